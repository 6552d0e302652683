#include <cases.hpp>

void f() {
  auto b = connected<ud>().make_batch<4>();
  (void)b.add(op::ud_send<B>{region().local(), ah().to(7)}, 1);
#ifndef RDMAKIT_CF_CONTROL
  b.reuse();
#endif
}
