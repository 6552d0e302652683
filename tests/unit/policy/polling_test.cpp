#include "fixture.hpp"

#include <atomic>
#include <thread>

using namespace policy_test;
using namespace std::chrono_literals;

// ---- the wait algorithms on a scripted CQ ------------------------------------------------

namespace {
// A CQ simulated in plain code: `arrive_at_arm` lands a completion during arm(), i.e.
// between the last poll and the arm, which is exactly when a naive loop strands it.
struct fake_ops {
  int ready = 0;
  bool armed = false;
  bool arrive_at_arm = false;
  int polls = 0, arms = 0, waits = 0;
  std::vector<std::string> trace;
  int poll() {
    ++polls;
    trace.push_back("poll");
    int n = ready;
    ready = 0;
    return n;
  }
  int arm() {
    ++arms;
    trace.push_back("arm");
    if (arrive_at_arm) {
      arrive_at_arm = false;
      ++ready;  // before the arm takes effect: no event will come for it
    }
    armed = true;
    return 0;
  }
  int wait_event(std::chrono::milliseconds) {
    ++waits;
    trace.push_back("wait");
    return ETIMEDOUT;  // nothing ever fires: a stranded completion would be lost
  }
};
}  // namespace

TEST_CASE("event_driven: drain, arm, re-poll, and only then block") {
  fake_ops ops;
  ops.arrive_at_arm = true;
  CHECK(event_driven<>::wait(ops, 10ms) == 1);
  CHECK(ops.trace == std::vector<std::string>{"poll", "arm", "poll"});
  CHECK(ops.waits == 0);

  fake_ops idle;
  CHECK(event_driven<>::wait(idle, 0ms) == 0);
  CHECK(idle.trace == std::vector<std::string>{"poll", "arm", "poll", "wait", "poll"});

  fake_ops ready;
  ready.ready = 3;
  CHECK(event_driven<>::wait(ready, 10ms) == 3);
  CHECK(ready.arms == 0);  // something was there: no arm, no sleep
}

TEST_CASE("adaptive spins first, then waits like event_driven") {
  fake_ops ops;
  ops.arrive_at_arm = true;
  CHECK(adaptive<5>::wait(ops, 10ms) == 1);
  CHECK(ops.polls == 5 + 1);  // Spin polls, then the arm and its re-poll
  CHECK(ops.arms == 1);
}

// adaptive spun Spin times before it read the clock: wait(0ms) with Spin = 10^7 took
// 329 ms on the mock (audit 42). The clock is read every 64 empty polls, as busy_poll does.
TEST_CASE("adaptive's spin ends at the timeout") {
  fake_ops ops;
  CHECK(adaptive<10'000'000>::wait(ops, 0ms) == 0);
  CHECK(ops.polls == 1 + 64);  // the first poll, then 64 before the clock is read
  CHECK(ops.arms == 0);
}

// The time left before a sleep was rounded down to whole milliseconds: wait(1ms) slept
// none and returned timed out at once, wait(5ms) after 4 (audit 42). Rounded up now, and
// a sleep that ends early (a channel's timeout, a signal) sleeps again until the deadline.
TEST_CASE("a sleeping wait gives up only once its timeout has passed") {
  using clock = std::chrono::steady_clock;
  fake_ops ops;  // its wait_event returns ETIMEDOUT at once
  const auto t0 = clock::now();
  CHECK(event_driven<>::wait(ops, 3ms) == 0);
  CHECK(clock::now() - t0 >= 3ms);
  CHECK(ops.waits > 1);
}

TEST_CASE("busy_poll never arms and gives up at the timeout") {
  fake_ops ops;
  CHECK(busy_poll<>::wait(ops, 1ms) == 0);
  CHECK(ops.arms == 0);
  CHECK(ops.polls >= 64);
  static_assert(polling<busy_poll<4>> && polling<event_driven<>> && polling<adaptive<>>);
  static_assert(!busy_poll<>::needs_channel && event_driven<>::needs_channel);
}

namespace {
// busy_poll: a completion after `empty` polls. Event policies: one after the first
// wait_event, which records how long it was asked to sleep.
struct late_ops : fake_ops {
  int empty = 0;
  std::chrono::milliseconds asked{-1};
  int poll() {
    ++polls;
    if (empty > 0 && --empty == 0) ready = 1;
    return ready;
  }
  int wait_event(std::chrono::milliseconds t) {
    asked = t;
    ready = 1;
    return 0;
  }
};
}  // namespace

