#include "fixture.hpp"

#include <array>
#include <cstring>
#include <span>
#include <map>
#include <optional>
#include <string>

using namespace policy_test;

namespace {
// Receiver `y` with an SRQ and two RC queue pairs on it; sender `x` with one queue pair
// connected to each.
struct srq_setup {
  explicit srq_setup(mock::fabric& fab, srq_attr attr = {.max_wr = 16, .max_sge = 1})
      : x(fab, "mock0"), y(fab, "mock1"), srq(y.pd.create_srq(attr)) {
    auto a1i = x.pd.create_qp<rc>(x.cq, qp_cap{8, 0});
    auto a2i = x.pd.create_qp<rc>(x.cq, qp_cap{8, 0});
    auto b1i = y.pd.create_qp<rc>(y.cq, srq, qp_cap{8, 0});
    auto b2i = y.pd.create_qp<rc>(y.cq, srq, qp_cap{8, 0});
    const auto e1 = a1i.local_endpoint(), e2 = a2i.local_endpoint();
    a1 = std::move(a1i).connect(b1i.local_endpoint());
    a2 = std::move(a2i).connect(b2i.local_endpoint());
    b1 = std::move(b1i).connect(e1);
    b2 = std::move(b2i).connect(e2);
  }
  side x, y;
  shared_receive_queue<B> srq;
  queue_pair<B, rc, signal_all, qp_state::rts> a1, a2;
  queue_pair<B, on_srq<rc>, signal_all, qp_state::rts> b1, b2;
};
}  // namespace

TEST_CASE("shared_receive_queue: two RC queue pairs take receives from one SRQ; completions reach each QP's handler") {
  mock::fabric fab;
  srq_setup s(fab);
  static_assert(std::is_same_v<decltype(s.y.pd.create_qp<rc>(s.y.cq, s.srq, qp_cap{})),
                               queue_pair<B, on_srq<rc>, signal_all, qp_state::init>>);
  CHECK(s.srq.caps().max_wr == 16);
  CHECK(s.b1.caps().max_recv_wr == 0);
  auto src = s.x.pd.allocate<rw_access>(256);
  auto dst = s.y.pd.allocate<rw_access>(4 * 64);
  for (std::uint64_t k = 0; k < 4; ++k) REQUIRE(s.srq.post_recv(dst.local(64 * k, 64), 100 + k).ok());
  std::map<std::uint32_t, std::vector<std::uint64_t>> by_qp;
  s.y.cq.on(s.b1, [&](const completion<B>& c) { by_qp[s.b1.qp_num()].push_back(c.wr_id()); });
  s.y.cq.on(s.b2, [&](const completion<B>& c) { by_qp[s.b2.qp_num()].push_back(c.wr_id()); });
  std::memcpy(src.data(), "one", 4);
  REQUIRE(s.a1.send(src.local(0, 4), 1).ok());
  std::memcpy(src.data() + 64, "two", 4);
  REQUIRE(s.a2.send(src.local(64, 4), 2).ok());
  REQUIRE(s.a1.send(src.local(0, 4), 3).ok());
  CHECK(collect(s.x.cq, 3).size() == 3);
  for (int i = 0; i < 100 && by_qp[s.b1.qp_num()].size() + by_qp[s.b2.qp_num()].size() < 3; ++i)
    (void)s.y.cq.dispatch();
  CHECK(by_qp[s.b1.qp_num()] == std::vector<std::uint64_t>{100, 102});
  CHECK(by_qp[s.b2.qp_num()] == std::vector<std::uint64_t>{101});
  CHECK(std::memcmp(dst.data() + 64, "two", 4) == 0);
  CHECK(s.y.cq.unrouted() == 0);
  CHECK(s.b1.posted_recvs() == 0);  // the SRQ's receives are not the QP's
  CHECK_FALSE(s.b1.in_error());
}

