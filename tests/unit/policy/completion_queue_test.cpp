#include "fixture.hpp"

#include <cerrno>
#include <chrono>
#include <map>

using namespace policy_test;

TEST_CASE("CQ capacity is accounted per attached QP; overflowing requests are refused") {
  mock::fabric fab;
  side x(fab, "mock0", 100);
  CHECK(x.cq.capacity() == 100);
  auto q1 = x.pd.create_qp<rc>(x.cq, qp_cap{40, 40});
  CHECK(x.cq.reserved() == 80);
  CHECK(x.cq.attached() == 1);
  try {
    auto q2 = x.pd.create_qp<uc>(x.cq, qp_cap{30, 10});
    FAIL("a QP that could overflow the CQ was created");
  } catch (const usage_error& e) {  // rdmakit's own accounting: no verb was called
    std::string w = e.what();
    CHECK(w.find("CQ of 100 entries is too small for a UC queue pair of 30 send + 10 receive WRs") !=
          std::string::npos);
    CHECK(w.find("80 entries already promised to 1 attached queue pair") != std::string::npos);
    CHECK(w.find("create it with at least 120") != std::string::npos);
  }
  CHECK(x.cq.reserved() == 80);  // the refused QP left nothing behind
  q1 = {};
  CHECK(x.cq.reserved() == 0);
  CHECK(x.cq.attached() == 0);
  CHECK_NOTHROW(x.pd.create_qp<uc>(x.cq, qp_cap{30, 10}));
}

TEST_CASE("a shared CQ routes every completion to its QP by qp_num") {
  mock::fabric fab;
  side x(fab, "mock0", 256), y(fab, "mock1", 256);
  // Two QPs on x share x.cq; their peers on y share y.cq.
  auto p1 = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 8});
  auto p2 = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 8});
  CHECK(x.cq.attached() == 2);
  CHECK(x.cq.reserved() == 24);
  auto src = x.pd.allocate<rw_access>(256);
  auto dst = y.pd.allocate<rw_access>(256);

  std::map<std::uint32_t, std::vector<std::uint64_t>> by_qp;
  std::vector<std::uint64_t> h1, h2;
  x.cq.on(p1.a, [&](const completion<B>& c) { h1.push_back(c.wr_id()); });
  x.cq.on(p2.a, [&](const completion<B>& c) { h2.push_back(c.wr_id()); });

  for (int round = 0; round < 10; ++round) {
    // Both QPs fill their SQs (the same wr_ids on purpose: only qp_num tells them apart).
    for (std::uint64_t id = 0; id < 4; ++id) {
      REQUIRE(p1.a.write(src.local(0, 8), dst.remote(), id).ok());
      REQUIRE(p2.a.write(src.local(8, 8), dst.remote().sub(8, 8), id).ok());
    }
    CHECK(p1.a.send_credits() == 0);
    CHECK(p2.a.send_credits() == 0);
    for (int i = 0; i < 10 && (p1.a.send_credits() < 4 || p2.a.send_credits() < 4); ++i) (void)x.cq.dispatch();
    // Each QP got its own credits back from its own completions.
    CHECK(p1.a.send_credits() == 4);
    CHECK(p2.a.send_credits() == 4);
  }
  CHECK(h1.size() == 20);  // every second WR is signaled
  CHECK(h2.size() == 20);
  CHECK(x.cq.unrouted() == 0);
}

