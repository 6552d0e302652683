// The mock's control plane (fabric.hpp): devices and ports, the simulated clock,
// the slot rule, fault injection, determinism, the arm hook. Only the mock can show
// these; the verbs semantics themselves are the conformance suite's job.
#include "harness.hpp"

#include <rdmakit/backends/mock.hpp>
#include <rdmakit/backends/mock/objects.hpp>  // fabric::state(): counters set near their end
#include <rdmakit/grh.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace conf;
using B = rdmakit::backends::mock;
namespace rm = rdmakit::mock;
using fx_t = fixture<B>;

namespace {

/// A QP on another device of the same fabric, owned by `fx`.
struct far_end {
  B::context ctx{};
  B::pd pd{};
  endpoint<B> ep;
  gid_entry gid;
};

far_end open_far(fx_t& fx, const char* device, qp_opts o = {}) {
  far_end f;
  f.ctx = B::open_device(fx.scope().fabric, device);
  fx.on_cleanup([c = f.ctx] { B::close_device(c); });
  f.pd = B::alloc_pd(f.ctx);
  fx.on_cleanup([p = f.pd] { CHECK(B::dealloc_pd(p) == 0); });
  f.ep.type = o.type;
  f.ep.send_cq = B::create_cq(f.ctx, o.cqe, {}, 0);
  fx.on_cleanup([c = f.ep.send_cq] { CHECK(B::destroy_cq(c) == 0); });
  f.ep.recv_cq = B::create_cq(f.ctx, o.cqe, {}, 0);
  fx.on_cleanup([c = f.ep.recv_cq] { CHECK(B::destroy_cq(c) == 0); });
  f.ep.caps = o.caps;
  f.ep.qp = B::create_qp(f.pd, f.ep.send_cq, f.ep.recv_cq, o.type, f.ep.caps, o.sig_all);
  f.ep.num = B::qp_num(f.ep.qp);
  fx.on_cleanup([q = f.ep.qp] { CHECK(B::destroy_qp(q) == 0); });
  f.gid = B::query_gid(f.ctx, 1, 1);
  return f;
}

ah_attr av_to(const gid& g) {
  ah_attr av;
  av.is_global = true;
  av.grh.dgid = g;
  av.grh.sgid_index = 1;
  av.grh.hop_limit = 1;
  return av;
}

rm::fabric& fab(fx_t& fx) { return fx.scope().fabric; }

// A pair (RC unless asked) on a wire of 10 us (so a WR is still in flight at the next
// step), a source of 64 bytes filled with seed 5 and a target of 64 zero bytes.
struct slow_wire {
  static rm::fabric_config config() {
    rm::fabric_config c;
    c.latency = std::chrono::microseconds(10);
    return c;
  }
  fx_t fx{config()};
  std::pair<endpoint<B>, endpoint<B>> ab;
  endpoint<B>& a = ab.first;
  endpoint<B>& b = ab.second;
  buffer<B>& src = fx.make_buffer(64);
  buffer<B>& dst = fx.make_buffer(64);
  explicit slow_wire(qp_type t = qp_type::rc) : ab(fx.make_pair({.type = t})) { src.fill(5); }
};

std::chrono::nanoseconds rnr_ns(int code) {
  // IB encoding of min_rnr_timer, microseconds (1..31; 0 = 655.36 ms).
  static constexpr int us[32] = {655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
                                 480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
                                 20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::chrono::microseconds(us[code]);
}

}  // namespace

// ------------------------------------------------------------------ devices

TEST_CASE("fabric: the default configuration has mock0 and mock1, RoCE ports like rxe") {
  rm::fabric f;
  CHECK(B::device_names(f) == std::vector<std::string>{"mock0", "mock1"});
  for (int d = 0; d < 2; ++d) {
    CAPTURE(d);
    auto ctx = B::open_device(f, d == 0 ? "mock0" : "mock1");
    CHECK(B::device_name(ctx) == (d == 0 ? "mock0" : "mock1"));
    auto dev = B::query_device(ctx);
    CHECK(dev.phys_port_cnt == 1);
    CHECK(dev.max_sge == 32);
    CHECK(dev.max_inline_data == 512);
    CHECK(dev.max_qp_wr == (1u << 20));
    CHECK(dev.max_cqe == 32767);
    auto port = B::query_port(ctx, 1);
    CHECK(port.layer == link_layer::ethernet);
    CHECK(port.state == port_state::active);
    CHECK(port.active_mtu == mtu::mtu_1024);
    CHECK(port.max_mtu == mtu::mtu_4096);
    CHECK(port.gid_tbl_len >= 2);
    auto g0 = B::query_gid(ctx, 1, 0);
    CHECK(g0.valid);
    CHECK(g0.value.is_link_local());
    auto g1 = B::query_gid(ctx, 1, 1);
    CHECK(g1.valid);
    CHECK(g1.index == 1);
    CHECK(g1.type == gid_type::roce_v2);
    CHECK(g1.value == gid::from_ipv4(10, 0, 0, std::uint8_t(d + 1)));
    CHECK_FALSE(B::query_gid(ctx, 1, 2).valid);
    CHECK(errno_of([&] { B::query_gid(ctx, 1, -1); }) == EINVAL);
    CHECK(errno_of([&] { B::query_gid(ctx, 1, int(port.gid_tbl_len)); }) == EINVAL);
    B::close_device(ctx);
  }
}

TEST_CASE("fabric: custom devices, ports, limits and GID entries") {
  rm::fabric_config cfg;
  rm::device_config a{.name = "alpha"};
  rm::device_config b{.name = "beta"};
  b.ports.resize(2);
  b.ports[1].active_mtu = mtu::mtu_4096;
  b.ports[1].gids = {gid_entry{gid::from_ipv4(192, 168, 7, 9), 3, gid_type::roce_v2, true}};
  b.limits.max_sge = 4;
  b.limits.max_inline_data = 64;
  cfg.devices = {a, b};
  rm::fabric f(cfg);
  CHECK(B::device_names(f) == std::vector<std::string>{"alpha", "beta"});
  auto ctx = B::open_device(f, "beta");
  auto dev = B::query_device(ctx);
  CHECK(dev.phys_port_cnt == 2);
  CHECK(dev.max_sge == 4);
  CHECK(B::query_port(ctx, 2).active_mtu == mtu::mtu_4096);
  auto g = B::query_gid(ctx, 2, 3);
  CHECK(g.valid);
  CHECK(g.value == gid::from_ipv4(192, 168, 7, 9));
  CHECK_FALSE(B::query_gid(ctx, 2, 1).valid);  // a custom table replaces the defaults
  CHECK(errno_of([&] { B::query_port(ctx, 3); }) != 0);
  // The limits are enforced.
  auto pd = B::alloc_pd(ctx);
  auto cq = B::create_cq(ctx, 8, {}, 0);
  qp_cap too_many{4, 4, 5, 1, 0};
  CHECK(errno_of([&] { B::create_qp(pd, cq, cq, qp_type::rc, too_many, true); }) == EINVAL);
  qp_cap too_much_inline{4, 4, 1, 1, 65};
  CHECK(errno_of([&] { B::create_qp(pd, cq, cq, qp_type::rc, too_much_inline, true); }) == EINVAL);
  CHECK(B::destroy_cq(cq) == 0);
  CHECK(B::dealloc_pd(pd) == 0);
  B::close_device(ctx);
  CHECK(errno_of([&] { B::open_device(f, "mock0"); }) == ENODEV);
}

TEST_CASE("fabric: an InfiniBand port has a LID and connects without a GRH") {
  rm::fabric_config cfg;
  rm::port_config ib, ib_fixed;
  ib.layer = ib_fixed.layer = link_layer::infiniband;
  ib_fixed.lid = 0x77;
  cfg.devices = {rm::device_config{.name = "mock0", .ports = {ib}}, rm::device_config{.name = "mock1", .ports = {ib_fixed}}};
  fx_t fx(cfg);
  CHECK(fx.port.layer == link_layer::infiniband);
  CHECK(fx.port.lid != 0);
  auto g0 = B::query_gid(fx.ctx, 1, 0);
  CHECK(g0.valid);
  CHECK(g0.type == gid_type::ib);
  CHECK(g0.value.is_link_local());
  auto other = B::open_device(fab(fx), "mock1");
  CHECK(B::query_port(other, 1).lid == 0x77);
  B::close_device(other);
  // RC over LIDs, no GRH.
  link_opts l;
  ah_attr av;
  av.is_global = false;
  av.dlid = fx.port.lid;
  l.av = av;
  auto [a, b] = fx.make_pair({}, l, l);
  auto& buf = fx.make_buffer(256);
  buf.fill(4, 0, 64);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(128, 64)}) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 64)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fx.poll_one(b.recv_cq).status == wc_status::success);
  CHECK(buf.holds(4, 128, 64));
  // No GRH and no LID: nothing to route on.
  av.dlid = 0;
  CHECK(errno_of([&] { fx.make_ah(av); }) == EINVAL);
}

TEST_CASE("fabric: an automatic LID is never one another port was given") {
  // mock0's port asks for LID 1; mock1's is automatic: it was given 1 as well, and a
  // packet for either went to mock0 (the first port of that LID).
  rm::fabric_config cfg;
  rm::port_config fixed, automatic;
  fixed.layer = automatic.layer = link_layer::infiniband;
  fixed.lid = 1;
  cfg.devices = {rm::device_config{.name = "mock0", .ports = {fixed}},
                 rm::device_config{.name = "mock1", .ports = {automatic, automatic}}};
  rm::fabric f(cfg);
  auto a = B::open_device(f, "mock0");
  auto b = B::open_device(f, "mock1");
  const auto la = B::query_port(a, 1).lid, lb1 = B::query_port(b, 1).lid, lb2 = B::query_port(b, 2).lid;
  CHECK(la == 1);
  CHECK(lb1 != 0);
  CHECK(lb2 != 0);
  CHECK(lb1 != la);
  CHECK(lb2 != la);
  CHECK(lb1 != lb2);
  B::close_device(a);
  B::close_device(b);
}

TEST_CASE("fabric: a fabric you construct is never used implicitly; name-only opens use the default fabric") {
  rm::fabric& dflt = rm::default_fabric();
  rm::fabric_config cfg;
  cfg.devices = {rm::device_config{.name = "inner0"}};
  rm::fabric inner(cfg);
  CHECK(&rm::default_fabric() == &dflt);
  CHECK(&dflt != &inner);
  CHECK(B::device_names(inner) == std::vector<std::string>{"inner0"});
  CHECK(B::device_names() == std::vector<std::string>{"mock0", "mock1"});
  CHECK(errno_of([] { B::open_device("inner0"); }) == ENODEV);
  auto ctx = B::open_device("mock0");
  CHECK(B::device_name(ctx) == "mock0");
  B::close_device(ctx);
  ctx = B::open_device(inner, "");
  CHECK(B::device_name(ctx) == "inner0");
  B::close_device(ctx);
}

TEST_CASE("fabric: the clock, ports and faults of a local fabric are not the default fabric's") {
  rm::fabric local;  // the same device names as the default fabric
  local.set_port_up("mock0", 1, false);
  local.inject(rm::fault{rm::fault_kind::drop, 0, 0, 1.0, {}});
  const auto default_now = rm::default_fabric().now();
  local.advance(3s);
  CHECK(rm::default_fabric().now() == default_now);
  auto mine = B::open_device(local, "mock0");
  CHECK(B::query_port(mine, 1).state == port_state::down);
  B::close_device(mine);
  auto by_name = B::open_device("mock0");
  CHECK(B::query_port(by_name, 1).state == port_state::active);
  B::close_device(by_name);
}

