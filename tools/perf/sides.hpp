#pragma once
// The two ways to run rdmakit-perf, one translation unit each (they instantiate every
// configuration of dispatch.hpp for their backend).
#include "perf.hpp"

#include <cstdint>
#include <string>

namespace rdmakit_perf {

struct endpoint_options {
  std::string host;         ///< empty: server
  std::uint16_t port = 18515;
  bool port_given = false;
};

/// The client's link to the server at host:port; exchange errors name both and the timeout.
inline peer_link client_link(const std::string& host, std::uint16_t port, exchange_options xo) {
  xo.retry_refused = true;  // the server may not be listening yet
  peer_link link;
  link.peer = host + ":" + std::to_string(port);
  link.exchange = [host, port, xo](const connection_info& l, const on_peer_fn& cb) {
    try {
      return exchange_client(host, port, l, xo, cb);
    } catch (const exchange_error& ex) {
      throw perf_failure("cannot exchange with the server at " + host + ":" + std::to_string(port) + " (timeout " +
                         std::to_string(xo.timeout.count()) + " ms): " + ex.what());
    }
  };
  link.finish = link.exchange;
  return link;
}

/// Both ends in this process on a mock fabric made for the run (server on mock0, client
/// on mock1, one thread each, devices opened from that fabric explicitly), exchanging
/// over TCP on 127.0.0.1. Prints the client's report. With a host: only the client
/// side, on mock1 of the process default fabric (to test the exchange and its errors).
int run_mock_loopback(const perf_options& o, const endpoint_options& e);

/// One side on a real device through libibverbs (server without a host).
int run_device(const perf_options& o, const endpoint_options& e);

/// -R: one side on a real device, connected through librdmacm (server without a host).
int run_device_cm(const perf_options& o, const endpoint_options& e);

}  // namespace rdmakit_perf