// The routed poll finds a completion's queue pair in a direct-mapped cache by the low
// bits of its number (cq_block::route) before the sorted routes: more queue pairs than
// its slots share some, and a destroyed queue pair's completions, polled after another
// was made (maybe with its slot or number), must reach neither that one nor any other.
TEST_CASE("a shared CQ of more queue pairs than route slots, one destroyed and replaced, routes by qp_num") {
  for (auto profile : {mock::device_profile::spec, mock::device_profile::rxe}) {
  CAPTURE(profile == mock::device_profile::rxe);
  mock::fabric_config cfg;
  cfg.profile = profile;
  mock::fabric fab(cfg);
  side x(fab, "mock0", 1024), y(fab, "mock1", 1024);
  constexpr int k = static_cast<int>(detail::cq_block<B>::route_slot_count) + 4;  // more than its route slots
  std::vector<qp_pair<rc>> pairs;
  for (int i = 0; i < k; ++i) pairs.push_back(make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4}));
  auto src = x.pd.allocate<rw_access>(256);
  auto dst = y.pd.allocate<rw_access>(256);
  std::map<std::uint32_t, int> owner;  // qp_num -> index
  auto renumber = [&] {
    owner.clear();
    for (int i = 0; i < k; ++i) owner[pairs[static_cast<std::size_t>(i)].a.qp_num()] = i;
  };
  renumber();
  std::vector<int> got(k, 0);
  int strays = 0;
  auto poll_all = [&](std::size_t n) {
    std::size_t seen = 0;
    for (int i = 0; i < 10000 && seen < n; ++i)
      seen += static_cast<std::size_t>(x.cq.poll([&](const completion<B>& c) {
        const auto it = owner.find(c.qp_num());
        if (it == owner.end() || c.wr_id() != static_cast<std::uint64_t>(it->second)) {
          ++strays;
          return;
        }
        ++got[static_cast<std::size_t>(it->second)];
      }));
  };
  for (int round = 0; round < 3; ++round) {
    for (int j = 0; j < 4; ++j)  // interleaved: one WR of each queue pair in turn
      for (int i = 0; i < k; ++i)
        REQUIRE(pairs[static_cast<std::size_t>(i)].a.write(src.local(0, 8), dst.remote(), static_cast<std::uint64_t>(i)).ok());
    poll_all(4 * k);
    for (int i = 0; i < k; ++i) CHECK(pairs[static_cast<std::size_t>(i)].a.send_credits() == 4);
  }
  CHECK(strays == 0);
  for (int i = 0; i < k; ++i) CHECK(got[static_cast<std::size_t>(i)] == 12);
  // Queue pair 3's completions stay in the CQ while it is destroyed and a new one made.
  for (int i = 0; i < k; ++i)
    REQUIRE(pairs[static_cast<std::size_t>(i)].a.write(src.local(0, 8), dst.remote(), static_cast<std::uint64_t>(i)).ok());
  const std::uint64_t unrouted = x.cq.unrouted();
  pairs[3] = qp_pair<rc>{};  // destroyed first: the new one may take its number (as mlx5 does)
  pairs[3] = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  const std::uint32_t new_qpn = pairs[3].a.qp_num();
  renumber();
  owner.erase(new_qpn);  // nothing polled now is the new queue pair's: a stray if routed there
  poll_all(k);  // (k - 1 when the device dropped the destroyed one's: polls on to the limit)
  // The destroyed queue pair's completion, if the device left it in the CQ, is unrouted
  // (no queue pair named), whatever number or slot the new one took.
  CHECK(strays <= 1);
  CHECK(x.cq.unrouted() == unrouted + static_cast<std::uint64_t>(strays));
  CHECK(pairs[3].a.send_credits() == 4);
  for (int i = 0; i < k; ++i)
    if (i != 3) CHECK(pairs[static_cast<std::size_t>(i)].a.send_credits() == 4);
  }
}