// ------------------------------------------------------------------ clock

TEST_CASE("fabric: advance moves the simulated clock") {
  rm::fabric f;
  const auto t0 = f.now();
  f.advance(5ms);
  CHECK(f.now() - t0 == std::chrono::nanoseconds(5ms));
  f.advance(0ns);
  CHECK(f.now() - t0 == std::chrono::nanoseconds(5ms));
}

// The clock is 64-bit nanoseconds: advance(nanoseconds::max()) twice wrapped it (now()
// came out at -2 ns, a third call moved it back). Refused past nanoseconds::max(); and
// advance() brought the clock to the end itself, where the timers of traffic that
// followed (an RNR retry is up to 655 ms) wrapped it all the same. It stops at half the
// range: 146 years of simulated time are left to what is scheduled after it.
TEST_CASE("fabric: advance past half of nanoseconds::max() is refused, naming the argument, the clock unchanged") {
  using std::chrono::nanoseconds;
  constexpr nanoseconds end = nanoseconds::max() / 2;
  auto refused = [](rm::fabric& f, nanoseconds by, const char* says) {
    CHECK_THROWS_WITH_AS(f.advance(by), doctest::Contains(says), rdmakit::usage_error);
  };
  rm::fabric f;
  f.advance(5ms);
  refused(f, nanoseconds::max(), "advance(9223372036854775807 ns)");
  CHECK(f.now() == nanoseconds(5ms));
  refused(f, end, "give at most 4611686018422387903 ns");
  f.advance(end - nanoseconds(5ms));  // up to the end exactly
  CHECK(f.now() == end);
  refused(f, nanoseconds::max(), "give at most 0 ns");
  refused(f, 1ns, "advance(1 ns)");
  CHECK(f.now() == end);
  f.advance(0ns);
  CHECK(f.now() == end);
}

TEST_CASE("fabric: traffic after advance() to its end keeps the clock going forward") {
  using std::chrono::nanoseconds;
  fx_t fx;
  link_opts la, lb;
  la.rnr_retry = 3;
  lb.min_rnr_timer = 0;  // 655.36 ms
  auto [a, b] = fx.make_pair({}, la, lb);
  auto& buf = fx.make_buffer(64);
  const nanoseconds room = nanoseconds::max() / 2 - fab(fx).now();
  fab(fx).advance(room - nanoseconds(1ms));  // as far as it goes, less a millisecond
  const auto t0 = fab(fx).now();
  REQUIRE(fx.post_send(a, 1, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::rnr_retry_exc_err);
  CHECK(fab(fx).now() - t0 >= 3 * rnr_ns(0));  // three retries of 655 ms, past where advance() stops
  CHECK(fab(fx).now() > t0);
}

// Delay faults of a year each are allowed; a few hundred hitting one message added up
// past the clock's range, and now() went negative (fabric.hpp: now() never wraps). The
// delays of one message are held to a year in all.
TEST_CASE("fabric: delay faults stacked on one message hold it a year at most") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  for (int i = 0; i < 300; ++i)
    fab(fx).inject({.kind = rm::fault_kind::delay, .src_qp_num = a.num, .delay = std::chrono::hours(24 * 365)});
  auto& src = fx.make_buffer(64);
  auto& dst = fx.make_buffer(64);
  REQUIRE(fx.post_recv(b, 1, {dst.sge(0, 64)}) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(0, 64)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fx.poll_one(b.recv_cq).status == wc_status::success);  // an empty poll jumps the clock to it
  CHECK(fab(fx).now() > std::chrono::nanoseconds::zero());
  CHECK(fab(fx).now() <= std::chrono::hours(24 * 365) + std::chrono::seconds(1));
}

TEST_CASE("fabric: RNR retries are spaced by the responder's min_rnr_timer") {
  fx_t fx;
  link_opts la, lb;
  la.rnr_retry = 3;
  lb.min_rnr_timer = 14;  // 1.28 ms
  auto [a, b] = fx.make_pair({}, la, lb);
  auto& buf = fx.make_buffer(64);
  const auto t0 = fab(fx).now();
  const auto p0 = fab(fx).packets_sent();
  REQUIRE(fx.post_send(a, 1, opcode::send, {buf.sge(0, 8)}) == 0);
  auto c = fx.poll_one(a.send_cq);
  CHECK(c.status == wc_status::rnr_retry_exc_err);
  const auto took = fab(fx).now() - t0;
  CHECK(took >= 3 * rnr_ns(14));
  CHECK(took < 4 * rnr_ns(14));
  CHECK(fab(fx).packets_sent() - p0 == 4);  // the first try and 3 retries
}

TEST_CASE("fabric: the transport timer is 4.096 us * 2^timeout, retried retry_cnt times") {
  fx_t fx;
  link_opts l;
  l.timeout = 10;  // 4.194 ms
  l.retry_cnt = 2;
  auto a = fx.make_qp();
  fx.bring_up(a, 0xabcdef, l);
  auto& buf = fx.make_buffer(64);
  const auto t0 = fab(fx).now();
  const auto p0 = fab(fx).packets_sent();
  REQUIRE(fx.post_send(a, 1, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::retry_exc_err);
  const auto period = std::chrono::nanoseconds(4096ull << 10);
  const auto took = fab(fx).now() - t0;
  CHECK(took >= 2 * period);
  CHECK(took <= 3 * period);
  CHECK(fab(fx).packets_sent() - p0 == 3);  // the first try and retry_cnt retries
}

TEST_CASE("fabric: with a wire latency a completion waits for the simulated round trip") {
  rm::fabric_config cfg;
  cfg.latency = 10us;
  fx_t fx(cfg);
  auto [a, b] = fx.make_pair();
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 64)}) == 0);
  const auto t0 = fab(fx).now();
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fab(fx).now() == t0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fab(fx).now() - t0 >= std::chrono::nanoseconds(20us));  // message, then ACK
  CHECK(fx.poll_one(b.recv_cq).status == wc_status::success);
}

// SQD drains: a device finishes the messages in progress, retries included, and starts
// no new one (IBA: SQ Drain). A WR in flight when the QP moved to SQD was never sent
// again: lost, NAKed for RNR or unanswered, it stayed without a completion until RTS
// (audit 13, F3).
TEST_CASE("fabric: in SQD a WR already in flight is retried to its end; one posted later waits for RTS") {
  rm::fabric_config cfg;
  cfg.latency = 2us;  // so the WR is on the wire when the QP moves to SQD
  fx_t fx(cfg);
  auto& src = fx.make_buffer(64);
  auto& dst = fx.make_buffer(64);
  src.fill(3);
  SUBCASE("its packet lost: the retry lands") {
    auto [a, b] = fx.make_pair({}, {.timeout = 10, .retry_cnt = 3}, {});
    fab(fx).inject({.kind = rm::fault_kind::drop, .src_qp_num = a.num, .count = 1});
    REQUIRE(fx.post_rdma(a, 7, opcode::rdma_write, src.sge(0, 64), dst.addr(), dst.rkey()) == 0);
    fx.move_to(a, qp_state::sqd);
    REQUIRE(fx.post_rdma(a, 8, opcode::rdma_write, src.sge(0, 8), dst.addr(), dst.rkey()) == 0);
    const auto got = fx.drain(a.send_cq, 200);
    REQUIRE(got.size() == 1);  // not the one posted in SQD
    CHECK(got[0].wr_id == 7);
    CHECK(got[0].status == wc_status::success);
    CHECK(dst.holds(3, 0, 64));
    fx.move_to(a, qp_state::rts);
    CHECK(fx.poll_one(a.send_cq).wr_id == 8);
  }
  SUBCASE("no answer: RETRY_EXC_ERR") {
    auto [a, b] = fx.make_pair({}, {.timeout = 10, .retry_cnt = 2}, {});
    fx.move_to(b, qp_state::err);
    REQUIRE(fx.post_rdma(a, 7, opcode::rdma_write, src.sge(0, 64), dst.addr(), dst.rkey()) == 0);
    fx.move_to(a, qp_state::sqd);
    CHECK(fx.poll_one(a.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
  }
  SUBCASE("RNR NAKed: RNR_RETRY_EXC_ERR") {
    auto [a, b] = fx.make_pair({}, {.rnr_retry = 2}, {.min_rnr_timer = 1});
    REQUIRE(fx.post_send(a, 9, opcode::send, {src.sge(0, 16)}) == 0);  // b has no receive
    fx.move_to(a, qp_state::sqd);
    CHECK(fx.poll_one(a.send_cq, "RNR retry exceeded").status == wc_status::rnr_retry_exc_err);
  }
}

// A thread that waits for the device's async events, and polls nothing, is what moves
// simulated time forward then (as get_cq_event and poll_cq do): the WRITE's refusal at
// the responder, and with it the responder's async event, is 10 us of wire away.
// get_async_event only waited: the event came when another thread's poll moved the
// clock, or never (its wait ended at its timeout).
TEST_CASE("fabric: get_async_event moves simulated time to the event it waits for") {
  rm::fabric_config cfg;
  cfg.latency = 10us;
  fx_t fx(cfg);
  auto [a, b] = fx.make_pair();
  auto& buf = fx.make_buffer(64);
  const auto t0 = fab(fx).now();
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, buf.sge(0, 8), buf.addr(8), buf.rkey() ^ 0x2200) == 0);
  async_event ev;
  const auto wall = std::chrono::steady_clock::now();
  REQUIRE(B::get_async_event(fx.ctx, 2000ms, ev) == 0);
  CHECK(std::chrono::steady_clock::now() - wall < 1000ms);  // not at its timeout
  CHECK(ev.type == async_event_type::qp_access_err);
  CHECK(ev.qp_num == b.num);
  CHECK(fab(fx).now() - t0 >= std::chrono::nanoseconds(10us));
  CHECK(fx.poll_one(a.send_cq).status == wc_status::rem_access_err);
  CHECK(B::get_async_event(fx.ctx, 10ms, ev) == ETIMEDOUT);  // nothing pending: no jump past it
}

// ------------------------------------------------------------------ clock modes and threads

namespace {
/// An RC sender `a` and a receiver `b` with no receive posted: a's SEND waits in RNR
/// until one is, for `rnr_retry` back-offs of `min_rnr_timer` (b's).
struct rnr_pair {
  rnr_pair(const rm::fabric_config& cfg, std::uint8_t rnr_retry, std::uint8_t min_rnr_timer) : fx(cfg) {
    link_opts la, lb;
    la.rnr_retry = rnr_retry;
    lb.min_rnr_timer = min_rnr_timer;
    std::tie(a, b) = fx.make_pair({}, la, lb);
    buf = &fx.make_buffer(64);
  }
  int send() { return fx.post_send(a, 7, opcode::send, {buf->sge(0, 8)}); }
  int recv() { return fx.post_recv(b, 1, {buf->sge(0, 64)}); }
  /// The status of a's completion, polled for up to 5 s of wall time (general_err: none).
  /// Between empty polls a short sleep leaves the CPU and the fabric's lock to the other
  /// thread (two cores, shared with other builds).
  wc_status sent() {
    B::wc w[1];
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      if (B::poll_cq(a.send_cq, 1, w) == 1) return to_completion<B>(w[0]).status;
      std::this_thread::sleep_for(20us);
    }
    return wc_status::general_err;
  }
  fx_t fx;
  endpoint<B> a, b;
  buffer<B>* buf = nullptr;
};

