// rdmakit-rping: rdma-core's rping (rdmacm-utils) on rdmakit's connection manager, with
// its options and wire protocol, so either end can be rping itself.
//
//   rdmakit-rping -s [-vVdPq] [-S size] [-C count] [-a addr] [-p port]
//   rdmakit-rping -c [-vVdq] [-S size] [-C count] [-I addr] -a addr [-p port]
//
// With --mock both ends run in this process on a mock fabric (server on mock0,
// 10.0.0.1; client on mock1, 10.0.0.2), on two threads: the protocol without a device.
// --mock -P: a persistent server and two clients one after the other.
#include "../common/cli.hpp"
#include "rping.hpp"

#include <rdmakit/backends/mock.hpp>
#if RDMAKIT_HAVE_RDMACM
#include <rdmakit/backends/rdmacm.hpp>
#endif

#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <string>

using namespace rdmakit;
using namespace rdmakit_tools;

namespace {

void usage(const char* argv0, std::FILE* to) {
  std::fprintf(to,
               "%s -s [-vVdPq] [-S size] [-C count] [-a addr] [-p port]\n"
               "%s -c [-vVdq] [-S size] [-C count] [-I addr] -a addr [-p port]\n"
               "\t-c\t\tclient side\n"
               "\t-I addr\t\tsource address to connect from (client; the server ignores it, as rping)\n"
               "\t-s\t\tserver side\n"
               "\t-P\t\tpersistent server: serves clients one after another until killed\n"
               "\t\t\t(rping -P serves them concurrently; here the next waits until the previous is done)\n"
               "\t-q\t\tself-created QP: made here, moved INIT->RTR->RTS with the CM's attributes\n"
               "\t-v\t\tdisplay ping data to stdout\n"
               "\t-V\t\tvalidate ping data\n"
               "\t-d\t\tdebug printfs\n"
               "\t-S size \tping data size (%u to %u, default 64)\n"
               "\t-C count\tping count times (default: until interrupted)\n"
               "\t-a addr\t\taddress (IPv4, IPv6 or a host name; server: -a ::0 binds every IPv6 address)\n"
               "\t-p port\t\tport (default 7174)\n"
               "rdmakit options:\n"
               "\t--mock\t\tboth ends in this process on a mock fabric (needs -C; with -P: two clients in a row)\n"
               "\t--ib-dev=dev\tthe RDMA device (default: the one the address is on; not with --mock)\n"
               "\t--timeout=ms\tbound on each wait (default 10000; with --mock-latency, 4 latencies more)\n"
               "\t--mock-latency=us  with --mock: one-way wire latency in microseconds (a decimal, e.g. 2 or 0.5;\n"
               "\t\t\tat most 1000000; default 0)\n"
               "\t--mock-profile=spec|rxe  with --mock: the device profile (default spec)\n"
               "\t-h, --help\tthis text\n",
               argv0, argv0, rping_min_size, rping_max_size);
}

// rping's get_addr: an IPv4 or IPv6 address, or a host name with one (the first).
bool resolve_address(const char* host, cm_address& out) {
  addrinfo* res = nullptr;
  if (getaddrinfo(host, nullptr, nullptr, &res) != 0 || !res) return false;
  const std::uint16_t port = out.port;
  bool ok = true;
  if (res->ai_family == AF_INET) {
    out = cm_address{};
    out.ipv4 = ntohl(reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
  } else if (res->ai_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(res->ai_addr);
    out = cm_address{};
    out.is_ipv6 = true;
    std::memcpy(out.ipv6.data(), &s6->sin6_addr, 16);
    out.scope_id = s6->sin6_scope_id;
  } else {
    ok = false;
  }
  out.port = port;
  freeaddrinfo(res);
  return ok;
}

#if RDMAKIT_HAVE_RDMACM
// The device librdmacm puts `a` on (bound on a server, resolved on a client); empty
// when the address names none in particular (0.0.0.0): then the first device.
std::string device_for(const cm_address& a, const cm_address& source, bool server) {
  using B = backends::rdmacm;
  if (server && a.is_any()) return {};
  auto ch = B::cm_create_channel(nullptr);
  auto id = B::cm_create_id(ch);
  std::string name;
  try {
    if (server) {
      sockaddr_storage s = B::sockaddr_of(a);
      if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&s)))
        throw verbs_error("rdma_bind_addr", errno, "binding " + a.to_string());
    } else {
      B::cm_resolve_addr(id, source, a, std::chrono::milliseconds{2000});
      basic_cm_event<B::cm_id> ev;
      if (B::cm_get_event(ch, std::chrono::milliseconds{3000}, ev) != 0 || ev.type != cm_event_type::addr_resolved)
        throw cm_error(cm_errc::address, "resolving " + a.to_string() + ": " + std::string(to_string(ev.type)));
    }
    if (id->verbs) name = ibv_get_device_name(id->verbs->device);
  } catch (...) {
    B::cm_destroy_id(id);
    B::cm_destroy_channel(ch);
    throw;
  }
  B::cm_destroy_id(id);
  B::cm_destroy_channel(ch);
  return name;
}
#endif

