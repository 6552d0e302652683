#include <cases.hpp>

void f() {
  auto& q = connected<uc>(); (void)q.write(region().local(), region().remote(), 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.read(region().local(), region().remote(), 1);
#endif
}