rm::fabric_config clocked(rm::clock_mode m) {
  rm::fabric_config c;
  c.clock = m;
  return c;
}
}  // namespace

// The audit's two-thread program (audit 8, A1): the receiver thread is started but busy
// before its first call into the fabric. Until it makes one it does not count, the
// sender's poll jumps the clock, and the RNR budget is spent at once: here, the whole
// 123 ms of it while the receiver has not run (it waits for the sender to finish, so the
// run is the same however loaded the machine). A NIC would wait for it.
TEST_CASE("fabric: clock_mode::automatic -- a thread started but not yet in a call does not count: RNR budget spent") {
  rnr_pair s(clocked(rm::clock_mode::automatic), 6, 22);  // 6 x 20.48 ms
  std::atomic<bool> sender_done{false};
  int reposted = -1;
  std::thread receiver([&] {
    while (!sender_done.load()) std::this_thread::sleep_for(100us);
    reposted = s.recv();
  });
  CHECK(s.send() == 0);
  const wc_status status = s.sent();
  sender_done = true;
  receiver.join();
  CHECK(status == wc_status::rnr_retry_exc_err);
  CHECK(fab(s.fx).now() >= 6 * rnr_ns(22));  // the budget, on the simulated clock
  CHECK(reposted == 0);
}

// The same program with fabric_config::clock = wall: the receiver thread, busy for 1 ms
// before its first call, reposts well inside the budget (6 x 20.48 ms of wall time), and
// the next RNR retry finds the receive, as on a NIC. In automatic mode (all there was
// before clock_mode) it fails as above whenever the sender polls before that first call.
// (Its 1 ms counts from the send: counted from the thread's start, a loaded machine that
// ran the receiver first had it repost before the send, with no RNR NAK to retry.)
TEST_CASE("fabric: clock_mode::wall -- a receiver thread that reposts 1 ms after the send is reached by RNR retries") {
  rnr_pair s(clocked(rm::clock_mode::wall), 6, 22);
  std::atomic<bool> sent{false};
  int reposted = -1;
  std::thread receiver([&] {
    while (!sent.load()) std::this_thread::yield();
    std::this_thread::sleep_for(1ms);  // busy: its first call into the fabric comes 1 ms later
    reposted = s.recv();
  });
  const auto p0 = fab(s.fx).packets_sent();
  CHECK(s.send() == 0);
  sent = true;
  const wc_status status = s.sent();
  receiver.join();
  CHECK(reposted == 0);
  CHECK(status == wc_status::success);
  CHECK(fab(s.fx).packets_sent() - p0 >= 2);  // refused (RNR NAK), then sent again
  CHECK(fab(s.fx).now() >= rnr_ns(22));        // one back-off at least
}

// Wall: the clock follows the wall clock for one thread alone too, from the present:
// setup time that passed with nothing pending is not spent from a budget at the first
// poll (the clock catches up with the wall clock at each call, before the call schedules
// anything), and advance() moves it on without holding later timers back by as much.
TEST_CASE("fabric: clock_mode::wall -- one thread's RNR back-offs take their wall-clock time, after idle time and advance()") {
  using std::chrono::steady_clock;
  rm::fabric_config cfg = clocked(rm::clock_mode::wall);
  rnr_pair s(cfg, 2, 18);  // 2 x 5.12 ms
  std::this_thread::sleep_for(20ms);  // longer than the budget, nothing pending
  auto t0 = steady_clock::now();
  REQUIRE(s.send() == 0);
  CHECK(s.sent() == wc_status::rnr_retry_exc_err);
  CHECK(steady_clock::now() - t0 >= 2 * rnr_ns(18));
  // advance() 3 s ahead: the next back-offs still take 5.12 ms each, not 3 s more.
  rnr_pair again(cfg, 2, 18);
  fab(again.fx).advance(3s);
  CHECK(fab(again.fx).now() >= 3s);
  t0 = steady_clock::now();
  REQUIRE(again.send() == 0);
  CHECK(again.sent() == wc_status::rnr_retry_exc_err);
  const auto took = steady_clock::now() - t0;
  CHECK(took >= 2 * rnr_ns(18));
  CHECK(took < 2s);
}

// Automatic, paced by a second thread: as with wall, the clock catches up with the wall
// clock at each call. It lagged at the last event run, so a post after 150 ms of idle
// time had its RNR back-offs (123 ms) all due at the first poll.
TEST_CASE("fabric: clock_mode::automatic -- paced by a second thread, time idle before a post is not spent from its budget") {
  rnr_pair s(clocked(rm::clock_mode::automatic), 6, 22);  // 6 x 20.48 ms
  std::atomic<int> stage{0};  // 1: the receiver has called; 2: the sender posted
  int reposted = -1;
  std::thread receiver([&] {
    B::wc w[1];
    (void)B::poll_cq(s.b.recv_cq, 1, w);  // counts from here
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    std::this_thread::sleep_for(1ms);
    reposted = s.recv();
  });
  while (stage.load() != 1) std::this_thread::yield();
  std::this_thread::sleep_for(150ms);  // idle: nothing pending
  CHECK(s.send() == 0);
  stage = 2;
  const wc_status status = s.sent();
  receiver.join();
  CHECK(reposted == 0);
  CHECK(status == wc_status::success);
}

// The improvement to automatic: a thread counts from its first call that creates an
// object, a CQ here (it counted only once it opened a device, created a QP or SRQ,
// posted, polled or waited). While it counts the clock follows the wall clock, so the
// other thread's back-offs take their time.
TEST_CASE("fabric: clock_mode::automatic -- a thread that only created a CQ counts: the clock follows the wall clock") {
  rnr_pair s(clocked(rm::clock_mode::automatic), 2, 18);  // 2 x 5.12 ms
  std::thread other([&] { (void)s.fx.make_cq(4); });
  other.join();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(s.send() == 0);
  CHECK(s.sent() == wc_status::rnr_retry_exc_err);
  CHECK(std::chrono::steady_clock::now() - t0 >= 2 * rnr_ns(18));  // not a jump
}

// Simulated: the clock always jumps, whatever the threads: a second thread that polls
// does not pace it, and the time at which the budget ends is the same in every run. Here
// 6 x 655 ms of simulated time pass in a moment (automatic: 3.9 s of wall time).
TEST_CASE("fabric: clock_mode::simulated -- jumps with two threads too, the same in every run") {
  auto run = [] {
    rnr_pair s(clocked(rm::clock_mode::simulated), 6, 0);  // 6 x 655.36 ms
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<bool> polled{false}, done{false};
    std::thread other([&] {  // polls all along: in automatic, this would pace the clock
      B::wc w[1];
      (void)B::poll_cq(s.b.recv_cq, 1, w);
      polled = true;
      while (!done.load()) {
        std::this_thread::sleep_for(100us);
        (void)B::poll_cq(s.b.recv_cq, 1, w);
      }
    });
    while (!polled.load()) std::this_thread::yield();
    CHECK(s.send() == 0);
    CHECK(s.sent() == wc_status::rnr_retry_exc_err);
    done = true;
    other.join();
    const auto now = fab(s.fx).now();
    CHECK(now >= 6 * rnr_ns(0));
    CHECK(now > std::chrono::steady_clock::now() - t0);  // ahead of the wall clock
    return now;
  };
  const auto first = run();
  CHECK(run() == first);
}

// ------------------------------------------------------------------ slot rule

TEST_CASE("fabric: strict slot rule -- unsignaled WRs hold the SQ until a signaled one is polled") {
  fx_t fx;
  auto a = fx.make_qp({.caps = {4, 4, 1, 1, 0}, .sig_all = false});
  auto b = fx.make_qp({.caps = {4, 64, 1, 1, 0}, .cqe = 128});
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  for (int i = 0; i < 40; ++i) REQUIRE(fx.post_recv(b, 1000 + i, {buf.sge(0, 64)}) == 0);
  for (int i = 0; i < 4; ++i) CHECK(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}, send_flags::none) == 0);
  CHECK(fx.poll(b.recv_cq, 4).size() == 4);  // they all completed...
  CHECK(fx.drain(a.send_cq, 3).empty());
  CHECK(fx.post_send(a, 9, opcode::send, {buf.sge(0, 8)}, send_flags::signaled) == ENOMEM);  // ...yet hold the SQ
  // Moving to ERR and back is the only way out for this QP; a fresh one shows the fix:
  auto c = fx.make_qp({.caps = {4, 4, 1, 1, 0}, .sig_all = false});
  auto d = fx.make_qp({.caps = {4, 64, 1, 1, 0}, .cqe = 128});
  fx.connect(c, d);
  for (int i = 0; i < 40; ++i) REQUIRE(fx.post_recv(d, 1000 + i, {buf.sge(0, 64)}) == 0);
  for (int round = 0; round < 5; ++round) {
    CAPTURE(round);
    for (int i = 0; i < 3; ++i) REQUIRE(fx.post_send(c, i, opcode::send, {buf.sge(0, 8)}, send_flags::none) == 0);
    REQUIRE(fx.post_send(c, 3, opcode::send, {buf.sge(0, 8)}, send_flags::signaled) == 0);
    CHECK(fx.poll_one(c.send_cq).wr_id == 3);  // polling it frees all four slots
  }
}

TEST_CASE("fabric: slot_release::on_completion frees unsignaled slots at once, like rxe") {
  rm::fabric_config cfg;
  cfg.slots = rm::slot_release::on_completion;
  fx_t fx(cfg);
  auto a = fx.make_qp({.caps = {4, 4, 1, 1, 0}, .sig_all = false});
  auto b = fx.make_qp({.caps = {4, 64, 1, 1, 0}, .cqe = 128});
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  for (int i = 0; i < 40; ++i) REQUIRE(fx.post_recv(b, 1000 + i, {buf.sge(0, 64)}) == 0);
  for (int i = 0; i < 12; ++i) {
    CAPTURE(i);
    CHECK(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}, send_flags::none) == 0);
    CHECK(fx.poll(b.recv_cq, 1).size() == 1);
  }
  CHECK(fx.drain(a.send_cq, 3).empty());
}

// ------------------------------------------------------------------ CQ overrun

// An RC pair a -> b whose receiver's CQ is `small` (cap entries), with ACK timeouts of 4 ms
// and one retry: a message left unanswered runs out of retries in simulated time.
struct small_receive_cq {
  fx_t fx;
  B::cq small = fx.make_cq(1);
  int cap = B::cq_capacity(small);
  endpoint<B> a = fx.make_qp({.caps = {std::uint32_t(cap + 4), 4, 1, 1, 0}, .cqe = 2 * cap + 8});
  endpoint<B> b = fx.make_qp({.caps = {4, std::uint32_t(cap + 4), 1, 1, 0}}, fx.make_cq(16), small);
  buffer<B>& buf = fx.make_buffer(256);
  explicit small_receive_cq(const rm::fabric_config& cfg = {}) : fx(cfg) {
    link_opts l;
    l.timeout = 10;
    l.retry_cnt = 1;
    fx.connect(a, b, l, l);
  }
};

