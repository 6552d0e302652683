#include <cases.hpp>

void f() {
  auto ok = pd().create_qp<rc, signal_every<32>>(cq(), static_caps<32, 32>{});
#ifndef RDMAKIT_CF_CONTROL
  auto bad = pd().create_qp<rc, signal_every<64>>(cq(), static_caps<32, 32>{});
#endif
}
