#include "fixture.hpp"

#include <cstring>
#include <functional>
#include <utility>
#include <memory>
#include <vector>

using namespace policy_test;

namespace {
constexpr auto window_region = all_access | access::mw_bind;

// x writes through a type 2 window on y's region, over an RC pair: the setup of the
// tests that bind, invalidate and bind again.
struct window_rig {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  memory_region<B, all_access> src = x.pd.allocate<all_access>(64);
  memory_region<B, window_region> region = y.pd.allocate<window_region>(256);
  qp_pair<rc, signal_all, B> p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  memory_window<B, access::remote_write> w = y.pd.alloc_window<access::remote_write>();
};

// The first completion of `cq` (or a failed check).
template <class CQ>
seen one(CQ& cq) {
  auto got = collect(cq, 1);
  REQUIRE(got.size() == 1);
  return got[0];
}
}  // namespace

TEST_CASE("memory_window: rights, type and remote descriptor are in the type") {
  mock::fabric fab;
  side y(fab, "mock1");
  auto w = y.pd.alloc_window<access::remote_read>();
  static_assert(decltype(w)::rights == access::remote_read);
  static_assert(decltype(w)::type == mw_type::type2);
  static_assert(std::is_same_v<decltype(w.remote()), remote_region<access::remote_read>>);
  auto w1 = alloc_window<access::remote_write, mw_type::type1>(y.pd);
  static_assert(decltype(w1)::type == mw_type::type1);
  CHECK(w);
  CHECK(w.rkey() != w1.rkey());
  CHECK_THROWS_AS((void)w.remote(), usage_error);  // never bound
  memory_window<B, access::remote_read> empty;
  CHECK_FALSE(empty);
  CHECK_THROWS_AS((void)empty.rkey(), usage_error);
}

TEST_CASE("memory_window: type 2 bound by a WR grants WRITE, READ and atomics on its range only") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(4096);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write | access::remote_read | access::remote_atomic>();
  const auto before = w.rkey();
  REQUIRE(w.bind(p.b, region, 1024, 512, 7).ok());
  auto b = one(y.cq);
  CHECK(b.status == wc_status::success);
  CHECK(b.op == wc_opcode::bind_mw);
  CHECK(b.wr_id == 7);
  CHECK(w.rkey() != before);
  CHECK(w.rkey() != region.rkey());
  const auto r = w.remote();
  CHECK(r.addr() == reinterpret_cast<std::uint64_t>(region.data()) + 1024);
  CHECK(r.length() == 512);
  CHECK(r.rkey() == w.rkey());
  std::memcpy(src.data(), "windowed", 8);
  REQUIRE(p.a.write(src.local(0, 8), r.sub(8, 8), 1).ok());
  CHECK(one(x.cq).status == wc_status::success);
  CHECK(std::memcmp(region.data() + 1024 + 8, "windowed", 8) == 0);
  REQUIRE(p.a.read(src.local(16, 8), r.sub(8, 8), 2).ok());
  CHECK(one(x.cq).status == wc_status::success);
  CHECK(std::memcmp(src.data() + 16, "windowed", 8) == 0);
  REQUIRE(p.a.post(op::fetch_add{src.local(32, 8), r.sub(64, 8), 5}, 3).ok());
  CHECK(one(x.cq).status == wc_status::success);
  std::uint64_t v = 0;
  std::memcpy(&v, region.data() + 1024 + 64, 8);
  CHECK(v == 5);
  // Beyond the window (inside the region): the spec profile refuses it.
  REQUIRE(p.a.write(src.local(0, 8), remote_region<access::remote_write>::unchecked(r.addr() + 512, r.rkey(), 8), 4)
              .ok());
  CHECK(one(x.cq).status == wc_status::rem_access_err);
}

TEST_CASE_FIXTURE(window_rig, "memory_window: type 2 invalidated by LOCAL_INV refuses the peer with REM_ACCESS_ERR") {
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  CHECK(one(y.cq).op == wc_opcode::bind_mw);
  REQUIRE(w.invalidate(p.b, 2).ok());
  auto inv = one(y.cq);
  CHECK(inv.status == wc_status::success);
  CHECK(inv.op == wc_opcode::local_inv);
  REQUIRE(p.a.write(src.local(0, 8), w.remote(), 3).ok());
  CHECK(one(x.cq).status == wc_status::rem_access_err);
  // Bound again (a type 2 window is reusable once invalidated), with a new rkey.
  const auto old = w.remote();
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  (void)collect(y.cq, 8, 50);  // the old pair's flushes
  REQUIRE(w.bind(q.b, region, 0, 128, 4).ok());
  CHECK(one(y.cq).status == wc_status::success);
  CHECK(w.rkey() != old.rkey());
  REQUIRE(q.a.write(src.local(0, 8), w.remote(), 5).ok());
  CHECK(one(x.cq).status == wc_status::success);
}

