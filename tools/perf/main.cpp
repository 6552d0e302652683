// rdmakit-perf: perftest-like bandwidth and latency tests on rdmakit's policy layer.
//
//   rdmakit-perf TEST [options]          server (with -d), or both ends in-process (mock)
//   rdmakit-perf TEST [options] <host>   client
//   rdmakit-write-bw [options] [<host>]  the test from the program name (rdmakit-<test>)
//
// TEST: write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat.
#include "../common/cli.hpp"
#include "sides.hpp"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

using namespace rdmakit_perf;

namespace {

void usage(const char* argv0, std::FILE* to) {
  std::fprintf(to,
               "Usage:\n"
               "  %s TEST [options]           server (with -d) / both ends in this process (no -d)\n"
               "  %s TEST [options] <host>    client, connects to the server at <host>\n"
               "  rdmakit-<test> [options] [<host>]   the test from the program name (rdmakit-write-bw...)\n"
               "\n"
               "Tests: write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat\n"
               "\n"
               "Options (as perftest's ib_*_bw / ib_*_lat):\n"
               "  -s, --size=<bytes>        message size (default 65536 for bw, 2 for lat; UD sends 1024;\n"
               "                            atomics: 8); the buffers, 2 x -s per QP and side, must fit the\n"
               "                            machine's memory\n"
               "  -n, --iters=<n>           operations per QP (default 5000 bw, 1000 lat)\n"
               "  -D, --duration=<sec>      run for this many seconds instead of -n\n"
               "  -t, --tx-depth=<n>        send queue depth (default 128 bw, 16 send/write_lat, 1 read/atomic_lat)\n"
               "  -r, --rx-depth=<n>        receives kept posted (send tests, default 512)\n"
               "  -Q, --cq-mod=<n>          one completion every n WRs (default 64 bw, 16 send/write_lat, 1 read/\n"
               "                            atomic_lat, at most -t):\n"
               "                            1: signal_all, 16/64: signal_every<n>, else signal_manual\n"
               "  -l, --post_list=<n>       WRs per post call (bw tests, 1..%u)\n"
               "  -I, --inline_size=<bytes> send inline when the message fits (write/send tests; default 220,\n"
               "                            capped by the device; above its max_inline_data: refused)\n"
               "  -e, --events              sleep on CQ events (event_driven) instead of busy polling\n"
               "  -q, --qp=<n>              number of QPs (bw tests; default 1)\n"
               "      --use_srq             send tests: the QPs take their receives from one shared receive\n"
               "                            queue of -r receives (busy polling, -Q 16 or 64)\n"
               "  -c, --connection=<RC|UC|UD>, --transport=<rc|uc|ud>   transport (default RC)\n"
               "  -A, --atomic_type=<FETCH_AND_ADD|CMP_AND_SWAP>       atomic operation\n"
               "  -d, --ib-dev=<dev>        RDMA device (default: none = mock loopback in this process)\n"
               "  -i, --ib-port=<port>      device port (default 1)\n"
               "  -x, --gid-index=<index>   GID index (default: automatic, RoCEv2 IPv4-mapped first)\n"
               "  -m, --mtu=<bytes>         path MTU cap (default: the port's active MTU)\n"
               "  -p, --port=<port>         TCP port of the exchange (default 18515; mock: ephemeral)\n"
               "  -R, --rdma_cm             connect through the RDMA connection manager (librdmacm; the mock's\n"
               "                            on the mock) instead of the TCP exchange: RC only, no --use_srq,\n"
               "                            the client's <host> is the server's IP address (none on the mock), -p its CM port\n"
               "\n"
               "rdmakit options:\n"
               "      --signal=auto|manual  auto (default): the policy from -Q as above; manual:\n"
               "                            signal_manual with the tool flagging every Q-th WR\n"
               "      --json                print the results as one JSON object\n"
               "      --mock                both ends in this process on the mock fabric (default without -d)\n"
               "      --timeout=<ms>        exchange deadline and longest wait for a completion (10000)\n"
               "      --accept-timeout=<ms> how long a server waits for its client (600000)\n"
               "      --no-progress         no progress lines on stderr\n"
               "      --mock-wrong-rkey     mock loopback: the client names an rkey the server never gave, so its\n"
               "                            WRs fail (shows how a failed completion is reported)\n"
               "      --mock-latency=<us>   mock loopback: one-way wire latency in microseconds (a decimal, e.g. 2\n"
               "                            or 0.5; at most 1000000; default 0: a WR completes almost at its post);\n"
               "                            the longest wait for a completion (--timeout) grows by 4 latencies\n"
               "      --mock-profile=spec|rxe  mock loopback: the device profile (default spec)\n"
               "  -h, --help                this text\n"
               "\n"
               "Not supported (perftest options; tools/README-perf.md \"Not implemented\"): -a/--all,\n"
               "  -b/--bidirectional, -o/--outs, --report_gbits.\n",
               argv0, argv0, max_post_list);
}

using rdmakit_tools::parse_uint;

const test_desc* test_by_name(std::string_view name) {
  for (const auto& t : all_tests) {
    std::string a = t.name, b = a;
    for (auto& ch : b)
      if (ch == '_') ch = '-';
    if (name == a || name == b) return &t;
  }
  return nullptr;
}

/// rdmakit-write-bw, rdmakit_write_lat, ... → the test.
const test_desc* test_from_program(std::string_view argv0) {
  auto slash = argv0.rfind('/');
  if (slash != std::string_view::npos) argv0.remove_prefix(slash + 1);
  if (argv0.substr(0, 8) != "rdmakit-" && argv0.substr(0, 8) != "rdmakit_") return nullptr;
  return test_by_name(argv0.substr(8));
}

struct cli {
  perf_options o;
  endpoint_options e;
  bool mock = false;
  bool help = false;
};

int fail(const char* argv0, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", argv0, msg.c_str());
  return 1;
}

int parse(int argc, char** argv, cli& c) {
  enum { o_json = 1000, o_mock, o_timeout, o_accept, o_signal, o_transport, o_noprog, o_srq, o_wrong_rkey,
         o_mock_latency, o_mock_profile, o_not_implemented };
  static const option longs[] = {
      {"size", required_argument, nullptr, 's'},        {"iters", required_argument, nullptr, 'n'},
      {"duration", required_argument, nullptr, 'D'},    {"tx-depth", required_argument, nullptr, 't'},
      {"rx-depth", required_argument, nullptr, 'r'},    {"cq-mod", required_argument, nullptr, 'Q'},
      {"post_list", required_argument, nullptr, 'l'},   {"inline_size", required_argument, nullptr, 'I'},
      {"events", no_argument, nullptr, 'e'},            {"qp", required_argument, nullptr, 'q'},
      {"connection", required_argument, nullptr, 'c'},  {"transport", required_argument, nullptr, o_transport},
      {"atomic_type", required_argument, nullptr, 'A'}, {"ib-dev", required_argument, nullptr, 'd'},
      {"ib-port", required_argument, nullptr, 'i'},     {"gid-index", required_argument, nullptr, 'x'},
      {"mtu", required_argument, nullptr, 'm'},         {"port", required_argument, nullptr, 'p'},
      {"json", no_argument, nullptr, o_json},           {"mock", no_argument, nullptr, o_mock},
      {"timeout", required_argument, nullptr, o_timeout}, {"accept-timeout", required_argument, nullptr, o_accept},
      {"signal", required_argument, nullptr, o_signal}, {"no-progress", no_argument, nullptr, o_noprog},
      {"use_srq", no_argument, nullptr, o_srq},         {"use-srq", no_argument, nullptr, o_srq},
      {"rdma_cm", no_argument, nullptr, 'R'},           {"rdma-cm", no_argument, nullptr, 'R'},
      {"mock-wrong-rkey", no_argument, nullptr, o_wrong_rkey},
      {"mock-latency", required_argument, nullptr, o_mock_latency},
      {"mock-profile", required_argument, nullptr, o_mock_profile},
      {"help", no_argument, nullptr, 'h'},
      // perftest's, not implemented (tools/README-perf.md): named as such, not getopt's "invalid option".
      {"all", no_argument, nullptr, 'a'},               {"bidirectional", no_argument, nullptr, 'b'},
      {"outs", required_argument, nullptr, 'o'},        {"report_gbits", no_argument, nullptr, o_not_implemented},
      {nullptr, 0, nullptr, 0}};
  const char* me = argv[0];
  auto bad = [&](const char* what, const char* arg, unsigned long long lo = 0, unsigned long long hi = 0,
                 const char* hint = nullptr) {
    std::fprintf(stderr, "%s: invalid %s \"%s\"%s (see --help)\n", me, what, arg,
                 hint ? hint : rdmakit_tools::range_hint(arg, lo, hi).c_str());
    return 1;
  };
  bool size_given = false, iters_given = false, tx_given = false, q_given = false, inline_given = false,
       atomic_given = false, rx_given = false;
  bool duration_given = false;
  bool manual = false;
  const char* mock_option = nullptr;  // the first of --mock-latency and --mock-profile given
  std::string mock_latency_arg;
  unsigned long long v = 0;
  int ch;
  int long_index = -1;
  // (long_index: set by getopt_long for a long option only, so reset before each.)
  while ((long_index = -1, ch = getopt_long(argc, argv, "s:n:D:t:r:Q:l:I:eq:c:A:d:i:x:m:p:Rhabo:", longs,
                                            &long_index)) != -1) {
    switch (ch) {
      case 's':
        if (!parse_uint(optarg, 1u << 30, v) || v < 1) return bad("size", optarg, 1, 1u << 30);
        c.o.size = static_cast<std::uint32_t>(v);
        size_given = true;
        break;
      case 'n':
        if (!parse_uint(optarg, 1ull << 40, v) || v < 1) return bad("iteration count", optarg, 1, 1ull << 40);
        c.o.iters = v;
        iters_given = true;
        break;
      case 'D': {
        double d = 0;
        if (!rdmakit_tools::parse_decimal(optarg, d) || !(d > 0) || d > 86400) {
          std::fprintf(stderr, "%s: invalid duration (seconds, above 0 and at most 86400) \"%s\"%s (see --help)\n", me,
                       optarg, rdmakit_tools::decimal_hint(optarg).c_str());
          return 1;
        }
        c.o.duration = d;
        duration_given = true;
        break;
      }
      case 't':
        if (!parse_uint(optarg, 1u << 15, v) || v < 1) return bad("tx depth", optarg, 1, 1u << 15);
        c.o.tx_depth = static_cast<std::uint32_t>(v);
        tx_given = true;
        break;
      case 'r':
        if (!parse_uint(optarg, 1u << 15, v) || v < 1) return bad("rx depth", optarg, 1, 1u << 15);
        c.o.rx_depth = static_cast<std::uint32_t>(v);
        rx_given = true;
        break;
      case 'Q':
        if (!parse_uint(optarg, 1u << 15, v) || v < 1) return bad("cq moderation", optarg, 1, 1u << 15);
        c.o.cq_mod = static_cast<std::uint32_t>(v);
        q_given = true;
        break;
      case 'l':
        if (!parse_uint(optarg, max_post_list, v) || v < 1) return bad("post list", optarg, 1, max_post_list);
        c.o.post_list = static_cast<std::uint32_t>(v);
        break;
      case 'I':
        if (!parse_uint(optarg, 4096, v)) return bad("inline size", optarg, 0, 4096);
        c.o.inline_size = static_cast<std::uint32_t>(v);
        inline_given = true;
        break;
      case 'e': c.o.events = true; break;
      case 'q':
        if (!parse_uint(optarg, 256, v) || v < 1) return bad("number of QPs (1..256)", optarg, 1, 256);
        c.o.num_qps = static_cast<std::uint32_t>(v);
        break;
      case 'c':
      case o_transport: {
        std::string t = optarg;
        for (auto& x : t) x = static_cast<char>(std::tolower(static_cast<unsigned char>(x)));
        if (t == "rc") c.o.transport = qp_type::rc;
        else if (t == "uc") c.o.transport = qp_type::uc;
        else if (t == "ud") c.o.transport = qp_type::ud;
        else return bad("transport (RC, UC or UD, in any case)", optarg);
        break;
      }
      case 'A': {
        atomic_given = true;
        std::string a = optarg;
        if (a == "FETCH_AND_ADD" || a == "fetch_and_add") c.o.cmp_swap = false;
        else if (a == "CMP_AND_SWAP" || a == "cmp_and_swap") c.o.cmp_swap = true;
        else return bad("atomic type (FETCH_AND_ADD or CMP_AND_SWAP)", optarg);
        break;
      }
      case 'd':
        if (!*optarg) return bad("device", optarg, 0, 0, rdmakit_tools::empty_device);
        c.o.device = optarg;
        break;
      case 'i':
        if (!parse_uint(optarg, 255, v) || v < 1) return bad("IB port", optarg, 1, 255);
        c.o.ib_port = static_cast<std::uint8_t>(v);
        break;
      case 'x':
        if (!parse_uint(optarg, 0xffff, v)) return bad("GID index", optarg, 0, 0xffff);
        c.o.gid_index = static_cast<int>(v);
        break;
      case 'm': {
        mtu m{};
        if (!parse_uint(optarg, 4096, v) || !mtu_from_bytes(static_cast<std::uint32_t>(v), m))
          return bad("MTU (256, 512, 1024, 2048 or 4096)", optarg);
        c.o.path_mtu = m;
        break;
      }
      case 'p':
        if (!parse_uint(optarg, 65535, v)) return bad("port", optarg, 0, 65535);
        c.e.port = static_cast<std::uint16_t>(v);
        c.e.port_given = true;
        break;
      case o_json: c.o.json = true; break;
      case o_mock: c.mock = true; break;
      case o_timeout:
        if (!parse_uint(optarg, 86'400'000, v) || v < 1) return bad("timeout (ms)", optarg, 1, 86'400'000);
        c.o.timeout = std::chrono::milliseconds(v);
        break;
      case o_accept:
        if (!parse_uint(optarg, 86'400'000, v) || v < 1) return bad("accept timeout (ms)", optarg, 1, 86'400'000);
        c.o.accept_timeout = std::chrono::milliseconds(v);
        break;
      case o_signal:
        if (!std::strcmp(optarg, "manual")) manual = true;
        else if (!std::strcmp(optarg, "auto")) manual = false;
        else return bad("signaling (auto or manual)", optarg);
        break;
      case o_noprog: c.o.progress = false; break;
      case o_srq: c.o.use_srq = true; break;
      case o_wrong_rkey: c.o.mock_wrong_rkey = true; break;
      case o_mock_latency:
        if (!rdmakit_tools::parse_mock_latency(optarg, c.o.mock_latency))
          return bad(rdmakit_tools::mock_latency_what, optarg, 0, 0, rdmakit_tools::decimal_hint(optarg).c_str());
        mock_latency_arg = optarg;
        if (!mock_option) mock_option = "--mock-latency";
        break;
      case o_mock_profile:
        if (!rdmakit_tools::parse_mock_profile(optarg, c.o.mock_rxe)) return bad("--mock-profile (spec or rxe)", optarg);
        if (!mock_option) mock_option = "--mock-profile";
        break;
      case 'R': c.o.rdma_cm = true; break;
      case 'h': c.help = true; return 0;
      case 'a': case 'b': case 'o': case o_not_implemented: {
        const std::string name = long_index >= 0 ? std::string("--") + longs[long_index].name
                                                 : std::string("-") + static_cast<char>(ch);
        std::fprintf(stderr, "%s: option %s is not supported by rdmakit-perf (tools/README-perf.md: Not implemented)\n",
                     me, name.c_str());
        return 1;
      }
      default:  // getopt said which option and what was wrong with it
        std::fprintf(stderr, "%s: see --help for the options\n", me);
        return 1;
    }
  }

  // Positionals: [TEST] [HOST].
  const test_desc* t = test_from_program(argv[0]);
  int pos = optind;
  if (t && pos < argc && test_by_name(argv[pos])) {  // it would be read as a host
    std::string_view prog = argv[0];
    if (const auto slash = prog.rfind('/'); slash != std::string_view::npos) prog.remove_prefix(slash + 1);
    return fail(me, std::string("\"") + argv[pos] + "\" is a test: " + std::string(prog) + " runs " + t->name +
                        ", from its name; drop \"" + argv[pos] + "\", or run rdmakit-perf " + argv[pos]);
  }
  if (!t) {
    if (pos >= argc) return fail(me, "which test? give one of write_bw read_bw send_bw atomic_bw write_lat read_lat "
                                     "send_lat atomic_lat (see --help)");
    t = test_by_name(argv[pos]);
    if (!t) return fail(me, std::string("unknown test \"") + argv[pos] + "\" (see --help)");
    ++pos;
  }
  if (pos < argc) {
    c.e.host = argv[pos++];
    if (c.e.host.empty())  // a script's unset "$HOST": it would become a server
      return fail(me, "an empty host argument: give the server's host name or address, or none to be the server");
  }
  if (pos < argc) return fail(me, std::string("unexpected argument \"") + argv[pos] + "\"");
  perf_options& o = c.o;
  o.test = t->kind;
  o.server = c.e.host.empty();

  // -D replaces -n: with both, one would be dropped without a word.
  if (duration_given && iters_given)
    return fail(me, "-D and -n together: -D runs for a time, -n for a count of operations; give one of them");

  // Defaults that depend on the test, as perftest's.
  if (!size_given) o.size = t->bw ? 65536 : 2;
  if (!iters_given) o.iters = t->bw ? 5000 : 1000;
  // Ping-pong latency tests answer every message: with a one-slot send queue each answer
  // would wait for the acknowledgement of the previous one, so they keep 16 slots and
  // signal every 16th (signal_every<16>); read/atomic latency signal every operation.
  const bool pingpong = t->kind == test_kind::send_lat || t->kind == test_kind::write_lat;
  if (!tx_given && !t->bw) o.tx_depth = pingpong ? 16 : 1;
  // (It was accepted and printed as the tx depth, and one operation is outstanding.)
  if (tx_given && (t->kind == test_kind::read_lat || t->kind == test_kind::atomic_lat))
    return fail(me, std::string(t->name) + " has one operation outstanding at a time, timed to its own "
                                           "completion: -t does not apply (drop -t)");
  if (!inline_given) o.inline_size = (t->op == op_kind::write || t->op == op_kind::send) ? 220 : 0;
  o.inline_given = inline_given;
  // As perftest: READs and atomics carry no data out, -I would be dropped without a word.
  if (inline_given && o.inline_size > 0 && t->op != op_kind::write && t->op != op_kind::send)
    return fail(me, std::string(t->name) + ": -I " + std::to_string(o.inline_size) +
                        ": inline data is for the write and send tests (a READ or an atomic sends no "
                        "payload); drop -I");
  // Options of another kind of test would be dropped without a word.
  if (atomic_given && t->op != op_kind::atomic)
    return fail(me, std::string(t->name) + ": -A chooses the operation of the atomic tests (atomic_bw, "
                                           "atomic_lat); drop -A");
  if (o.mock_wrong_rkey && t->op == op_kind::send)
    return fail(me, std::string(t->name) + ": --mock-wrong-rkey makes the client's WRs name a wrong rkey, and a "
                                           "SEND names none; use it with a write, read or atomic test");
  // (A UC WRITE to a wrong rkey is dropped at the peer, which sends no NAK: the run
  // reported full bandwidth and exit 0, though no byte landed.)
  if (o.mock_wrong_rkey && o.transport == qp_type::uc)
    return fail(me, std::string(t->name) + ": --mock-wrong-rkey shows a failed completion, and UC has none to "
                                           "show: the peer drops a WRITE to a wrong rkey without a NAK; use -c RC");
  if (t->op == op_kind::atomic) {
    // Run with 8 bytes and a warning, it reported a size it was not asked for.
    if (size_given && o.size != 8)
      return fail(me, std::string(t->name) + ": -s " + std::to_string(o.size) +
                          ": an atomic moves 8 bytes; give -s 8 or leave -s out");
    o.size = 8;
  }
  if (t->op == op_kind::send && o.transport == qp_type::ud && !size_given) o.size = 1024;

  // What each transport can do.
  const char* tname = o.transport == qp_type::rc ? "RC" : o.transport == qp_type::uc ? "UC" : "UD";
  if (t->op == op_kind::read && o.transport != qp_type::rc)
    return fail(me, std::string(t->name) + " needs RDMA READ, which " + tname +
                        " does not have (only RC does): use --transport rc");
  if (t->op == op_kind::atomic && o.transport != qp_type::rc)
    return fail(me, std::string(t->name) + " needs atomics, which " + tname +
                        " does not have (only RC does): use --transport rc");
  if (t->op == op_kind::write && o.transport == qp_type::ud)
    return fail(me, std::string(t->name) + " needs RDMA WRITE, which UD does not have (RC and UC do): use "
                                           "--transport rc or uc");

  if (o.rdma_cm && o.transport != qp_type::rc)
    return fail(me, "-R: the connection manager connects RC queue pairs only (rdma_cm's TCP port space: a device "
                    "refuses UC there): use --transport rc, or drop -R for the TCP exchange");
  if (o.rdma_cm && o.use_srq) return fail(me, "-R and --use_srq together are not supported: drop one");
  // The CM listens on -p itself: port 0 would be one the client cannot know.
  if (o.rdma_cm && c.e.port_given && c.e.port == 0)
    return fail(me, "-R -p 0: the connection manager listens on the port given, and the client must know it: "
                    "give a port above 0 (or none for the default)");
  if (o.use_srq && t->op != op_kind::send)
    return fail(me, std::string(t->name) + ": --use_srq is for the send tests (send_bw, send_lat), the only ones "
                                           "that post receives");
  if (rx_given && t->op != op_kind::send)
    return fail(me, std::string(t->name) + ": -r sets the receives posted, and only the send tests (send_bw, "
                                           "send_lat) post any; drop -r");
  if (o.path_mtu && o.transport == qp_type::ud)
    return fail(me, "-m sets a connection's path MTU; UD has none (each datagram is one packet of at most the "
                    "port's MTU): drop -m");

  // Test-specific limits. (-Q above -t was refused for the bandwidth tests only: a
  // ping-pong latency test then ran with a deeper send queue than -t said.)
  if (q_given && o.cq_mod > o.tx_depth && (t->bw || pingpong))
    return fail(me, "-Q " + std::to_string(o.cq_mod) + " is larger than the send queue (-t " +
                        std::to_string(o.tx_depth) + "): a completion every " + std::to_string(o.cq_mod) +
                        " WRs needs at least that many slots; lower -Q or raise -t");
  if (!t->bw) {
    if (o.num_qps != 1) return fail(me, std::string(t->name) + ": latency tests use one QP (drop -q)");
    if (o.post_list != 1) return fail(me, std::string(t->name) + ": post lists (-l) are for bandwidth tests");
    if (t->kind == test_kind::write_lat && o.events)
      return fail(me, "write_lat detects each write by polling memory, not the CQ: -e does not apply");
    // Each read/atomic is timed to its own completion: every one is signaled.
    if ((t->kind == test_kind::read_lat || t->kind == test_kind::atomic_lat) && q_given && o.cq_mod != 1)
      return fail(me, std::string(t->name) + " times each operation to its own completion, so every WR is "
                                             "signaled: -Q " + std::to_string(o.cq_mod) + " does not apply (drop -Q)");
    if (t->kind == test_kind::read_lat || t->kind == test_kind::atomic_lat) o.cq_mod = 1;
    else if (!q_given) o.cq_mod = pingpong ? std::min<std::uint32_t>(16, o.tx_depth) : 1;
  } else {
    if (!q_given) o.cq_mod = std::min<std::uint32_t>(64, o.tx_depth);
    if (o.post_list > o.tx_depth)
      return fail(me, "-l " + std::to_string(o.post_list) + " is larger than the send queue (-t " +
                          std::to_string(o.tx_depth) + ")");
    // A list is posted whole or not at all. Unless the lists tile the -Q interval, the
    // send queue can fill with unsignaled WRs while a list waits for slots that no
    // completion frees (-t 64 -l 3: 21 lists, one slot left, the 64th WR never posted):
    // the run stalled for --timeout, then blamed the peer. As perftest, -Q follows -l.
    if (o.post_list > 1 && o.cq_mod % o.post_list != 0 && o.post_list % o.cq_mod != 0) {
      if (q_given)
        return fail(me, "-l " + std::to_string(o.post_list) + " with -Q " + std::to_string(o.cq_mod) +
                            ": a list is posted whole or not at all, so the send queue could fill with unsignaled "
                            "WRs that no completion frees; give a -Q that is a multiple or a divisor of -l (-Q " +
                            std::to_string(o.post_list) + ", say)");
      o.cq_mod = o.post_list;
    }
  }
  if (o.cq_mod == 1 && !manual) o.signal = signal_choice::all;
  else if (manual) o.signal = signal_choice::manual;
  else if (o.cq_mod == 16) o.signal = signal_choice::every16;
  else if (o.cq_mod == 64) o.signal = signal_choice::every64;
  else o.signal = signal_choice::manual;  // any other Q: the tool flags every Q-th WR itself

  if (c.mock && !o.device.empty() && o.device != "mock")
    return fail(me, "--mock and -d " + o.device + " contradict each other");
  if (o.device == "mock") {
    c.mock = true;
    o.device.clear();
  }
  if (o.device.empty()) {
    if (!c.mock && !c.e.host.empty())
      return fail(me, "a host (" + c.e.host + ") but no device: give -d <device> (e.g. -d rxe0) to run the client "
                      "on it; without -d both ends run in this process on the mock fabric");
    c.mock = true;
  }
  // Each side keeps a source and a destination slot of -s bytes per QP, zero-filled at
  // setup (the mock loopback: two sides in this process). Past the machine's memory that
  // was std::bad_alloc, or the OOM killer once the pages were touched.
  {
    const std::uint64_t slot = (std::uint64_t{o.size} + 40 + 63) / 64 * 64;
    const std::uint64_t need = 2 * slot * o.num_qps * (c.mock && c.e.host.empty() ? 2 : 1);
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    const std::uint64_t have = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
    if (have && need > have)
      return fail(me, "-s " + std::to_string(o.size) + " with -q " + std::to_string(o.num_qps) + " needs " +
                          std::to_string(need >> 20) + " MiB of buffers (2 x -s per QP" +
                          (c.mock && c.e.host.empty() ? ", both sides in this process" : "") +
                          "), more than this machine's " + std::to_string(have >> 20) + " MiB: lower -s or -q");
  }
  if (c.mock && o.rdma_cm && !c.e.host.empty())
    return fail(me, "-R --mock " + c.e.host + ": the mock's connection manager serves this process only, so no "
                    "server can be at " + c.e.host + ": drop the host to run both ends here, or give -d <device>");
  if (o.mock_wrong_rkey && !c.mock)
    return fail(me, "--mock-wrong-rkey makes the mock loopback's client fail; on a device (-d " + o.device +
                        ") leave it out");
  if (mock_option && !c.mock)
    return fail(me, std::string(mock_option) + " is for the mock loopback (no -d, or --mock): on a device (-d " +
                        o.device + ") the wire and the device are the real ones; drop " + mock_option +
                        ", or drop -d to run on the mock");
  // (The client alone opens mock1 of the process default fabric, whose settings are fixed.)
  if (mock_option && !c.e.host.empty())
    return fail(me, std::string(mock_option) + " with a host (" + c.e.host + "): it sets the fabric of the mock "
                        "loopback, which runs both ends in this process; drop the host");
  // -R: the mock's connection manager gives the QPs an ACK timeout of 2.1 s per try, longer
  // than any round trip --mock-latency allows; the TCP exchange connects with the defaults.
  if (!o.rdma_cm) {
    const connect_options co;
    const std::string why =
        rdmakit_tools::rc_latency_refusal(o.mock_latency, co.timeout, co.retry_cnt, "or use -c UC or UD, or -R");
    if (o.transport == qp_type::rc && !why.empty()) return fail(me, "--mock-latency=" + mock_latency_arg + ": " + why);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  cli c;
  if (int rc = parse(argc, argv, c)) return rc;
  if (c.help) {
    usage(argv[0], stdout);
    return 0;
  }
  c.o.cm_port = c.e.port;
  if (c.mock) return run_mock_loopback(c.o, c.e);
  if (c.o.rdma_cm) return run_device_cm(c.o, c.e);
  return run_device(c.o, c.e);
} catch (const std::exception& e) {
  std::fprintf(stderr, "rdmakit-perf: %s\n", e.what());
  return 1;
}
