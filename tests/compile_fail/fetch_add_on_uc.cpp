#include <cases.hpp>

void f() {
  auto& q = connected<uc>(); (void)q.send(region().local(), 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.fetch_add(region().local(0, 8), region().remote(), 1, 2);
#endif
}
