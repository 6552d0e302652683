#include <cases.hpp>

void f() {
  auto& q = fresh<rc>(); (void)q.post_recv(region().local(), 1);
#ifndef RDMAKIT_CF_CONTROL
  auto w = q.prepare(op::write{region().local(), region().remote()}, 1);
#endif
}
