#include <cases.hpp>

void f() {
  auto b = connected<ud>().make_batch<4>(); b.add(op::ud_send{region().local(), ah().to(1)}, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)b.add(op::fetch_add{region().local(), region().remote(), 1}, 2);
#endif
}
