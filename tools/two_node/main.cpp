// rdmakit-two-node: the two-node conformance scenarios (tools/two_node/two_node.hpp),
// one queue pair end per host: every opcode of RC, UC and UD, multi-packet messages,
// RNR, transport retries and a bad rkey, checked on both sides.
//
//   rdmakit-two-node [options]              mock: both roles in this process
//   rdmakit-two-node -d DEV [options]       server (responder): wait for the client
//   rdmakit-two-node -d DEV [options] HOST  client (requester): connect to the server
//
// One line per scenario, `PASS name` or `FAIL name: why`, the same on both sides (a
// scenario passes only when both sides passed); exit status 1 when any failed.
#include "../common/cli.hpp"
#include "../common/device_peer.hpp"
#include "two_node_mock.hpp"

#include <rdmakit/backends/mock.hpp>
#if RDMAKIT_HAVE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#endif

#include <getopt.h>

#include <cstdio>
#include <cstring>
#include <string>

using namespace rdmakit;
using namespace rdmakit_tools;

namespace {

struct cli {
  two_node_options o;
  std::uint16_t port = 18800;
  bool port_given = false;  // the mock's loopback takes an ephemeral port unless -p names one
  std::string host;
  bool spec_profile = false;
  bool list = false;
  std::chrono::nanoseconds latency{0};  // --mock-latency
  const char* mock_option = nullptr;    // the first of --mock-latency and --mock-profile given
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "Usage: rdmakit-two-node [options] [host]\n"
               "  -d, --ib-dev=DEV      device (none, or mock: both roles here on the mock)\n"
               "  -i, --ib-port=PORT    device port (default 1)\n"
               "  -g, --gid-idx=N       GID index\n"
               "  -p, --port=PORT       TCP port of the exchange (default 18800; mock: ephemeral)\n"
               "  -s, --only=TEXT       only the scenarios whose name contains TEXT (give both sides the same;\n"
               "                        matching none is refused)\n"
               "  -w, --wait=MS         longest wait for a completion (default 10000, at least 200)\n"
               "  -l, --list            print the scenario names and exit\n"
               "  --profile=rxe|spec    the deviation table's rows to expect (default rxe); on the mock\n"
               "                        also the device profile it runs as\n"
               "  --mock-profile=rxe|spec  mock only: the device profile it runs as, and the rows to expect\n"
               "                        (--profile on the mock; refused with -d, where --profile says the rows)\n"
               "  --mock-latency=US     mock only: one-way wire latency in microseconds (a decimal, e.g. 2 or\n"
               "                        0.5; at most 1000000; default 0); -w grows by 4 latencies\n"
               "  -h, --help            this text\n");
}

