// rdmakit-perf on real devices (libibverbs): one side per process.
#include "../common/device_peer.hpp"
#include "sides.hpp"

#if RDMAKIT_HAVE_IBVERBS
#include "dispatch.hpp"

#include <rdmakit/backends/ibverbs.hpp>
#endif

#include <cstdio>
#include <memory>

namespace rdmakit_perf {

#if RDMAKIT_HAVE_IBVERBS
int run_device(const perf_options& o, const endpoint_options& e) {
  exchange_options xo;
  xo.timeout = o.timeout;
  xo.accept_timeout = o.accept_timeout;
  peer_link link;
  device<backends::ibverbs> dev(o.device);  // a wrong -d fails before the server says it waits
  if (e.host.empty()) {
    auto listener = std::make_shared<exchange_listener>(e.port);
    if (!o.json)
      rdmakit_tools::print_listening(std::string("rdmakit-perf: ") + describe(o.test).name + " server",
                                     listener->port(), o.accept_timeout);
    link.peer = "client";
    link.exchange = [listener, xo](const connection_info& l, const on_peer_fn& cb) {
      return listener->exchange(l, xo, cb);
    };
    exchange_options fxo = xo;  // the end-of-run message comes after the run: a -D run's seconds more
    fxo.accept_timeout = finish_timeout(o);
    link.finish = [listener, fxo](const connection_info& l, const on_peer_fn& cb) {
      return listener->exchange(l, fxo, cb);
    };
    link.cancel_finish = [listener] { rdmakit_tools::wake_listener(listener->port()); };
    perf_options so = o;
    so.server = true;
    run_report r = run_config<backends::ibverbs>(so, link, std::move(dev));
    print_report(r, so, "ibverbs", "server");
    return 0;
  }
  link = client_link(e.host, e.port, xo);
  perf_options so = o;
  so.server = false;
  run_report r = run_config<backends::ibverbs>(so, link, std::move(dev));
  print_report(r, so, "ibverbs", "client");
  return 0;
}
#else
int run_device(const perf_options&, const endpoint_options&) {
  std::fprintf(stderr, "rdmakit-perf: built without libibverbs (or as a sanitizer build, which leaves devices out): "
                       "only the mock loopback (no -d) is available\n");
  return 1;
}
#endif

}  // namespace rdmakit_perf
