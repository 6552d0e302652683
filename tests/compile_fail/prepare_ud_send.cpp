#include <cases.hpp>

void f() {
  auto& q = connected<ud>();
  (void)q.post(op::ud_send<B>{region().local(), ah().to(7)}, 1);
#ifndef RDMAKIT_CF_CONTROL
  auto w = q.prepare(op::ud_send<B>{region().local(), ah().to(7)}, 1);
#endif
}
