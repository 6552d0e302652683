#include <cases.hpp>

void f() {
  auto& q = fresh<rc>(); (void)q.post_recv(region().local(), 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.send(region().local(), 1);
#endif
}
