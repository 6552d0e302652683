// Objects the documentation lets threads share (docs/ownership-and-threads.md, "Threads":
// different queue pairs and CQs may be used from different threads), used so from two
// threads at once. Run under ThreadSanitizer: a data race there is a failure.
#include "fixture.hpp"
#include "../child_abort.hpp"
#include "../sanitized.hpp"

#include <array>
#include <atomic>
#include <string>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

using namespace policy_test;

TEST_CASE("UD queue pairs on one shared receive queue, created and destroyed on two threads, each with its own CQ") {
  mock::fabric fab;
  side y(fab, "mock0");
  auto srq = y.pd.create_srq({.max_wr = 64, .max_sge = 1});
  // One UD queue pair stays on the SRQ throughout: its receives must keep room for the GRH.
  auto keep = y.pd.create_qp<ud>(y.cq, srq, qp_cap{4, 0});
  constexpr int rounds = 300;
  auto churn = [&] {
    auto cq = y.dev.create_cq(128);
    for (int i = 0; i < rounds; ++i) {
      auto q = y.pd.create_qp<ud>(cq, srq, qp_cap{4, 0});
      (void)q;
    }
  };
  std::thread a(churn), b(churn);
  a.join();
  b.join();
  // A lost update of the SRQ's count of UD queue pairs would have dropped the GRH offset
  // while `keep` is still on it: a receive too small for the GRH would then be taken.
  auto buf = y.pd.allocate<rw_access>(64);
  CHECK(srq.post_recv(buf.local(0, 39), 1).status == post_status::recv_too_small);
  CHECK(srq.post_recv(buf.local(0, 64), 2).ok());
}

namespace {
constexpr auto window_region = all_access | access::mw_bind;

// Completions of `cq` until `n` arrived (or a bounded number of polls); their statuses.
template <class CQ>
std::vector<wc_status> statuses(CQ& cq, int n) {
  std::vector<wc_status> got;
  for (int i = 0; i < 100000 && static_cast<int>(got.size()) < n; ++i)
    (void)cq.poll([&](const auto& c) { got.push_back(c.status()); });
  return got;
}
}  // namespace

// A type 2 window keeps the native QP it was bound through until it is freed
// (qp_native_hold): a queue pair and its window destroyed on two threads at once meet on
// that hold's count. Whichever goes first, each native QP is destroyed once, after the
// window's native dealloc.
TEST_CASE("queue pairs and the type 2 windows bound through them, destroyed on two threads at once") {
  using R = freeing_log;
  mock::fabric fab;
  basic_side<R> x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  constexpr int n = 40;
  std::vector<queue_pair<R, rc, signal_all, qp_state::rts>> qps, peers;
  std::vector<memory_window<R, access::remote_write>> windows;
  std::vector<std::pair<const void*, const void*>> bound;  // (native QP, native window)
  for (int i = 0; i < n; ++i) {
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4, 1, 1, 0});
    auto w = y.pd.alloc_window<access::remote_write>();
    REQUIRE(w.bind(p.b, region, 0, 256, static_cast<std::uint64_t>(i)).ok());
    REQUIRE(statuses(y.cq, 1) == std::vector{wc_status::success});
    bound.emplace_back(p.b.native(), w.native());
    peers.push_back(std::move(p.a));
    qps.push_back(std::move(p.b));
    windows.push_back(std::move(w));
  }
  R::clear(4 * n);
  std::thread a([&] {
    for (auto& q : qps) q = {};
  });
  std::thread b([&] {
    for (auto it = windows.rbegin(); it != windows.rend(); ++it) *it = {};  // meets a half way
  });
  a.join();
  b.join();
  for (const auto& [qp, mw] : bound) {
    int qp_at = -1, mw_at = -1, qp_times = 0;
    for (int i = 0; i < static_cast<int>(R::log.size()); ++i) {
      if (R::log[i].handle == qp && R::log[i].verb == "destroy_qp") qp_at = i, ++qp_times;
      if (R::log[i].handle == mw && R::log[i].verb == "dealloc_mw") mw_at = i;
    }
    CHECK(qp_times == 1);
    CHECK(mw_at >= 0);
    CHECK(mw_at < qp_at);
  }
}

