#include <cases.hpp>

void f() {
  auto q = pd().create_qp<rc>(cq(), qp_cap{8, 8});
#ifndef RDMAKIT_CF_CONTROL
  auto s = pd().create_qp<on_srq<rc>>(cq(), qp_cap{8, 0});
#endif
}
