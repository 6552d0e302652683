#include <cases.hpp>

void f() {
  (void)pd().create_ah(ah_attr{});
#ifndef RDMAKIT_CF_CONTROL
  auto srq = pd().create_srq(srq_attr{.max_wr = 16});
#endif
}