// A receive completion that finds its CQ full is lost, and its QP goes to ERR (IBA C9-218;
// the spec profile raises QP_FATAL, rxe 6.1 none) without acknowledging the message: the
// sender runs out of retries. The QP carried on, and the message was acknowledged.
TEST_CASE("fabric: a receive completion lost to a full CQ takes its QP to ERR, unacknowledged") {
  for (auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
    CAPTURE(profile);
    rm::fabric_config cfg;
    cfg.profile = profile;
    small_receive_cq p(cfg);
    auto [fx, small, cap, a, b, buf] = std::tie(p.fx, p.small, p.cap, p.a, p.b, p.buf);
    for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_recv(b, 100 + i, {buf.sge(0, 64)}) == 0);
    for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}) == 0);
    const auto sent = fx.poll(a.send_cq, std::size_t(cap) + 1);
    REQUIRE(sent.size() == std::size_t(cap) + 1);
    for (int i = 0; i < cap; ++i) CHECK(sent[i].status == wc_status::success);
    CHECK(sent[cap].status == wc_status::retry_exc_err);  // never acknowledged
    CHECK(B::query_qp_state(b.qp) == qp_state::err);
    async_event ev;
    REQUIRE(B::get_async_event(fx.ctx, 0ms, ev) == 0);
    CHECK(ev.type == async_event_type::cq_err);
    const bool fatal = B::get_async_event(fx.ctx, 0ms, ev) == 0;
    CHECK(fatal == (profile == rm::device_profile::spec));
    if (fatal) {
      CHECK(ev.type == async_event_type::qp_fatal);
      CHECK(ev.qp_num == b.num);
    }
    CHECK(fx.drain(small).size() == std::size_t(cap));
  }
}

// A receive that fails (too small; a WRITE with immediate naming a bad rkey) and whose
// completion is lost to a full CQ: the QP goes to ERR for the lost completion, and the
// message is answered no more than a good one would be (the sender runs out of retries),
// with one affiliated error. The NAK went out from the QP in ERR, and the bad rkey raised
// QP_ACCESS_ERR after QP_FATAL (audit 22, F2).
TEST_CASE("fabric: a failed receive whose completion is lost to a full CQ is not answered") {
  for (int what = 0; what < 2; ++what) {  // a receive too small; WRITE_WITH_IMM with a bad rkey
    CAPTURE(what);
    small_receive_cq p;
    auto [fx, cap, a, b, buf] = std::tie(p.fx, p.cap, p.a, p.b, p.buf);
    for (int i = 0; i < cap; ++i) REQUIRE(fx.post_recv(b, 100 + i, {buf.sge(0, 64)}) == 0);
    for (int i = 0; i < cap; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}) == 0);
    REQUIRE(fx.poll(a.send_cq, std::size_t(cap)).size() == std::size_t(cap));  // b's CQ is full
    REQUIRE(fx.post_recv(b, 200, {buf.sge(0, what == 0 ? 4 : 64)}) == 0);
    if (what == 0)
      REQUIRE(fx.post_send(a, 50, opcode::send, {buf.sge(0, 8)}) == 0);
    else
      REQUIRE(fx.post_rdma(a, 50, opcode::rdma_write_with_imm, buf.sge(0, 8), buf.addr(0), buf.rkey() ^ 0x100) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::retry_exc_err);
    CHECK(B::query_qp_state(b.qp) == qp_state::err);
    std::vector<async_event_type> b_events;
    for (async_event ev; B::get_async_event(fx.ctx, 0ms, ev) == 0;)
      if (ev.qp_num == b.num) b_events.push_back(ev.type);
    CHECK(b_events == std::vector<async_event_type>{async_event_type::qp_fatal});
  }
}

// A post list [BIND_MW, SEND] whose BIND_MW completion is lost to a full CQ: the QP goes
// to ERR in the post and the SEND behind it flushes, so it is not sent, with or without a
// latency. Without one it went out on the one-message path all the same (audit 22, F3).
TEST_CASE("fabric: a SEND flushed in its own post by a lost completion ahead of it is not sent") {
  for (int us : {0, 1}) {
    CAPTURE(us);
    rm::fabric_config cfg;
    cfg.latency = std::chrono::microseconds(us);
    fx_t fx(cfg);
    auto scq = fx.make_cq(1);
    const int cap = B::cq_capacity(scq);
    auto a = fx.make_qp({.type = qp_type::uc, .caps = {std::uint32_t(cap + 4), 4, 1, 1, 0}}, scq, fx.make_cq(16));
    auto b = fx.make_qp({.type = qp_type::uc, .caps = {4, std::uint32_t(cap + 4), 1, 1, 0}});
    fx.connect(a, b);
    auto& src = fx.make_buffer(64);
    auto& dst = fx.make_buffer(64 * (cap + 2));
    auto& region = fx.make_buffer(4096, access::local_write | access::remote_write | access::mw_bind);
    for (int i = 0; i < cap + 1; ++i) REQUIRE(fx.post_recv(b, 100 + i, {dst.sge(64 * i, 64)}) == 0);
    for (int i = 0; i < cap; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {src.sge(0, 8)}) == 0);
    REQUIRE(fx.poll(b.recv_cq, std::size_t(cap)).size() == std::size_t(cap));  // a's send CQ is full
    auto w = B::alloc_mw(fx.pd, mw_type::type2);
    fx.on_cleanup([w] { B::dealloc_mw(w); });
    B::send_wr list[2]{};
    B::sge s{};
    B::set_sge(s, src.addr(0), 8, src.lkey());
    B::set_send(list[0], 50, opcode::bind_mw, send_flags::signaled, nullptr, 0);
    B::set_bind_mw(list[0], w, (B::mw_rkey(w) & ~0xFFu) | ((B::mw_rkey(w) + 1) & 0xFFu), region.mr, region.addr(0),
                   4096, access::remote_write);
    B::set_send(list[1], 51, opcode::send, send_flags::signaled, &s, 1);
    B::set_next(list[0], &list[1]);
    B::send_wr* bad = nullptr;
    REQUIRE(B::post_send(a.qp, list, &bad) == 0);
    fab(fx).advance(1ms);
    CHECK(B::query_qp_state(a.qp) == qp_state::err);
    CHECK(fx.drain(b.recv_cq).empty());
  }
}

// A CQ that overflowed takes no more completions (IBA C11-37), and a QP that completes
// into it afterwards goes to ERR with QP_FATAL too, though its completion would fit now.
// (The CQ took the next completion once polled, and the QP carried on.)
TEST_CASE("fabric: a CQ that overflowed takes no completion of any of its queue pairs") {
  fx_t fx;
  auto small = fx.make_cq(1);
  const int cap = B::cq_capacity(small);
  auto a = fx.make_qp({.caps = {std::uint32_t(cap + 4), 4, 1, 1, 0}}, small, fx.make_cq(16));
  auto c = fx.make_qp({.caps = {4, 4, 1, 1, 0}}, small, fx.make_cq(16));
  auto b = fx.make_qp({.caps = {4, std::uint32_t(cap + 8), 1, 1, 0}, .cqe = 2 * cap + 16});
  auto d = fx.make_qp();
  fx.connect(a, b);
  fx.connect(c, d);
  auto& buf = fx.make_buffer(64);
  for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_recv(b, 100 + i, {buf.sge(0, 64)}) == 0);
  for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll(b.recv_cq, std::size_t(cap) + 1).size() == std::size_t(cap) + 1);
  CHECK(fx.drain(small).size() == std::size_t(cap));  // room again
  REQUIRE(fx.post_recv(d, 1, {buf.sge(0, 64)}) == 0);
  REQUIRE(fx.post_send(c, 7, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(d.recv_cq).status == wc_status::success);  // the message went
  CHECK(fx.drain(small).empty());                              // its completion did not come
  CHECK(B::query_qp_state(a.qp) == qp_state::err);
  CHECK(B::query_qp_state(c.qp) == qp_state::err);
  std::vector<async_event_type> got;
  std::vector<std::uint32_t> qps;
  for (async_event ev; B::get_async_event(fx.ctx, 0ms, ev) == 0;) {
    got.push_back(ev.type);
    qps.push_back(ev.qp_num);
  }
  REQUIRE(got.size() == 3);  // one CQ_ERR, then each QP's QP_FATAL
  CHECK(got[0] == async_event_type::cq_err);
  CHECK(got[1] == async_event_type::qp_fatal);
  CHECK(qps[1] == a.num);
  CHECK(got[2] == async_event_type::qp_fatal);
  CHECK(qps[2] == c.num);
}

// ------------------------------------------------------------------ faults, UC/UD

TEST_CASE("fabric: drop on UC and UD -- nothing arrives, the sender sees SUCCESS") {
  fx_t fx;
  for (qp_type t : {qp_type::uc, qp_type::ud}) {
    CAPTURE(t);
    auto pair = fx.make_pair({.type = t});
    const auto &a = pair.first, &b = pair.second;
    auto ah = fx.make_ah(fx.loopback_av());
    auto& buf = fx.make_buffer(512);
    REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 256)}) == 0);
    fab(fx).inject({.kind = rm::fault_kind::drop, .src_qp_num = a.num});
    auto send = [&](std::uint64_t id, std::uint32_t len) {
      return t == qp_type::ud ? fx.post_ud(a, id, ah, b.num, default_qkey, {buf.sge(256, len)})
                              : fx.post_send(a, id, opcode::send, {buf.sge(256, len)});
    };
    REQUIRE(send(10, 8) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    CHECK(fx.drain(b.recv_cq).empty());
    // The fault hit once; the receive is still there for the next message.
    REQUIRE(send(11, 16) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    auto r = fx.poll_one(b.recv_cq);
    CHECK(r.wr_id == 1);
    CHECK(r.byte_len == (t == qp_type::ud ? 16 + grh_bytes : 16u));
  }
}

TEST_CASE("fabric: duplicate on UD -- two receives consumed") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::ud});
  auto ah = fx.make_ah(fx.loopback_av());
  auto& buf = fx.make_buffer(1024);
  buf.fill(5, 512, 32);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 128)}}, {2, {buf.sge(128, 128)}}, {3, {buf.sge(256, 128)}}}).rc == 0);
  fab(fx).inject({.kind = rm::fault_kind::duplicate, .src_qp_num = a.num});
  REQUIRE(fx.post_ud(a, 10, ah, b.num, default_qkey, {buf.sge(512, 32)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  auto r = fx.poll(b.recv_cq, 2);
  REQUIRE(r.size() == 2);
  CHECK(r[0].wr_id == 1);
  CHECK(r[1].wr_id == 2);
  CHECK(buf.holds(5, grh_bytes, 32));
  CHECK(buf.holds(5, 128 + grh_bytes, 32));
  CHECK(fx.drain(b.recv_cq).empty());
}

// The rxe profile's UD receive too small for the payload: rxe 6.1 has copied the GRH area
// when it fails the receive (the spec profile writes nothing into a failed receive).
TEST_CASE("fabric: rxe profile -- a UD receive too small for the payload has its GRH area written") {
  for (const auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    rm::fabric_config cfg;
    cfg.profile = profile;
    fx_t fx(cfg);
    auto [a, b] = fx.make_pair({.type = qp_type::ud});
    auto ah = fx.make_ah(fx.loopback_av());
    auto& buf = fx.make_buffer(1024);
    buf.fill(5, 512, 100);
    REQUIRE(fx.post_recv(b, 1, {buf.sge(0, grh_bytes + 50)}) == 0);
    REQUIRE(fx.post_ud(a, 10, ah, b.num, default_qkey, {buf.sge(512, 100)}) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    CHECK(fx.poll_one(b.recv_cq).status != wc_status::success);
    const auto g = parse_grh(std::span<const std::byte>(buf.data(), grh_bytes));
    if (profile == rm::device_profile::rxe) {
      REQUIRE(g);
      CHECK(g->source == fx.gid.value);
    } else {
      CHECK_FALSE(g);  // still the zeros the buffer was made with
    }
    CHECK(std::all_of(buf.data() + grh_bytes, buf.data() + grh_bytes + 50, [](std::byte x) { return x == std::byte{0}; }));
  }
}

TEST_CASE("fabric: reorder on UD -- the hit message arrives after the next one") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::ud});
  auto ah = fx.make_ah(fx.loopback_av());
  auto& buf = fx.make_buffer(1024);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 128)}}, {2, {buf.sge(128, 128)}}}).rc == 0);
  fab(fx).inject({.kind = rm::fault_kind::reorder, .src_qp_num = a.num});
  REQUIRE(fx.post_ud(a, 10, ah, b.num, default_qkey, {buf.sge(512, 10)}) == 0);
  REQUIRE(fx.post_ud(a, 11, ah, b.num, default_qkey, {buf.sge(512, 20)}) == 0);
  CHECK(fx.poll(a.send_cq, 2).size() == 2);
  auto r = fx.poll(b.recv_cq, 2);
  REQUIRE(r.size() == 2);
  CHECK(r[0].byte_len == 20 + grh_bytes);  // the second message first
  CHECK(r[1].byte_len == 10 + grh_bytes);
}

