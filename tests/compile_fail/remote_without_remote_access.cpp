#include <cases.hpp>

void f() {
  auto& r = local_only_region(); (void)r.local();
#ifndef RDMAKIT_CF_CONTROL
  (void)r.remote();
#endif
}
