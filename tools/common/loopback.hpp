#pragma once
// The mock loopback both tools run without a device: a server and a client side in
// this process, one thread each, exchanging their records over TCP on 127.0.0.1. Each
// tool says what a side does; this runs both and keeps what each one threw.
#include <rdmakit/connection.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

namespace rdmakit_tools {

/// What a side says when it stopped because the other side failed.
inline std::string peer_failed_message(bool is_server) {
  return std::string("stopped: the ") + (is_server ? "client" : "server") + " failed";
}

/// Connects to 127.0.0.1:`port` and hangs up: a server blocked in accepting its client
/// gets a connection whose exchange fails at once. Best effort (nothing listening: no-op).
inline void wake_listener(std::uint16_t port) noexcept {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  ::close(fd);
}

/// One exchange of records with the peer (the tools call it per queue pair).
using exchange_fn =
    std::function<rdmakit::connection_info(const rdmakit::connection_info& local, const rdmakit::on_peer_fn& on_peer)>;

struct loopback_side {
  std::string error;  ///< what the side threw; empty when it returned
  bool first = false;  ///< it failed before the other side did (or alone)
  bool ok() const noexcept { return error.empty(); }
};

struct loopback_result {
  std::uint16_t port = 0;  ///< where the server listened
  loopback_side server, client;
  bool ok() const noexcept { return server.ok() && client.ok(); }
  /// "client: <error>" or "server: <error>", of the side that failed first (the other
  /// may only have stopped for it); empty when both returned.
  std::string failure() const {
    if (ok()) return {};
    return client_failed_first() ? "client: " + client.error : "server: " + server.error;
  }
  /// The client failed, and the server did not fail before it.
  bool client_failed_first() const noexcept { return !client.ok() && (client.first || server.ok()); }
};

/// What a side that takes a third argument learns of the run (see run_loopback).
struct loopback_control {
  const std::atomic<bool>* peer_failed;  ///< set once the other side failed
  std::uint16_t port;                    ///< the server's
  /// Makes the server's exchange waiting for a connection fail now (wake_listener).
  void wake_server() const noexcept { wake_listener(port); }
};

/// Listens on 127.0.0.1:`port` (0: an ephemeral port), then runs `run_side(is_server,
/// exchange)` for the server and the client on two threads and waits for both. The
/// client retries a refused connection (its server may not be listening yet).
///
/// A side that fails must not leave the other waiting for it until a timeout (a server
/// waits for its client's last exchange as long as the run lasts): `peer_failed` is set;
/// a server waiting for a connection is given one that closes at once, and a failed
/// server closes each client connection until the client is done, so the waiting
/// exchange fails now; an exchange started after that fails at once. A side that also
/// takes a loopback_control (`run_side(is_server, exchange, control)`) can stop its
/// own waits on `peer_failed`.
template <class RunSide>
loopback_result run_loopback(std::uint16_t port, rdmakit::exchange_options xo, RunSide run_side) {
  rdmakit::exchange_listener listener(port, "127.0.0.1");
  xo.retry_refused = true;
  loopback_result r;
  r.port = listener.port();
  std::atomic<bool> peer_failed{false};
  auto check_peer = [&](bool is_server) {
    if (peer_failed.load(std::memory_order_acquire)) throw std::runtime_error(peer_failed_message(is_server));
  };
  const exchange_fn serve = [&](const rdmakit::connection_info& local, const rdmakit::on_peer_fn& cb) {
    check_peer(true);
    try {
      return listener.exchange(local, xo, cb);
    } catch (const rdmakit::exchange_error&) {
      check_peer(true);  // the failed client's wake-up call, not a fault of the exchange
      throw;
    }
  };
  const exchange_fn connect = [&](const rdmakit::connection_info& local, const rdmakit::on_peer_fn& cb) {
    check_peer(false);
    try {
      return rdmakit::exchange_client("127.0.0.1", r.port, local, xo, cb);
    } catch (const rdmakit::exchange_error&) {
      check_peer(false);  // turned away by the failed server, not a fault of the exchange
      throw;
    }
  };
  std::atomic<bool> client_done{false};
  auto side = [&](loopback_side& out, bool is_server) {
    try {
      if constexpr (std::is_invocable_v<RunSide&, bool, const exchange_fn&, const loopback_control&>)
        run_side(is_server, is_server ? serve : connect, loopback_control{&peer_failed, r.port});
      else
        run_side(is_server, is_server ? serve : connect);
    } catch (const std::exception& e) {
      out.error = e.what();
      if (out.error.empty()) out.error = "an exception without a message";
      out.first = !peer_failed.exchange(true, std::memory_order_acq_rel);
      if (!is_server) wake_listener(r.port);
    }
    if (!is_server) {
      client_done.store(true, std::memory_order_release);
    } else if (!out.ok()) {
      // The client may be waiting for this side's record, or connect later: each
      // connection is closed at once, so that its exchange fails now, not at its timeout.
      try {
        while (!client_done.load(std::memory_order_acquire)) listener.turn_away(std::chrono::milliseconds{20});
      } catch (const std::exception&) {  // the socket failed: the client's timeout is left
      }
    }
  };
  std::thread server([&] { side(r.server, true); });
  std::thread client([&] { side(r.client, false); });
  server.join();
  client.join();
  return r;
}

}  // namespace rdmakit_tools
