#include <cases.hpp>

#include <rdmakit/connection_manager.hpp>

// rdma_cm's TCP port space connects RC only: rxe refused a UC queue pair at the accept.

using CB = rdmakit::archetype_cm_backend;
protection_domain<CB>& cm_pd();
completion_queue<CB>& cm_cq();

void f() {
  const cm_address to{};
#ifndef RDMAKIT_CF_CONTROL
  auto c = cm_connect<uc>(cm_pd(), cm_cq(), qp_cap{}, to);
#else
  auto c = cm_connect<rc>(cm_pd(), cm_cq(), qp_cap{}, to);
#endif
}