TEST_CASE("a poll batch is credited at once only when all of it is the cached QP's successes") {
  mock::fabric fab;
  side x(fab, "mock0", 256), y(fab, "mock1", 256);
  auto p1 = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto p2 = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto drain = [&] {
    int got = 0;
    for (int i = 0; i < 20; ++i) got += x.cq.drain([](const completion<B>& c) { CHECK(c.ok()); });
    return got;
  };
  // p2's completion fills the CQ's one-entry route cache.
  REQUIRE(p2.a.write(src.local(), dst.remote(), 1).ok());
  REQUIRE(drain() == 1);

  SUBCASE("a batch mixing two live QPs credits each its own") {
    for (std::uint64_t id = 0; id < 2; ++id) REQUIRE(p1.a.write(src.local(), dst.remote(), id).ok());
    for (std::uint64_t id = 0; id < 3; ++id) REQUIRE(p2.a.write(src.local(), dst.remote(), id).ok());
    CHECK(drain() == 5);
    CHECK(p1.a.send_credits() == 4);
    CHECK(p2.a.send_credits() == 4);
    CHECK(x.cq.unrouted() == 0);
  }
  SUBCASE("a failure among the cached QP's completions is accounted one by one") {
    auto other_pd = x.dev.create_pd();
    auto foreign = other_pd.allocate<rw_access>(64);  // LOC_PROT_ERR on this QP
    REQUIRE(p2.a.write(src.local(), dst.remote(), 1).ok());
    REQUIRE(p2.a.write(foreign.local(), dst.remote(), 2).ok());
    int failed = 0;
    for (int i = 0; i < 20; ++i) (void)x.cq.drain([&](const completion<B>& c) { failed += !c.ok(); });
    CHECK(failed == 1);
    CHECK(p2.a.in_error());
    CHECK(p2.a.first_error() == wc_status::loc_prot_err);
    CHECK(p2.a.write(src.local(), dst.remote(), 3).status == post_status::qp_error);
    CHECK(p1.a.write(src.local(), dst.remote(), 4).ok());  // the other QP is untouched
  }
}

TEST_CASE("a sole QP's batch is checked whole: a failure in its last completion is seen at any batch size") {
  // The sole-QP path reads the statuses four at a time, then the rest one by one: a
  // failure only in the batch's last completion exercises every tail length.
  for (int n = 1; n <= 9; ++n) {
    CAPTURE(n);
    mock::fabric fab;
    side x(fab, "mock0", 64), y(fab, "mock1", 64);
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 4});
    auto src = x.pd.allocate<rw_access>(64);
    auto dst = y.pd.allocate<rw_access>(64);
    auto other_pd = x.dev.create_pd();
    auto foreign = other_pd.allocate<rw_access>(64);  // LOC_PROT_ERR on this QP
    for (int i = 0; i + 1 < n; ++i) REQUIRE(p.a.write(src.local(), dst.remote(), i).ok());
    REQUIRE(p.a.write(foreign.local(), dst.remote(), n).ok());
    int got = 0;
    for (int i = 0; i < 100 && got == 0; ++i) got = x.cq.poll();
    REQUIRE(got == n);  // one batch
    CHECK(p.a.in_error());
    CHECK(p.a.first_error() == wc_status::loc_prot_err);
  }
}

TEST_CASE("poll() and wait() without a handler give the credits back; a failure still shows on the QP") {
  mock::fabric fab;
  side x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto p = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  for (std::uint64_t id = 0; id < 4; ++id) REQUIRE(p.a.write(src.local(), dst.remote(), id).ok());
  CHECK(p.a.send_credits() == 0);
  int got = 0;
  for (int i = 0; i < 20 && got < 2; ++i) got += x.cq.poll();
  CHECK(got == 2);  // the two signaled WRs
  CHECK(p.a.send_credits() == 4);
  CHECK(x.cq.poll() == 0);

  auto other_pd = x.dev.create_pd();
  auto foreign = other_pd.allocate<rw_access>(64);
  REQUIRE(p.a.write(src.local(), dst.remote(), 5).ok());
  REQUIRE(p.a.write(foreign.local(), dst.remote(), 6).ok());  // signaled: the 2nd of a run
  const wait_result r = x.cq.wait(std::chrono::milliseconds{1000});
  CHECK(r.count() == 1);
  CHECK(p.a.in_error());
  CHECK(p.a.first_error() == wc_status::loc_prot_err);
  CHECK(p.a.write(src.local(), dst.remote(), 7).status == post_status::qp_error);
  CHECK(completion_queue<B>{}.wait().error() == EBADF);
}

