#pragma once
// The scenario of faults.hpp with both ends on one mock fabric in this process (a
// thread each, exchange over 127.0.0.1) and per-message faults injected into its wire.
#include "faults.hpp"

#include <rdmakit/backends/mock.hpp>

#include <stdexcept>

namespace rdmakit_tools {

struct mock_faults {
  double loss = 0, dup = 0, reorder = 0;  ///< per-message probabilities, for the whole run
  std::uint64_t seed = 1;
  mock::device_profile profile = mock::device_profile::rxe;
};

struct faults_pair {
  faults_report client, server;
};

template <transport T>
faults_pair run_faults_on_mock(faults_options o, const mock_faults& f) {
  mock::fabric_config cfg;
  cfg.seed = f.seed;
  cfg.profile = f.profile;
  mock::fabric fab(cfg);
  // count 0: every message the probability picks, until the end.
  if (f.loss > 0) fab.inject({.kind = mock::fault_kind::drop, .count = 0, .probability = f.loss});
  if (f.dup > 0) fab.inject({.kind = mock::fault_kind::duplicate, .count = 0, .probability = f.dup});
  if (f.reorder > 0) fab.inject({.kind = mock::fault_kind::reorder, .count = 0, .probability = f.reorder});
  faults_pair out;
  const auto lb = run_loopback(0, exchange_options{}, [&](bool is_server, const exchange_fn& ex) {
    faults_options mine = o;
    mine.server = is_server;
    (is_server ? out.server : out.client) = run_faults<backends::mock, T, yielding_poll<>>(
        mine, ex, device<backends::mock>(fab, is_server ? "mock0" : "mock1"));
  });
  if (!lb.ok()) throw std::runtime_error(lb.failure());
  return out;
}

}  // namespace rdmakit_tools