TEST_CASE("shared_receive_queue: a receive CQ reserves the SRQ's max_wr once, not once per queue pair") {
  mock::fabric fab;
  side y(fab, "mock0");
  auto cq = y.dev.create_cq(64);
  auto srq = y.pd.create_srq({.max_wr = 32, .max_sge = 1});
  std::vector<queue_pair<B, on_srq<rc>>> qps;
  for (int i = 0; i < 4; ++i) qps.push_back(y.pd.create_qp<rc>(cq, srq, qp_cap{8, 0}));  // 32 + 4 × 8 = 64
  CHECK(cq.reserved() == 64);
  CHECK_THROWS_WITH_AS((void)y.pd.create_qp<rc>(cq, srq, qp_cap{8, 0}), doctest::Contains("create_qp()"),
                       usage_error);
  qps.pop_back();
  CHECK(cq.reserved() == 56);
  qps.clear();
  CHECK(cq.reserved() == 0);  // the last QP gave the SRQ's share back
  // A second SRQ on the same CQ is counted on its own.
  auto other = y.pd.create_srq({.max_wr = 24, .max_sge = 1});
  auto q1 = y.pd.create_qp<rc>(cq, srq, qp_cap{4, 0});
  auto q2 = y.pd.create_qp<rc>(cq, other, qp_cap{4, 0});
  CHECK(cq.reserved() == 32 + 24 + 8);
}

TEST_CASE("shared_receive_queue: setup misuse is a clear error") {
  mock::fabric fab;
  side y(fab, "mock0");
  CHECK_THROWS_WITH_AS((void)y.pd.create_srq({.max_wr = 0}), doctest::Contains("max_wr 0 is outside 1..16384"),
                       usage_error);
  CHECK_THROWS_WITH_AS((void)y.pd.create_srq({.max_wr = 8, .max_sge = 28}), doctest::Contains("max_srq_sge"),
                       usage_error);
  CHECK_THROWS_WITH_AS((void)y.pd.create_srq({.max_wr = 8, .max_sge = 1, .limit = 9}),
                       doctest::Contains("limit 9 is above max_wr 8"), usage_error);
  auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
  CHECK_THROWS_WITH_AS((void)y.pd.create_qp<rc>(y.cq, srq, qp_cap{8, 8}),
                       doctest::Contains("no receive queue of its own"), usage_error);
  CHECK_THROWS_WITH_AS(srq.arm_limit(9), doctest::Contains("above the SRQ's max_wr 8"), usage_error);
  shared_receive_queue<B> empty;
  CHECK_FALSE(empty);
  CHECK_THROWS_AS((void)y.pd.create_qp<rc>(y.cq, empty, qp_cap{8, 0}), usage_error);
  CHECK_THROWS_AS(empty.arm_limit(1), usage_error);
  auto buf = y.pd.allocate<rw_access>(64);
  CHECK(empty.post_recv(buf.local(), 1).status == post_status::empty_handle);
}

// A queue pair on another PD than its SRQ's was accepted (by the mock, the kernel and
// rdmakit): rxe checks a receive's lkey against the queue pair's PD, the mock and some
// NICs against the SRQ's, so the same program worked on one and failed on the other
// (audit 34, F2). Of another device, the mock refused it (EINVAL) and ibverbs passed it on.
TEST_CASE("shared_receive_queue: a queue pair on another protection domain or device than the SRQ's is refused") {
  mock::fabric fab;
  side y(fab, "mock0"), z(fab, "mock1");
  auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
  auto pd2 = y.dev.create_pd();
  CHECK_THROWS_WITH_AS((void)pd2.create_qp<rc>(y.cq, srq, qp_cap{8, 0}),
                       doctest::Contains("the shared receive queue was created on another protection domain"),
                       usage_error);
  CHECK_THROWS_WITH_AS((void)z.pd.create_qp<rc>(z.cq, srq, qp_cap{8, 0}),
                       doctest::Contains("the shared receive queue was created on another protection domain"),
                       usage_error);
  CHECK(y.cq.attached() == 0);
  auto ok = y.pd.create_qp<rc>(y.cq, srq, qp_cap{8, 0});
  CHECK(y.cq.attached() == 1);
}

TEST_CASE("shared_receive_queue: posting statuses: bad wr_id, rq_full at max_wr, SGEs above max_sge, post_recvs") {
  mock::fabric fab;
  side y(fab, "mock0");
  auto srq = y.pd.create_srq({.max_wr = 4, .max_sge = 1});
  auto buf = y.pd.allocate<rw_access>(6 * 64);
  CHECK(srq.post_recv(buf.local(0, 64), std::uint64_t{1} << 63).status == post_status::bad_wr_id);
  std::vector<local_buffer> bufs;
  for (std::uint32_t k = 0; k < 3; ++k) bufs.push_back(buf.local(64 * k, 64));
  auto r = srq.post_recvs(bufs, 10);
  CHECK(r.ok());
  CHECK(r.posted == 3);
  CHECK(srq.post_recv(buf.local(192, 64), 13).ok());
  auto full = srq.post_recv(buf.local(256, 64), 14);
  CHECK(full.status == post_status::rq_full);
  const local_buffer two[] = {buf.local(256, 32), buf.local(288, 32)};
  auto sg = srq.post_recv(std::span<const local_buffer>(two), 15);  // two SGEs, max_sge 1
  CHECK(sg.status == post_status::backend_error);
  CHECK(sg.err == EINVAL);
  CHECK(sg.rule == post_rule::sge_count);
}