// The device's record of peers' invalidations (detail::peer_invalidations) is shared by
// every queue pair and CQ of the device: windows bound and invalidated on one thread
// while another polls SEND_WITH_INVs naming its own windows on another CQ.
TEST_CASE("type 2 windows bound and invalidated on one thread while another polls peers' send_inv on the device") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto region = y.pd.allocate<window_region>(256);
  auto src = x.pd.allocate<all_access>(64);
  auto x2 = x.dev.create_cq(256);
  auto y2 = y.dev.create_cq(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
  auto q = make_pair<rc>(x.pd, x2, y.pd, y2, qp_cap{16, 16, 1, 1, 0});
  constexpr int rounds = 1000;
  int a_ok = 0, b_refused = 0;
  std::thread a([&] {  // binds and invalidates its window through p.b
    auto w = y.pd.alloc_window<access::remote_write>();
    for (int i = 0; i < rounds; ++i) {
      if (!w.bind(p.b, region, 0, 256, 1).ok() || !w.invalidate(p.b, 2).ok()) return;
      if (statuses(y.cq, 2) != std::vector{wc_status::success, wc_status::success}) return;
      ++a_ok;
    }
  });
  std::thread b([&] {  // binds its window through q.b; the peer revokes it with send_inv
    auto w = y.pd.alloc_window<access::remote_write>();
    auto inbox = y.pd.allocate<access::local_write>(64);
    for (int i = 0; i < rounds; ++i) {
      if (!w.bind(q.b, region, 0, 256, 1).ok() || statuses(y2, 1) != std::vector{wc_status::success}) return;
      if (!q.b.post_recv(inbox.local(), 3).ok() || !q.a.post(op::send_inv{src.local(0, 4), w.remote()}, 4).ok())
        return;
      if (statuses(x2, 1) != std::vector{wc_status::success} || statuses(y2, 1) != std::vector{wc_status::success})
        return;
      try {
        (void)w.invalidate(q.b, 5);  // the poll above noted the peer's invalidation
      } catch (const usage_error&) {
        ++b_refused;
      }
    }
  });
  a.join();
  b.join();
  CHECK(a_ok == rounds);
  CHECK(b_refused == rounds);
}

namespace {
// The mock, counting the native CQs it destroys on the thread that set `poller` and on others.
struct cq_counting : backends::mock {
  static inline std::atomic<int> by_poller{0}, by_others{0};
  static inline std::thread::id poller;
  static void reset_counts() {
    by_poller = 0;
    by_others = 0;
    poller = std::this_thread::get_id();
  }
  static int destroy_cq(cq c) noexcept {
    (std::this_thread::get_id() == poller ? by_poller : by_others).fetch_add(1, std::memory_order_relaxed);
    return backends::mock::destroy_cq(c);
  }
};

// y.cq, which a type 2 window owns through the destroyed queue pair it keeps (in ERR,
// its two receives to flush), and the window.
struct kept_cq_rig {
  using R = cq_counting;
  mock::fabric fab{[] {
    mock::fabric_config cfg;
    cfg.profile = mock::device_profile::rxe;  // the kept queue pair's flushes stay in the CQ
    return cfg;
  }()};
  basic_side<R> x{fab, "mock0"}, y{fab, "mock1", 64};
  memory_region<R, window_region> region = y.pd.allocate<window_region>(256);
  memory_region<R, all_access> rbuf = y.pd.allocate<all_access>(4096);
  memory_window<R, access::remote_write> w = y.pd.alloc_window<access::remote_write>();
  kept_cq_rig() {
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4, 1, 1, 0});
    for (std::uint32_t i = 0; i < 2; ++i) REQUIRE(p.b.post_recv(rbuf.local(i * 64, 64), i).ok());
    REQUIRE(w.bind(p.b, region, 0, 64, 1000).ok());
    REQUIRE(statuses(y.cq, 1) == std::vector{wc_status::success});
  }
  /// Polls y.cq until one completion's handler ran `in_handler` once; whether it did.
  template <class F>
  bool deliver_once(F in_handler) {
    bool ran = false;
    for (int i = 0; i < 1000 && !ran; ++i)
      (void)y.cq.poll([&](const completion<R>&) {
        if (!std::exchange(ran, true)) in_handler();
      });
    return ran;
  }
};
}  // namespace

// A handler may drop the CQ it runs from: the CQ then goes when the delivery ends. A
// type 2 window that keeps a destroyed queue pair of that CQ owns the CQ too, and may be
// freed on any thread: while the delivery runs, its free drops the CQ's last owner
// (audit 31). Whichever side ends last destroys the CQ, once, and nothing touches it
// after (a data race there, under ThreadSanitizer; a CQ destroyed twice or never).
TEST_CASE("a window freed on another thread while a handler of its kept queue pair's CQ drops that CQ") {
  using R = cq_counting;
  constexpr int rounds = 60;
  int delivered = 0;
  R::reset_counts();
  for (int round = 0; round < rounds; ++round) {
    kept_cq_rig rig;
    std::atomic<bool> go{false};  // relaxed: orders nothing between the threads
    std::thread freer([&] {
      while (!go.load(std::memory_order_relaxed)) {
      }
      rig.w = {};
    });
    delivered += rig.deliver_once([&] {
      rig.y.cq = {};
      go.store(true, std::memory_order_relaxed);
    });
    go.store(true, std::memory_order_relaxed);
    freer.join();
  }
  CHECK(delivered == rounds);
  CHECK(R::by_poller + R::by_others == 2 * rounds);  // each round's two native CQs, once each
}

