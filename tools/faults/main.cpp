// rdmakit-faults: send N messages over RC/UC/UD under faults, report what arrived.
//
//   rdmakit-faults [options]            mock: both ends in this process, faults injected
//   rdmakit-faults -d DEV [options]     server on a device: wait for a client
//   rdmakit-faults -d DEV [options] H   client: connect to the server at H
//
// On a device the faults come from the link (tests/rxe/netem.sh puts netem on it); on
// the mock from the fabric: --loss/--dup/--reorder are per-packet probabilities with
// --seed, under the rxe device profile (--profile spec for the specification).
// Output: one line per side, `faults side=server|client transport=... key=value ...`.
#include "../common/cli.hpp"
#include "../common/device_peer.hpp"
#include "faults_mock.hpp"

#include <rdmakit/backends/mock.hpp>
#if RDMAKIT_HAVE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#endif

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace rdmakit;
using namespace rdmakit_tools;

namespace {

struct cli {
  faults_options fo;
  qp_type transport = qp_type::rc;
  std::uint16_t port = 18700;
  bool port_given = false;  // the mock's loopback takes an ephemeral port unless -p names one
  std::string host;
  double loss = 0, dup = 0, reorder = 0;
  std::uint64_t seed = 1;
  bool spec_profile = false;
  std::chrono::nanoseconds latency{0};  // --mock-latency
  std::chrono::milliseconds xtimeout{60'000};
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "Usage: rdmakit-faults [options] [host]\n"
               "  -T, --transport=rc|uc|ud   transport (default rc)\n"
               "  -o, --op=send|write_imm|write  what carries the messages (default send; UD: send)\n"
               "  -n, --count=N              messages (default 200)\n"
               "  -s, --size=BYTES           message size (default 4096; UD 1024)\n"
               "  -w, --window=N             sends outstanding at most (default 16)\n"
               "  -m, --mtu=BYTES            path MTU (default 1024)\n"
               "  -t, --timeout=EXP          RC local ACK timeout exponent, 1..22: 4.096 us * 2^EXP per try\n"
               "                             (default 12: 17 ms); 0, the verbs' \"no timeout\", is refused\n"
               "  -R, --retry=N              RC retry count (default 6)\n"
               "  -d, --ib-dev=DEV           device (none, or mock: both ends here on the mock)\n"
               "  -g, --gid-idx=N            GID index\n"
               "  -p, --port=PORT            TCP port of the exchange (default 18700; mock: ephemeral)\n"
               "Mock only (refused with -d DEV: on a device, netem on the link makes the faults):\n"
               "  --loss=P --dup=P --reorder=P  per-packet fault probabilities (0..1)\n"
               "  --seed=N                   fabric seed (default 1)\n"
               "  --profile=rxe|spec         device profile (default rxe); --mock-profile=rxe|spec is the same\n"
               "  --mock-latency=US          one-way wire latency in microseconds (a decimal, e.g. 2 or 0.5; at\n"
               "                             most 1000000; default 0); the client's wait for a completion and the\n"
               "                             server's drain after the last message grow by 4 latencies\n"
               "  -h, --help                 this text\n");
}

bool parse_prob(const char* s, double& p) {
  return parse_decimal(s, p) && p <= 1;
}

int parse(int argc, char** argv, cli& c, bool& help) {
  enum { o_loss = 1000, o_dup, o_reorder, o_seed, o_profile, o_mock_profile, o_mock_latency };
  static const option longs[] = {
      {"transport", required_argument, nullptr, 'T'}, {"op", required_argument, nullptr, 'o'},
      {"count", required_argument, nullptr, 'n'},     {"size", required_argument, nullptr, 's'},
      {"window", required_argument, nullptr, 'w'},    {"mtu", required_argument, nullptr, 'm'},
      {"timeout", required_argument, nullptr, 't'},   {"retry", required_argument, nullptr, 'R'},
      {"ib-dev", required_argument, nullptr, 'd'},    {"gid-idx", required_argument, nullptr, 'g'},
      {"port", required_argument, nullptr, 'p'},      {"loss", required_argument, nullptr, o_loss},
      {"dup", required_argument, nullptr, o_dup},     {"reorder", required_argument, nullptr, o_reorder},
      {"seed", required_argument, nullptr, o_seed},   {"profile", required_argument, nullptr, o_profile},
      {"mock-profile", required_argument, nullptr, o_mock_profile},
      {"mock-latency", required_argument, nullptr, o_mock_latency},
      {"help", no_argument, nullptr, 'h'},            {nullptr, 0, nullptr, 0}};
  auto bad = [&](const char* what, const char* arg, unsigned long long lo = 0, unsigned long long hi = 0,
                 const char* hint = nullptr) {
    std::fprintf(stderr, "rdmakit-faults: invalid %s \"%s\"%s\n", what, arg,
                 hint ? hint : rdmakit_tools::range_hint(arg, lo, hi).c_str());
    return 2;
  };
  auto bad_probability = [&](const char* arg) {
    std::fprintf(stderr, "rdmakit-faults: invalid probability (0 to 1) \"%s\"%s\n", arg, decimal_hint(arg).c_str());
    return 2;
  };
  bool size_given = false;
  const char* rc_only = nullptr;  // -t or -R: RC's retransmission, which UC and UD do not have
  bool mtu_given = false;
  const char* mock_option = nullptr;  // the first mock-only option given (refused with -d)
  const char* latency_arg = nullptr;  // --mock-latency as given
  unsigned long long v = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, "T:o:n:s:w:m:t:R:d:g:p:h", longs, nullptr)) != -1) {
    switch (ch) {
      case 'T':
        if (!std::strcmp(optarg, "rc")) c.transport = qp_type::rc;
        else if (!std::strcmp(optarg, "uc")) c.transport = qp_type::uc;
        else if (!std::strcmp(optarg, "ud")) c.transport = qp_type::ud;
        else return bad("transport (rc, uc or ud)", optarg);
        break;
      case 'o':
        if (!std::strcmp(optarg, "send")) c.fo.op = fault_op::send;
        else if (!std::strcmp(optarg, "write_imm")) c.fo.op = fault_op::write_imm;
        else if (!std::strcmp(optarg, "write")) c.fo.op = fault_op::write;
        else return bad("op (send, write_imm or write)", optarg);
        break;
      case 'n':
        if (!parse_uint(optarg, 100000, v) || v < 1) return bad("count", optarg, 1, 100000);
        c.fo.count = static_cast<std::uint32_t>(v);
        break;
      case 's':
        if (!parse_uint(optarg, 1u << 20, v) || v < 8) return bad("size", optarg, 8, 1u << 20);
        c.fo.size = static_cast<std::uint32_t>(v);
        size_given = true;
        break;
      case 'w':
        if (!parse_uint(optarg, 1024, v) || v < 1) return bad("window", optarg, 1, 1024);
        c.fo.window = static_cast<std::uint32_t>(v);
        break;
      case 'm':
        if (!parse_uint(optarg, 4096, v) || !mtu_from_bytes(static_cast<std::uint32_t>(v), c.fo.path_mtu))
          return bad("MTU (256, 512, 1024, 2048 or 4096)", optarg);
        mtu_given = true;
        break;
      case 't':
        if (!parse_uint(optarg, 31, v)) return bad("timeout exponent", optarg, 0, 31);
        c.fo.timeout = static_cast<std::uint8_t>(v);
        rc_only = "-t";
        break;
      case 'R':
        if (!parse_uint(optarg, 7, v)) return bad("retry count", optarg, 0, 7);
        c.fo.retry_cnt = static_cast<std::uint8_t>(v);
        rc_only = "-R";
        break;
      case 'd':
        if (!*optarg) return bad("device", optarg, 0, 0, empty_device);
        c.fo.device = optarg;
        break;
      case 'g':
        if (!parse_uint(optarg, 0xffff, v)) return bad("GID index", optarg, 0, 0xffff);
        c.fo.gid_index = static_cast<int>(v);
        break;
      case 'p':
        if (!parse_uint(optarg, 65535, v)) return bad("port", optarg, 0, 65535);
        c.port = static_cast<std::uint16_t>(v);
        c.port_given = true;
        break;
      case o_loss:
        if (!parse_prob(optarg, c.loss)) return bad_probability(optarg);
        if (!mock_option) mock_option = "--loss";
        break;
      case o_dup:
        if (!parse_prob(optarg, c.dup)) return bad_probability(optarg);
        if (!mock_option) mock_option = "--dup";
        break;
      case o_reorder:
        if (!parse_prob(optarg, c.reorder)) return bad_probability(optarg);
        if (c.reorder >= 1) {
          // Each reordered message waits for the next one of its queue pair: none would arrive.
          std::fprintf(stderr, "rdmakit-faults: --reorder=%s: must be below 1: the mock holds a reordered message "
                               "until the next one of its queue pair, so at 1 no message would ever arrive "
                               "(docs/faults.md, note 5)\n", optarg);
          return 2;
        }
        if (!mock_option) mock_option = "--reorder";
        break;
      case o_seed:
        if (!parse_uint(optarg, ~0ull, v)) return bad("seed", optarg, 0, ~0ull);
        c.seed = v;
        if (!mock_option) mock_option = "--seed";
        break;
      case o_profile:
        if (!std::strcmp(optarg, "spec")) c.spec_profile = true;
        else if (std::strcmp(optarg, "rxe")) return bad("profile (rxe or spec)", optarg);
        if (!mock_option) mock_option = "--profile";
        break;
      case o_mock_profile: {
        bool rxe = true;
        if (!parse_mock_profile(optarg, rxe)) return bad("--mock-profile (rxe or spec)", optarg);
        c.spec_profile = !rxe;
        if (!mock_option) mock_option = "--mock-profile";
        break;
      }
      case o_mock_latency:
        if (!parse_mock_latency(optarg, c.latency)) return bad(mock_latency_what, optarg, 0, 0, decimal_hint(optarg).c_str());
        latency_arg = optarg;
        if (!mock_option) mock_option = "--mock-latency";
        break;
      case 'h': help = true; return 0;
      default: usage(stderr); return 2;
    }
  }
  if (!take_host("rdmakit-faults", argc, argv, optind, c.host)) return 2;
  // Options the transport has no use for would be dropped without a word.
  if (rc_only && c.transport != qp_type::rc) {
    std::fprintf(stderr,
                 "rdmakit-faults: %s sets RC's retransmission (-t its ACK timeout, -R its retry count); %s never "
                 "retransmits, a lost message is gone: drop %s, or use -T rc\n",
                 rc_only, c.transport == qp_type::uc ? "UC" : "UD", rc_only);
    return 2;
  }
  if (mtu_given && c.transport == qp_type::ud) {
    std::fprintf(stderr, "rdmakit-faults: -m sets a connection's path MTU; UD has none (each message is one packet "
                         "of at most the port's MTU): drop -m\n");
    return 2;
  }
  if (!size_given && c.transport == qp_type::ud) c.fo.size = 1024;
  // On a device the link's faults are netem's: a run would go on without the mock's.
  if (mock_option && !c.fo.device.empty() && c.fo.device != "mock") {
    std::fprintf(stderr,
                 "rdmakit-faults: %s is for the mock (no -d): on a device (-d %s) the faults%s are the link's; "
                 "put netem on it (tests/rxe/netem.sh), or drop -d to run on the mock\n",
                 mock_option, c.fo.device.c_str(), c.latency.count() ? " and the latency" : "");
    return 2;
  }
  // 0 switches the requester's ACK timer off: a lost last packet is never sent again, and
  // the run would stall until the client's wait for a completion gives up. A try longer
  // than that wait ends the run before the first retry just the same.
  const auto max_exp = [&] {
    unsigned e = 1;
    while (e < 31 && 4.096e-3 * static_cast<double>(1u << (e + 1)) < static_cast<double>(c.fo.stall_timeout.count())) ++e;
    return e;
  }();
  if (c.fo.timeout == 0) {
    std::fprintf(stderr,
                 "rdmakit-faults: -t 0 is the verbs' \"no ACK timeout\": RC then never retransmits a lost packet, "
                 "so a run with losses stalls; give -t 1..%u (4.096 us * 2^EXP per try; default 12: 17 ms)\n",
                 max_exp);
    return 2;
  }
  if (c.fo.timeout > max_exp) {
    std::fprintf(stderr,
                 "rdmakit-faults: -t %u is %.0f s per try, longer than the client waits for a completion (%lld s): "
                 "a lost packet would end the run before it is sent again; give -t 1..%u\n",
                 static_cast<unsigned>(c.fo.timeout), 4.096e-6 * static_cast<double>(1ull << c.fo.timeout),
                 static_cast<long long>(c.fo.stall_timeout.count() / 1000), max_exp);
    return 2;
  }
  // A round trip past the ACK timeout's tries fails every WR, loss or not.
  if (c.transport == qp_type::rc) {
    if (const std::string why = rc_latency_refusal(c.latency, c.fo.timeout, c.fo.retry_cnt,
                                                   "or raise -t or -R, or use -T uc or ud");
        !why.empty()) {
      std::fprintf(stderr, "rdmakit-faults: --mock-latency=%s: %s\n", latency_arg, why.c_str());
      return 2;
    }
  }
  // The server keeps one slot per message: refuse what it could not allocate.
  constexpr std::uint64_t max_server_bytes = std::uint64_t{1} << 30;
  if (std::uint64_t{c.fo.count} * (c.fo.size + 40) > max_server_bytes) {
    std::fprintf(stderr,
                 "rdmakit-faults: -n %u messages of -s %u bytes need %llu MiB on the server (one slot each); "
                 "keep -n times -s under 1 GiB\n",
                 c.fo.count, c.fo.size,
                 static_cast<unsigned long long>(std::uint64_t{c.fo.count} * (c.fo.size + 40) >> 20));
    return 2;
  }
  c.fo.server = c.host.empty();
  return 0;
}