namespace {
// A policy of the user's own that drains, then arms before it returns (an edge-triggered
// style): its arm() comes after the handler ran.
struct drain_then_arm {
  static constexpr std::string_view name = "drain_then_arm";
  static constexpr int batch = 1;
  static constexpr bool needs_channel = true;
  static constexpr unsigned ack_batch = 1;
  static inline int arm_result = -1, wait_result = -1;
  template <class Ops>
  static int wait(Ops& ops, std::chrono::milliseconds timeout) noexcept(noexcept(ops.poll())) {
    int total = 0;
    for (int n; (n = ops.poll()) > 0;) total += n;
    arm_result = ops.arm();
    wait_result = ops.wait_event(timeout);
    return total;
  }
};
static_assert(polling<drain_then_arm>);
}  // namespace

// A handler may move the CQ's handle away (docs/polling.md); the policy's next poll then
// says EBADF, and its arm() and wait_event() dereferenced the empty handle (audit 42).
TEST_CASE("a policy's arm() and wait_event() after its handler moved the CQ away answer EBADF") {
  mock::fabric fab;
  device<B> dx(fab, "mock0"), dy(fab, "mock1");
  auto pdx = dx.create_pd();
  auto pdy = dy.create_pd();
  auto cq = dx.create_cq<drain_then_arm>(16);
  auto cqy = dy.create_cq(16);
  auto p = make_pair<rc, signal_all>(pdx, cq, pdy, cqy, qp_cap{4, 4});
  auto src = pdx.allocate<rw_access>(64);
  auto dst = pdy.allocate<rw_access>(64);
  REQUIRE(p.a.write(src.local(), dst.remote(), 1).ok());
  REQUIRE(p.a.write(src.local(), dst.remote(), 2).ok());
  completion_queue<B, drain_then_arm> kept;
  (void)cq.wait([&](const completion<B>&) { if (cq) kept = std::move(cq); }, std::chrono::milliseconds{5});
  CHECK(drain_then_arm::arm_result == EBADF);
  CHECK(drain_then_arm::wait_result == EBADF);
  CHECK_FALSE(cq);
  CHECK(kept);
}

TEST_CASE("dispatch: completions of a QP without a handler go to the fallback (or are counted)") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  REQUIRE(p.a.write(src.local(), dst.remote(), 1).ok());
  int fallback = 0;
  for (int i = 0; i < 10 && fallback == 0; ++i) (void)x.cq.dispatch([&](const completion<B>&) { ++fallback; });
  CHECK(fallback == 1);
  REQUIRE(p.a.write(src.local(), dst.remote(), 2).ok());
  for (int i = 0; i < 10 && x.cq.unrouted() == 0; ++i) (void)x.cq.dispatch();
  CHECK(x.cq.unrouted() == 1);
  CHECK(p.a.send_credits() == 4);  // accounting happens whether or not a handler exists
  auto other = y.dev.create_cq(8);
  CHECK_THROWS_AS(other.on(p.a, [](const completion<B>&) {}), usage_error);
}