TEST_CASE("memory_window: type 1 bound by the verbs call; invalidate is a zero-length bind") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write, mw_type::type1>();
  const auto credits = p.b.send_credits();
  REQUIRE(w.bind(p.b, region, 64, 64, 1).ok());
  CHECK(p.b.send_credits() <= credits);  // the bind took a send-queue slot
  CHECK(one(y.cq).op == wc_opcode::bind_mw);
  CHECK(p.b.send_credits() == credits);
  REQUIRE(p.a.write(src.local(0, 8), w.remote(), 2).ok());
  CHECK(one(x.cq).status == wc_status::success);
  REQUIRE(w.invalidate(p.b, 3).ok());
  auto inv = one(y.cq);
  CHECK(inv.status == wc_status::success);
  CHECK(inv.op == wc_opcode::bind_mw);
  REQUIRE(p.a.write(src.local(0, 8), remote_region<access::remote_write>::unchecked(
                                         w.remote().addr(), w.remote().rkey(), 8),
                    4)
              .ok());
  CHECK(one(x.cq).status == wc_status::rem_access_err);
}

TEST_CASE("memory_window: the peer's send_inv invalidates a type 2 window") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto inbox = y.pd.allocate<access::local_write>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  CHECK(one(y.cq).status == wc_status::success);
  const auto peer_view = w.remote();  // what the peer would have received
  REQUIRE(p.b.post_recv(inbox.local(), 10).ok());
  REQUIRE(p.a.post(op::send_inv{src.local(0, 4), peer_view}, 2).ok());
  CHECK(one(x.cq).status == wc_status::success);
  std::uint32_t invalidated = 0;
  bool flagged = false;
  for (int i = 0; i < 1000 && !invalidated; ++i)
    (void)y.cq.poll([&](const completion<B>& c) {
      CHECK(c.status() == wc_status::success);
      flagged = has_all(c.flags(), wc_flags::with_inv);
      invalidated = c.invalidated_rkey();
    });
  CHECK(flagged);
  CHECK(invalidated == peer_view.rkey());
  REQUIRE(p.a.write(src.local(0, 8), peer_view, 3).ok());
  CHECK(one(x.cq).status == wc_status::rem_access_err);
}

TEST_CASE("memory_window: a bound window keeps its region registered and its PD alive") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto src = x.pd.allocate<all_access>(64);
  auto w = std::make_unique<memory_window<B, access::remote_write>>();
  std::optional<qp_pair<rc>> p;
  {
    side y(fab, "mock1");
    auto region = y.pd.allocate<window_region>(256);
    p.emplace(make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0}));
    *w = y.pd.alloc_window<access::remote_write>();
    REQUIRE(w->bind(p->b, region, 0, 256, 1).ok());
    CHECK(one(y.cq).status == wc_status::success);
    // region, PD, CQ and device handles of side y go out of scope here.
  }
  std::memcpy(src.data(), "survives", 8);
  REQUIRE(p->a.write(src.local(0, 8), w->remote(), 2).ok());
  CHECK(one(x.cq).status == wc_status::success);  // the buffer is still registered and allocated
  w.reset();                                       // frees the window, then the registration
  p.reset();
}

TEST_CASE("memory_window: misuse is a usage_error naming the problem") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_read>();
  CHECK_THROWS_AS((void)w.bind(p.b, region, 200, 100, 1), usage_error);  // past the region's end
  CHECK_THROWS_AS((void)w.bind(p.b, region, 0, 0, 1), usage_error);      // empty
  CHECK_THROWS_AS((void)w.bind(p.a, region, 0, 16, 1), usage_error);     // a queue pair of another PD
  auto other = x.pd.allocate<window_region>(64);
  auto wx = x.pd.alloc_window<access::remote_read>();
  CHECK_THROWS_AS((void)wx.bind(p.a, region, 0, 16, 1), usage_error);  // a region of another PD
  CHECK_THROWS_AS((void)w.invalidate(p.b, 1), usage_error);           // never bound
  memory_window<B, access::remote_read> moved = std::move(w);
  CHECK_FALSE(w);
  CHECK_THROWS_AS((void)w.bind(p.b, region, 0, 16, 1), usage_error);  // moved from
  CHECK(moved.bind(p.b, region, 0, 16, 1).ok());
  CHECK(one(y.cq).status == wc_status::success);
}

