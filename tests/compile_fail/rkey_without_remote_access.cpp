#include <cases.hpp>

void f() {
  auto& r = local_only_region(); (void)r.lkey();
#ifndef RDMAKIT_CF_CONTROL
  (void)r.rkey();
#endif
}
