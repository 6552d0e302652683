#include <cases.hpp>

void f() {
  auto& q = connected<on_srq<rc>>(); (void)q.send(region().local(), 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.post_recv(region().local(), 2);
#endif
}