// A window rebound elsewhere lets go of its region when the bind is posted, but until the
// device runs the bind (and for good when the bind fails) the window still grants that
// region. The device then refuses to deregister it (rxe and the mock: a window is bound);
// rdmakit ignored that and freed the buffer, which the peer could still write through the
// window (ASan: heap-use-after-free), and the registration was never retried (leaked).
TEST_CASE("memory_window: a region whose window rebind failed stays allocated until the device lets it go") {
  mock::fabric_config cfg = two_ib_devices();
  cfg.devices[1].limits.max_mr = 3;
  mock::fabric fab(cfg);
  side x(fab, "ib0"), y(fab, "ib1");
  auto src = x.pd.allocate<all_access>(64);
  auto target = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write, mw_type::type1>();
  remote_region<access::remote_write> old;
  {
    auto first = y.pd.allocate<window_region>(256);
    REQUIRE(w.bind(p.b, first, 0, 256, 1).ok());
    CHECK(one(y.cq).status == wc_status::success);
    old = w.remote();
    // An unrelated WRITE with a bad rkey puts p.b in ERR: the rebind is flushed.
    REQUIRE(p.b.write(target.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 2).ok());
    REQUIRE(w.bind(p.b, target, 0, 256, 3).ok());
    const auto failed = collect(y.cq, 2);
    REQUIRE(failed.size() == 2);
    CHECK(failed[0].status == wc_status::rem_access_err);
    CHECK(failed[1].status == wc_status::wr_flush_err);  // the window stays bound to `first`
  }  // `first` goes while the device still has the window bound to it
  std::memcpy(src.data(), "retained", 8);
  REQUIRE(q.a.write(src.local(0, 8), old, 4).ok());  // a type 1 window: through any QP of the PD
  CHECK(one(x.cq).status == wc_status::success);     // into memory still allocated
  SUBCASE("the window goes: `first` is deregistered and freed then") { w = {}; }
  SUBCASE("a later bind fails too, and the window's end lets `first` go") {
    // The flushed bind gave the window's ibv_mw::rkey its next value, which the device
    // never took (rxe's provider: "user has to undo this if he gets an error wc"): every
    // later bind names a stale rkey and is refused, so the device keeps `first`.
    REQUIRE(w.bind(q.b, target, 0, 256, 5).ok());
    CHECK(one(y.cq).status == wc_status::mw_bind_err);
    auto held = y.pd.allocate<access::local_write>(64);
    CHECK_THROWS_AS((void)y.pd.allocate<access::local_write>(64), verbs_error);  // max_mr 3: `first` is kept
    w = {};
  }
  auto n1 = y.pd.allocate<access::local_write>(64);
  CHECK_NOTHROW((void)y.pd.allocate<access::local_write>(64));  // max_mr 3: `first` is gone
}

// A BIND_MW names the window by ibv_mw::rkey, which libibverbs never updates after a
// type 2 bind; rxe refuses a bind whose named rkey is not the window's (MW_BIND_ERR, the
// queue pair in ERR). bind() kept only its own copy of the new rkey, so a type 2 window
// could not be bound a second time on rxe (the mock took any bind, and now refuses it
// as rxe does).
TEST_CASE("memory_window: a type 2 window is bound again after each invalidation, on one queue pair") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto inbox = y.pd.allocate<access::local_write>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  for (std::uint64_t round = 0; round < 4; ++round) {
    CAPTURE(round);
    REQUIRE(w.bind(p.b, region, 0, 256, 10 * round + 1).ok());
    REQUIRE(one(y.cq).status == wc_status::success);
    std::memcpy(src.data(), &round, 8);
    REQUIRE(p.a.write(src.local(0, 8), w.remote(), 10 * round + 2).ok());
    REQUIRE(one(x.cq).status == wc_status::success);
    std::uint64_t got = ~round;
    std::memcpy(&got, region.data(), 8);
    CHECK(got == round);
    if (round % 2 == 0) {
      REQUIRE(w.invalidate(p.b, 10 * round + 3).ok());
      REQUIRE(one(y.cq).status == wc_status::success);
    } else {  // the peer invalidates it
      REQUIRE(p.b.post_recv(inbox.local(), 10 * round + 4).ok());
      REQUIRE(p.a.post(op::send_inv{src.local(0, 4), w.remote()}, 10 * round + 5).ok());
      REQUIRE(one(x.cq).status == wc_status::success);
      REQUIRE(one(y.cq).status == wc_status::success);
    }
  }
}

// A second bind of a bound type 2 window was posted: the device refused it (MW_BIND_ERR),
// its queue pair went to ERR, and rkey() named a binding never made, so every later
// bind failed the same way (found by an audit). It is a usage_error before anything is
// posted; after invalidate() (or a peer's send_inv, above) it binds again.
TEST_CASE_FIXTURE(window_rig, "memory_window: binding a bound type 2 window is a usage_error; the queue pair and window go on") {
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  REQUIRE(one(y.cq).status == wc_status::success);
  const auto granted = w.remote();
  CHECK_THROWS_WITH_AS((void)w.bind(p.b, region, 0, 128, 2), doctest::Contains("invalidate() it first"), usage_error);
  CHECK(y.cq.poll() == 0);  // nothing was posted
  CHECK(w.rkey() == granted.rkey());
  REQUIRE(p.a.write(src.local(0, 8), w.remote(), 3).ok());  // the binding and the queue pair still work
  CHECK(one(x.cq).status == wc_status::success);
  REQUIRE(w.invalidate(p.b, 4).ok());
  REQUIRE(one(y.cq).status == wc_status::success);
  REQUIRE(w.bind(p.b, region, 0, 128, 5).ok());
  CHECK(one(y.cq).status == wc_status::success);
}

