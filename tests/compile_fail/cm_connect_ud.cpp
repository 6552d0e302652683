#include <cases.hpp>

#include <rdmakit/connection_manager.hpp>

using CB = rdmakit::archetype_cm_backend;
protection_domain<CB>& cm_pd();
completion_queue<CB>& cm_cq();

void f() {
  const cm_address to{};
#ifndef RDMAKIT_CF_CONTROL
  auto c = cm_connect<ud>(cm_pd(), cm_cq(), qp_cap{}, to);
#else
  auto c = cm_connect<rc>(cm_pd(), cm_cq(), qp_cap{}, to);  // the whole CM layer on the concept alone
  cm_listener<CB> l;
  auto s = l.next_request(std::chrono::milliseconds{1}).accept<rc, signal_every<4>>(cm_pd(), cm_cq(), qp_cap{});
  (void)s.qp().write(region().local(), region().remote(), 1);
#endif
}
