#include <cases.hpp>

void f() {
  auto& q = fresh<ud>(); (void)q.local_endpoint();
#ifndef RDMAKIT_CF_CONTROL
  auto live = std::move(q).connect(endpoint{});
#endif
}