// One handler a queue pair takes both its CQs' completions. Set through the send CQ and
// then through the receive CQ, the second replaced the first for both: send completions
// reached the receive handler, silently (audit 14). Now refused.
TEST_CASE("on(): one handler per queue pair, for both its CQs; on() through the other CQ is refused") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto scq = x.dev.create_cq(16);
  auto rcq = x.dev.create_cq(16);
  auto a0 = x.pd.create_qp<rc>(scq, rcq, qp_cap{4, 4});
  auto b0 = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  const auto ea = a0.local_endpoint();
  auto a = std::move(a0).connect(b0.local_endpoint());
  auto b = std::move(b0).connect(ea);
  auto mem = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::vector<std::uint64_t> sends, recvs;
  scq.on(a, [&](const completion<B>& c) { (c.is_recv() ? recvs : sends).push_back(c.wr_id()); });
  CHECK_THROWS_WITH_AS(rcq.on(a, [](const completion<B>&) {}),
                       doctest::Contains("has a handler set through its other CQ"), usage_error);
  REQUIRE(a.post_recv(mem.local(0, 64), 5).ok());
  REQUIRE(b.send(dst.local(0, 8), 6).ok());
  REQUIRE(a.write(mem.local(0, 8), dst.remote(), 7).ok());
  for (int i = 0; i < 20 && (sends.empty() || recvs.empty()); ++i) {
    (void)scq.dispatch();
    (void)rcq.dispatch();
    (void)y.cq.poll();
  }
  CHECK(sends == std::vector<std::uint64_t>{7});
  CHECK(recvs == std::vector<std::uint64_t>{5});
  int replaced = 0;
  scq.on(a, [&](const completion<B>&) { ++replaced; });  // through the CQ that set it: replaced
  REQUIRE(a.write(mem.local(0, 8), dst.remote(), 8).ok());
  for (int i = 0; i < 20 && replaced == 0; ++i) (void)scq.dispatch();
  CHECK(replaced == 1);
}

namespace {

// An RC pair whose writer polls its CQ in batches of 2, and a region to write to.
struct writer {
  mock::fabric fab;
  device<B> dx{fab, "mock0"}, dy{fab, "mock1"};
  protection_domain<B> pdx = dx.create_pd(), pdy = dy.create_pd();
  completion_queue<B, busy_poll<2>> cqx = dx.create_cq<busy_poll<2>>(64);
  completion_queue<B> cqy = dy.create_cq(64);
  qp_pair<rc> p = make_pair<rc>(pdx, cqx, pdy, cqy, qp_cap{8, 8});
  memory_region<B, rw_access> src = pdx.allocate<rw_access>(64), dst = pdy.allocate<rw_access>(64);

  void write(std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) REQUIRE(p.a.write(src.local(), dst.remote(), i).ok());
  }
};

}  // namespace

TEST_CASE("drain polls until the CQ is empty, across batches") {
  writer w;
  w.write(7);
  std::vector<std::uint64_t> ids;
  CHECK(w.cqx.drain([&](const completion<B>& c) { ids.push_back(c.wr_id()); }) == 7);
  CHECK(ids == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6});
}

// flushing() said what the next create_qp would count: a poll that drained a busy CQ
// (fewer completions than it asked for) frees a destroyed queue pair's room, and the
// accessor still reported it held until a create_qp or reset() took it back.
TEST_CASE("flushing() drops a destroyed queue pair's room once a poll drained the CQ, before any create_qp") {
  destroyed_beside_busy r;
  CHECK(r.cq.flushing() == 4);  // its receives may still complete here (rxe leaves them)
  r.drain();
  CHECK(r.cq.flushing() == 0);
  CHECK(r.cq.reserved() == 4);
  auto q = r.x.pd.create_qp<rc>(r.cq, qp_cap{8, 8});  // and the room is there: 4 + 16 of 20
  CHECK(r.cq.flushing() == 0);
}

TEST_CASE("drain empties the CQ when a batch held a reset queue pair's drain marker") {
  // The marker is accounted and never delivered: a full batch then delivers one fewer
  // than it polled, which drain took for the end of the CQ (helper-97's audit).
  mock::fabric fab;
  side x(fab, "mock0", 256), y(fab, "mock1", 256);
  auto p1 = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto p2 = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{64, 8});
  auto src = x.pd.allocate<access::local_write>(64);
  auto dst = y.pd.allocate<access::local_write | access::remote_write>(64);
  for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(p1.a.post(op::write{src.local(0, 8), dst.remote()}, 100 + i).ok());
  auto p1_init = std::move(p1.a).reset();  // unsignaled WRs out: the old QP posts its marker
  (void)x.cq.poll();                        // finds the CQ empty: the mock flushes the marker now
  for (std::uint64_t i = 0; i < 40; ++i) REQUIRE(p2.a.post(op::write{src.local(0, 8), dst.remote()}, i).ok());
  int seen = 0;
  CHECK(x.cq.drain([&](const completion<B>& c) { seen += c.ok(); }) == 40);
  CHECK(seen == 40);
  CHECK(x.cq.poll() == 0);
}