// With -p 0 the connection manager picks the port, which a client must be given: said
// on stderr (rping itself says nothing, so neither does a server on a given port).
void say_port_if_picked(std::uint16_t asked, std::uint16_t bound) {
  if (asked == 0) std::fprintf(stderr, "rdmakit-rping: server on port %u, waiting for a client\n", bound);
}

}  // namespace

int main(int argc, char** argv) {
  rping_options o;
  int role = -1;  // rping: -s or -c must be given
  bool mock = false;
  bool have_addr = false;
  bool count_given = false;  // -C (0 is rping's "until interrupted", which --mock refuses)
  std::uint16_t port = 7174;
  std::string ib_dev;
  static const option longs[] = {{"mock", no_argument, nullptr, 'M'},
                                 {"ib-dev", required_argument, nullptr, 'D'},
                                 {"timeout", required_argument, nullptr, 'T'},
                                 {"mock-latency", required_argument, nullptr, 1000},
                                 {"mock-profile", required_argument, nullptr, 1001},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  std::chrono::nanoseconds latency{0};  // --mock-latency
  bool rxe = false;                     // --mock-profile=rxe
  const char* mock_option = nullptr;    // the first of them given (they need --mock)
  int op;
  unsigned long long v = 0;
  while ((op = getopt_long(argc, argv, "a:I:Pp:C:S:t:scvVdqh", longs, nullptr)) != -1) {
    switch (op) {
      case 'a':
        if (!resolve_address(optarg, o.addr)) {
          std::fprintf(stderr, "rdmakit-rping: '%s' is not an IPv4 or IPv6 address or a host name with one\n", optarg);
          return 1;
        }
        have_addr = true;
        break;
      case 'I':
        if (!resolve_address(optarg, o.source)) {
          std::fprintf(stderr, "rdmakit-rping: -I '%s' is not an IPv4 or IPv6 address or a host name with one\n", optarg);
          return 1;
        }
        break;
      case 'P': o.persistent = true; break;
      case 'p':
        if (!parse_uint(optarg, 65535, v)) {
          std::fprintf(stderr, "rdmakit-rping: invalid port '%s'%s\n", optarg, range_hint(optarg, 0, 65535).c_str());
          return 1;
        }
        port = static_cast<std::uint16_t>(v);
        break;
      case 's': role = 1; break;
      case 'c': role = 0; break;
      case 'S':
        if (!parse_uint(optarg, rping_max_size, v) || v < rping_min_size) {
          std::fprintf(stderr, "Invalid size %s (valid range is %u to %u)%s\n", optarg, rping_min_size, rping_max_size,
                       uint_hint(optarg).c_str());
          return 1;
        }
        o.size = static_cast<std::uint32_t>(v);
        break;
      case 'C':
        if (!parse_uint(optarg, 0x7fffffff, v)) {  // the option, the value and the range (rping: "Invalid count")
          const std::string why = uint_hint(optarg);
          std::fprintf(stderr, "rdmakit-rping: invalid -C count '%s'%s\n", optarg,
                       why.empty() ? ": from 0 (until interrupted) to 2147483647" : why.c_str());
          return 1;
        }
        o.count = static_cast<int>(v);
        count_given = true;
        break;
      case 'v': o.verbose = true; break;
      case 'V': o.validate = true; break;
      case 'd': o.debug = true; break;
      case 'M': mock = true; break;
      case 'D':
        if (!*optarg) {  // an unset "$DEV": not "the one the address is on"
          std::fprintf(stderr,
                       "rdmakit-rping: --ib-dev '': an empty device name: give the device (e.g. rxe0), or leave "
                       "--ib-dev out\n");
          return 1;
        }
        ib_dev = optarg;
        break;
      case 'T':
        if (!parse_uint(optarg, 1u << 30, v) || v == 0) {
          std::fprintf(stderr, "rdmakit-rping: invalid --timeout '%s' (milliseconds, > 0)%s\n", optarg,
                       uint_hint(optarg).c_str());
          return 1;
        }
        o.timeout = std::chrono::milliseconds{v};
        break;
      case 1000:
        if (!parse_mock_latency(optarg, latency)) {
          std::fprintf(stderr, "rdmakit-rping: invalid %s '%s'%s\n", mock_latency_what, optarg,
                       decimal_hint(optarg).c_str());
          return 1;
        }
        if (!mock_option) mock_option = "--mock-latency";
        break;
      case 1001:
        if (!parse_mock_profile(optarg, rxe)) {
          std::fprintf(stderr, "rdmakit-rping: invalid --mock-profile '%s' (spec or rxe)\n", optarg);
          return 1;
        }
        if (!mock_option) mock_option = "--mock-profile";
        break;
      case 'h': usage(argv[0], stdout); return 0;
      case 'q': o.self_qp = true; break;
      case 't':
        std::fprintf(stderr, "rdmakit-rping: -%c is not supported (see --help)\n", op);
        return 1;
      default:  // getopt said which option and what was wrong with it (the usage after it buried that line)
        std::fprintf(stderr, "%s: see --help for the options\n", argv[0]);
        return 1;
    }
  }
  if (optind < argc) {  // rping ignores them; a forgotten -a would bind or connect elsewhere
    std::fprintf(stderr, "rdmakit-rping: unexpected argument '%s': an address goes after -a (see --help)\n",
                 argv[optind]);
    return 1;
  }
  if (mock && !ib_dev.empty()) {
    std::fprintf(stderr, "rdmakit-rping: --mock runs on the mock fabric's devices: --ib-dev %s does not apply\n",
                 ib_dev.c_str());
    return 1;
  }
  if (mock_option && !mock) {
    std::fprintf(stderr, "rdmakit-rping: %s sets the fabric of --mock (both ends in this process on the mock): "
                         "on a device%s%s the wire and the device are the real ones; add --mock, or drop %s\n",
                 mock_option, ib_dev.empty() ? "" : " (--ib-dev ", ib_dev.empty() ? "" : (ib_dev + ")").c_str(),
                 mock_option);
    return 1;
  }
  o.addr.port = port;
  try {
    if (mock) {
      if (o.count == 0) {
        if (count_given)
          std::fprintf(stderr, "rdmakit-rping: --mock -C 0: -C 0 pings until interrupted, and a --mock run ends: "
                               "give a count of at least 1\n");
        else
          std::fprintf(stderr, "rdmakit-rping: --mock needs -C count (at least 1)\n");
        return 1;
      }
      // The client runs on mock1 (10.0.0.2): a source on the server's mock0 would route
      // its connection there, away from the client's PD (a library error about devices).
      if (std::uint32_t v4 = o.source.ipv4; !o.source.is_any() &&
          (o.source.is_ipv6 ? o.source.mapped_ipv4(v4) && v4 == 0x0A000001 : v4 == 0x0A000001)) {
        std::fprintf(stderr, "rdmakit-rping: --mock -I %s: 10.0.0.1 is the server's device (mock0); the client runs "
                             "on mock1, 10.0.0.2: give -I 10.0.0.2 or leave -I out\n",
                     o.source.to_string().c_str());
        return 1;
      }
      // The mock CM connects with an ACK timeout of 2.1 s per try (19): longer than any
      // round trip --mock-latency allows, so no latency fails a WR's retries.
      mock::fabric_config cfg;
      cfg.latency = latency;
      cfg.profile = rxe ? mock::device_profile::rxe : mock::device_profile::spec;
      mock::fabric fab(cfg);
      o.timeout = wait_with_latency(o.timeout, latency);  // each wait: a round trip more, twice
      using B = backends::mock;
      rping_side<B> srv(device<B>(fab, "mock0"), o);
      cm_listener<B> l(device<B>(fab, "mock0"), cm_address::parse("10.0.0.1", port));
      say_port_if_picked(port, l.address().port);
      // The server's loop runs until `stop`, which the client's side sets when it ends,
      // by an exception too: the server's future waits for the loop in its destructor.
      std::atomic<bool> stop{false};
      struct stop_when_done {
        std::atomic<bool>& stop;
        ~stop_when_done() { stop = true; }
      };
      if (o.persistent) {  // two clients in a row against one persistent server
        auto server = std::async(std::launch::async, [&] { return srv.serve_persistent(l, [&] { return stop.load(); }); });
        bool ok = true;
        {
          const stop_when_done done{stop};
          for (int i = 0; i < 2 && ok; ++i) {
            rping_side<B> cli(device<B>(fab, "mock1"), o);
            ok = cli.ping(l.address());
          }
        }
        const int served = server.get();
        if (ok && served != 2) {
          std::fprintf(stderr, "rdmakit-rping: the persistent server served %d clients, not 2\n", served);
          return 1;
        }
        return ok ? 0 : 1;
      }
      // -a: the client connects there (the server listens on 10.0.0.1 whatever -a says).
      const cm_address to = have_addr ? o.addr : l.address();
      rping_side<B> cli(device<B>(fab, "mock1"), o);
      auto server = std::async(std::launch::async, [&] { srv.serve(l, [&] { return stop.load(); }); });
      bool ok = false;
      {
        const stop_when_done done{stop};
        ok = cli.ping(to);
      }
      server.get();
      return ok ? 0 : 1;
    }
    if (role < 0) {
      usage(argv[0], stderr);
      return 1;
    }
#if RDMAKIT_HAVE_RDMACM
    using B = backends::rdmacm;
    o.server = role == 1;
    if (!o.server && !have_addr) {
      std::fprintf(stderr, "rdmakit-rping: the client needs -a addr\n");
      return 1;
    }
    if (ib_dev.empty()) ib_dev = device_for(o.addr, o.source, o.server);
    rping_side<B> side(device<B>(ib_dev), o);
    if (o.server) {
      device<B> dev(ib_dev);
      cm_listener<B> l(dev, o.addr);
      say_port_if_picked(port, l.address().port);
      if (o.persistent) {
        side.serve_persistent(l, [] { return false; });  // until killed, as rping -P
        return 0;
      }
      side.serve(l);
      return 0;
    }
    return side.ping(o.addr) ? 0 : 1;
#else
    std::fprintf(stderr, "rdmakit-rping: built without librdmacm: only --mock works\n");
    return 1;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmakit-rping: %s\n", e.what());
    return 1;
  }
}