// With every message hit (count 0, probability 1), each was held behind the next, which
// was held too: nothing ever arrived, and the held messages piled up without bound.
// The message that releases a held one goes first, as the one it swaps with.
TEST_CASE("fabric: reorder hitting every message swaps them in pairs; none is held for ever") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::ud});
  auto ah = fx.make_ah(fx.loopback_av());
  auto& buf = fx.make_buffer(1024);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 128)}}, {2, {buf.sge(128, 128)}}, {3, {buf.sge(256, 128)}},
                                {4, {buf.sge(384, 128)}}}).rc == 0);
  fab(fx).inject({.kind = rm::fault_kind::reorder, .src_qp_num = a.num, .count = 0, .probability = 1.0});
  for (std::uint32_t k = 1; k <= 4; ++k) REQUIRE(fx.post_ud(a, k, ah, b.num, default_qkey, {buf.sge(512, k)}) == 0);
  CHECK(fx.poll(a.send_cq, 4).size() == 4);
  auto r = fx.poll(b.recv_cq, 4);
  REQUIRE(r.size() == 4);
  CHECK(r[0].byte_len == 2 + grh_bytes);
  CHECK(r[1].byte_len == 1 + grh_bytes);
  CHECK(r[2].byte_len == 4 + grh_bytes);
  CHECK(r[3].byte_len == 3 + grh_bytes);
}

TEST_CASE("fabric: delay on UC -- the message arrives only once the clock passes the delay") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& src = fx.make_buffer(64);
  auto& dst = fx.make_buffer(64);
  src.fill(9);
  REQUIRE(fx.post_recv(b, 1, {dst.sge(0, 64)}) == 0);
  fab(fx).inject({.kind = rm::fault_kind::delay, .src_qp_num = a.num, .delay = 5ms});
  REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(0, 64)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);  // UC: complete once sent
  fab(fx).advance(4ms);
  CHECK(dst.u64(0) == 0);  // not there yet (no empty poll, so the clock did not jump)
  fab(fx).advance(2ms);
  CHECK(dst.holds(9, 0, 64));
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.wr_id == 1);
  CHECK(r.byte_len == 64);
}

TEST_CASE("fabric: a fault hits only its source QP and only `count` messages; clear_faults ends it") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::ud});
  auto [c, d] = fx.make_pair({.type = qp_type::ud});
  auto ah = fx.make_ah(fx.loopback_av());
  auto& buf = fx.make_buffer(2048);
  std::vector<typename fx_t::recv_spec> rl;
  for (std::uint64_t i = 0; i < 8; ++i) rl.push_back({i, {buf.sge(i * 128, 128)}});
  REQUIRE(fx.post_recv_list(b, rl).rc == 0);
  fab(fx).inject({.kind = rm::fault_kind::drop, .src_qp_num = a.num, .count = 2});
  for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(fx.post_ud(a, i, ah, b.num, default_qkey, {buf.sge(1536, 4)}) == 0);
  REQUIRE(fx.post_ud(c, 9, ah, b.num, default_qkey, {buf.sge(1536, 5)}) == 0);  // not from a: unaffected
  CHECK(fx.poll(a.send_cq, 3).size() == 3);
  CHECK(fx.poll_one(c.send_cq).status == wc_status::success);
  auto r = fx.poll(b.recv_cq, 2);
  REQUIRE(r.size() == 2);
  CHECK(r[0].byte_len == 4 + grh_bytes);  // a's third message
  CHECK(r[1].byte_len == 5 + grh_bytes);  // c's
  CHECK(fx.drain(b.recv_cq).empty());
  fab(fx).inject({.kind = rm::fault_kind::drop, .count = 0});  // every QP, forever
  REQUIRE(fx.post_ud(a, 20, ah, b.num, default_qkey, {buf.sge(1536, 4)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fx.drain(b.recv_cq).empty());
  fab(fx).clear_faults();
  REQUIRE(fx.post_ud(a, 21, ah, b.num, default_qkey, {buf.sge(1536, 6)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fx.poll_one(b.recv_cq).byte_len == 6 + grh_bytes);
  (void)d;
}

// ------------------------------------------------------------------ faults, RC

TEST_CASE("fabric: drop on RC is retransmitted after the timer, so it only delays") {
  fx_t fx;
  link_opts l;
  l.timeout = 8;  // ~1 ms
  auto [a, b] = fx.make_pair({}, l, l);
  auto& buf = fx.make_buffer(64);
  buf.fill(3, 0, 8);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(32, 32)}) == 0);
  fab(fx).inject({.kind = rm::fault_kind::drop, .src_qp_num = a.num});
  const auto t0 = fab(fx).now();
  const auto p0 = fab(fx).packets_sent();
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fab(fx).now() - t0 >= std::chrono::nanoseconds(4096ull << 8));
  CHECK(fab(fx).packets_sent() - p0 == 2);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(buf.holds(3, 32, 8));
}

TEST_CASE("fabric: a duplicated RC request is not executed twice") {
  fx_t fx;
  auto [a, b] = fx.make_pair();
  auto& buf = fx.make_buffer(256);
  auto& remote = fx.make_buffer(64);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 64)}}, {2, {buf.sge(64, 64)}}}).rc == 0);
  fab(fx).inject({.kind = rm::fault_kind::duplicate, .src_qp_num = a.num, .count = 2});
  REQUIRE(fx.post_send(a, 10, opcode::send, {buf.sge(128, 8)}) == 0);
  REQUIRE(fx.post_atomic(a, 11, opcode::atomic_fetch_and_add, buf.sge(192, 8), remote.addr(0), remote.rkey(), 1) == 0);
  auto s = fx.poll(a.send_cq, 2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].status == wc_status::success);
  CHECK(s[1].status == wc_status::success);
  CHECK(buf.u64(192) == 0);    // the old value
  CHECK(remote.u64(0) == 1);   // added once
  CHECK(fx.poll(b.recv_cq, 1).size() == 1);
  CHECK(fx.drain(b.recv_cq).empty());  // one receive consumed, not two
}

TEST_CASE("fabric: an unplugged peer port -> RETRY_EXC_ERR, PORT_ERR then PORT_ACTIVE") {
  fx_t fx;
  auto a = fx.make_qp();
  auto far = open_far(fx, "mock1");
  link_opts la, lb;
  la.timeout = 4;
  la.retry_cnt = 2;
  la.av = av_to(far.gid.value);
  lb.av = av_to(fx.gid.value);
  fx.bring_up(a, far.ep.num, la);
  fx.bring_up(far.ep, a.num, lb);
  auto& buf = fx.make_buffer(64);
  auto& fbuf = fx.make_buffer(64, acc::local_write, far.pd);
  REQUIRE(fx.post_recv(far.ep, 1, {fbuf.sge(0, 64)}) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 8)}) == 0);  // works while plugged
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(fx.poll_one(far.ep.recv_cq).status == wc_status::success);

  fab(fx).set_port_up("mock1", 1, false);
  async_event ev;
  REQUIRE(B::get_async_event(far.ctx, 100ms, ev) == 0);
  CHECK(ev.type == async_event_type::port_err);
  CHECK(ev.port_num == 1);
  CHECK(B::query_port(far.ctx, 1).state != port_state::active);
  CHECK(B::get_async_event(fx.ctx, 10ms, ev) == ETIMEDOUT);  // mock0's port did not change
  REQUIRE(fx.post_recv(far.ep, 3, {fbuf.sge(0, 64)}) == 0);
  REQUIRE(fx.post_send(a, 4, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::retry_exc_err);
  CHECK(B::query_qp_state(a.qp) == qp_state::err);

  fab(fx).set_port_up("mock1", 1, true);
  REQUIRE(B::get_async_event(far.ctx, 100ms, ev) == 0);
  CHECK(ev.type == async_event_type::port_active);
  CHECK(B::query_port(far.ctx, 1).state == port_state::active);
  CHECK(errno_of([&] { fab(fx).set_port_up("nope", 1, false); }) == ENODEV);
  CHECK(errno_of([&] { fab(fx).set_port_up("mock1", 2, false); }) == EINVAL);
}

// ------------------------------------------------------------------ determinism

namespace {
/// 64 UD messages under a 50% drop fault; which ones arrived.
std::vector<std::uint32_t> lossy_run(std::uint64_t seed) {
  rm::fabric_config cfg;
  cfg.seed = seed;
  fx_t fx(cfg);
  auto [a, b] = fx.make_pair({.type = qp_type::ud, .caps = {80, 80, 1, 1, 0}, .cqe = 128});
  auto ah = fx.make_ah(fx.loopback_av());
  auto& buf = fx.make_buffer(64 * 128);
  for (std::uint64_t i = 0; i < 64; ++i) REQUIRE(fx.post_recv(b, i, {buf.sge(i * 128, 128)}) == 0);
  fab(fx).inject({.kind = rm::fault_kind::drop, .count = 0, .probability = 0.5});
  for (std::uint32_t i = 0; i < 64; ++i) {
    REQUIRE(fx.post_ud(a, i, ah, b.num, default_qkey, {buf.sge(0, i + 1)}) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  }
  std::vector<std::uint32_t> arrived;
  for (auto& c : fx.drain(b.recv_cq, 10)) arrived.push_back(c.byte_len - grh_bytes);
  return arrived;
}
}  // namespace

TEST_CASE("fabric: the same seed gives the same run") {
  auto first = lossy_run(42);
  auto second = lossy_run(42);
  CHECK(first == second);
  CHECK(first.size() > 8);   // some arrived
  CHECK(first.size() < 56);  // some were dropped
}

// ------------------------------------------------------------------ arm hook

TEST_CASE("fabric: the arm hook lands a completion between the last poll and the arm") {
  fx_t fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp();
  auto b = fx.make_qp({}, fx.make_cq(16), cq);
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 64)}) == 0);
  int hook_calls = 0;
  fab(fx).set_arm_hook([&](const void* armed) {
    if (hook_calls++ == 0 && armed == static_cast<const void*>(cq))
      CHECK(fx.post_send(a, 2, opcode::send, {buf.sge(0, 8)}) == 0);
  });
  // drain -> arm -> re-poll: the completion that landed during the arm is found.
  B::wc w[4];
  CHECK(B::poll_cq(cq, 4, w) == 0);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  CHECK(hook_calls == 1);
  REQUIRE(B::poll_cq(cq, 4, w) == 1);
  CHECK(B::get_wr_id(w[0]) == 1);
  // A loop that waited for the event instead would not get one for it.
  B::cq got{};
  CHECK(B::get_cq_event(ch, 20ms, got) == ETIMEDOUT);
  fab(fx).set_arm_hook({});
}