// rxe (Linux 6.1) panics the kernel on a LOCAL_INV of a type 2 window that is not bound
// (never, or invalidated already): observed in the guest. invalidate() posted one for
// a second call; the window now knows it is unbound and refuses.
TEST_CASE("memory_window: invalidating a window that is not bound any more is a usage_error") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  auto w1 = alloc_window<access::remote_write, mw_type::type1>(y.pd);
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  REQUIRE(w1.bind(p.b, region, 0, 256, 2).ok());
  REQUIRE(w.invalidate(p.b, 3).ok());
  REQUIRE(w1.invalidate(p.b, 4).ok());
  (void)collect(y.cq, 4);
  CHECK_THROWS_WITH_AS((void)w.invalidate(p.b, 5), doctest::Contains("not bound"), usage_error);
  CHECK_THROWS_WITH_AS((void)w1.invalidate(p.b, 6), doctest::Contains("not bound"), usage_error);
  CHECK(y.cq.poll() == 0);  // nothing was posted
  REQUIRE(w.bind(p.b, region, 0, 128, 7).ok());  // bound again: invalidate goes through
  CHECK(one(y.cq).status == wc_status::success);
  REQUIRE(w.invalidate(p.b, 8).ok());
  CHECK(one(y.cq).status == wc_status::success);
}

TEST_CASE("memory_window: take_invalidation records the peer's send_inv, so invalidate() refuses") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto inbox = y.pd.allocate<access::local_write>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  auto other = y.pd.alloc_window<access::remote_write>();
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  REQUIRE(other.bind(p.b, region, 0, 64, 2).ok());
  (void)collect(y.cq, 2);
  REQUIRE(p.b.post_recv(inbox.local(), 10).ok());
  REQUIRE(p.b.post_recv(inbox.local(), 11).ok());
  REQUIRE(p.a.post(op::send_inv{src.local(0, 4), w.remote()}, 3).ok());
  REQUIRE(p.a.post(op::send<>{src.local(0, 4)}, 4).ok());
  (void)collect(x.cq, 2);
  int taken_w = 0, taken_other = 0, seen_recvs = 0;
  for (int i = 0; i < 1000 && seen_recvs < 2; ++i)
    seen_recvs += y.cq.poll([&](const completion<B>& c) {
      taken_other += other.take_invalidation(c);  // neither names it
      taken_w += w.take_invalidation(c);          // the first names w, the plain SEND none
    });
  REQUIRE(seen_recvs == 2);
  CHECK(taken_w == 1);
  CHECK(taken_other == 0);
  CHECK_THROWS_WITH_AS((void)w.invalidate(p.b, 5), doctest::Contains("not bound"), usage_error);
  REQUIRE(other.invalidate(p.b, 6).ok());  // still bound
  CHECK(one(y.cq).status == wc_status::success);
  REQUIRE(w.bind(p.b, region, 0, 64, 7).ok());
  CHECK(one(y.cq).status == wc_status::success);
}

// A peer's send_inv the window was not told of (take_invalidation) left it believing it
// was bound, and invalidate() posted a LOCAL_INV of an unbound type 2 window: the mock
// completes it LOC_QP_OP_ERR, rxe's kernel panics (Linux 6.1, seen in the guest). The
// peer may send it on any queue pair of the window's device, not only the binding one.
// Any poll of the device's CQs now notes it, and invalidate() refuses.
TEST_CASE("memory_window: a peer's send_inv polled anywhere on the device makes invalidate() refuse") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto inbox = y.pd.allocate<access::local_write>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto other_cq = y.dev.create_cq(64);  // a second connection into the PD, with its own CQ
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, other_cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  auto kept = y.pd.alloc_window<access::remote_write>();  // not named: stays bound
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  REQUIRE(kept.bind(p.b, region, 0, 64, 2).ok());
  (void)collect(y.cq, 2);
  SUBCASE("on the binding queue pair, polled without take_invalidation") {
    REQUIRE(p.b.post_recv(inbox.local(), 10).ok());
    REQUIRE(p.a.post(op::send_inv{src.local(0, 4), w.remote()}, 3).ok());
    CHECK(one(y.cq).status == wc_status::success);
  }
  SUBCASE("on another queue pair and CQ, by a handler") {
    REQUIRE(q.b.post_recv(inbox.local(), 10).ok());
    REQUIRE(q.a.post(op::send_inv{src.local(0, 4), w.remote()}, 3).ok());
    int got = 0;
    for (int i = 0; i < 1000 && got == 0; ++i) got += other_cq.poll([](const completion<B>&) {});
    REQUIRE(got == 1);
  }
  (void)collect(x.cq, 1);
  CHECK_THROWS_WITH_AS((void)w.invalidate(p.b, 5), doctest::Contains("send_inv invalidated"), usage_error);
  CHECK(y.cq.poll() == 0);  // no LOCAL_INV was posted
  CHECK_THROWS_WITH_AS((void)w.invalidate(p.b, 5), doctest::Contains("not bound"), usage_error);
  REQUIRE(kept.invalidate(p.b, 6).ok());
  CHECK(one(y.cq).status == wc_status::success);
  REQUIRE(w.bind(p.b, region, 0, 64, 7).ok());  // bound again: invalidated as usual
  CHECK(one(y.cq).status == wc_status::success);
  REQUIRE(w.invalidate(p.b, 8).ok());
  CHECK(one(y.cq).status == wc_status::success);
}

