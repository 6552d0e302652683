// rdmakit-pingpong's protocol on the mock fabric: both ends on threads, records over
// 127.0.0.1, faults injected into the fabric. The data phase must end, never hang.
#include "pingpong.hpp"

#include <rdmakit/backends/mock.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>

using namespace rdmakit;
using namespace rdmakit_tools;
using namespace std::chrono_literals;
using B = backends::mock;

namespace {

struct outcome {
  int rc = -1;
  std::string out;
  std::string error;
};

/// Runs a server (mock0) and a client (mock1) of `fab` with transport T; `tweak` edits
/// each side's options (called with is_server).
template <class T, class Tweak>
std::pair<outcome, outcome> run_pair(mock::fabric& fab, Tweak&& tweak) {
  exchange_listener listener(0, "127.0.0.1");
  exchange_options xo;
  xo.format = wire_format::pingpong;
  xo.timeout = 2000ms;
  xo.retry_refused = true;
  auto side = [&](bool is_server) {
    outcome r;
    try {
      printer p(&r.out);
      pingpong_options o;
      o.server = is_server;
      o.device = is_server ? "mock0" : "mock1";
      o.size = 256;
      o.iters = 50;
      o.rx_depth = 16;
      o.stall_timeout = 300ms;
      tweak(o, is_server);
      exchange_fn ex = [&](const connection_info& local, const on_peer_fn& cb) {
        return is_server ? listener.exchange(local, xo, cb)
                         : exchange_client("127.0.0.1", listener.port(), local, xo, cb);
      };
      r.rc = run_pingpong<B, T, yielding_poll<>>(o, ex, p, device<B>(fab, o.device));
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  };
  auto s = std::async(std::launch::async, side, true);
  auto c = std::async(std::launch::async, side, false);
  return {s.get(), c.get()};
}

}  // namespace

TEST_CASE("a clean run prints the ibv_*_pingpong summary on both ends") {
  mock::fabric fab;
  const auto result = run_pair<rc>(fab, [](pingpong_options&, bool) {});
  const outcome& s = result.first;
  const outcome& c = result.second;
  CHECK(s.error.empty());
  CHECK(c.error.empty());
  CHECK(s.rc == 0);
  CHECK(c.rc == 0);
  for (const auto* o : {&s, &c}) {
    CHECK(o->out.find("  local address:  LID 0x0000, QPN 0x") != std::string::npos);
    CHECK(o->out.find("  remote address: LID 0x0000, QPN 0x") != std::string::npos);
    CHECK(o->out.find("25600 bytes in ") != std::string::npos);  // 256 B x 50 x 2
    CHECK(o->out.find("50 iters in ") != std::string::npos);
  }
}

TEST_CASE("UD: a lost message ends both sides after the stall timeout, with the reason") {
  mock::fabric fab;
  fab.inject(mock::fault{mock::fault_kind::drop, 0, 1, 1.0, {}});
  const auto t0 = std::chrono::steady_clock::now();
  const auto result = run_pair<ud>(fab, [](pingpong_options&, bool) {});
  const outcome& s = result.first;
  const outcome& c = result.second;
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 5s);
  for (const auto* o : {&s, &c}) {
    CAPTURE(o->error);
    CHECK(o->error.find("no completion for 300 ms") != std::string::npos);
    CHECK(o->error.find("UD does not retransmit") != std::string::npos);
  }
}

TEST_CASE("RC: the same loss is retransmitted and the run completes") {
  mock::fabric fab;
  fab.inject(mock::fault{mock::fault_kind::drop, 0, 1, 1.0, {}});
  const auto result = run_pair<rc>(fab, [](pingpong_options&, bool) {});
  const outcome& s = result.first;
  const outcome& c = result.second;
  CHECK(s.error.empty());
  CHECK(c.error.empty());
  CHECK(s.rc == 0);
  CHECK(c.rc == 0);
}

TEST_CASE("-c: a length mismatch between the ends is reported") {
  mock::fabric fab;
  const auto result = run_pair<ud>(fab, [](pingpong_options& o, bool is_server) {
    o.check = true;
    if (!is_server) o.size = 128;  // the server expects 256
  });
  const outcome& s = result.first;
  const outcome& c = result.second;
  CAPTURE(s.error);
  CHECK(s.error.find("received 128 bytes, expected 256") != std::string::npos);
  CHECK_FALSE(c.error.empty());  // its peer stopped answering
}

TEST_CASE("UD: a size above the port MTU is refused before anything is exchanged") {
  mock::fabric fab;
  printer p(nullptr);
  pingpong_options o;
  o.device = "mock0";
  o.size = 4096;  // the mock port's active MTU is 1024
  exchange_fn never = [](const connection_info&, const on_peer_fn&) -> connection_info {
    FAIL("no exchange expected");
    return {};
  };
  CHECK_THROWS_WITH_AS((run_pingpong<B, ud, busy_poll<>>(o, never, p, device<B>(fab, o.device))),
                       doctest::Contains("larger than the port MTU (1024)"), pingpong_failure);
}

// A UD peer record naming QP 1 or a multicast GID went into the address handle: the
// run sent where no peer answers and ended at the stall timeout, naming a lost message.
TEST_CASE("UD: a peer record naming a management QP or a multicast GID is refused as malformed") {
  mock::fabric fab;
  printer p(nullptr);
  pingpong_options o;
  o.device = "mock0";
  o.size = 256;
  o.stall_timeout = 300ms;
  for (const bool multicast : {false, true}) {
    CAPTURE(multicast);
    exchange_fn garbled = [&](const connection_info& local, const on_peer_fn& cb) {
      connection_info peer = local;
      if (multicast)
        REQUIRE(gid::parse("ff0e0000000000000000000000000001", peer.ep.gid));
      else
        peer.ep.qpn = 1;
      cb(peer);
      return peer;
    };
    CHECK_THROWS_WITH_AS((run_pingpong<B, ud, busy_poll<>>(o, garbled, p, device<B>(fab, o.device))),
                         doctest::Contains(multicast ? "multicast" : "management QP"), exchange_error);
  }
}
