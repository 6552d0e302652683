#include <cases.hpp>

#include <rdmakit/connection_manager.hpp>

// A connection on a queue pair the application made needs cm_user_qp_backend
// (rdma_init_qp_attr, rdma_establish): archetype_cm_backend has only cm_backend.
using CB = rdmakit::archetype_cm_backend;
using UB = rdmakit::archetype_cm_user_qp_backend;
queue_pair<CB, rc>& cm_fresh();
queue_pair<UB, rc>& user_fresh();

void f() {
  const cm_address to{};
#ifndef RDMAKIT_CF_CONTROL
  auto c = cm_connect(std::move(cm_fresh()), to);
#else
  auto c = cm_connect(std::move(user_fresh()), to);  // the self-made QP path on the concept alone
  cm_listener<UB> l;
  auto s = l.next_request(std::chrono::milliseconds{1}).accept(std::move(user_fresh()));
  (void)s.qp().write(region().local(), region().remote(), 1);
#endif
  (void)c;
}
