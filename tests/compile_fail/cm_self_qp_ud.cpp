#include <cases.hpp>

#include <rdmakit/connection_manager.hpp>

// A self-made queue pair the CM connects must be RC, as the CM's own.
using UB = rdmakit::archetype_cm_user_qp_backend;
template <class T>
queue_pair<UB, T>& user_fresh();

void f() {
  const cm_address to{};
#ifndef RDMAKIT_CF_CONTROL
  auto c = cm_connect(std::move(user_fresh<ud>()), to);
#else
  auto c = cm_connect(std::move(user_fresh<rc>()), to);
#endif
  (void)c;
}