TEST_CASE("wait finds a completion behind batches of reset queue pairs' drain markers, and so does dispatch_wait") {
  // A batch of markers alone gives nothing to the handler; the CQ is not empty for that.
  // event_driven took each such batch for an empty CQ, and after its inlined poll, its
  // drain and its re-poll after arming it slept through the timeout with the
  // completion in the CQ (helper-97's audit).
  for (const bool dispatching : {false, true}) {
    CAPTURE(dispatching);
    mock::fabric fab;
    side y(fab, "mock1", 256);
    device<B> dx(fab, "mock0");
    auto pd = dx.create_pd();
    auto cq = dx.create_cq<event_driven<2>>(256);
    auto src = pd.allocate<access::local_write>(64);
    auto dst = y.pd.allocate<access::local_write | access::remote_write>(64);
    std::vector<queue_pair<B, rc, signal_manual, qp_state::init>> resets;
    for (int i = 0; i < 8; ++i) {
      auto p = make_pair<rc, signal_manual>(pd, cq, y.pd, y.cq, qp_cap{8, 8});
      REQUIRE(p.a.post(op::write{src.local(0, 8), dst.remote()}, 1).ok());  // unsignaled
      resets.push_back(std::move(p.a).reset());
    }
    (void)cq.poll();  // finds the CQ empty: the mock writes the markers now
    auto p = make_pair<rc>(pd, cq, y.pd, y.cq, qp_cap{8, 8});
    REQUIRE(p.a.post(op::write{src.local(0, 8), dst.remote()}, 7).ok());
    std::uint64_t got = 0;
    const auto take = [&](const completion<B>& c) { got = c.wr_id(); };
    const wait_result r = dispatching ? cq.dispatch_wait(take, std::chrono::milliseconds{300})
                                      : cq.wait(take, std::chrono::milliseconds{300});
    CHECK(r.count() == 1);
    CHECK(got == 7);
  }
}

TEST_CASE("wait_for: n completions within one timeout, else a timed-out result or the error") {
  writer w;
  auto& cqx = w.cqx;
  w.write(5);
  int seen = 0;
  const wait_result all = cqx.wait_for(5, [&](const completion<B>&) { ++seen; });  // batches of 2
  CHECK(all.count() == 5);
  CHECK(seen == 5);

  const auto start = std::chrono::steady_clock::now();
  const wait_result none = cqx.wait_for(1, [&](const completion<B>&) { ++seen; }, std::chrono::milliseconds(30));
  CHECK(none.timed_out());
  CHECK(seen == 5);
  CHECK(cqx.wait_for(0, [&](const completion<B>&) { ++seen; }).error() == EINVAL);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(30));

  completion_queue<B, busy_poll<2>> moved_from = std::move(cqx);
  CHECK(cqx.wait_for(1, [](const completion<B>&) {}).error() == EBADF);  // NOLINT(bugprone-use-after-move)
}

// The timeouts were std::chrono::milliseconds: hours::max() ("no limit") overflowed
// converting at the call (undefined behaviour), came out negative, and wait_for gave up
// at once with the completion there; a microseconds timeout did not compile.
TEST_CASE("wait, wait_for, dispatch_wait: a timeout of any duration; hours::max() is no limit") {
  writer w;
  auto& cqx = w.cqx;
  w.write(1);
  int seen = 0;
  const wait_result r = cqx.wait_for(1, [&](const completion<B>&) { ++seen; }, std::chrono::hours::max());
  CHECK(r.count() == 1);
  CHECK(seen == 1);
  w.write(1);
  CHECK(cqx.wait(std::chrono::hours::max()).count() == 1);
  w.write(1);
  CHECK(cqx.dispatch_wait(std::chrono::microseconds{1500}).count() == 1);
  const wait_result none = cqx.wait(std::chrono::microseconds{1});  // rounded up to 1 ms, not 0
  CHECK(none.timed_out());
}

