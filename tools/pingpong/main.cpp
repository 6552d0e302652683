// rdmakit-pingpong: ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong on rdmakit,
// with their options, output and TCP exchange, so either end can be one of them.
//
//   rdmakit-pingpong [options]          server: wait for a client
//   rdmakit-pingpong [options] <host>   client: connect to the server at <host>
//
// The transport comes from --transport, else from the program name
// (rdmakit-rc-pingpong, rdmakit-uc-pingpong, rdmakit-ud-pingpong), else RC.
// Without -d (or with -d mock) both ends run in this process on a mock fabric of their
// own (devices opened from it explicitly), on two threads, exchanging their records over TCP on 127.0.0.1 (an ephemeral port unless -p).
#include "../common/cli.hpp"
#include "../common/device_peer.hpp"
#include "pingpong.hpp"

#include <rdmakit/backends/mock.hpp>
#if RDMAKIT_HAVE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#endif

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <thread>

using namespace rdmakit;
using namespace rdmakit_tools;

namespace {

struct cli {
  pingpong_options pp;
  qp_type transport = qp_type::rc;
  bool size_given = false;
  bool mtu_given = false;
  bool port_given = false;
  std::uint16_t port = pingpong_port;
  std::string host;
  exchange_options xo;
  std::chrono::nanoseconds mock_latency{0};  ///< --mock-latency: the mock fabric's one-way wire latency
  std::string mock_latency_arg;              ///< as given
  bool mock_rxe = false;                     ///< --mock-profile=rxe
  const char* mock_option = nullptr;         ///< the first of them given (refused with a device)
};

void usage(const char* argv0, std::FILE* to) {
  std::fprintf(to,
               "Usage:\n"
               "  %s            start a server and wait for connection\n"
               "  %s <host>     connect to server at <host>\n"
               "\n"
               "Options (as ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong):\n"
               "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"
               "  -d, --ib-dev=<dev>     use IB device <dev>; without -d (or with -d mock) both ends\n"
               "                         run in this process on the mock fabric\n"
               "  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n"
               "  -s, --size=<size>      size of message to exchange (default 4096; UD 1024)\n"
               "  -m, --mtu=<size>       path MTU (default 1024; capped by the port's active MTU; RC/UC)\n"
               "  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n"
               "  -n, --iters=<iters>    number of exchanges (default 1000)\n"
               "  -l, --sl=<sl>          service level value (default 0)\n"
               "  -e, --events           sleep on CQ events (default poll)\n"
               "  -g, --gid-idx=<gid index> local port gid index (default: automatic, RoCEv2\n"
               "                         IPv4-mapped first; ibv_*_pingpong default to no GID)\n"
               "  -c, --chk              validate received messages (their length)\n"
               "\n"
               "rdmakit options:\n"
               "  -T, --transport=rc|uc|ud  transport (default: from the program name\n"
               "                         rdmakit-{rc,uc,ud}-pingpong, else rc)\n"
               "  -W, --wire=pingpong|rdmakit  exchange format (default pingpong, the ibv_*_pingpong\n"
               "                         record; rdmakit's own also carries the MTU)\n"
               "      --timeout=<ms>     bound on the exchange once connected, and on the wait for\n"
               "                         any completion (default 10000); the client retries a\n"
               "                         refused connection that long\n"
               "      --accept-timeout=<ms>  how long the server waits for a client (default 120000)\n"
               "      --mock-latency=<us>  mock loopback: one-way wire latency in microseconds (a decimal,\n"
               "                         e.g. 2 or 0.5; at most 1000000; default 0: a WR completes almost at\n"
               "                         its post); the wait for a completion (--timeout) grows by 4 latencies\n"
               "      --mock-profile=spec|rxe  mock loopback: the device profile (default spec)\n"
               "  -h, --help             this text\n"
               "\n"
               "Not supported (ibv_*_pingpong options): -o/--odp, -O/--iodp, -P/--prefetch,\n"
               "  -t/--ts, -j/--dm, -N/--new_send.\n",
               argv0, argv0);
}

using rdmakit_tools::parse_uint;

qp_type transport_from_name(std::string_view argv0) {
  auto slash = argv0.rfind('/');
  if (slash != std::string_view::npos) argv0.remove_prefix(slash + 1);
  if (argv0.find("uc-pingpong") != std::string_view::npos || argv0.find("uc_pingpong") != std::string_view::npos)
    return qp_type::uc;
  if (argv0.find("ud-pingpong") != std::string_view::npos || argv0.find("ud_pingpong") != std::string_view::npos)
    return qp_type::ud;
  return qp_type::rc;
}

/// 0: parsed; otherwise the exit code (help: 0 via `help`).
int parse(int argc, char** argv, cli& c, bool& help) {
  c.transport = transport_from_name(argv[0]);
  c.xo.format = wire_format::pingpong;
  c.xo.accept_timeout = std::chrono::milliseconds{120'000};
  enum { opt_timeout = 1000, opt_accept_timeout, opt_mock_latency, opt_mock_profile };
  static const option longs[] = {
      {"port", required_argument, nullptr, 'p'},      {"ib-dev", required_argument, nullptr, 'd'},
      {"ib-port", required_argument, nullptr, 'i'},   {"size", required_argument, nullptr, 's'},
      {"mtu", required_argument, nullptr, 'm'},       {"rx-depth", required_argument, nullptr, 'r'},
      {"iters", required_argument, nullptr, 'n'},     {"sl", required_argument, nullptr, 'l'},
      {"events", no_argument, nullptr, 'e'},          {"gid-idx", required_argument, nullptr, 'g'},
      {"chk", no_argument, nullptr, 'c'},             {"transport", required_argument, nullptr, 'T'},
      {"wire", required_argument, nullptr, 'W'},      {"timeout", required_argument, nullptr, opt_timeout},
      {"accept-timeout", required_argument, nullptr, opt_accept_timeout},
      {"mock-latency", required_argument, nullptr, opt_mock_latency},
      {"mock-profile", required_argument, nullptr, opt_mock_profile},
      {"help", no_argument, nullptr, 'h'},            {"odp", no_argument, nullptr, 'o'},
      {"iodp", no_argument, nullptr, 'O'},            {"prefetch", no_argument, nullptr, 'P'},
      {"ts", no_argument, nullptr, 't'},              {"dm", no_argument, nullptr, 'j'},
      {"new_send", no_argument, nullptr, 'N'},        {nullptr, 0, nullptr, 0}};
  auto bad = [&](const char* what, const char* arg, unsigned long long lo = 0, unsigned long long hi = 0,
                 const char* hint = nullptr) {
    // One line naming the value (the whole usage after it buried that line).
    std::fprintf(stderr, "%s: invalid %s \"%s\"%s (see --help)\n", argv[0], what, arg,
                 hint ? hint : rdmakit_tools::range_hint(arg, lo, hi).c_str());
    return 1;
  };
  int ch;
  unsigned long long v = 0;
  while ((ch = getopt_long(argc, argv, "p:d:i:s:m:r:n:l:eg:cT:W:hoOPtjN", longs, nullptr)) != -1) {
    switch (ch) {
      case 'p':
        if (!parse_uint(optarg, 65535, v)) return bad("port", optarg, 0, 65535);
        c.port = static_cast<std::uint16_t>(v);
        c.port_given = true;
        break;
      case 'd':
        if (!*optarg) return bad("device", optarg, 0, 0, empty_device);
        c.pp.device = optarg;
        break;
      case 'i':
        if (!parse_uint(optarg, 255, v) || v < 1) return bad("IB port", optarg, 1, 255);
        c.pp.ib_port = static_cast<std::uint8_t>(v);
        break;
      case 's':
        if (!parse_uint(optarg, 0x7fffffff, v) || v < 1) return bad("size", optarg, 1, 0x7fffffff);
        c.pp.size = static_cast<std::uint32_t>(v);
        c.size_given = true;
        break;
      case 'm':
        if (!parse_uint(optarg, 4096, v) || !mtu_from_bytes(static_cast<std::uint32_t>(v), c.pp.path_mtu))
          return bad("MTU (256, 512, 1024, 2048 or 4096)", optarg);
        c.mtu_given = true;
        break;
      case 'r':
        if (!parse_uint(optarg, 1u << 20, v) || v < 1) return bad("rx depth", optarg, 1, 1u << 20);
        c.pp.rx_depth = static_cast<std::uint32_t>(v);
        break;
      case 'n':
        if (!parse_uint(optarg, 0x7fffffff, v) || v < 1) return bad("iteration count", optarg, 1, 0x7fffffff);
        c.pp.iters = static_cast<std::uint32_t>(v);
        break;
      case 'l':
        if (!parse_uint(optarg, 15, v)) return bad("service level", optarg, 0, 15);
        c.pp.sl = static_cast<std::uint8_t>(v);
        break;
      case 'e': c.pp.events = true; break;
      case 'g':
        if (!parse_uint(optarg, 0xffff, v)) return bad("GID index", optarg, 0, 0xffff);
        c.pp.gid_index = static_cast<int>(v);
        break;
      case 'c': c.pp.check = true; break;
      case 'T':
        if (!std::strcmp(optarg, "rc")) c.transport = qp_type::rc;
        else if (!std::strcmp(optarg, "uc")) c.transport = qp_type::uc;
        else if (!std::strcmp(optarg, "ud")) c.transport = qp_type::ud;
        else return bad("transport (rc, uc or ud)", optarg);
        break;
      case 'W':
        if (!std::strcmp(optarg, "pingpong")) c.xo.format = wire_format::pingpong;
        else if (!std::strcmp(optarg, "rdmakit")) c.xo.format = wire_format::rdmakit;
        else return bad("wire format (pingpong or rdmakit)", optarg);
        break;
      case opt_timeout:
        if (!parse_uint(optarg, 86'400'000, v) || v < 1) return bad("timeout (ms)", optarg, 1, 86'400'000);
        c.xo.timeout = c.pp.stall_timeout = std::chrono::milliseconds(v);
        break;
      case opt_accept_timeout:
        if (!parse_uint(optarg, 86'400'000, v) || v < 1) return bad("accept timeout (ms)", optarg, 1, 86'400'000);
        c.xo.accept_timeout = std::chrono::milliseconds(v);
        break;
      case opt_mock_latency:
        if (!parse_mock_latency(optarg, c.mock_latency)) return bad(mock_latency_what, optarg, 0, 0,
                                                                    decimal_hint(optarg).c_str());
        c.mock_latency_arg = optarg;
        if (!c.mock_option) c.mock_option = "--mock-latency";
        break;
      case opt_mock_profile:
        if (!parse_mock_profile(optarg, c.mock_rxe)) return bad("--mock-profile (spec or rxe)", optarg);
        if (!c.mock_option) c.mock_option = "--mock-profile";
        break;
      case 'h': help = true; return 0;
      case 'o': case 'O': case 'P': case 't': case 'j': case 'N':
        std::fprintf(stderr, "%s: option -%c is not supported by rdmakit-pingpong (see --help)\n", argv[0], ch);
        return 1;
      default:  // getopt said which option and what was wrong with it: one line more, as rdmakit-perf
        std::fprintf(stderr, "%s: see --help for the options\n", argv[0]);
        return 1;
    }
  }
  if (optind == argc - 1) {
    c.host = argv[optind];
    if (c.host.empty()) {  // a script's unset "$HOST": it would become a server
      std::fprintf(stderr,
                   "%s: an empty host argument: give the server's host name or address, or none to be the server\n",
                   argv[0]);
      return 1;
    }
  } else if (optind < argc) {
    std::fprintf(stderr,
                 "%s: unexpected argument \"%s\": give at most one host (the server's), after the options (see --help)\n",
                 argv[0], argv[optind + 1]);
    return 1;
  }
  // (ibv_ud_pingpong has no -m: it would be dropped without a word.)
  if (c.mtu_given && c.transport == qp_type::ud) {
    std::fprintf(stderr, "%s: -m sets a connection's path MTU; UD has none (each message is one packet of at most "
                         "the port's MTU): drop -m\n", argv[0]);
    return 1;
  }
  if (!c.size_given && c.transport == qp_type::ud) c.pp.size = 1024;
  // The mock's options on a device would be dropped without a word.
  if (c.mock_option && !c.pp.device.empty() && c.pp.device != "mock") {
    std::fprintf(stderr, "%s: %s is for the mock loopback (no -d, or -d mock): on a device (-d %s) the wire and the "
                         "device are the real ones; drop %s, or drop -d to run on the mock\n",
                 argv[0], c.mock_option, c.pp.device.c_str(), c.mock_option);
    return 1;
  }
  if (c.transport == qp_type::rc) {
    const connect_options co;  // run_pingpong's ACK timeout and retry count
    if (const std::string why = rc_latency_refusal(c.mock_latency, co.timeout, co.retry_cnt, "or use -T uc or ud");
        !why.empty()) {
      std::fprintf(stderr, "%s: --mock-latency=%s: %s\n", argv[0], c.mock_latency_arg.c_str(), why.c_str());
      return 1;
    }
  }
  c.pp.server = c.host.empty();
  return 0;
}

/// Picks the transport and polling policies. `Spin`: the polling policy without -e.
/// `dev`: the device to run on, or empty to open the one o.device names.
template <verbs_backend B, polling Spin>
int dispatch(const pingpong_options& o, qp_type t, const exchange_fn& ex, printer& out, device<B> dev = {}) {
  switch (t) {
    case qp_type::rc:
      return o.events ? run_pingpong<B, rc, event_driven<>>(o, ex, out, std::move(dev))
                      : run_pingpong<B, rc, Spin>(o, ex, out, std::move(dev));
    case qp_type::uc:
      return o.events ? run_pingpong<B, uc, event_driven<>>(o, ex, out, std::move(dev))
                      : run_pingpong<B, uc, Spin>(o, ex, out, std::move(dev));
    case qp_type::ud:
      return o.events ? run_pingpong<B, ud, event_driven<>>(o, ex, out, std::move(dev))
                      : run_pingpong<B, ud, Spin>(o, ex, out, std::move(dev));
  }
  return 1;
}

const char* transport_name(qp_type t) {
  return t == qp_type::rc ? "RC" : t == qp_type::uc ? "UC" : "UD";
}

/// Both ends on the mock fabric ("mock0" serves, "mock1" connects), one thread each,
/// exchanging over TCP on 127.0.0.1. Output is printed per side once both are done.
int run_mock_loopback(const cli& c) {
  if (!c.host.empty()) {
    std::fprintf(stderr,
                 "rdmakit-pingpong: a host was given %s: the mock loopback runs both ends in this process; "
                 "drop the host, or give -d <an RDMA device> to talk to %s\n",
                 c.pp.device.empty() ? "without -d" : "with -d mock", c.host.c_str());
    return 1;
  }
  mock::fabric_config cfg;
  cfg.latency = c.mock_latency;
  cfg.profile = c.mock_rxe ? mock::device_profile::rxe : mock::device_profile::spec;
  mock::fabric fab(cfg);  // both ends open their devices from it, explicitly
  std::string out[2];  // server, client
  int rc[2] = {1, 1};
  const std::uint16_t port = c.port_given ? c.port : 0;
  const auto lb = rdmakit_tools::run_loopback(port, c.xo, [&](bool is_server, const exchange_fn& ex) {
    printer p(&out[is_server ? 0 : 1]);
    pingpong_options o = c.pp;
    o.stall_timeout = wait_with_latency(o.stall_timeout, c.mock_latency);
    o.server = is_server;
    o.device = is_server ? "mock0" : "mock1";
    rc[is_server ? 0 : 1] =
        dispatch<backends::mock, yielding_poll<>>(o, c.transport, ex, p, device<backends::mock>(fab, o.device));
  });
  // The fabric's settings only when not the defaults (the line is otherwise as it was).
  const std::string fabric_note = mock_fabric_note(c.mock_latency, c.mock_rxe);
  std::printf("mock loopback, %s, exchange over 127.0.0.1:%u (%s format)%s\n", transport_name(c.transport), lb.port,
              c.xo.format == wire_format::pingpong ? "ibv_*_pingpong" : "rdmakit", fabric_note.c_str());
  const rdmakit_tools::loopback_side* sides[2] = {&lb.server, &lb.client};
  // A side's error (stderr) goes in its section, after what it printed: stdout is flushed
  // first, or a piped stdout put both errors above the header and left the sections empty.
  for (int i = 0; i < 2; ++i) {
    std::printf("[%s]\n%s", i == 0 ? "server mock0" : "client mock1", out[i].c_str());
    if (!sides[i]->ok()) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s: %s\n", i == 0 ? "server" : "client", sides[i]->error.c_str());
    }
  }
  return lb.ok() && rc[0] == 0 && rc[1] == 0 ? 0 : 1;
}

template <verbs_backend B>
int run_device(const cli& c) {
  printer out;
  // The device first: a wrong -d fails before a server says it waits for a client.
  device<B> dev(c.pp.device);
  device_peer peer("rdmakit-pingpong", c.host, c.port, c.xo);  // a server listens before "local address" is printed
  return dispatch<B, busy_poll<>>(c.pp, c.transport, peer.exchange(), out, std::move(dev));
}

}  // namespace

int main(int argc, char** argv) try {
  cli c;
  bool help = false;
  if (int rc = parse(argc, argv, c, help)) return rc;
  if (help) {
    usage(argv[0], stdout);
    return 0;
  }
  if (c.pp.device.empty() || c.pp.device == "mock") return run_mock_loopback(c);
#if RDMAKIT_HAVE_IBVERBS
  return run_device<backends::ibverbs>(c);
#else
  std::fprintf(stderr, "rdmakit-pingpong: built without libibverbs: only the mock loopback (no -d) is available\n");
  return 1;
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "rdmakit-pingpong: %s\n", e.what());
  return 1;
}