TEST_CASE("fabric: a configuration, fault or clock step it cannot simulate is refused, naming what was wrong") {
  using namespace std::chrono;
  auto refused = [](auto make, const char* says) {
    CHECK_THROWS_WITH_AS(make(), doctest::Contains(says), rdmakit::usage_error);
  };
  // A fabric made from the configuration `edit` leaves.
  auto config_refused = [&](auto edit, const char* says) {
    refused([&] {
      rm::fabric_config c;
      edit(c);
      rm::fabric f(c);
    }, says);
  };
  // A fabric of one device `name` whose one port `edit` sets up.
  auto port_refused = [&](const char* name, auto edit, const char* says) {
    config_refused([&](rm::fabric_config& c) {
      rm::port_config p;
      edit(p);
      c.devices = {{.name = name, .ports = {p}}};
    }, says);
  };
  config_refused([](rm::fabric_config& c) {
    c.devices = {{.name = "big", .ports = std::vector<rm::port_config>(256)}};
  }, "device big has 256 ports: at most 255");
  config_refused([](rm::fabric_config& c) { c.devices = {{.name = "none", .ports = {}}}; }, "device none has no port");
  config_refused([](rm::fabric_config& c) { c.latency = nanoseconds(-5); }, "latency = -5 ns");
  config_refused([](rm::fabric_config& c) { c.latency = nanoseconds::max(); }, "latency = 9223372036854775807 ns");
  config_refused([](rm::fabric_config& c) {
    c.profile = rm::device_profile::rxe;
    c.reuse_qp_numbers = true;
  }, "reuse_qp_numbers with device_profile::rxe");
  // The CM's retry time is added to the wall clock: negative gave up at once, and
  // milliseconds::max() overflowed the clock (it gave up at once too).
  config_refused([](rm::fabric_config& c) {
    c.cm_retry_time = milliseconds(-1);
  }, "fabric_config::cm_retry_time = -1 ms");
  config_refused([](rm::fabric_config& c) {
    c.cm_retry_time = milliseconds::max();
  }, "fabric_config::cm_retry_time = 9223372036854775807 ms");
  // Devices are opened by name: a second one of the same name (or with none) could never
  // be opened, and was made without a word.
  config_refused([](rm::fabric_config& c) {
    c.devices = {{.name = "twin"}, {.name = "twin"}};
  }, "two devices are named 'twin'");
  config_refused([](rm::fabric_config& c) { c.devices.resize(2); }, "device 0 has no name");
  // A GID entry past the 16-entry table was dropped without a word; two at one index
  // kept the last.
  port_refused("g", [](rm::port_config& p) {
    p.gids = {gid_entry{gid::from_ipv4(10, 1, 1, 1), 16, gid_type::roce_v2, true}};
  }, "device g port 1: port_config::gids holds index 16: the GID table has 16 entries (0..15)");
  port_refused("g", [](rm::port_config& p) {
    p.gids = {gid_entry{gid::from_ipv4(10, 1, 1, 1), 2, gid_type::roce_v2, true},
              gid_entry{gid::from_ipv4(10, 1, 1, 2), 2, gid_type::roce_v2, true}};
  }, "device g port 1: port_config::gids holds index 2 twice");
  // An entry with valid = false (the default, easily left out) was made a valid GID: a
  // table copied from query_gid, empty slots and all, answered to the zero GID.
  port_refused("g", [](rm::port_config& p) {
    p.gids = {gid_entry{.value = gid::from_ipv4(10, 1, 1, 1), .index = 3, .type = gid_type::roce_v2}};
  }, "device g port 1: port_config::gids holds index 3 with valid = false");
  // MTUs: an enumerator that is none (0 bytes: a UD packet count divided by it), or an
  // active MTU above the port's maximum.
  port_refused("m", [](rm::port_config& p) {
    p.active_mtu = static_cast<mtu>(0);
  }, "device m port 1: port_config::active_mtu = 0 is not an MTU");
  port_refused("m", [](rm::port_config& p) {
    p.max_mtu = mtu::mtu_1024;
    p.active_mtu = mtu::mtu_2048;
  }, "device m port 1: port_config::active_mtu (2048 bytes) is above its max_mtu (1024 bytes)");
  // A link layer the mock does not simulate: "unspecified" got RoCE's GIDs but no LID,
  // and rdmakit takes it for InfiniBand (no GRH): connect() had nothing to address it by.
  port_refused("u", [](rm::port_config& p) {
    p.layer = link_layer::unspecified;
  }, "device u port 1: port_config::layer = 0 is not one the mock simulates");
  // LIDs: a unicast LID (1..0xbfff), one per port; two ports of one LID take each other's packets.
  port_refused("ib", [](rm::port_config& p) {
    p.layer = link_layer::infiniband;
    p.lid = 0xc000;
  }, "device ib port 1: port_config::lid = 0xc000 is not a unicast LID");
  config_refused([](rm::fabric_config& c) {
    rm::port_config p;
    p.layer = link_layer::infiniband;
    p.lid = 5;
    c.devices = {{.name = "a", .ports = {p}}, {.name = "b", .ports = {p}}};
  }, "device b port 1: port_config::lid = 0x5 is also device a port 1's");
  // A GID on two ports: packets for it went to the first (a port may list one GID
  // twice, as RoCE v1 and v2 entries do).
  config_refused([](rm::fabric_config& c) {
    rm::port_config p;
    p.gids = {gid_entry{gid::from_ipv4(10, 1, 1, 1), 1, gid_type::roce_v2, true},
              gid_entry{gid::from_ipv4(10, 1, 1, 1), 2, gid_type::roce_v1, true}};
    c.devices = {{.name = "a", .ports = {p}}, {.name = "b", .ports = {p}}};
  }, "device b port 1: GID 0000:0000:0000:0000:0000:ffff:0a01:0101 (index 1) is also device a port 1's");
  // Values no enumerator names were silently another (a slot rule that never gave slots
  // back, the spec profile, a fault that did nothing); a GID type that is none failed at
  // create_qp with advice about IP addresses; an Ethernet port's LID was dropped; no
  // completion vector made every create_cq fail.
  config_refused([](rm::fabric_config& c) { c.profile = static_cast<rm::device_profile>(7); },
                 "fabric_config::profile = 7 is no device_profile");
  config_refused([](rm::fabric_config& c) { c.slots = static_cast<rm::slot_release>(9); },
                 "fabric_config::slots = 9 is no slot_release");
  config_refused([](rm::fabric_config& c) { c.clock = static_cast<rm::clock_mode>(3); },
                 "fabric_config::clock = 3 is no clock_mode: give clock_mode::automatic, clock_mode::wall or "
                 "clock_mode::simulated");
  port_refused("t", [](rm::port_config& p) {
    p.gids = {gid_entry{gid::from_ipv4(10, 1, 1, 1), 1, static_cast<gid_type>(9), true}};
  }, "device t port 1: port_config::gids holds index 1 of type 9, which is none");
  port_refused("e", [](rm::port_config& p) { p.lid = 5; },
               "device e port 1: port_config::lid = 5 on an Ethernet (RoCE) port, which has no LID");
  config_refused([](rm::fabric_config& c) {
    c.devices = {{.name = "v", .ports = {rm::port_config{}}}};
    c.devices[0].limits.num_comp_vectors = 0;
  }, "device v has limits.num_comp_vectors = 0");
  // 300 devices of default GIDs: the device number took 8 bits, and device 256's GIDs
  // were device 0's.
  {
    rm::fabric_config c;
    for (int i = 0; i < 300; ++i) c.devices.push_back({.name = "d" + std::to_string(i), .ports = {rm::port_config{}}});
    rm::fabric many(c);
    auto d0 = B::open_device(many, "d0");
    auto d256 = B::open_device(many, "d256");
    CHECK(B::query_gid(d0, 1, 1).value != B::query_gid(d256, 1, 1).value);
    CHECK(B::query_gid(d0, 1, 0).value != B::query_gid(d256, 1, 0).value);
    B::close_device(d256);
    B::close_device(d0);
  }
  rm::fabric f;
  refused([&] { f.inject({.kind = static_cast<rm::fault_kind>(9)}); }, "fault::kind = 9 is no fault_kind");
  refused([&] { f.inject({.kind = rm::fault_kind::delay, .delay = nanoseconds(-1)}); }, "fault::delay = -1 ns");
  refused([&] { f.inject({.kind = rm::fault_kind::drop, .probability = 1.5}); }, "fault::probability = 1.5");
  f.advance(seconds(5));
  refused([&] { f.advance(seconds(-1)); }, "advance(-1000000000 ns)");
  CHECK(f.now() == seconds(5));  // unchanged
}

TEST_CASE("fabric: QP numbers only grow, unless reuse_qp_numbers gives a destroyed QP's number again") {
  for (const bool reuse : {false, true}) {
    CAPTURE(reuse);
    rm::fabric_config cfg;
    cfg.reuse_qp_numbers = reuse;
    rm::fabric f(cfg);
    auto ctx = B::open_device(f, "mock0");
    auto pd = B::alloc_pd(ctx);
    auto cq = B::create_cq(ctx, 8, {}, 0);
    qp_cap caps{4, 4, 1, 1, 0};
    auto make = [&] { return B::create_qp(pd, cq, cq, qp_type::rc, caps, true); };
    auto q1 = make(), q2 = make();
    const std::uint32_t n1 = B::qp_num(q1), n2 = B::qp_num(q2);
    CHECK(B::destroy_qp(q1) == 0);
    CHECK(B::destroy_qp(q2) == 0);
    auto q3 = make(), q4 = make(), q5 = make();
    if (reuse) {
      CHECK(B::qp_num(q3) == n2);  // the most recently freed first
      CHECK(B::qp_num(q4) == n1);
    } else {
      CHECK(B::qp_num(q3) > n2);
      CHECK(B::qp_num(q4) > B::qp_num(q3));
    }
    CHECK(B::qp_num(q5) > n2);  // none left to reuse: a new one
    for (auto q : {q3, q4, q5}) CHECK(B::destroy_qp(q) == 0);
    CHECK(B::destroy_cq(cq) == 0);
    CHECK(B::dealloc_pd(pd) == 0);
    B::close_device(ctx);
  }
}

// ------------------------------------------------------------------ numbers and keys of a long run