// rxe looks a SEND_WITH_INV's rkey up in the whole device, whichever context (device
// object) the receiving queue pair was made from. The record of peers' invalidations was
// kept per device object, so one received through a second device object opened on the
// same device was not seen, and invalidate() posted the LOCAL_INV of an unbound window
// (an audit). The record is the device's now, shared by its device objects.
TEST_CASE("memory_window: a peer's send_inv through another device object on the same device makes invalidate() "
          "refuse") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;  // (the spec profile refuses a send_inv of another PD's window)
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  (void)collect(y.cq, 1);
  {
    side again(fab, "mock1");  // the same device, opened a second time
    auto inbox = again.pd.allocate<access::local_write>(64);
    auto q = make_pair<rc>(x.pd, x.cq, again.pd, again.cq, qp_cap{16, 16, 1, 1, 0});
    REQUIRE(q.b.post_recv(inbox.local(), 10).ok());
    REQUIRE(q.a.post(op::send_inv{src.local(0, 4), w.remote()}, 3).ok());
    CHECK(one(again.cq).status == wc_status::success);
    (void)collect(x.cq, 1);
  }
  CHECK_THROWS_WITH_AS((void)w.invalidate(p.b, 5), doctest::Contains("send_inv invalidated"), usage_error);
  CHECK(y.cq.poll() == 0);  // no LOCAL_INV was posted
  REQUIRE(w.bind(p.b, region, 0, 64, 7).ok());  // bound again: invalidated as usual
  CHECK(one(y.cq).status == wc_status::success);
  REQUIRE(w.invalidate(p.b, 8).ok());
  CHECK(one(y.cq).status == wc_status::success);
}

using teardown = std::vector<std::string_view>;

// The device holds the QP a type 2 window was bound through until the window is
// invalidated or freed: rxe's destroy_qp then waited 50 s, warned, and freed the QP under
// the window, whose later dealloc dropped a reference on whatever QP had taken that
// memory (kernel 6.1, seen in the guest). A window declared before its queue pair (so
// destroyed after it), or a reset() of that queue pair, got there. The window now keeps
// the native QP, in ERR, until it is freed.
TEST_CASE("memory_window: a queue pair's native QP outlives the type 2 windows bound through it") {
  using R = freeing_log;
  mock::fabric fab;
  basic_side<R> x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  auto w = y.pd.alloc_window<access::remote_write>();  // declared first: destroyed last
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
  REQUIRE(collect(y.cq, 1).size() == 1);
  R::clear(8);
  SUBCASE("the queue pair destroyed") {
    { auto gone = std::move(p.b); }
    CHECK(R::verbs() == teardown{});
  }
  SUBCASE("the queue pair reset, and its replacement destroyed") {
    { auto fresh = std::move(p.b).reset(); }
    CHECK(R::verbs() == teardown{"destroy_qp"});  // the replacement; the retired one stays
    R::clear(8);
  }
  CHECK(y.cq.poll() >= 0);  // the CQ goes on
  w = {};                   // the window first, then the QP it held
  CHECK(R::verbs() == teardown{"dealloc_mw", "destroy_qp"});
}

// The queue pair a type 2 window keeps (above) is in ERR, and its WRs flush into its CQ
// later; the CQ took it for destroyed and let its room go at the first poll that found
// the CQ empty, which comes before those flushes. A queue pair created in that room
// then lost its completions to the overrun (CQ_ERR), and its credits with them, for
// good (an audit). The room comes back once the window has let the QP be destroyed.
TEST_CASE("memory_window: the room of a queue pair kept by a window stays until its flushes are polled") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1", 32);
  const std::uint32_t half = static_cast<std::uint32_t>(y.cq.capacity() / 2);
  auto src = x.pd.allocate<all_access>(4096);
  auto rbuf = y.pd.allocate<all_access>(1 << 16);
  auto region = y.pd.allocate<window_region>(256);
  auto w = y.pd.alloc_window<access::remote_write>();  // outlives the queue pair below
  {
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{half, half, 1, 1, 0});
    for (std::uint32_t i = 0; i < half; ++i) REQUIRE(p.b.post_recv(rbuf.local(i * 64, 64), i).ok());
    REQUIRE(w.bind(p.b, region, 0, 64, 1000).ok());
    REQUIRE(collect(y.cq, 1).size() == 1);
  }  // kept in ERR by the window: its receives flush later
  CHECK(y.cq.poll() == 0);  // before the flushes
  // No room for a queue pair of the same depths beside the flushes to come.
  CHECK_THROWS_AS((void)make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{half, half, 1, 1, 0}), usage_error);
  auto flushed = collect(y.cq, half);
  CHECK(flushed.size() == half);
  for (const auto& c : flushed) CHECK(c.status == wc_status::wr_flush_err);
  // Polled: the room is back, and a new queue pair's completions all arrive.
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{half, half, 1, 1, 0});
  for (std::uint32_t i = 0; i < half; ++i) REQUIRE(q.b.post_recv(rbuf.local(32768 + i * 64, 64), 100 + i).ok());
  for (std::uint32_t i = 0; i < half; ++i) REQUIRE(q.a.send(src.local(0, 8), 200 + i).ok());
  for (std::uint32_t i = 0; i < half; ++i) REQUIRE(q.a.post_recv(src.local(1024 + i * 64, 64), 400 + i).ok());
  for (std::uint32_t i = 0; i < half; ++i) REQUIRE(q.b.send(rbuf.local(60000, 8), 300 + i).ok());
  const auto got = collect(y.cq, 2 * half);  // the CQ's whole capacity
  CHECK(got.size() == 2 * half);
  for (const auto& c : got) CHECK(c.status == wc_status::success);
  CHECK(q.b.send_credits() == half);
  CHECK_FALSE(y.dev.next_event());  // no CQ_ERR
}

