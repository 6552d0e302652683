#pragma once
// The mock loopback both tools run without a device: a server and a client side in
// this process, one thread each, exchanging their records over TCP on 127.0.0.1. Each
// tool says what a side does; this runs both and keeps what each one threw.
#include <rdmakit/connection.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>

namespace rdmakit_tools {

/// One exchange of records with the peer (the tools call it per queue pair).
using exchange_fn =
    std::function<rdmakit::connection_info(const rdmakit::connection_info& local, const rdmakit::on_peer_fn& on_peer)>;

struct loopback_side {
  std::string error;  ///< what the side threw; empty when it returned
  bool ok() const noexcept { return error.empty(); }
};

struct loopback_result {
  std::uint16_t port = 0;  ///< where the server listened
  loopback_side server, client;
  bool ok() const noexcept { return server.ok() && client.ok(); }
};

/// Listens on 127.0.0.1:`port` (0: an ephemeral port), then runs `run_side(is_server,
/// exchange)` for the server and the client on two threads and waits for both. The
/// client retries a refused connection (its server may not be listening yet).
template <class RunSide>
loopback_result run_loopback(std::uint16_t port, rdmakit::exchange_options xo, RunSide run_side) {
  rdmakit::exchange_listener listener(port, "127.0.0.1");
  xo.retry_refused = true;
  loopback_result r;
  r.port = listener.port();
  const exchange_fn serve = [&](const rdmakit::connection_info& local, const rdmakit::on_peer_fn& cb) {
    return listener.exchange(local, xo, cb);
  };
  const exchange_fn connect = [&](const rdmakit::connection_info& local, const rdmakit::on_peer_fn& cb) {
    return rdmakit::exchange_client("127.0.0.1", r.port, local, xo, cb);
  };
  auto side = [&](loopback_side& out, bool is_server) {
    try {
      run_side(is_server, is_server ? serve : connect);
    } catch (const std::exception& e) {
      out.error = e.what();
      if (out.error.empty()) out.error = "an exception without a message";
    }
  };
  std::thread server([&] { side(r.server, true); });
  std::thread client([&] { side(r.client, false); });
  server.join();
  client.join();
  return r;
}

}  // namespace rdmakit_tools
