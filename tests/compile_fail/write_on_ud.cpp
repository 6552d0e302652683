#include <cases.hpp>

void f() {
  auto& q = connected<ud>(); (void)q.send(ah().to(7), region().local(), 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.write(region().local(), region().remote(), 1);
#endif
}
