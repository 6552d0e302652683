#pragma once
// The scenario of faults.hpp with both ends on one mock fabric in this process (a
// thread each, exchange over 127.0.0.1) and per-message faults injected into its wire.
#include "../common/cli.hpp"
#include "faults.hpp"

#include <rdmakit/backends/mock.hpp>

#include <stdexcept>

namespace rdmakit_tools {

struct mock_faults {
  double loss = 0, dup = 0, reorder = 0;  ///< per-message probabilities, for the whole run
  std::uint64_t seed = 1;
  mock::device_profile profile = mock::device_profile::rxe;
  std::chrono::nanoseconds latency{0};  ///< the fabric's one-way wire latency (--mock-latency)
};

struct faults_pair {
  faults_report client, server;
};

/// `xo`: the loopback's exchange options (tests shorten them); `port`: its TCP port (0:
/// an ephemeral one).
template <transport T>
faults_pair run_faults_on_mock(faults_options o, const mock_faults& f, exchange_options xo = {},
                               std::uint16_t port = 0) {
  mock::fabric_config cfg;
  cfg.seed = f.seed;
  cfg.profile = f.profile;
  cfg.latency = f.latency;
  mock::fabric fab(cfg);
  // A completion comes up to a round trip later, and a UC or UD message up to a latency
  // after its send completed (the rxe profile, the default here, completes it at the
  // post): the client's wait and the server's drain after the client's end
  // grow by four latencies (the options' values are the wire's own otherwise).
  o.stall_timeout = wait_with_latency(o.stall_timeout, f.latency);
  o.grace = wait_with_latency(o.grace, f.latency);
  // count 0: every message the probability picks, until the end.
  if (f.loss > 0) fab.inject({.kind = mock::fault_kind::drop, .count = 0, .probability = f.loss});
  if (f.dup > 0) fab.inject({.kind = mock::fault_kind::duplicate, .count = 0, .probability = f.dup});
  if (f.reorder > 0) fab.inject({.kind = mock::fault_kind::reorder, .count = 0, .probability = f.reorder});
  faults_pair out;
  // The server waits for the client's end (its second exchange) from the start: as long as
  // the client may take, up to stall_timeout per completion, not the exchange's timeout
  // (a long -t under loss outlasted it). A client that fails wakes the server at once.
  const auto client_bound = o.stall_timeout * (std::int64_t{o.count} + 1);
  if (xo.accept_timeout < client_bound) xo.accept_timeout = client_bound;
  const auto lb = run_loopback(port, xo, [&](bool is_server, const exchange_fn& ex) {
    faults_options mine = o;
    mine.server = is_server;
    (is_server ? out.server : out.client) = run_faults<backends::mock, T, yielding_poll<>>(
        mine, ex, device<backends::mock>(fab, is_server ? "mock0" : "mock1"));
  });
  if (!lb.ok()) throw std::runtime_error(lb.failure());
  return out;
}

}  // namespace rdmakit_tools
