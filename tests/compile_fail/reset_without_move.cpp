#include <cases.hpp>

void f() {
  auto& q = connected<rc>();
#ifndef RDMAKIT_CF_CONTROL
  auto init = q.reset();
#else
  auto init = std::move(q).reset();
#endif
  (void)init;
}