TEST_CASE_TEMPLATE("a timeout past the clock's range waits on, not out (it overflowed and expired at once)", P,
                   busy_poll<>, event_driven<>, adaptive<2>) {
  using namespace std::chrono;
  for (const milliseconds t : {milliseconds::max(), duration_cast<milliseconds>(hours(24 * 365 * 1000))}) {
    late_ops ops;
    if constexpr (!P::needs_channel) ops.empty = 1000;  // past busy_poll's first clock read (every 64 polls)
    CHECK(P::wait(ops, t) == 1);
    if constexpr (P::needs_channel) CHECK(ops.asked > hours(24 * 365));  // the device sleeps as long as it may
  }
}

// The concept requires everything completion_queue calls, so a policy that cannot be
// used is refused where it is named, not deep inside completion_queue.
struct facts_without_wait {
  static constexpr std::string_view name = "no_wait";
  static constexpr int batch = 16;
  static constexpr bool needs_channel = false;
  static constexpr unsigned ack_batch = 1;
};
struct throwing_wait : facts_without_wait {
  template <class Ops>
  static int wait(Ops&, std::chrono::milliseconds);  // not noexcept
};
struct zero_batch : facts_without_wait {
  static constexpr int batch = 0;
  template <class Ops>
  static int wait(Ops&, std::chrono::milliseconds) noexcept;
};
struct usable : facts_without_wait {
  template <class Ops>
  static int wait(Ops&, std::chrono::milliseconds) noexcept;
};
static_assert(!polling<facts_without_wait>);
static_assert(!polling<throwing_wait>);
static_assert(!polling<zero_batch>);
static_assert(polling<usable>);

TEST_CASE("polling policies have names") {
  CHECK(busy_poll<>::name == "busy_poll");
  CHECK(event_driven<>::name == "event_driven");
  CHECK(adaptive<>::name == "adaptive");
}

// ---- on the mock: a completion lands between the last poll and the arm ------------------

namespace {
// An RC pair whose side a's CQ (cqx) waits with policy P; side b's CQ (y.cq) polls. rx: a
// buffer a receives into, tx: one b sends from.
template <class P>
struct polled_pair {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  completion_queue<B, P> cqx = x.dev.template create_cq<P>(64);
  qp_pair<rc, signal_all, B> p = make_pair<rc>(x.pd, cqx, y.pd, y.cq, qp_cap{8, 8});
  memory_region<B, rw_access> rx = x.pd.allocate<rw_access>(64), tx = y.pd.allocate<rw_access>(64);
};

template <class P>
void arm_race() {
  polled_pair<P> s;
  REQUIRE(s.p.a.post_recv(s.rx.local(), 10).ok());

  int hook_calls = 0;
  s.fab.set_arm_hook([&](const void* cq) {
    if (cq != s.cqx.native() || hook_calls++) return;
    // The peer's SEND arrives now, before the arm takes effect.
    REQUIRE(s.p.b.send(s.tx.local(0, 8), 20).ok());
  });
  if (!P::needs_channel) REQUIRE(s.p.b.send(s.tx.local(0, 8), 20).ok());  // busy_poll never arms

  std::vector<std::uint64_t> got;
  // No event will ever come for it: a policy that does not re-poll after arming would
  // sleep out the whole timeout (and only then find it, or lose it).
  const auto t0 = std::chrono::steady_clock::now();
  int n = s.cqx.wait([&](const completion<B>& c) { got.push_back(c.wr_id()); }, 3000ms).count();
  CHECK(std::chrono::steady_clock::now() - t0 < 1000ms);
  s.fab.set_arm_hook({});
  CHECK(n == 1);
  CHECK(got == std::vector<std::uint64_t>{10});
  if (P::needs_channel) CHECK(hook_calls >= 1);
}
}  // namespace

TEST_CASE_TEMPLATE("no polling policy strands a completion that lands before the arm", P, busy_poll<>,
                   busy_poll<1>, event_driven<>, event_driven<1, 1>, adaptive<0>, adaptive<3>) {
  arm_race<P>();
}