TEST_CASE("shared_receive_queue: the limit event, told apart with raised(); limit() 0 once it fired") {
  mock::fabric fab;
  srq_setup s(fab, {.max_wr = 16, .max_sge = 1, .limit = 2});
  CHECK(s.srq.limit() == 2);
  auto src = s.x.pd.allocate<rw_access>(64);
  auto dst = s.y.pd.allocate<rw_access>(4 * 64);
  for (std::uint64_t k = 0; k < 3; ++k) REQUIRE(s.srq.post_recv(dst.local(64 * k, 64), k).ok());
  REQUIRE(s.a1.send(src.local(0, 8), 1).ok());  // 2 left
  CHECK_FALSE(s.y.dev.next_event());
  REQUIRE(s.a2.send(src.local(0, 8), 2).ok());  // 1 left: below 2
  auto ev = s.y.dev.next_event();
  REQUIRE(ev);
  CHECK(ev->type == async_event_type::srq_limit_reached);
  CHECK(s.srq.raised(*ev));
  CHECK(s.srq.limit() == 0);
  s.srq.arm_limit(1);
  CHECK(s.srq.limit() == 1);
  REQUIRE(s.a1.send(src.local(0, 8), 3).ok());  // 0 left: below 1
  ev = s.y.dev.next_event();
  REQUIRE(ev);
  CHECK(s.srq.raised(*ev));
  CHECK(collect(s.y.cq, 3).size() == 3);
}

TEST_CASE("shared_receive_queue: queue pairs keep the SRQ (and its PD) alive when the handles go first") {
  mock::fabric fab;
  side x(fab, "mock0");
  device<B> dev(fab, "mock1");
  auto cq = dev.create_cq(64);
  std::optional<protection_domain<B>> pd(dev.create_pd());
  std::optional<shared_receive_queue<B>> srq(pd->create_srq({.max_wr = 8, .max_sge = 1}));
  auto dst = pd->allocate<rw_access>(64);
  auto bi = pd->create_qp<rc>(cq, *srq, qp_cap{4, 0});
  REQUIRE(srq->post_recv(dst.local(), 7).ok());
  auto ai = x.pd.create_qp<rc>(x.cq, qp_cap{4, 0});
  const auto ea = ai.local_endpoint();
  auto a = std::move(ai).connect(bi.local_endpoint());
  auto b = std::move(bi).connect(ea);
  srq.reset();  // the handle goes; the QP still takes the receive already posted
  pd.reset();
  auto src = x.pd.allocate<rw_access>(64);
  std::memcpy(src.data(), "kept", 5);
  REQUIRE(a.send(src.local(0, 5), 1).ok());
  auto got = collect(cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[0].wr_id == 7);
  CHECK(got[0].qp_num == b.qp_num());
  CHECK(std::memcmp(dst.data(), "kept", 5) == 0);
  // An SRQ made from a temporary PD handle keeps the PD; a moved-from handle is empty.
  auto srq2 = dev.create_pd().create_srq({.max_wr = 4, .max_sge = 1});
  auto moved = std::move(srq2);
  CHECK(moved);
  CHECK(moved.caps().max_wr == 4);
  CHECK_FALSE(srq2);
  CHECK_THROWS_AS((void)srq2.caps(), usage_error);
}

