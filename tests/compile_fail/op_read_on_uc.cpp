#include <cases.hpp>

void f() {
  auto& q = connected<uc>(); (void)q.post(op::write{region().local(), region().remote()}, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.post(op::read{region().local(), region().remote()}, 2);
#endif
}