// A server that makes QPs for days passes 2^24 of them. The numbers grew past 0xFFFFFF
// (audit 26, F1: 16.7 M QPs, at most one alive, in 6 s), and every connect after that
// was refused (QP numbers have 24 bits). They start again from the lowest, past those in
// use, as a device's cyclic allocator does.
TEST_CASE("fabric: QP numbers stay within 24 bits: past 0xFFFFFF they start again, skipping those in use") {
  rm::fabric f;
  auto ctx = B::open_device(f, "mock0");
  auto pd = B::alloc_pd(ctx);
  auto cq = B::create_cq(ctx, 8, {}, 0);
  qp_cap caps{4, 4, 1, 1, 0};
  auto make = [&] { return B::create_qp(pd, cq, cq, qp_type::rc, caps, true); };
  auto kept = make();
  REQUIRE(B::qp_num(kept) == 0x11);
  f.state().next_qpn = 0xFFFFFE;  // as 16.7 M QPs made and destroyed would leave it
  auto q1 = make(), q2 = make(), q3 = make(), q4 = make();
  CHECK(B::qp_num(q1) == 0xFFFFFE);
  CHECK(B::qp_num(q2) == 0xFFFFFF);
  CHECK(B::qp_num(q3) == 0x12);  // 0x11 is kept's
  CHECK(B::qp_num(q4) == 0x13);
  for (auto q : {kept, q1, q2, q3, q4}) CHECK(B::destroy_qp(q) == 0);
  CHECK(B::destroy_cq(cq) == 0);
  CHECK(B::dealloc_pd(pd) == 0);
  B::close_device(ctx);
}

// Region keys came from one 32-bit counter (audit 26, F4): after 2^30 registrations the
// rxe profile's rkeys took the window keys' form (every WRITE to a new region failed),
// and the spec profile's lkeys did; at 2^31 a new region's keys were an old one's,
// replacing a live region's entry. They wrap below the window keys now, past the keys
// of live regions: a WRITE by a live region's rkey still reaches that region.
TEST_CASE("fabric: region keys wrap below the windows' keys, past those in use; both profiles") {
  for (const auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
    CAPTURE(profile);
    rm::fabric_config cfg;
    cfg.profile = profile;
    fx_t fx(cfg);
    auto [a, b] = fx.make_pair();
    auto& src = fx.make_buffer(64);
    src.fill(9);
    auto& kept = fx.make_buffer(64);
    fab(fx).state().next_key = 0x3FFFFFFF;  // as a billion registrations would leave it
    auto& last = fx.make_buffer(64);
    auto& wrapped = fx.make_buffer(64);
    CHECK(last.lkey() == 0x3FFFFFFFu);
    CHECK(wrapped.lkey() < 0x40000000u);  // never a window key (rules.hpp, is_mw_key)
    for (const auto* other : {&kept, &last}) {
      CHECK(wrapped.lkey() != other->lkey());
      CHECK(wrapped.rkey() != other->rkey());
    }
    std::uint64_t id = 1;
    for (auto* to : {&kept, &last, &wrapped}) {
      REQUIRE(fx.post_rdma(a, id, opcode::rdma_write, src.sge(0, 8), to->addr(0), to->rkey()) == 0);
      CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
      CHECK(to->holds(9, 0, 8));
      ++id;
    }
  }
}

// Window indexes were never given again (audit 26, F3): the 4,194,304th alloc_mw failed
// with ENOMEM, one window alive at a time, and every one after it. A freed index is
// given again once the count wraps, with another key byte than its last window's, so the
// old window's rkey does not name the new one.
TEST_CASE("fabric: window indexes wrap past those in use; a reused one has another rkey") {
  fx_t fx;
  auto kept = B::alloc_mw(fx.pd, mw_type::type2);
  auto freed = B::alloc_mw(fx.pd, mw_type::type2);
  const std::uint32_t stale = B::mw_rkey(freed);
  CHECK(B::dealloc_mw(freed) == 0);
  fab(fx).state().next_mw = (1u << 22) - 1;  // as 4 M windows made and freed would leave it
  auto last = B::alloc_mw(fx.pd, mw_type::type2);
  B::mw again{};
  REQUIRE_NOTHROW(again = B::alloc_mw(fx.pd, mw_type::type2));
  const auto index = [](std::uint32_t rkey) { return (rkey >> 8) & 0x3FFFFFu; };
  CHECK(index(B::mw_rkey(last)) == 0x3FFFFFu);
  CHECK(index(B::mw_rkey(again)) == index(stale));  // kept's is in use
  CHECK(B::mw_rkey(again) != stale);
  CHECK((B::mw_rkey(again) & 0xC0000000u) == 0x40000000u);  // a window key
  for (auto w : {kept, last, again}) CHECK(B::dealloc_mw(w) == 0);
}

// destroy_qp left the QP's async events queued (audit 26, F2): a server that tore down
// each connection that hit a stale rkey kept one event per connection for ever, and with
// reused QP numbers a healthy QP was named by its predecessors' QP_ACCESS_ERRs. As the
// kernel does (and the mock did for CQs and SRQs), events not yet read go with the QP.
TEST_CASE("fabric: destroying a QP drops its async events not yet read") {
  fx_t fx;
  auto a = fx.make_qp();
  auto cq = fx.make_cq(16);
  endpoint<B> b;  // destroyed by hand, not by the fixture
  b.send_cq = b.recv_cq = cq;
  b.caps = {16, 16, 1, 1, 0};
  b.qp = B::create_qp(fx.pd, cq, cq, qp_type::rc, b.caps, true);
  b.num = B::qp_num(b.qp);
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, buf.sge(0, 8), buf.addr(8), buf.rkey() ^ 0x2200) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::rem_access_err);  // b went to ERR: its event is queued
  REQUIRE(B::destroy_qp(b.qp) == 0);
  async_event ev;
  CHECK(B::get_async_event(fx.ctx, 0ms, ev) == ETIMEDOUT);
}

// A WR behind one that failed its local check is never sent: the requester stops at the
// failed WQE (as a device does, its QP going to ERR), even while an earlier WR is still
// in flight and the failure's completion waits behind it. The requester skipped past the
// failed WQE at the next post: the third WRITE landed, and completed with SUCCESS.
TEST_CASE("fabric: a WR posted behind one that failed its local check is not sent") {
  slow_wire w;  // the first WRITE is still in flight at the later posts
  auto [fx, a, src, dst] = std::tie(w.fx, w.a, w.src, w.dst);
  auto bad = src.sge(0, 8);
  bad.lkey ^= 0x5500;
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 8), dst.addr(0), dst.rkey()) == 0);
  REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, bad, dst.addr(16), dst.rkey()) == 0);
  REQUIRE(fx.post_rdma(a, 3, opcode::rdma_write, src.sge(0, 8), dst.addr(32), dst.rkey()) == 0);
  const auto got = fx.drain(a.send_cq, 200);
  REQUIRE(got.size() == 3);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[1].status == wc_status::loc_prot_err);
  CHECK(got[2].status == wc_status::wr_flush_err);
  CHECK(dst.holds(5, 0, 8));
  CHECK(dst.zero(32, 8));  // never sent
}

// A device reads a WR's bytes by DMA some time after the post, and the buffer is the
// device's until the WR's completion: a program that writes it before then sends what it
// wrote (or a mix). The mock read them at the post, so that classic mistake never showed
// on it. The spec profile reads a SEND's or WRITE's bytes when its message reaches the
// responder: an RC WR completes on its ACK after that, a UC or UD WR completes then (it
// was sent). The rxe profile reads them at the post, as rxe copies a user QP's first
// transmission inside ibv_post_send (docs/mock.md). UC and UD were read at the post on
// both profiles, their completions coming at the post.
TEST_CASE("fabric: a WR's bytes are read when its message arrives (spec), at the post (rxe)") {
  for (auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
    rm::fabric_config cfg;
    cfg.latency = 10us;
    cfg.profile = profile;
    fx_t fx(cfg);
    auto& src = fx.make_buffer(64);
    auto& dst = fx.make_buffer(64 + grh_bytes);
    for (qp_type t : {qp_type::rc, qp_type::uc, qp_type::ud}) {
      for (opcode op : {opcode::rdma_write, opcode::send}) {
        if (t == qp_type::ud && op == opcode::rdma_write) continue;
        CAPTURE(profile);
        CAPTURE(t);
        CAPTURE(op);
        auto [a, b] = fx.make_pair({.type = t, .caps = {16, 16, 2, 2, 0}});
        const std::uint32_t at = t == qp_type::ud ? grh_bytes : 0;  // where the payload lands
        src.fill(5);
        dst.clear();
        if (op == opcode::send) REQUIRE(fx.post_recv(b, 9, {dst.sge(0, 64 + at)}) == 0);
        // Two SGEs, so that it cannot go as one borrowed buffer either.
        const std::vector<rdmakit::sge> sg{src.sge(0, 32), src.sge(32, 32)};
        if (t == qp_type::ud)
          REQUIRE(fx.post_ud(a, 1, fx.make_ah(fx.loopback_av()), b.num, default_qkey, sg) == 0);
        else if (op == opcode::send)
          REQUIRE(fx.post_send(a, 1, op, sg) == 0);
        else
          REQUIRE(fx.post_send_list(a, {{.wr_id = 1, .op = op, .sg = sg, .remote_addr = dst.addr(), .rkey = dst.rkey()}})
                      .rc == 0);
        src.fill(9);  // before the completion: a mistake on a device
        CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
        fab(fx).advance(1ms);
        const bool at_arrival = profile == rm::device_profile::spec;
        CHECK(dst.holds(at_arrival ? 9 : 5, at, 64));
        if (op == opcode::send) CHECK(fx.poll_one(b.recv_cq).status == wc_status::success);
      }
    }
  }
}

// Reading at arrival has its failures, as a device's DMA does: a region deregistered
// before the WR's completion (another classic mistake) fails the WR with LOC_PROT_ERR
// and the QP with it, and nothing behind it lands.
TEST_CASE("fabric: a WR whose region is deregistered before its message arrives fails; none behind it lands") {
  for (qp_type t : {qp_type::rc, qp_type::uc}) {
    CAPTURE(t);
    slow_wire w(t);
    auto [fx, a, b, src, dst] = std::tie(w.fx, w.a, w.b, w.src, w.dst);
    auto* own = B::reg_mr(fx.pd, src.data(), 64, access::local_write);
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, {src.addr(0), 32, B::mr_lkey(own)}, dst.addr(0), dst.rkey()) == 0);
    REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, src.sge(32, 32), dst.addr(32), dst.rkey()) == 0);
    REQUIRE(B::dereg_mr(own) == 0);
    const auto got = fx.drain(a.send_cq, 200);
    REQUIRE(got.size() == 2);
    CHECK(got[0].status == wc_status::loc_prot_err);
    CHECK(got[1].status == wc_status::wr_flush_err);
    CHECK(dst.zero(0, 64));
    CHECK(fx.drain(b.recv_cq, 10).empty());
  }
}

// A UC or UD WR completes once its message goes, which on the mock is when it arrives
// (a wire of 10 us): until then its buffer is the device's. (It completed at the post.)
TEST_CASE("fabric: a UC or UD WR completes when its message goes, not at its post") {
  for (qp_type t : {qp_type::uc, qp_type::ud}) {
    CAPTURE(t);
    fx_t fx(slow_wire::config());
    auto [a, b] = fx.make_pair({.type = t});
    auto ah = fx.make_ah(fx.loopback_av());
    auto& buf = fx.make_buffer(256);
    REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 128)}) == 0);
    const auto posted = fab(fx).now();
    REQUIRE((t == qp_type::ud ? fx.post_ud(a, 10, ah, b.num, default_qkey, {buf.sge(128, 16)})
                              : fx.post_send(a, 10, opcode::send, {buf.sge(128, 16)})) == 0);
    CHECK(fx.poll_one(a.send_cq).wr_id == 10);  // (its empty poll moves the clock to the arrival)
    CHECK(fab(fx).now() - posted >= 10us);
    CHECK(fx.poll_one(b.recv_cq).wr_id == 1);
  }
}

