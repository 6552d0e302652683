// rdmakit-perf on the mock backend: both ends in one process.
#include "dispatch.hpp"
#include "sides.hpp"

#include <rdmakit/backends/mock.hpp>

#include <cstdio>
#include <exception>
#include <thread>

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
  mock::fabric fab;  // both ends open their devices from it, explicitly
  exchange_listener listener(e.port_given ? e.port : 0, "127.0.0.1");
  const std::string where = "127.0.0.1:" + std::to_string(listener.port());
  struct side {
    run_report rep;
    std::string error;
    bool ok = false;
  } server, client;
  auto run = [&](side& s, bool is_server) {
    try {
      perf_options so = o;
      so.server = is_server;
      so.device = is_server ? "mock0" : "mock1";
      so.yield_when_idle = true;
      so.progress = o.progress && !is_server;
      exchange_options xo;
      xo.timeout = o.timeout;
      xo.accept_timeout = o.accept_timeout;
      xo.retry_refused = true;
      peer_link link;
      if (is_server) {
        link.peer = "client";
        link.exchange = [&](const connection_info& l, const on_peer_fn& cb) { return listener.exchange(l, xo, cb); };
        link.finish = link.exchange;
      } else {
        link.peer = where;
        link.exchange = [&](const connection_info& l, const on_peer_fn& cb) {
          return exchange_client("127.0.0.1", listener.port(), l, xo, cb);
        };
        link.finish = link.exchange;
      }
      s.rep = run_config<backends::mock>(so, link, device<backends::mock>(fab, so.device));
      s.ok = true;
    } catch (const std::exception& ex) {
      s.error = ex.what();
    }
  };
  std::thread ts([&] { run(server, true); });
  std::thread tc([&] { run(client, false); });
  ts.join();
  tc.join();
  if (server.ok && client.ok) {
    if (!o.json) std::printf("mock loopback: client mock1 -> server mock0, exchange over %s\n", where.c_str());
    if (!server.rep.note.empty()) client.rep.note = server.rep.note;
    print_report(client.rep, o, "mock", "client");
    return 0;
  }
  if (!server.error.empty()) std::fprintf(stderr, "rdmakit-perf: server (mock0): %s\n", server.error.c_str());
  if (!client.error.empty()) std::fprintf(stderr, "rdmakit-perf: client (mock1): %s\n", client.error.c_str());
  return 1;
}

}  // namespace rdmakit_perf
