// rdmakit-perf -R on real devices: one side per process, connected through librdmacm
// (backends::rdmacm) instead of the TCP exchange.
#include "sides.hpp"

#if RDMAKIT_HAVE_RDMACM
#include "dispatch.hpp"

#include <rdmakit/backends/rdmacm.hpp>

#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#endif

#include <cstdio>

namespace rdmakit_perf {

#if RDMAKIT_HAVE_RDMACM
int run_device_cm(const perf_options& o, const endpoint_options& e) {
  perf_options so = o;
  so.server = e.host.empty();
  so.cm_port = e.port;
  peer_link link;
  link.exchange = [](const connection_info&, const on_peer_fn&) -> connection_info {
    throw perf_failure("-R: no TCP exchange");
  };
  if (so.server) {
    so.cm_ipv4 = 0;
    link.peer = "client";
    if (!o.json)
      std::fprintf(stderr, "rdmakit-perf: %s server on CM port %u (rdma_cm), waiting for a client (up to %lld s)\n",
                   describe(o.test).name, e.port, static_cast<long long>(o.accept_timeout.count() / 1000));
  } else {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(e.host.c_str(), nullptr, &hints, &res) != 0 || !res)
      throw perf_failure("-R: cannot resolve " + e.host + " to an IPv4 address");
    so.cm_ipv4 = ntohl(reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
    freeaddrinfo(res);
    link.peer = e.host + ":" + std::to_string(e.port) + " (rdma_cm)";
  }
  run_report r = run_config<backends::rdmacm>(so, link);
  print_report(r, so, "rdmacm", so.server ? "server" : "client");
  return 0;
}
#else
int run_device_cm(const perf_options&, const endpoint_options&) {
  std::fprintf(stderr, "rdmakit-perf: built without librdmacm: -R works only on the mock loopback (no -d)\n");
  return 1;
}
#endif

}  // namespace rdmakit_perf