const char* name(qp_type t) { return t == qp_type::rc ? "rc" : t == qp_type::uc ? "uc" : "ud"; }

#if RDMAKIT_HAVE_IBVERBS
template <verbs_backend B, polling P>
faults_report dispatch(const faults_options& o, qp_type t, const exchange_fn& ex, device<B> dev = {}) {
  switch (t) {
    case qp_type::rc: return run_faults<B, rc, P>(o, ex, std::move(dev));
    case qp_type::uc: return run_faults<B, uc, P>(o, ex, std::move(dev));
    case qp_type::ud: break;
  }
  return run_faults<B, ud, P>(o, ex, std::move(dev));
}
#endif

int run_mock(const cli& c) {
  if (!c.host.empty()) {
    std::fprintf(stderr, "rdmakit-faults: a host was given without -d; give -d <device> to talk to %s\n",
                 c.host.c_str());
    return 2;
  }
  mock_faults f{c.loss, c.dup, c.reorder, c.seed,
                c.spec_profile ? mock::device_profile::spec : mock::device_profile::rxe, c.latency};
  const std::uint16_t port = c.port_given ? c.port : 0;
  faults_pair r;
  switch (c.transport) {
    case qp_type::rc: r = run_faults_on_mock<rc>(c.fo, f, {}, port); break;
    case qp_type::uc: r = run_faults_on_mock<uc>(c.fo, f, {}, port); break;
    case qp_type::ud: r = run_faults_on_mock<ud>(c.fo, f, {}, port); break;
  }
  faults_options o = c.fo;
  o.server = false;
  std::printf("%s\n", r.client.line(name(c.transport), o).c_str());
  o.server = true;
  std::printf("%s\n", r.server.line(name(c.transport), o).c_str());
  return 0;
}

#if RDMAKIT_HAVE_IBVERBS
int run_device(const cli& c) {
  exchange_options xo;
  xo.timeout = c.xtimeout;
  xo.accept_timeout = std::chrono::milliseconds{120'000};
  device<backends::ibverbs> dev(c.fo.device);  // a wrong -d fails before the server says it waits
  device_peer peer("rdmakit-faults", c.host, c.port, xo);
  const faults_report rep =
      dispatch<backends::ibverbs, busy_poll<>>(c.fo, c.transport, peer.exchange(), std::move(dev));
  std::printf("%s\n", rep.line(name(c.transport), c.fo).c_str());
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  cli c;
  bool help = false;
  if (int rc = parse(argc, argv, c, help)) return rc;
  if (help) {
    usage(stdout);
    return 0;
  }
  if (c.fo.device.empty() || c.fo.device == "mock") return run_mock(c);
#if RDMAKIT_HAVE_IBVERBS
  return run_device(c);
#else
  std::fprintf(stderr, "rdmakit-faults: built without libibverbs: only the mock (no -d)\n");
  return 1;
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "rdmakit-faults: %s\n", e.what());
  return 1;
}