// Audit 29, F1: a poll that drained the CQ after a window-kept queue pair's destroy, but
// before the window freed its native QP, gave that queue pair's room back at the next
// create_qp (forget_drained): the flushes the device wrote in between were still in the
// CQ, a queue pair of the same depths overran it (CQ_ERR) and its lost completions kept
// its credits for ever. A drain proves the CQ empty only of a QP already gone.
TEST_CASE("memory_window: a drained poll while a window keeps a destroyed queue pair gives none of its room back") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;  // destroy_qp leaves the flushes in the CQ, as rxe
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1", 32);
  const std::uint32_t h = static_cast<std::uint32_t>((y.cq.capacity() - 2) / 2);
  auto src = x.pd.allocate<all_access>(4096);
  auto rbuf = y.pd.allocate<all_access>(1 << 16);
  auto region = y.pd.allocate<window_region>(256);
  auto w = y.pd.alloc_window<access::remote_write>();
  auto busy = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{1, 1});
  {
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{h, h, 1, 1, 0});
    for (std::uint32_t i = 0; i < h; ++i) REQUIRE(p.b.post_recv(rbuf.local(i * 64, 64), i).ok());
    REQUIRE(w.bind(p.b, region, 0, 64, 1000).ok());
    REQUIRE(collect(y.cq, 1).size() == 1);
  }  // kept in ERR by the window
  REQUIRE(busy.b.write(rbuf.local(60000, 8), src.remote().sub(0, 8), 7).ok());
  REQUIRE(y.cq.poll() == 1);  // fewer than a batch: a drained poll
  CHECK(y.cq.poll() == 0);    // the device writes the kept queue pair's flushes now
  w = {};                     // and its native QP goes; the flushes stay in the CQ
  CHECK_THROWS_AS((void)make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{h, h}), usage_error);
  auto flushed = collect(y.cq, h);
  CHECK(flushed.size() == h);
  for (const auto& c : flushed) CHECK(c.status == wc_status::wr_flush_err);
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{h, h});  // polled: the room is back
  for (std::uint32_t i = 0; i < h; ++i) REQUIRE(q.b.post_recv(rbuf.local(32768 + i * 64, 64), 100 + i).ok());
  for (std::uint32_t i = 0; i < h; ++i) REQUIRE(q.a.send(src.local(0, 8), 200 + i).ok());
  for (std::uint32_t i = 0; i < h; ++i) REQUIRE(q.a.post_recv(src.local(1024 + i * 64, 64), 400 + i).ok());
  for (std::uint32_t i = 0; i < h; ++i) REQUIRE(q.b.send(rbuf.local(60000, 8), 300 + i).ok());
  const auto got = collect(y.cq, 2 * h);  // all but the busy pair's room
  CHECK(got.size() == 2 * h);
  for (const auto& c : got) CHECK(c.status == wc_status::success);
  CHECK(q.b.send_credits() == h);
  CHECK_FALSE(y.dev.next_event());  // no CQ_ERR
}

namespace {
// The mock, running `after_empty_poll` once when a poll_cq finds nothing: what another
// thread may do between that poll and what the CQ concludes from it.
struct empty_poll_hook : backends::mock {
  static inline std::function<void()> after_empty_poll;
  static int poll_cq(cq c, int n, wc* out) noexcept {
    const int got = backends::mock::poll_cq(c, n, out);
    if (got == 0 && after_empty_poll) std::exchange(after_empty_poll, {})();
    return got;
  }
};
static_assert(verbs_backend<empty_poll_hook>);
}  // namespace

// Audit 29's note: a window freed (on another thread) between a poll that found the CQ
// empty and the CQ's reading of whether the kept native QP lives: the flushes written
// then are in the CQ, yet the empty poll was taken to prove them polled, and the room
// was given back to a queue pair of the same depths (CQ_ERR). An empty poll counts only
// once the native QP was seen gone before it.
TEST_CASE("memory_window: a window freed between an empty poll and its conclusion gives none of the room back") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;  // destroy_qp leaves the flushes in the CQ, as rxe
  mock::fabric fab(cfg);
  basic_side<empty_poll_hook> x(fab, "mock0"), y(fab, "mock1", 32);
  const std::uint32_t h = static_cast<std::uint32_t>(y.cq.capacity() / 2);
  auto src = x.pd.allocate<all_access>(4096);
  auto rbuf = y.pd.allocate<all_access>(1 << 16);
  auto region = y.pd.allocate<window_region>(256);
  auto w = y.pd.alloc_window<access::remote_write>();
  {
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{h, h, 1, 1, 0});
    for (std::uint32_t i = 0; i < h; ++i) REQUIRE(p.b.post_recv(rbuf.local(i * 64, 64), i).ok());
    REQUIRE(w.bind(p.b, region, 0, 64, 1000).ok());
    REQUIRE(collect(y.cq, 1).size() == 1);
  }  // kept in ERR by the window
  empty_poll_hook::after_empty_poll = [&] { w = {}; };  // its flushes written, its QP gone
  CHECK(y.cq.poll() == 0);
  CHECK_FALSE(empty_poll_hook::after_empty_poll);
  CHECK_THROWS_AS((void)make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{h, h}), usage_error);
  auto flushed = collect(y.cq, h);
  CHECK(flushed.size() == h);
  for (const auto& c : flushed) CHECK(c.status == wc_status::wr_flush_err);
  CHECK(y.cq.poll() == 0);  // polled, then found empty: the room is back
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{h, h});
  for (std::uint32_t i = 0; i < h; ++i) REQUIRE(q.b.post_recv(rbuf.local(32768 + i * 64, 64), 100 + i).ok());
  for (std::uint32_t i = 0; i < h; ++i) REQUIRE(q.a.send(src.local(0, 8), 200 + i).ok());
  const auto got = collect(y.cq, h);
  CHECK(got.size() == h);
  for (const auto& c : got) CHECK(c.status == wc_status::success);
  CHECK_FALSE(y.dev.next_event());  // no CQ_ERR
}

