#pragma once
// The shared control blocks behind the RAII handles. Each child keeps what it depends
// on alive (as rust-ibverbs keeps Arcs to its parents): a protection domain holds its
// device, a region, address handle or queue pair holds its PD, a queue pair holds its
// completion queues. The native object is destroyed when the last owner goes, so no
// order of destruction or move can reach a destroyed parent. Setup shares ownership
// (shared_owner copies); the data path only follows raw pointers held by live objects.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/owning_ptr.hpp>

#include <cstdint>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class B>
struct device_state {
  typename B::context ctx{};
  std::string name;
  device_attr attr{};

  device_state() = default;
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;
  ~device_state() {
    if (ctx != typename B::context{}) B::close_device(ctx);
  }

  port_attr port(std::uint8_t n) const {
    if (n == 0 || n > attr.phys_port_cnt)
      throw usage_error(cat("port(): device ", name, " has no port ", n, " (ports are 1..", attr.phys_port_cnt, ")"));
    return B::query_port(ctx, n);
  }
};

template <class B>
struct pd_state {
  shared_owner<const device_state<B>> dev;
  typename B::pd pd{};

  explicit pd_state(shared_owner<const device_state<B>> d) : dev(std::move(d)), pd(B::alloc_pd(dev->ctx)) {}
  pd_state(const pd_state&) = delete;
  pd_state& operator=(const pd_state&) = delete;
  ~pd_state() {
    if (pd != typename B::pd{}) B::dealloc_pd(pd);
  }
};

template <class B>
using device_ref = shared_owner<const device_state<B>>;
template <class B>
using pd_ref = shared_owner<const pd_state<B>>;

}  // namespace detail
RDMAKIT_END_NAMESPACE
