// rdmakit-perf on the mock backend: both ends in one process.
#include "../common/cli.hpp"
#include "dispatch.hpp"
#include "sides.hpp"

#include <rdmakit/backends/mock.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace rdmakit_perf {

int run_mock_loopback(const perf_options& o, const endpoint_options& e) {
  if (!e.host.empty()) {
    // Only the client, on mock1 of the process default fabric: the server must be
    // another rdmakit-perf in this process, so this is for exercising the exchange (and
    // its errors) alone.
    exchange_options xo;
    xo.timeout = o.timeout;
    peer_link link = client_link(e.host, e.port, xo);
    perf_options so = o;
    so.server = false;
    so.device = "mock1";
    run_report r = run_config<backends::mock>(so, link);
    print_report(r, so, "mock", "client");
    return 0;
  }
  mock::fabric_config cfg;
  cfg.latency = o.mock_latency;
  cfg.profile = o.mock_rxe ? mock::device_profile::rxe : mock::device_profile::spec;
  mock::fabric fab(cfg);  // both ends open their devices from it, explicitly
  exchange_options xo;
  xo.timeout = o.timeout;
  // One listener serves the setup and the end-of-run message, which comes after the
  // run: a -D run's seconds more (the client here connects at once for the setup).
  xo.accept_timeout = finish_timeout(o);
  run_report server, client;
  const std::uint16_t port = e.port_given ? e.port : 0;
  const auto lb = rdmakit_tools::run_loopback(port, xo, [&](bool is_server, const exchange_fn& ex,
                                                             const rdmakit_tools::loopback_control& ctl) {
    perf_options so = o;
    so.timeout = rdmakit_tools::wait_with_latency(o.timeout, o.mock_latency);  // each wait: a round trip more, twice
    so.peer_failed = ctl.peer_failed;
    so.server = is_server;
    so.device = is_server ? "mock0" : "mock1";
    so.yield_when_idle = true;
    so.progress = o.progress && !is_server;
    if (o.rdma_cm) {  // -R: the mock's connection manager; mock0 is 10.0.0.1
      so.cm_ipv4 = is_server ? 0 : 0x0A000001;
      so.cm_port = e.port;
    }
    peer_link link{ex, ex, is_server ? "client" : "the server on 127.0.0.1", [ctl] { ctl.wake_server(); }};
    (is_server ? server : client) = run_config<backends::mock>(so, link, device<backends::mock>(fab, so.device));
  });
  const std::string where = "127.0.0.1:" + std::to_string(lb.port);
  if (lb.ok()) {
    if (!o.json) {
      // The fabric's settings only when not the defaults (the line is otherwise as it was).
      const std::string fabric_note = rdmakit_tools::mock_fabric_note(o.mock_latency, o.mock_rxe);
      std::printf("mock loopback: client mock1 -> server mock0, %s%s\n",
                  o.rdma_cm ? "connected through the mock's connection manager (-R)" : ("exchange over " + where).c_str(),
                  fabric_note.c_str());
    }
    if (!server.note.empty()) client.note = server.note;
    // A SEND is counted where it arrives too, as perftest's receiver reports: UC and UD
    // drop one that finds no receive, and their sender completes it all the same (the
    // client's table alone showed 644,651 MB/s for 1.5 % of the messages arriving).
    const bool sends = describe(o.test).op == op_kind::send && server.bw && client.bw;
    if (sends && server.bw->iters < client.bw->iters)
      client.note = "server: received " + std::to_string(server.bw->iters) + " of the " +
                    std::to_string(client.bw->iters) +
                    " messages sent (UC and UD drop one that finds no receive posted): the server side's report "
                    "below is what arrived";
    print_report(client, o, "mock", "client");
    if (sends) print_report(server, o, "mock", "server");
    return 0;
  }
  // The side that failed first, then the other (which may only have stopped for it).
  const bool client_first = lb.client_failed_first();
  for (const bool client : {client_first, !client_first}) {
    const auto& side = client ? lb.client : lb.server;
    if (!side.ok()) std::fprintf(stderr, "rdmakit-perf: %s: %s\n", client ? "client (mock1)" : "server (mock0)",
                                 side.error.c_str());
  }
  return 1;
}

}  // namespace rdmakit_perf