TEST_CASE_TEMPLATE("event policies sleep on the channel and wake for a completion from another thread", P,
                   event_driven<4, 2>, adaptive<16, 4, 2>) {
  polled_pair<P> s;
  int received = 0;
  for (int round = 0; round < 5; ++round) {
    REQUIRE(s.p.a.post_recv(s.rx.local(), static_cast<std::uint64_t>(round)).ok());
    std::thread peer([&] {
      std::this_thread::sleep_for(10ms);
      REQUIRE(s.p.b.send(s.tx.local(0, 8), 100).ok());
    });
    int n = s.cqx.wait([&](const completion<B>& c) {
      CHECK(c.ok());
      CHECK(c.wr_id() == static_cast<std::uint64_t>(round));
      ++received;
    }, 5000ms).count();
    peer.join();
    CHECK(n == 1);
    (void)collect(s.y.cq, 1);
  }
  CHECK(received == 5);
  CHECK(s.cqx.unacked_events() < P::ack_batch);  // acked in batches as they come
  s.cqx.ack_events();
  CHECK(s.cqx.unacked_events() == 0);
}

// Every sleeping wait armed its CQ for the next completion: a server could not sleep
// through its own sends' completions and wake only for requests, as `ib_send_lat -e`
// and servers arming with ibv_req_notify_cq(cq, 1) do (helper-102's audit).
TEST_CASE_TEMPLATE("solicited_only: a wait sleeps through unsolicited completions and wakes for a solicited one", P,
                   solicited_only<event_driven<4, 2>>, solicited_only<adaptive<16, 4, 2>>) {
  static_assert(polling<P> && detail::arms_solicited<P> && !detail::arms_solicited<event_driven<>>);
  CHECK(P::name == "solicited_only");
  polled_pair<P> s;
  REQUIRE(s.p.a.post_recv(s.rx.local(0, 32), 1).ok());
  REQUIRE(s.p.a.post_recv(s.rx.local(32, 32), 2).ok());
  std::atomic<bool> armed{false}, woke{false};
  s.fab.set_arm_hook([&](const void* cq) {
    if (cq == s.cqx.native()) armed = true;
  });
  int n = -1;
  std::vector<std::uint64_t> got;
  std::thread waiter([&] {
    n = s.cqx.wait([&](const completion<B>& c) { got.push_back(c.wr_id()); }, 5000ms).count();
    woke = true;
  });
  while (!armed.load()) std::this_thread::yield();
  std::this_thread::sleep_for(10ms);  // the arm has taken effect, the waiter sleeps
  REQUIRE(s.p.b.send(s.tx.local(0, 8), 100).ok());  // not solicited: no event
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(woke.load());
  REQUIRE(s.p.b.send(s.tx.local(0, 8), 101, send_flags::solicited).ok());
  waiter.join();
  s.fab.set_arm_hook({});
  CHECK(n == 2);  // woken by the solicited one, and both are there
  CHECK(got == std::vector<std::uint64_t>{1, 2});
  (void)collect(s.y.cq, 2);
}

TEST_CASE_TEMPLATE("a sleeping policy's wait on an empty CQ lasts its whole timeout, even 1 ms", P, event_driven<>,
                   adaptive<>, solicited_only<event_driven<>>) {
  mock::fabric fab;
  device<B> dx(fab, "mock0");
  auto cq = dx.create_cq<P>(16);
  for (const std::chrono::milliseconds t : {1ms, 2ms, 5ms}) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = cq.wait([](const completion<B>&) {}, t);
    CHECK(r.timed_out());
    CHECK(std::chrono::steady_clock::now() - t0 >= t);
  }
}

TEST_CASE("an event-driven wait times out cleanly when nothing comes") {
  mock::fabric fab;
  device<B> dx(fab, "mock0");
  auto cq = dx.create_cq<event_driven<>>(16);
  auto t0 = std::chrono::steady_clock::now();
  const auto r = cq.wait([](const completion<B>&) {}, 20ms);
  CHECK(r.timed_out());
  CHECK_FALSE(r);
  CHECK(r.count() == 0);
  CHECK(r.error() == 0);
  CHECK(std::chrono::steady_clock::now() - t0 >= 15ms);
}