// A UC or UD WR that a fault hits went out before the network decided its fate: it
// completes at the post, with the bytes the buffer held then, whether it is dropped,
// duplicated, held back or delayed.
TEST_CASE("fabric: a UC or UD WR a fault hits completes at its post with the bytes of then") {
  for (auto kind : {rm::fault_kind::drop, rm::fault_kind::duplicate, rm::fault_kind::reorder, rm::fault_kind::delay}) {
    for (qp_type t : {qp_type::uc, qp_type::ud}) {
      CAPTURE(kind);
      CAPTURE(t);
      fx_t fx(slow_wire::config());
      const auto pair = fx.make_pair({.type = t});
      const auto &a = pair.first, &b = pair.second;
      auto ah = fx.make_ah(fx.loopback_av());
      auto& src = fx.make_buffer(64);
      auto& dst = fx.make_buffer(512);
      const std::uint32_t at = t == qp_type::ud ? grh_bytes : 0;
      REQUIRE(fx.post_recv(b, 1, {dst.sge(0, 128)}) == 0);
      REQUIRE(fx.post_recv(b, 2, {dst.sge(128, 128)}) == 0);
      REQUIRE(fx.post_recv(b, 3, {dst.sge(256, 128)}) == 0);
      auto send = [&](std::uint64_t id) {
        return t == qp_type::ud ? fx.post_ud(a, id, ah, b.num, default_qkey, {src.sge(0, 64)})
                                : fx.post_send(a, id, opcode::send, {src.sge(0, 64)});
      };
      fab(fx).inject({.kind = kind, .src_qp_num = a.num, .count = 1, .delay = 5ms});
      src.fill(5);
      REQUIRE(send(10) == 0);
      src.fill(9);  // a mistake before the completion, were it not polled already
      B::wc wc;
      REQUIRE(B::poll_cq(a.send_cq, 1, &wc) == 1);  // found without moving the clock: completed at the post
      CHECK(B::get_wr_id(wc) == 10);
      REQUIRE(send(11) == 0);  // releases a held message
      fab(fx).advance(10ms);
      CHECK(fx.poll_one(a.send_cq).wr_id == 11);
      const auto got = fx.drain(b.recv_cq);
      CHECK(got.size() == (kind == rm::fault_kind::drop ? 1u : kind == rm::fault_kind::duplicate ? 3u : 2u));
      // Receives are taken in arrival order: the held message or the delayed one comes
      // after WR 11's (seed 9), a duplicate's two copies first (seed 5).
      if (kind == rm::fault_kind::duplicate) {
        CHECK(dst.holds(5, at, 64));
        CHECK(dst.holds(5, 128 + at, 64));
      } else if (kind == rm::fault_kind::reorder || kind == rm::fault_kind::delay) {
        CHECK(dst.holds(9, at, 64));
        CHECK(dst.holds(5, 128 + at, 64));
      }
    }
  }
}

// A UC WR a fault hits is read at its post, though the WR ahead of it is read only when
// its message arrives; once its QP leaves RTS (ERR, RESET, or the WR ahead failing its
// read) before then, both flush or vanish and neither lands, as a device sends its WRs in
// order. The faulted WR's message landed, behind one that was never sent (audit 22, F1).
TEST_CASE("fabric: a faulted UC WR behind one in flight does not land once its QP left RTS") {
  for (auto kind : {rm::fault_kind::delay, rm::fault_kind::duplicate, rm::fault_kind::reorder}) {
    for (int how = 0; how < 3; ++how) {  // ERR, RESET, the region of the WR ahead deregistered
      CAPTURE(kind);
      CAPTURE(how);
      fx_t fx(slow_wire::config());
      auto [a, b] = fx.make_pair({.type = qp_type::uc});
      auto& src = fx.make_buffer(64);
      auto& dst = fx.make_buffer(128);
      std::vector<std::uint8_t> ahead(32, 7);
      auto* own = B::reg_mr(fx.pd, ahead.data(), ahead.size(), access::local_write);
      REQUIRE(fx.post_recv(b, 100, {dst.sge(0, 64)}) == 0);
      REQUIRE(fx.post_recv(b, 101, {dst.sge(64, 64)}) == 0);
      REQUIRE(fx.post_send(a, 1, opcode::send, {{reinterpret_cast<std::uint64_t>(ahead.data()), 32, B::mr_lkey(own)}}) == 0);
      fab(fx).inject({.kind = kind, .src_qp_num = a.num, .count = 1, .delay = 5us});
      REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(0, 32)}) == 0);  // the fault: read now
      if (how == 0) fx.move_to(a, qp_state::err);
      if (how == 1) fx.move_to(a, qp_state::reset);
      REQUIRE(B::dereg_mr(own) == 0);
      fab(fx).advance(1ms);
      CHECK(fx.drain(b.recv_cq).empty());
      if (how != 1) {
        const auto got = fx.drain(a.send_cq);
        REQUIRE(got.size() == 2);
        CHECK(got[0].status == (how == 2 ? wc_status::loc_prot_err : wc_status::wr_flush_err));
        CHECK(got[1].status == wc_status::wr_flush_err);
      }
    }
  }
}

// A WR not read yet when its QP is reset (or destroyed, or moved to ERR) was never sent:
// its buffer, the program's again once the QP is reset, is not read afterwards.
TEST_CASE("fabric: a WRITE still on the wire when its QP is reset or moved to ERR does not land") {
  for (qp_type t : {qp_type::rc, qp_type::uc}) {
    for (qp_state to : {qp_state::reset, qp_state::err}) {
      CAPTURE(t);
      CAPTURE(to);
      slow_wire w(t);
      REQUIRE(w.fx.post_rdma(w.a, 1, opcode::rdma_write, w.src.sge(0, 64), w.dst.addr(), w.dst.rkey()) == 0);
      w.fx.move_to(w.a, to);
      fab(w.fx).advance(1ms);
      CHECK(w.dst.zero(0, 64));
      if (to == qp_state::err) CHECK(w.fx.poll_one(w.a.send_cq).status == wc_status::wr_flush_err);
    }
  }
}

// A destroyed QP's WRITE still on the wire was read from the WQE of the QP that took its
// number (reuse_qp_numbers) when that WQE had the same place and PSN: 4096 bytes from the
// new WR's 8-byte buffer (a heap overflow under ASan), written where the old WR asked,
// and the new WR, taken for its duplicate, completed with SUCCESS and never landed
// (audit 20, F1). A message and its answers are for the QP that sent them.
TEST_CASE("fabric: a destroyed QP's WRITE on the wire is not read from the QP that took its number") {
  rm::fabric_config cfg;
  cfg.latency = 10us;
  cfg.reuse_qp_numbers = true;
  fx_t fx(cfg);
  auto b = fx.make_qp();
  auto raw = [&] {  // destroyed by hand, not by the fixture
    endpoint<B> e;
    e.send_cq = fx.make_cq(16);
    e.recv_cq = e.send_cq;
    e.caps = {16, 16, 1, 1, 0};
    e.qp = B::create_qp(fx.pd, e.send_cq, e.recv_cq, qp_type::rc, e.caps, true);
    e.num = B::qp_num(e.qp);
    return e;
  };
  auto a = raw();
  fx.connect(a, b);
  auto& big = fx.make_buffer(4096);
  auto& small = fx.make_buffer(4096);  // the new WR sends its first 8 bytes
  auto& dst = fx.make_buffer(8192);
  big.fill(5);
  small.fill(7);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, big.sge(0, 4096), dst.addr(0), dst.rkey()) == 0);
  REQUIRE(B::destroy_qp(a.qp) == 0);  // its WRITE still on the wire
  auto a2 = raw();
  REQUIRE(a2.num == a.num);
  fx.bring_up(a2, b.num);  // the same PSN as a's
  fx.on_cleanup([q = a2.qp] { CHECK(B::destroy_qp(q) == 0); });
  REQUIRE(fx.post_rdma(a2, 1, opcode::rdma_write, small.sge(0, 8), dst.addr(4096), dst.rkey()) == 0);
  const auto got = fx.drain(a2.send_cq, 50);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(dst.zero(0, 4096));          // the old WRITE was never read: its QP is gone
  CHECK(dst.holds(7, 4096, 8));      // the new one landed
}

// Timers that fall due together ran in the order of their QPs' addresses, so a second
// run of one seed in the same process (its QPs elsewhere in memory) could take another
// order (audit 20, F5). They run in the order the QPs were made: here the allocator
// hands the requesters the places of three QPs just destroyed, last freed first, so
// their addresses fall in the reverse of their creation order.
TEST_CASE("fabric: timers that fall due together run in the order their QPs were made, not their addresses") {
  fx_t fx;
  auto cq = fx.make_cq(64);
  qp_cap caps{4, 4, 1, 1, 0};
  std::vector<B::qp> gone;
  for (int i = 0; i < 3; ++i) gone.push_back(B::create_qp(fx.pd, cq, cq, qp_type::rc, caps, true));
  for (auto q : gone) REQUIRE(B::destroy_qp(q) == 0);
  std::vector<endpoint<B>> req;
  for (int i = 0; i < 3; ++i) req.push_back(fx.make_qp({}, cq, cq));
  auto& buf = fx.make_buffer(64);
  for (auto& a : req) {
    fx.bring_up(a, 0xFFFFFF, {.timeout = 10, .retry_cnt = 1});  // nobody answers: each ACK timer runs out
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, buf.sge(0, 8), buf.addr(8), buf.rkey()) == 0);
  }
  const auto got = fx.drain(cq, 200);
  REQUIRE(got.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(got[i].status == wc_status::retry_exc_err);
    CHECK(got[i].qp_num == req[i].num);
  }
}

// An RC request that came ahead of the PSN its responder expected (the one before it
// reordered or delayed, nothing lost) was dropped in silence: its requester resent it
// only at its ACK timeout, or never with TIMEOUT 0, and the QP stalled (audit 44). The
// responder NAKs it with a PSN sequence error, once, and the requester resends at once.
TEST_CASE("fabric: an RC request ahead of the expected PSN is NAKed, and resent at once, with TIMEOUT 0 too") {
  for (auto kind : {rm::fault_kind::reorder, rm::fault_kind::delay}) {
    for (auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
      for (std::uint8_t timeout : {std::uint8_t{0}, std::uint8_t{14}}) {
        CAPTURE(kind);
        CAPTURE(static_cast<int>(profile));
        CAPTURE(static_cast<int>(timeout));
        rm::fabric_config c = slow_wire::config();
        c.profile = profile;
        fx_t fx(c);
        link_opts lo;
        lo.timeout = timeout;
        auto [a, b] = fx.make_pair({.type = qp_type::rc}, lo, lo);
        auto& src = fx.make_buffer(64);
        auto& dst = fx.make_buffer(128);
        src.fill(3);
        fab(fx).inject({.kind = kind, .src_qp_num = a.num, .count = 1, .delay = 100us});
        REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 64), dst.addr(0), dst.rkey()) == 0);
        REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, src.sge(0, 64), dst.addr(64), dst.rkey()) == 0);
        fab(fx).advance(std::chrono::milliseconds(5));  // round trips, far below one ACK timeout (67 ms)
        const auto got = fx.drain(a.send_cq);
        REQUIRE(got.size() == 2);
        CHECK(got[0].status == wc_status::success);
        CHECK(got[1].status == wc_status::success);
        CHECK(dst.holds(3, 0, 64));  // a pattern from seed 3, each WRITE's copy
        CHECK(dst.holds(3, 64, 64));
      }
    }
  }
}
