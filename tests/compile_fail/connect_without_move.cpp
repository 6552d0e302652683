#include <cases.hpp>

void f() {
  auto& q = fresh<rc>();
#ifndef RDMAKIT_CF_CONTROL
  auto live = q.connect(endpoint{});
#else
  auto live = std::move(q).connect(endpoint{});
#endif
  (void)live;
}
