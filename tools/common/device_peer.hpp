#pragma once
// The exchange one side of a tool uses on a real device: the server listens on a port,
// the client connects to host:port. Shared by the tools that run one side per process.
#include "loopback.hpp"

#include <rdmakit/connection.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace rdmakit_tools {

/// What a server says once it listens, on stderr (stdout is the tool's report): the port
/// it bound, which with -p 0 only the kernel knows and a client must be given, and how
/// long it waits. `server` names it, e.g. "rdmakit-perf: write_bw server".
inline void print_listening(const std::string& server, std::uint16_t port, std::chrono::milliseconds accept_timeout,
                            std::FILE* to = stderr) {
  const long long ms = accept_timeout.count();
  std::fprintf(to, "%s on port %u, waiting for a client (up to %lld %s)\n", server.c_str(), port,
               ms % 1000 ? ms : ms / 1000, ms % 1000 ? "ms" : "s");
}

/// A server (no host) listens on `port` from construction on, and says on which
/// (print_listening), so a tool can print its address knowing the client can connect; a
/// client connects to host:port and retries while the server is not listening yet. The
/// exchange must not outlive this object. `tool` names the program in what it prints.
/// A tool opens its device first, so that a wrong -d fails before a server says it waits.
class device_peer {
 public:
  device_peer(const char* tool, std::string host, std::uint16_t port, rdmakit::exchange_options xo,
              std::FILE* say = stderr)
      : host_(std::move(host)), port_(port), xo_(xo) {
    if (host_.empty()) {
      listener_.emplace(port);
      print_listening(std::string(tool) + ": server", listener_->port(),
                      xo_.accept_timeout.count() > 0 ? xo_.accept_timeout : xo_.timeout, say);  // 0: timeout's
    } else {
      xo_.retry_refused = true;
    }
  }
  device_peer(const device_peer&) = delete;  // exchange() points at this object
  device_peer& operator=(const device_peer&) = delete;

  bool server() const noexcept { return listener_.has_value(); }
  exchange_fn exchange() {
    if (listener_)
      return [this](const rdmakit::connection_info& l, const rdmakit::on_peer_fn& cb) {
        return listener_->exchange(l, xo_, cb);
      };
    return [this](const rdmakit::connection_info& l, const rdmakit::on_peer_fn& cb) {
      return rdmakit::exchange_client(host_, port_, l, xo_, cb);
    };
  }

 private:
  std::string host_;
  std::uint16_t port_;
  rdmakit::exchange_options xo_;
  std::optional<rdmakit::exchange_listener> listener_;
};

}  // namespace rdmakit_tools
