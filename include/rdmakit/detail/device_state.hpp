#pragma once
// What every object created from a device needs to know about it. Heap-allocated by
// device<B> so the device handle can move while PDs and QPs keep pointing at it.
#include <rdmakit/backend.hpp>

#include <cstdint>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class B>
struct device_state {
  typename B::context ctx{};
  std::string name;
  device_attr attr{};

  port_attr port(std::uint8_t n) const {
    if (n == 0 || n > attr.phys_port_cnt)
      throw verbs_error("ibv_query_port", EINVAL,
                        "device " + name + " has no port " + std::to_string(n) + " (ports are 1.." +
                            std::to_string(attr.phys_port_cnt) + ")");
    return B::query_port(ctx, n);
  }
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
