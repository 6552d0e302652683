#include <cases.hpp>

void f() {
  auto& q = fresh<uc>(); (void)q.post_recv(region().local(), 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.write(region().local(), region().remote(), 1);
#endif
}