TEST_CASE("shared_receive_queue: UD queue pairs on an SRQ: receives must hold the GRH; the payload follows it") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
  auto buf = y.pd.allocate<rw_access>(256);
  REQUIRE(srq.post_recv(buf.local(0, 16), 1).ok());  // no UD QP yet: nothing to check against
  auto b = y.pd.create_qp<ud>(y.cq, srq, qp_cap{4, 0}).activate();
  CHECK(srq.post_recv(buf.local(0, 16), 2).status == post_status::recv_too_small);
  static_assert(std::is_same_v<decltype(b), queue_pair<B, on_srq<ud>, signal_all, qp_state::rts>>);
  auto a = x.pd.create_qp<ud>(x.cq, qp_cap{4, 4}).activate();
  auto ah = x.pd.create_ah(b.local_endpoint());
  auto src = x.pd.allocate<rw_access>(64);
  std::memcpy(src.data(), "datagram", 9);
  // The 16-byte receive posted first takes the first datagram and fails, the next one fits.
  REQUIRE(srq.post_recv(buf.local(64, 128), 3).ok());
  REQUIRE(a.send(ah.to(b.qp_num()), src.local(0, 9), 10).ok());
  REQUIRE(a.send(ah.to(b.qp_num()), src.local(0, 9), 11).ok());
  CHECK(collect(x.cq, 2).size() == 2);
  std::vector<seen> got = collect(y.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 1);
  CHECK(got[0].status == wc_status::loc_len_err);
  CHECK(got[1].wr_id == 3);
  CHECK(got[1].status == wc_status::success);
  CHECK(got[1].payload_offset == grh_bytes);
  CHECK(std::memcmp(buf.data() + 64 + grh_bytes, "datagram", 9) == 0);
  CHECK_FALSE(b.in_error());  // a datagram too large costs its receive, not the QP
}

// A UD receive's completion polled after its queue pair was destroyed (rxe leaves it in
// the CQ) was made with payload offset 0: the GRH read as the payload, and payload_len()
// 40 bytes too long. The destroyed queue pair's offset is kept until the CQ is empty.
TEST_CASE("shared_receive_queue: a UD receive of a destroyed queue pair still has its payload after the GRH") {
  for (const bool on_srq_qp : {false, true}) {
    CAPTURE(on_srq_qp);
    mock::fabric_config cfg;
    cfg.profile = mock::device_profile::rxe;
    mock::fabric fab(cfg);
    side x(fab, "mock0"), y(fab, "mock1");
    auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
    auto buf = y.pd.allocate<rw_access>(256);
    auto a = x.pd.create_qp<ud>(x.cq, qp_cap{4, 4}).activate();
    auto src = x.pd.allocate<rw_access>(64);
    std::memcpy(src.data(), "datagram", 9);
    std::optional<queue_pair<B, ud, signal_all, qp_state::rts>> own;
    std::optional<queue_pair<B, on_srq<ud>, signal_all, qp_state::rts>> shared;
    endpoint to;
    if (on_srq_qp) {
      shared.emplace(y.pd.create_qp<ud>(y.cq, srq, qp_cap{4, 0}).activate());
      REQUIRE(srq.post_recv(buf.local(0, 128), 1).ok());
      to = shared->local_endpoint();
    } else {
      auto b = y.pd.create_qp<ud>(y.cq, qp_cap{4, 4});
      REQUIRE(b.post_recv(buf.local(0, 128), 1).ok());
      own.emplace(std::move(b).activate());
      to = own->local_endpoint();
    }
    auto ah = x.pd.create_ah(to);
    REQUIRE(a.send(ah.to(to.qpn), src.local(0, 9), 10).ok());
    CHECK(collect(x.cq, 1).size() == 1);
    own.reset();
    shared.reset();
    std::vector<seen> got = collect(y.cq, 1);
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == wc_status::success);
    CHECK(got[0].payload_offset == grh_bytes);
    CHECK(got[0].byte_len - got[0].payload_offset == 9);
  }
}

// The GRH rule used to outlive the UD queue pairs: once one had been on the SRQ, a
// receive under 40 bytes was refused (recv_too_small) for RC queue pairs for good.
TEST_CASE("shared_receive_queue: receives must hold the GRH only while a UD queue pair is on the SRQ") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
  auto buf = y.pd.allocate<rw_access>(256);
  auto src = x.pd.allocate<rw_access>(64);
  std::optional<queue_pair<B, on_srq<ud>, signal_all, qp_state::rts>> u1, u2;
  u1.emplace(y.pd.create_qp<ud>(y.cq, srq, qp_cap{4, 0}).activate());
  u2.emplace(y.pd.create_qp<ud>(y.cq, srq, qp_cap{4, 0}).activate());
  CHECK(srq.post_recv(buf.local(0, 16), 1).status == post_status::recv_too_small);
  u1.reset();
  CHECK(srq.post_recv(buf.local(0, 16), 2).status == post_status::recv_too_small);  // u2 is still there
  auto again = std::move(*u2).reset();  // a UD queue pair again (the old one retired: nothing outstanding)
  CHECK(srq.post_recv(buf.local(0, 16), 3).status == post_status::recv_too_small);
  again = {};
  u2.reset();
  // No UD queue pair left: an RC queue pair's small receive is posted, its data at offset 0.
  REQUIRE(srq.post_recv(buf.local(0, 16), 4).ok());
  const std::array<local_buffer, 1> list{buf.local(16, 16)};
  REQUIRE(srq.post_recv(std::span<const local_buffer>(list), 6).ok());
  REQUIRE(srq.post_recvs(std::span<const local_buffer>(list), 7).ok());
  auto ri = y.pd.create_qp<rc>(y.cq, srq, qp_cap{4, 0});
  auto a = std::move(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4})).connect(ri.local_endpoint());
  auto r = std::move(ri).connect(a.local_endpoint());
  std::memcpy(src.data(), "tiny", 5);
  REQUIRE(a.send(src.local(0, 5), 5).ok());
  CHECK(collect(x.cq, 1).size() == 1);
  auto got = collect(y.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 4);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[0].payload_offset == 0);
  CHECK(std::memcmp(buf.data(), "tiny", 5) == 0);
}