// The two orders of it, each made certain.
TEST_CASE("a window freed on another thread during the delivery that dropped its CQ: the delivery's end destroys it") {
  using R = cq_counting;
  R::reset_counts();
  kept_cq_rig rig;
  std::atomic<int> step{0};
  std::thread freer([&] {
    while (step.load() != 1) {
    }
    rig.w = {};  // the CQ's last owner, while the handler runs
    step.store(2);
  });
  CHECK(rig.deliver_once([&] {
    rig.y.cq = {};
    step.store(1);
    while (step.load() != 2) {
    }
  }));
  freer.join();
  CHECK(R::by_poller == 1);  // y.cq, at the delivery's end
  CHECK(R::by_others == 0);
}

TEST_CASE("a window freed on another thread after the delivery that dropped its CQ: that thread destroys it") {
  using R = cq_counting;
  R::reset_counts();
  kept_cq_rig rig;
  // The flag set during the delivery: the handler destroys a second kept queue pair.
  auto w2 = rig.y.pd.alloc_window<access::remote_write>();
  std::optional<qp_pair<rc, signal_all, R>> p = make_pair<rc>(rig.x.pd, rig.x.cq, rig.y.pd, rig.y.cq, qp_cap{4, 4, 1, 1, 0});
  REQUIRE(w2.bind(p->b, rig.region, 64, 64, 1001).ok());
  REQUIRE(rig.deliver_once([&] {
    p.reset();  // kept by w2
    rig.y.cq = {};
  }));
  CHECK(R::by_poller == 0);  // y.cq is the windows' now
  std::thread freer([&] {
    rig.w = {};
    w2 = {};
  });
  freer.join();
  CHECK(R::by_poller == 0);
  CHECK(R::by_others == 1);  // y.cq, with the last window
}

// ---- and what the documentation forbids: a CQ and its queue pairs used from two threads
// at once. Creating a queue pair on a CQ while another thread waited on it (or destroying
// one) changed the CQ's routes and room under that thread's polls: a SEGV under ASan,
// or a wrong "CQ too small" usage_error in release builds (audit 42). Refused now while
// the other thread is inside the wait's slow part.

namespace {
// A queue pair on `cq`, and a thread inside a wait of `wait_for` on it once made.
struct waited_cq {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  completion_queue<B, event_driven<>> cq = x.dev.create_cq<event_driven<>>(256);
  qp_pair<rc> pair = make_pair<rc>(x.pd, cq, y.pd, y.cq, qp_cap{4, 4});
  wait_result r{0};
  std::thread waiter;
  explicit waited_cq(std::chrono::milliseconds wait_for) {
    std::atomic<int> stage{0};
    waiter = std::thread([this, wait_for, &stage] {
      stage = 1;
      r = cq.dispatch_wait(wait_for);
    });
    while (stage.load() != 1) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // inside its wait by now
  }
  ~waited_cq() {
    if (waiter.joinable()) waiter.join();
  }
};
}  // namespace

TEST_CASE("a CQ another thread waits on: create_qp and on() on it are refused, a second waiter answers EBUSY") {
  using namespace std::chrono;
  waited_cq w(milliseconds(800));
  auto& x = w.x;
  auto& cq = w.cq;
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(cq, qp_cap{4, 4}), doctest::Contains("another thread is waiting on"),
                       usage_error);
  CHECK_THROWS_WITH_AS(cq.on(w.pair.a, [](const completion<B>&) {}), doctest::Contains("another thread is waiting on"),
                       usage_error);
  CHECK(cq.dispatch_wait(milliseconds(10)).error() == EBUSY);
  w.waiter.join();
  CHECK(w.r.timed_out());
  CHECK_NOTHROW(x.pd.create_qp<rc>(cq, qp_cap{4, 4}));  // its wait is over
  CHECK(cq.dispatch_wait(milliseconds(1)).timed_out());
}

#if !defined(RDMAKIT_TEST_TSAN)  // (a fork of a threaded program: not under TSan)
// A destructor cannot throw: the program ends, saying why, rather than go on with the
// CQ's state torn. A forked child destroys the queue pair: the parent's waiter is
// still marked on the CQ there.
TEST_CASE("a queue pair destroyed while another thread waits on its CQ ends the program, saying so") {
  waited_cq w(std::chrono::milliseconds(600));
  const auto ended = child_abort::run_in_child([&] { w.pair.a = {}; });  // the parent's waiter marks the CQ there too
  CHECK(ended.aborted);
  CHECK(ended.said.find("while another thread is waiting on its completion queue") != std::string::npos);
}
#endif
