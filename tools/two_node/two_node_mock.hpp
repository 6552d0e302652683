#pragma once
// rdmakit-two-node's scenarios with both roles on one mock fabric in this process (a
// thread each, exchange over 127.0.0.1), under the device profile given.
#include "two_node.hpp"

#include <rdmakit/backends/mock.hpp>

#include <functional>
#include <stdexcept>

namespace rdmakit_tools {

struct two_node_pair {
  std::vector<two_node_result> client, server;
};

/// Both sides; `setup` may inject faults into the fabric before the run; `port`: the
/// loopback's TCP port (0: an ephemeral one); `latency`: the fabric's one-way wire latency.
inline two_node_pair run_two_node_on_mock(two_node_options o, mock::device_profile profile,
                                          const std::function<void(mock::fabric&)>& setup = {},
                                          std::uint16_t port = 0, std::chrono::nanoseconds latency = {}) {
  mock::fabric_config cfg;
  cfg.profile = profile;
  cfg.latency = latency;
  mock::fabric fab(cfg);
  if (setup) setup(fab);
  o.profile = profile == mock::device_profile::rxe ? "rxe" : "spec";
  exchange_options xo;
  xo.timeout = std::chrono::milliseconds{60'000};
  two_node_pair out;
  const auto lb = run_loopback(port, xo, [&](bool is_server, const exchange_fn& ex) {
    two_node_options mine = o;
    mine.server = is_server;
    (is_server ? out.server : out.client) = run_two_node<backends::mock, yielding_poll<>>(
        mine, ex, device<backends::mock>(fab, is_server ? "mock0" : "mock1"), [](const two_node_result&) {});
  });
  if (!lb.ok()) throw std::runtime_error(lb.failure());
  return out;
}

}  // namespace rdmakit_tools