TEST_CASE("shared_receive_queue: reset() of a queue pair on an SRQ gives a fresh one on the same SRQ, reserved once") {
  mock::fabric fab;
  srq_setup s(fab);
  const auto reserved = s.y.cq.reserved();
  CHECK(reserved == 16 + 8 + 8);
  auto src = s.x.pd.allocate<rw_access>(64);
  auto dst = s.y.pd.allocate<rw_access>(2 * 64);
  REQUIRE(s.a1.write(src.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 1).ok());  // b1 goes to ERR
  (void)collect(s.x.cq, 1);
  (void)collect(s.y.cq, 1);
  auto fresh = std::move(s.b1).reset();
  static_assert(std::is_same_v<decltype(fresh), queue_pair<B, on_srq<rc>, signal_all, qp_state::init>>);
  CHECK(s.y.cq.reserved() == reserved);
  auto fresh_a = std::move(s.a1).reset();
  const auto ea = fresh_a.local_endpoint();
  auto a = std::move(fresh_a).connect(fresh.local_endpoint());
  auto b = std::move(fresh).connect(ea);
  REQUIRE(s.srq.post_recv(dst.local(0, 64), 5).ok());
  REQUIRE(a.send(src.local(0, 8), 2).ok());
  auto got = collect(s.y.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[0].qp_num == b.qp_num());
  CHECK(got[0].wr_id == 5);
}

namespace {
// As rxe: receiver `y` with a CQ of 5 entries (granted 7), exactly what one RC queue pair
// of send depth 4 on an SRQ of 3 (which takes 3) reserves; `make_b()` connects one to a
// sender on `x`.
struct rxe_srq_rig {
  static mock::fabric_config rxe() {
    mock::fabric_config cfg;
    cfg.profile = mock::device_profile::rxe;
    return cfg;
  }
  mock::fabric fab{rxe()};
  side x{fab, "mock0"}, y{fab, "mock1"};
  completion_queue<B> cq = y.dev.create_cq(5);
  shared_receive_queue<B> srq = y.pd.create_srq({.max_wr = 3, .max_sge = 1});
  memory_region<B, rw_access> src = x.pd.allocate<rw_access>(64);
  memory_region<B, rw_access> dst = y.pd.allocate<rw_access>(4 * 64);
  queue_pair<B, rc, signal_all, qp_state::rts> a;

  queue_pair<B, on_srq<rc>, signal_all, qp_state::rts> make_b() {
    auto ai = x.pd.create_qp<rc>(x.cq, qp_cap{4, 0});
    auto bi = y.pd.create_qp<rc>(cq, srq, qp_cap{4, 0});  // 4 + the SRQ's 3: the CQ's 7
    const auto ea = ai.local_endpoint();
    a = std::move(ai).connect(bi.local_endpoint());
    return std::move(bi).connect(ea);
  }
  /// `n` receives posted to the SRQ and taken by `n` SENDs from `a`, whose completions
  /// are polled; the receives' completions are left in `cq`.
  void receive(std::uint64_t n) {
    for (std::uint64_t k = 0; k < n; ++k) REQUIRE(srq.post_recv(dst.local(64 * k, 64), 100 + k).ok());
    for (std::uint64_t k = 0; k < n; ++k) REQUIRE(a.send(src.local(0, 8), k).ok());
    CHECK(collect(x.cq, n).size() == n);
  }
};
}  // namespace