// An unsigned count of a coarser unit than milliseconds came out milliseconds::min(),
// and a double one past the range a negative (undefined) conversion: wait_for gave up
// at once, timed out with the completion there.
TEST_CASE("wait, wait_for: an unsigned or floating-point timeout waits, not gives up at once") {
  writer w;
  auto& cqx = w.cqx;
  int seen = 0;
  w.write(1);
  CHECK(cqx.wait_for(1, [&](const completion<B>&) { ++seen; }, std::chrono::duration<unsigned>(5)).count() == 1);
  w.write(1);
  CHECK(cqx.wait_for(1, [&](const completion<B>&) { ++seen; },
                     std::chrono::duration<double, std::milli>::max()).count() == 1);
  w.write(1);
  CHECK(cqx.wait(std::chrono::duration<std::uint64_t, std::milli>::max()).count() == 1);
  CHECK(seen == 2);
}

// wait(f, 0ms) looks once, as a past deadline does in every wait; wait_for gave up
// before its first look and left completions already there undelivered.
TEST_CASE("wait_for with a zero or negative timeout looks once: completions already there are delivered") {
  writer w;
  auto& cqx = w.cqx;
  int seen = 0;
  for (const auto t : {std::chrono::milliseconds(0), std::chrono::milliseconds(-1), std::chrono::milliseconds::min()}) {
    CAPTURE(t.count());
    w.write(2);
    const wait_result r = cqx.wait_for(2, [&](const completion<B>&) { ++seen; }, t);
    CHECK(r.count() == 2);
    CHECK_FALSE(r.timed_out());
    CHECK(cqx.wait_for(1, [&](const completion<B>&) { ++seen; }, t).timed_out());  // none left
  }
  CHECK(seen == 6);
}

TEST_CASE("completion queue: bad sizes are setup errors; handles move") {
  mock::fabric fab;
  device<B> d(fab, "mock0");
  CHECK_THROWS_AS(d.create_cq(0), usage_error);
  CHECK_THROWS_AS(d.create_cq(1 << 30), verbs_error);
  auto cq = d.create_cq<event_driven<>>(8);
  CHECK(cq.native_channel() != B::channel{});
  auto moved = std::move(cq);
  CHECK(moved);
  CHECK_FALSE(cq);
}

TEST_CASE("a CQ serving one queue pair tells its receives from its sends, with receives posted or not") {
  mock::fabric fab;
  side x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});  // x.cq serves p.a alone
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto reap = [&] {
    std::vector<seen> got;
    for (int i = 0; i < 20; ++i) (void)x.cq.poll([&](const completion<B>& c) { got.push_back(copy(c)); });
    return got;
  };
  // Sends only: the batch needs no look at the wr_ids.
  for (std::uint64_t id = 0; id < 4; ++id) REQUIRE(p.a.write(src.local(), dst.remote(), id).ok());
  CHECK(reap().size() == 4);
  CHECK(p.a.send_credits() == 4);
  // Receives posted: the peer's SENDs and this QP's own WRITEs complete in one batch.
  REQUIRE(p.a.post_recv(src.local(0, 16), 100).ok());
  REQUIRE(p.a.post_recv(src.local(16, 16), 101).ok());
  REQUIRE(p.b.send(dst.local(0, 8), 7).ok());
  REQUIRE(p.b.send(dst.local(0, 8), 8).ok());
  REQUIRE(p.a.write(src.local(), dst.remote(), 9).ok());
  const auto got = reap();
  REQUIRE(got.size() == 3);
  int recvs = 0;
  for (const auto& c : got) recvs += c.recv;
  CHECK(recvs == 2);
  CHECK(p.a.posted_recvs() == 0);
  CHECK(p.a.send_credits() == 4);
}