int parse(int argc, char** argv, cli& c, bool& help) {
  enum { o_profile = 1000, o_mock_profile, o_mock_latency };
  static const option longs[] = {
      {"ib-dev", required_argument, nullptr, 'd'}, {"ib-port", required_argument, nullptr, 'i'},
      {"gid-idx", required_argument, nullptr, 'g'}, {"port", required_argument, nullptr, 'p'},
      {"only", required_argument, nullptr, 's'},   {"wait", required_argument, nullptr, 'w'},
      {"list", no_argument, nullptr, 'l'},         {"profile", required_argument, nullptr, o_profile},
      {"mock-profile", required_argument, nullptr, o_mock_profile},
      {"mock-latency", required_argument, nullptr, o_mock_latency},
      {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0}};
  auto bad = [&](const char* what, const char* arg, unsigned long long lo = 0, unsigned long long hi = 0,
                 const char* hint = nullptr) {
    std::fprintf(stderr, "rdmakit-two-node: invalid %s \"%s\"%s\n", what, arg,
                 hint ? hint : rdmakit_tools::range_hint(arg, lo, hi).c_str());
    return 2;
  };
  unsigned long long v = 0;
  const char* latency_arg = nullptr;  // --mock-latency as given
  int ch;
  while ((ch = getopt_long(argc, argv, "d:i:g:p:s:w:lh", longs, nullptr)) != -1) {
    switch (ch) {
      case 'd':
        if (!*optarg) return bad("device", optarg, 0, 0, empty_device);
        c.o.device = optarg;
        break;
      case 'i':
        if (!parse_uint(optarg, 255, v) || v < 1) return bad("device port", optarg, 1, 255);
        c.o.ib_port = static_cast<std::uint8_t>(v);
        break;
      case 'g':
        if (!parse_uint(optarg, 0xffff, v)) return bad("GID index", optarg, 0, 0xffff);
        c.o.gid_index = static_cast<int>(v);
        break;
      case 'p':
        if (!parse_uint(optarg, 65535, v)) return bad("port", optarg, 0, 65535);
        c.port = static_cast<std::uint16_t>(v);
        c.port_given = true;
        break;
      case 's':
        // (Empty would select every scenario: a script's unset variable.)
        if (!*optarg) {
          std::fprintf(stderr, "rdmakit-two-node: --only with an empty TEXT (an unset variable?): give part of a "
                               "scenario's name (-l lists them), or leave --only out to run every scenario\n");
          return 2;
        }
        c.o.only = optarg;
        break;
      case 'w':
        if (!parse_uint(optarg, 600'000, v) || v < 1) return bad("wait", optarg, 1, 600'000);
        c.o.wait = std::chrono::milliseconds{v};
        break;
      case 'l': c.list = true; break;
      case o_profile:
        if (!std::strcmp(optarg, "spec")) c.spec_profile = true;
        else if (std::strcmp(optarg, "rxe")) return bad("profile (rxe or spec)", optarg);
        break;
      case o_mock_profile: {
        bool rxe = true;
        if (!parse_mock_profile(optarg, rxe)) return bad("--mock-profile (rxe or spec)", optarg);
        c.spec_profile = !rxe;
        if (!c.mock_option) c.mock_option = "--mock-profile";
        break;
      }
      case o_mock_latency:
        if (!parse_mock_latency(optarg, c.latency)) return bad(mock_latency_what, optarg, 0, 0, decimal_hint(optarg).c_str());
        latency_arg = optarg;
        if (!c.mock_option) c.mock_option = "--mock-latency";
        break;
      case 'h': help = true; return 0;
      default: usage(stderr); return 2;
    }
  }
  if (!take_host("rdmakit-two-node", argc, argv, optind, c.host)) return 2;
  if (c.mock_option && !c.o.device.empty() && c.o.device != "mock") {
    std::fprintf(stderr,
                 "rdmakit-two-node: %s is for the mock (no -d): on a device (-d %s) the wire and the device are the "
                 "real ones; drop %s%s, or drop -d to run on the mock\n",
                 c.mock_option, c.o.device.c_str(), c.mock_option,
                 std::strcmp(c.mock_option, "--mock-profile") ? "" : " (--profile says which deviation rows to expect there)");
    return 2;
  }
  // The RC scenarios connect with the default ACK timeout and retry count (the peer-gone
  // ones expect their retries to run out: they do, latency or not).
  bool any_rc = false;
  for (const auto& s : two_node_scenarios())
    any_rc = any_rc || (s.name.rfind("rc.", 0) == 0 && (c.o.only.empty() || s.name.find(c.o.only) != std::string::npos));
  if (any_rc) {
    const connect_options co;
    if (const std::string why = rc_latency_refusal(c.latency, co.timeout, co.retry_cnt, "or --only uc. or ud.");
        !why.empty() && !c.list) {
      std::fprintf(stderr, "rdmakit-two-node: --mock-latency=%s: %s\n", latency_arg, why.c_str());
      return 2;
    }
  }
  if (c.list && !c.host.empty()) {
    std::fprintf(stderr, "rdmakit-two-node: -l only prints the scenario names: drop the host (%s), or -l to run\n",
                 c.host.c_str());
    return 2;
  }
  // Below it the scenarios FAIL on a sound device: the RNR one's SEND completes only after
  // its responder's pause.
  if (c.o.wait < two_node_min_wait) {
    std::fprintf(stderr,
                 "rdmakit-two-node: -w %lld is too short: rc.rnr.recv_posted_later's SEND completes only after its "
                 "responder's %lld ms pause, and every completion needs time on the link besides; give -w %lld or "
                 "more (default 10000)\n",
                 static_cast<long long>(c.o.wait.count()), static_cast<long long>(two_node_rnr_pause.count()),
                 static_cast<long long>(two_node_min_wait.count()));
    return 2;
  }
  if (!c.o.only.empty()) {
    bool any = false;
    for (const auto& s : two_node_scenarios()) any = any || s.name.find(c.o.only) != std::string::npos;
    if (!any) {
      std::fprintf(stderr, "rdmakit-two-node: --only %s matches no scenario: -l lists their names\n", c.o.only.c_str());
      return 2;
    }
  }
  c.o.server = c.host.empty();
  return 0;
}

int summary(const std::vector<two_node_result>& rs, const char* who) {
  std::size_t failed = 0;
  for (const auto& r : rs) failed += !r.pass;
  std::printf("two-node (%s): %zu scenarios, %zu passed, %zu failed\n", who, rs.size(), rs.size() - failed, failed);
  return failed || rs.empty() ? 1 : 0;
}

int run_mock(const cli& c) {
  if (!c.host.empty()) {
    std::fprintf(stderr, "rdmakit-two-node: a host was given without -d; give -d <device> to talk to %s\n",
                 c.host.c_str());
    return 2;
  }
  const auto p = c.spec_profile ? mock::device_profile::spec : mock::device_profile::rxe;
  two_node_options o = c.o;
  o.wait = wait_with_latency(o.wait, c.latency);  // a completion may come a round trip later, twice over
  const auto r = run_two_node_on_mock(o, p, {}, c.port_given ? c.port : 0, c.latency);
  for (const auto& x : r.server) std::printf("%s\n", x.line().c_str());
  // The two sides agree on PASS/FAIL; the client's reasons complete the server's.
  for (std::size_t i = 0; i < r.client.size(); ++i)
    if (!r.client[i].pass) std::printf("  client: %s\n", r.client[i].line().c_str());
  std::string who = c.spec_profile ? "mock, spec profile" : "mock, rxe profile";
  who += mock_fabric_note(c.latency, false);  // the profile is named already
  return summary(r.server, who.c_str());
}

#if RDMAKIT_HAVE_IBVERBS
int run_device(cli c) {
  c.o.profile = c.spec_profile ? "spec" : "rxe";
  exchange_options xo;
  xo.timeout = std::chrono::milliseconds{60'000};
  xo.accept_timeout = std::chrono::milliseconds{120'000};
  auto print = [](const two_node_result& r) {
    std::printf("%s\n", r.line().c_str());
    std::fflush(stdout);
  };
  device<backends::ibverbs> dev(c.o.device);  // a wrong -d fails before the server says it waits
  device_peer peer("rdmakit-two-node", c.host, c.port, xo);
  const auto rs = run_two_node<backends::ibverbs, busy_poll<>>(c.o, peer.exchange(), std::move(dev), print);
  return summary(rs, c.o.server ? "server" : "client");
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
  if (c.list) {
    for (const auto& s : two_node_scenarios())
      if (c.o.only.empty() || s.name.find(c.o.only) != std::string::npos) std::printf("%s\n", s.name.c_str());
    return 0;
  }
  if (c.o.device.empty() || c.o.device == "mock") return run_mock(c);
#if RDMAKIT_HAVE_IBVERBS
  return run_device(c);
#else
  std::fprintf(stderr, "rdmakit-two-node: built without libibverbs: only the mock (no -d)\n");
  return 1;
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "rdmakit-two-node: %s\n", e.what());
  return 1;
}