// The last queue pair of an SRQ on a CQ gave the SRQ's max_wr back when destroyed, though
// rxe (and the mock as rxe) leaves its receive completions in the CQ: a queue pair
// created in its place could overflow the CQ. They now count in flushing(), as a
// destroyed queue pair's own WRs do, until polled or until a poll finds the CQ empty.
TEST_CASE("shared_receive_queue: the last queue pair of an SRQ on a CQ, destroyed, keeps the SRQ's room until polled") {
  rxe_srq_rig r;
  REQUIRE(r.cq.capacity() == 7);  // 5 asked: rxe grants 2^k - 1 (create.grants_rounded_up)
  std::uint32_t gone = 0;
  {
    auto b = r.make_b();
    CHECK(r.cq.reserved() == 7);
    r.receive(2);
    gone = b.qp_num();
  }  // b destroyed with its two receive completions in the CQ
  CHECK(r.cq.reserved() == 0);
  CHECK(r.cq.flushing() == 3);
  CHECK_THROWS_AS((void)r.y.pd.create_qp<rc>(r.cq, r.srq, qp_cap{4, 0}), usage_error);
  const auto left = collect(r.cq, 2);
  REQUIRE(left.size() == 2);
  CHECK(left[0].qp_num == gone);
  // Up to max_wr were counted; the poll that returned these two drained the CQ (fewer
  // than it asked for), so the third was never there.
  CHECK(r.cq.flushing() == 0);
  CHECK(r.cq.poll([](const auto&) {}) == 0);
  CHECK(r.cq.flushing() == 0);
  auto again = r.y.pd.create_qp<rc>(r.cq, r.srq, qp_cap{4, 0});
  CHECK(r.cq.reserved() == 7);
}

// A server whose CQ is never found empty (traffic of other connections: each poll
// returns what came, never nothing) could not make a queue pair on it again: the room of
// a destroyed SRQ queue pair's completions came back only at a poll that returned none
// (audit 26, F6: "CQ too small" at the third connection). A poll after the destroy that
// returned fewer than it asked drained the CQ just as well: once the batches polled are
// delivered, the room is free for the next create_qp.
TEST_CASE("shared_receive_queue: a poll that drained the CQ after a destroy gives the room back, none empty") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = y.dev.create_cq(9);  // the busy pair's 2 and b's 4 + the SRQ's 3: no room for a destroyed b's 3
  auto srq = y.pd.create_srq({.max_wr = 3, .max_sge = 1});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(4 * 64);
  auto connect = [](auto& from, auto& to) {  // (to's INIT handle, from's): both RTS
    const auto e = from.local_endpoint();
    auto f = std::move(from).connect(to.local_endpoint());
    return std::pair{std::move(f), std::move(to).connect(e)};
  };
  auto busy_x = x.pd.create_qp<rc>(x.cq, qp_cap{2, 0});
  auto busy_y = y.pd.create_qp<rc>(cq, qp_cap{2, 0});
  auto [bx, by] = connect(busy_x, busy_y);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    {
      auto ai = x.pd.create_qp<rc>(x.cq, qp_cap{4, 0});
      auto bi = y.pd.create_qp<rc>(cq, srq, qp_cap{4, 0});
      auto [a, b] = connect(ai, bi);
      for (std::uint64_t k = 0; k < 2; ++k) REQUIRE(srq.post_recv(dst.local(64 * k, 64), 100 + k).ok());
      for (std::uint64_t k = 0; k < 2; ++k) REQUIRE(a.send(src.local(0, 8), k).ok());
      CHECK(collect(x.cq, 2).size() == 2);
      CHECK(collect(cq, 2).size() == 2);
    }  // b destroyed: its SRQ's 3 held
    REQUIRE(by.write(dst.local(0, 8), src.remote().sub(0, 8), 7).ok());
    CHECK(cq.poll([](const auto&) {}) == 1);  // the busy pair's: fewer than a batch, not none
  }
}

TEST_CASE("shared_receive_queue: an SRQ never posted to keeps no room once its last queue pair is destroyed") {
  mock::fabric fab;
  side y(fab, "mock0");
  auto cq = y.dev.create_cq(5);
  auto srq = y.pd.create_srq({.max_wr = 4, .max_sge = 1});
  { auto b = y.pd.create_qp<rc>(cq, srq, qp_cap{1, 0}); }
  CHECK(cq.flushing() == 0);
  auto again = y.pd.create_qp<rc>(cq, srq, qp_cap{1, 0});
  CHECK(cq.reserved() == 5);
}