// A window kept every queue pair it was ever bound through until it was freed: one
// window lent to client after client kept every client's QP (in ERR) and its CQ room
// (an audit). Once it knows a peer's send_inv of its binding ran, the device holds none
// of them for it: it lets them go.
TEST_CASE("memory_window: told of a peer's send_inv, the window lets its queue pairs go") {
  using R = freeing_log;
  mock::fabric fab;
  basic_side<R> x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto region = y.pd.allocate<window_region>(256);
  auto inbox = y.pd.allocate<access::local_write>(64);
  auto w = y.pd.alloc_window<access::remote_write>();  // declared first: destroyed last
  for (int client = 0; client < 3; ++client) {
    CAPTURE(client);
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
    REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
    REQUIRE(collect(y.cq, 1).size() == 1);
    REQUIRE(p.b.post_recv(inbox.local(), 10).ok());
    REQUIRE(p.a.post(op::send_inv{src.local(0, 4), w.remote()}, 3).ok());
    (void)collect(x.cq, 1);
    R::clear(8);
    int taken = 0;
    for (int i = 0; i < 1000 && taken == 0; ++i)
      (void)y.cq.poll([&](const completion<R>& c) { taken += w.take_invalidation(c); });
    REQUIRE(taken == 1);
    if (client == 2)
      CHECK(R::verbs() == teardown{"destroy_qp"});  // client 1's, kept for the owner's invalidation below
    else
      CHECK(R::verbs() == teardown{});
    if (client == 1) {
      REQUIRE(w.bind(p.b, region, 0, 64, 7).ok());  // bound again, through the same queue pair
      REQUIRE(collect(y.cq, 1).size() == 1);
      REQUIRE(w.invalidate(p.b, 8).ok());  // the owner's LOCAL_INV: the window cannot know it ran
      REQUIRE(collect(y.cq, 1).size() == 1);
    }
    R::clear(8);
    p = {};
    if (client == 1)
      CHECK(R::verbs() == teardown{"destroy_qp"});  // the peer's; the window keeps its own
    else
      CHECK(R::verbs() == teardown{"destroy_qp", "destroy_qp"});  // both: the window let its QP go
  }
  R::clear(8);
  w = {};
  CHECK(R::verbs() == teardown{"dealloc_mw"});
}