// reset() gives the SRQ's share to the new queue pair: the old one, released with
// receives of the SRQ completed and unpolled, must not hold it apart as a destroyed last
// queue pair does (on a CQ sized for one queue pair, reset() would then be refused).
TEST_CASE("shared_receive_queue: reset() after SRQ traffic keeps the SRQ's share for the new queue pair") {
  rxe_srq_rig r;
  auto b = r.make_b();
  r.receive(1);
  auto fresh = std::move(b).reset();  // the receive's completion is still in the CQ
  CHECK(r.cq.reserved() == 7);
  CHECK(r.cq.flushing() == 0);
  const auto got = collect(r.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 100);
}

// A queue pair on an SRQ was released at reset() unless it had signaled sends to come:
// its receives are the SRQ's, so none counted. A message it had taken, its completion
// not yet polled, then skipped the handler set with on() (rxe: unrouted), or was lost
// with the queue pair (a device that cleans the CQ at destroy_qp, the default profile).
TEST_CASE("shared_receive_queue: reset() keeps a queue pair whose SRQ receives may be in the CQ, for its handler") {
  for (const auto profile : {mock::device_profile::spec, mock::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    mock::fabric_config cfg;
    cfg.profile = profile;
    cfg.devices = mock::default_devices();
    cfg.devices[1].limits.max_qp = 3;  // b1, b2 and one kept by reset()
    mock::fabric fab(cfg);
    srq_setup s(fab);
    auto src = s.x.pd.allocate<rw_access>(64);
    auto dst = s.y.pd.allocate<rw_access>(2 * 64);
    REQUIRE(s.srq.post_recv(dst.local(0, 64), 100).ok());
    REQUIRE(s.srq.post_recv(dst.local(64, 64), 101).ok());
    std::vector<std::uint64_t> handled;
    s.y.cq.on(s.b1, [&](const completion<B>& c) {
      CHECK(c.ok());
      handled.push_back(c.wr_id());
    });
    std::memcpy(src.data(), "kept", 4);
    REQUIRE(s.a1.send(src.local(0, 4), 1).ok());
    REQUIRE(collect(s.x.cq, 1).size() == 1);  // delivered: its receive completion is in y's CQ
    const std::uint32_t old_qpn = s.b1.qp_num();
    auto fresh = std::move(s.b1).reset();
    for (int i = 0; i < 100 && handled.empty(); ++i) (void)s.y.cq.dispatch();
    CHECK(handled == std::vector<std::uint64_t>{100});
    CHECK(s.y.cq.unrouted() == 0);
    CHECK(std::memcmp(dst.data(), "kept", 4) == 0);
    // Until a poll finds the CQ empty the old one is kept: a second reset would need a
    // fourth QP. After it, the next reset lets the old one go.
    (void)s.y.cq.dispatch();
    auto again = std::move(fresh).reset();
    CHECK(again.qp_num() != old_qpn);
    CHECK(again);
  }
}

// A queue pair replaced on an SRQ was let go only by a poll that found its receive CQ
// empty: a busy server's CQ, never found empty, kept one more native queue pair per
// reset, until reset() failed for the device's max_qp (audit 47, O1). A poll that
// drains the CQ (fewer completions than it asked) proves the same, as it does for a
// destroyed queue pair's records.
TEST_CASE("shared_receive_queue: a reset queue pair on an SRQ is let go after a poll that drained the CQ, though never empty") {
  mock::fabric_config cfg;
  cfg.devices = mock::default_devices();
  cfg.devices[1].limits.max_qp = 3;  // b1, b2 and one kept by reset()
  mock::fabric fab(cfg);
  srq_setup s(fab);
  auto src = s.x.pd.allocate<rw_access>(64);
  auto dst = s.y.pd.allocate<rw_access>(4 * 64);
  for (std::uint64_t k = 0; k < 4; ++k) REQUIRE(s.srq.post_recv(dst.local(64 * k, 64), 100 + k).ok());
  REQUIRE(s.a1.send(src.local(0, 4), 1).ok());
  REQUIRE(collect(s.x.cq, 1).size() == 1);  // b1's receive completion is in y's CQ
  auto fresh = std::move(s.b1).reset();     // kept: that completion may be its
  REQUIRE(s.a2.send(src.local(0, 4), 2).ok());
  REQUIRE(collect(s.x.cq, 1).size() == 1);  // and b2's behind it
  CHECK(s.y.cq.dispatch() == 2);            // both, fewer than a batch: drained, never empty
  auto again = std::move(fresh).reset();    // lets the old one go: no fourth queue pair needed
  CHECK(again);
  CHECK(s.y.cq.unrouted() == 2);
}

// A handler's nested poll found the CQ empty while the outer batch still held a receive
// completion of a queue pair replaced by reset() (kept for its SRQ receives): that empty
// poll was taken as proof that none of its completions was left, the handler's next
// reset let it go, and the outer batch's completion reached the fallback.
TEST_CASE("shared_receive_queue: a nested empty poll does not let a reset queue pair go while the outer batch holds its receive") {
  mock::fabric fab;
  srq_setup s(fab);
  auto src = s.x.pd.allocate<rw_access>(64);
  auto dst = s.y.pd.allocate<rw_access>(2 * 64);
  REQUIRE(s.srq.post_recv(dst.local(0, 64), 100).ok());
  REQUIRE(s.srq.post_recv(dst.local(64, 64), 101).ok());
  REQUIRE(s.a2.send(src.local(0, 4), 1).ok());  // b2's receive, first in y's CQ
  REQUIRE(s.a1.send(src.local(0, 4), 2).ok());  // then b1's
  REQUIRE(collect(s.x.cq, 2).size() == 2);
  std::vector<std::uint64_t> to_old;
  s.y.cq.on(s.b1, [&](const completion<B>& c) { to_old.push_back(c.wr_id()); });
  std::optional<queue_pair<B, on_srq<rc>, signal_all, qp_state::init>> fresh(std::move(s.b1).reset());
  s.y.cq.on(s.b2, [&](const completion<B>&) {
    CHECK(s.y.cq.poll() == 0);  // the outer batch took both
    fresh.emplace(std::move(*fresh).reset());
  });
  int fallback = 0;
  CHECK(s.y.cq.dispatch([&](const completion<B>&) { ++fallback; }) == 2);
  CHECK(to_old == std::vector<std::uint64_t>{101});
  CHECK(fallback == 0);
  CHECK(s.y.cq.unrouted() == 0);
}

// A queue pair on an SRQ whose receives did not fit its CQ was told to lower its
// max_recv_wr, which is 0 there: the receives are the SRQ's (audit 48).
TEST_CASE("shared_receive_queue: a CQ too small for the SRQ's receives says they are the SRQ's") {
  mock::fabric fab;
  side y(fab, "mock1");
  auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
  auto small = y.dev.create_cq(8);
  CHECK_THROWS_WITH_AS((void)y.pd.create_qp<rc>(small, srq, qp_cap{1, 0}),
                       doctest::Contains("1 send WR + the 8 receives of its shared receive queue"), usage_error);
}

// rxe writes back an SRQ's max_wr as asked but takes its ring's 2^k - 1 receives (the
// mock's rxe profile too): the receive CQs reserved only the max_wr asked, so a CQ the
// library accepted overflowed, a completion was lost and its queue pair answered sq_full
// for good (seen in the guest, found by an audit). caps() is now what the SRQ takes, and
// CQ room and arm_limit() follow it.
TEST_CASE("shared_receive_queue: caps() is what the device takes (rxe: more than asked); CQs keep room for it") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;
  mock::fabric fab(cfg);
  side y(fab, "mock1");
  auto srq = y.pd.create_srq({.max_wr = 8, .max_sge = 1});
  CHECK(srq.caps().max_wr == 15);  // 16 slots, one kept empty
  auto buf = y.pd.allocate<rw_access>(64);
  std::uint32_t posted = 0;
  while (posted < 100 && srq.post_recv(buf.local(), posted).ok()) ++posted;
  CHECK(posted == srq.caps().max_wr);
  auto small = y.dev.create_cq(9);  // granted 15: the SRQ's receives fill it, no room for a send
  CHECK_THROWS_WITH_AS((void)y.pd.create_qp<rc>(small, srq, qp_cap{1, 0}), doctest::Contains("too small"),
                       usage_error);
  auto big = y.dev.create_cq(16);  // granted 31
  CHECK_NOTHROW((void)y.pd.create_qp<rc>(big, srq, qp_cap{1, 0}));
  CHECK_THROWS_AS(srq.arm_limit(16), usage_error);
  CHECK_NOTHROW(srq.arm_limit(15));
}