// A type 2 bind that fails (here flushed: its queue pair is in ERR) leaves the device's
// window unbound while the window believes it bound. A LOCAL_INV of it posted on another
// queue pair then reaches an unbound window, which panics rxe's kernel (Linux 6.1), and
// so does one that overtakes a bind still queued on another queue pair. Through the
// binding queue pair it cannot: the bind runs first, and a failed one puts the queue pair
// in ERR, so the LOCAL_INV behind it is flushed. invalidate() therefore takes the queue
// pair the window was bound through, and refuses another (or that one after reset()).
TEST_CASE("memory_window: a window is invalidated through the queue pair it was bound through only") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write>();
  SUBCASE("a bind that was flushed") {
    // A WRITE with a bad rkey puts p.b in ERR: the bind behind it is flushed.
    REQUIRE(p.b.write(region.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 1).ok());
    REQUIRE(w.bind(p.b, region, 0, 256, 2).ok());
    const auto failed = collect(y.cq, 2);
    REQUIRE(failed.size() == 2);
    CHECK(failed[1].status == wc_status::wr_flush_err);
    CHECK_THROWS_WITH_AS((void)w.invalidate(q.b, 3), doctest::Contains("bound through"), usage_error);
    CHECK(y.cq.poll() == 0);  // nothing was posted
    CHECK(w.invalidate(p.b, 4).status == post_status::qp_error);  // the binding queue pair is in ERR
  }
  SUBCASE("a bind that ran") {
    REQUIRE(w.bind(p.b, region, 0, 256, 2).ok());
    CHECK(one(y.cq).status == wc_status::success);
    CHECK_THROWS_WITH_AS((void)w.invalidate(q.b, 3), doctest::Contains("bound through"), usage_error);
    auto moved = std::move(p.b);  // the same queue pair, moved: still the one
    REQUIRE(w.invalidate(moved, 4).ok());
    CHECK(one(y.cq).status == wc_status::success);
    REQUIRE(w.bind(q.b, region, 0, 64, 5).ok());  // unbound: any queue pair of the PD binds it
    CHECK(one(y.cq).status == wc_status::success);
    REQUIRE(w.invalidate(q.b, 6).ok());
    CHECK(one(y.cq).status == wc_status::success);
  }
  SUBCASE("the binding queue pair was replaced by reset()") {
    REQUIRE(w.bind(p.b, region, 0, 256, 2).ok());
    CHECK(one(y.cq).status == wc_status::success);
    auto fresh = std::move(p.b).reset();
    auto again = std::move(fresh).connect(p.a.local_endpoint());
    CHECK_THROWS_WITH_AS((void)w.invalidate(again, 3), doctest::Contains("bound through"), usage_error);
  }
  // Through another queue pair the zero-length bind overtook a bind still queued (behind
  // READs): it named an rkey the device had not given yet and failed, the bind then ran,
  // and the peer kept access after invalidate() returned ok, which then refused a retry.
  SUBCASE("a type 1 window too") {
    auto w1 = alloc_window<access::remote_write, mw_type::type1>(y.pd);
    REQUIRE(w1.bind(p.b, region, 0, 256, 2).ok());
    CHECK(one(y.cq).status == wc_status::success);
    CHECK_THROWS_WITH_AS((void)w1.invalidate(q.b, 3), doctest::Contains("bound through"), usage_error);
    CHECK(y.cq.poll() == 0);  // nothing was posted
    REQUIRE(w1.invalidate(p.b, 4).ok());
    CHECK(one(y.cq).status == wc_status::success);
    REQUIRE(w1.bind(q.b, region, 0, 64, 5).ok());  // a type 1 window binds through any queue pair of its PD
    CHECK(one(y.cq).status == wc_status::success);
    REQUIRE(w1.invalidate(q.b, 6).ok());
    CHECK(one(y.cq).status == wc_status::success);
  }
}

// The operations memory_window posts are its own: a LOCAL_INV or BIND_MW posted directly
// would bypass what the window knows (whether it is bound, its current rkey).
static_assert(!std::is_aggregate_v<op::invalidate_window> && !std::is_default_constructible_v<op::invalidate_window>);
static_assert(!std::is_aggregate_v<op::bind_window<B>> && !std::is_default_constructible_v<op::bind_window<B>>);

// A fenced BIND_MW or LOCAL_INV ran as soon as the mock reached it, before the READ ahead
// of it was answered (semantics.md §8.1: a fenced WR waits for every earlier READ and
// atomic): a peer's WRITE through the window landed while the bind should still wait.
TEST_CASE("memory_window: a fenced bind and a fenced invalidation wait for the READ before them") {
  mock::fabric_config cfg;
  cfg.latency = std::chrono::microseconds{5};
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  auto far = x.pd.allocate<rw_access>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  // The peer writes through its own queue pair (a type 1 window serves any of its PD):
  // a refused WRITE puts both ends of that one in ERR, not the binding queue pair.
  auto peer = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w = y.pd.alloc_window<access::remote_write, mw_type::type1>();
  // The READ's response is back at t+10 µs; the peer's WRITE arrives at t+5 µs.
  REQUIRE(p.b.read(region.local(0, 8), far.remote().sub(0, 8), 1).ok());
  REQUIRE(w.bind(p.b, region, 0, 256, 2, send_flags::fence).ok());
  REQUIRE(peer.a.write(far.local(0, 8), w.remote().sub(0, 8), 3).ok());
  fab.advance(std::chrono::microseconds{7});
  auto early = collect(x.cq, 1);
  REQUIRE(early.size() == 1);
  CHECK(early[0].status == wc_status::rem_access_err);  // the window was not bound yet
  auto local = collect(y.cq, 2);
  REQUIRE(local.size() == 2);
  CHECK(local[0].status == wc_status::success);
  CHECK(local[1].status == wc_status::success);  // the bind ran once the READ completed

  // The invalidation: fenced behind a READ, the window still grants access until it runs.
  auto q = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto w2 = y.pd.alloc_window<access::remote_write>();
  REQUIRE(w2.bind(q.b, region, 0, 256, 4).ok());
  fab.advance(std::chrono::microseconds{1});
  REQUIRE(collect(y.cq, 1).size() == 1);
  REQUIRE(q.b.read(region.local(0, 8), far.remote().sub(0, 8), 5).ok());
  REQUIRE(w2.invalidate(q.b, 6, send_flags::fence).ok());
  REQUIRE(q.a.write(far.local(0, 8), w2.remote().sub(0, 8), 7).ok());
  fab.advance(std::chrono::microseconds{7});
  auto before_inv = collect(x.cq, 1);
  REQUIRE(before_inv.size() == 1);
  CHECK(before_inv[0].status == wc_status::success);  // not invalidated yet
  CHECK(collect(y.cq, 2).size() == 2);
}
