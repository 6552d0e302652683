// A completion handler may destroy what it handles: the queue pair whose completion it
// got (the rest of the batch is then delivered as unrouted), its own handler (replaced
// or dropped with the queue pair: it is freed once it returns), or the CQ's state (its
// handle moved from or reassigned: the batch is still delivered whole). None of these
// may reach freed memory (ASan+UBSan in CI, where each of these tests fails without the
// fix); all but the reassigned CQ's also fail without a sanitizer.
#include "fixture.hpp"

#include <cerrno>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

using namespace policy_test;

namespace {

// Four sends from a on side x, received on y: four successful completions of a in one
// batch of x's CQ (the poll's fast path: all of one queue pair).
struct four_sends {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  memory_region<B, rw_access> src = x.pd.allocate<rw_access>(256);
  memory_region<B, rw_access> dst = y.pd.allocate<rw_access>(256);
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> a;
  queue_pair<B, rc, signal_all, qp_state::rts> b;

  four_sends() : b(make()) {
    for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(b.post_recv(dst.local(i * 64, 64), i).ok());
    for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(a->send(src.local(i * 64, 64), 10 + i).ok());
    REQUIRE(collect(y.cq, 4).size() == 4);  // all four arrived: x's CQ holds all four
  }

 private:
  queue_pair<B, rc, signal_all, qp_state::rts> make() {
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
    a.emplace(std::move(p.a));
    return std::move(p.b);
  }
};

// N RC pairs whose senders share x's CQ; write(i, n) posts n WRITEs (wr_ids 10·i + k)
// on pair i: the completions of several queue pairs in x's batches.
template <int N>
struct pairs_on_one_cq {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  memory_region<B, rw_access> src = x.pd.allocate<rw_access>(64);
  memory_region<B, rw_access> dst = y.pd.allocate<rw_access>(64);
  std::vector<qp_pair<rc>> p;

  pairs_on_one_cq() {
    for (int i = 0; i < N; ++i) p.push_back(make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8}));
  }
  void write(int i, int n) {
    for (int k = 0; k < n; ++k) REQUIRE(p[i].a.write(src.local(), dst.remote(), 10 * i + k).ok());
  }
};

// Sets *destroyed when the closure that holds it is destroyed.
struct canary {
  bool* destroyed;
  explicit canary(bool* d) : destroyed(d) {}
  canary(canary&& o) noexcept : destroyed(std::exchange(o.destroyed, nullptr)) {}
  canary& operator=(canary&&) = delete;
  ~canary() {
    if (destroyed) *destroyed = true;
  }
};

// A fabric that gives a destroyed queue pair's number to the next one at once, as mlx5 does.
mock::fabric_config reusing_qp_numbers() {
  mock::fabric_config cfg;
  cfg.reuse_qp_numbers = true;
  return cfg;
}

}  // namespace

TEST_CASE("a poll handler that destroys its queue pair gets the rest of the batch as unrouted") {
  four_sends t;
  std::vector<std::uint64_t> ids;
  const int n = t.x.cq.poll([&](const completion<B>& c) {
    ids.push_back(c.wr_id());
    t.a.reset();  // the queue pair of every completion in this batch
  });
  CHECK(n == 4);
  CHECK(ids == std::vector<std::uint64_t>{10, 11, 12, 13});
  CHECK(t.x.cq.unrouted() == 3);  // delivered after their queue pair was gone
  CHECK(t.x.cq.attached() == 0);
}

TEST_CASE("wait_for with a handler that destroys its queue pair") {
  four_sends t;
  int seen = 0;
  const auto r = t.x.cq.wait_for(4, [&](const completion<B>& c) {
    CHECK(c.ok());
    ++seen;
    t.a.reset();
  });
  CHECK(r.count() == 4);
  CHECK(seen == 4);
  CHECK(t.x.cq.unrouted() == 3);
}

TEST_CASE("a handler set with on() outlives its own call when it destroys its queue pair") {
  four_sends t;
  bool destroyed = false, alive_after_reset = false;
  int calls = 0;
  t.x.cq.on(*t.a, [&, c = canary(&destroyed)](const completion<B>&) {
    ++calls;
    t.a.reset();  // drops this handler with its queue pair
    alive_after_reset = !destroyed;  // its captures are still there until it returns
  });
  int fallback = 0;
  CHECK(t.x.cq.dispatch([&](const completion<B>&) { ++fallback; }) == 4);
  CHECK(calls == 1);
  CHECK(alive_after_reset);
  CHECK(destroyed);  // freed once it returned
  CHECK(fallback == 3);  // the rest of the batch: no queue pair, no handler
}

TEST_CASE("a handler set with on() that replaces itself is freed after it returns") {
  four_sends t;
  bool first_destroyed = false, alive_after_replace = false;
  int first = 0, second = 0;
  t.x.cq.on(*t.a, [&, c = canary(&first_destroyed)](const completion<B>&) {
    ++first;
    t.x.cq.on(*t.a, [&](const completion<B>&) { ++second; });
    alive_after_replace = !first_destroyed;
  });
  CHECK(t.x.cq.dispatch() == 4);
  CHECK(alive_after_replace);
  CHECK(first_destroyed);
  CHECK(first == 1);
  CHECK(second == 3);
  CHECK(t.x.cq.unrouted() == 0);
}

TEST_CASE("a handler that drops its queue pair and reassigns its CQ gets the whole batch") {
  four_sends t;
  int seen = 0;
  const int n = t.x.cq.poll([&](const completion<B>& c) {
    CHECK(c.wr_id() == 10 + static_cast<std::uint64_t>(seen++));
    t.a.reset();
    t.x.cq = t.x.dev.create_cq(16);  // the last owner of the CQ these completions came from
  });
  CHECK(n == 4);  // that CQ lived until its batch was delivered
  CHECK(seen == 4);
  CHECK(t.x.cq.poll() == 0);  // the new CQ
}

TEST_CASE("a handler that moves its CQ away gets the whole batch; the handle is then empty") {
  four_sends t;
  std::optional<completion_queue<B>> moved;
  int seen = 0;
  const int n = t.x.cq.poll([&](const completion<B>&) {
    ++seen;
    if (!moved) moved.emplace(std::move(t.x.cq));
  });
  CHECK(n == 4);
  CHECK(seen == 4);
  CHECK(t.x.cq.poll() == -EBADF);
  CHECK(moved->poll() == 0);
  CHECK(moved->attached() == 1);  // the queue pair went with the CQ's state
}

// dispatch() without a fallback counts the completions of queue pairs without a handler
// on the CQ's state. It did so through the handle (`blk_`), which a handler that moved
// the CQ away had emptied: a null dereference (a crash in release builds too).
TEST_CASE("dispatch() whose handler moves its CQ away counts the rest of the batch on the CQ it polled") {
  pairs_on_one_cq<2> t;
  auto& x = t.x;
  t.write(0, 1);
  t.write(1, 1);  // no handler: unrouted
  std::optional<completion_queue<B>> moved;
  x.cq.on(t.p[0].a, [&](const completion<B>&) {
    if (!moved) moved.emplace(std::move(x.cq));
  });
  int total = 0;
  SUBCASE("dispatch()") {
    for (int i = 0; i < 100 && total < 2; ++i) total += std::max(0, (moved ? *moved : x.cq).dispatch());
  }
  SUBCASE("dispatch_wait()") {
    for (int i = 0; i < 100 && total < 2; ++i)
      total += std::max(0, (moved ? *moved : x.cq).dispatch_wait(std::chrono::milliseconds{10}).count());
  }
  CHECK(total == 2);
  REQUIRE(moved);
  CHECK(moved->unrouted() == 1);  // pair 1's completion, counted once, on the state that moved
  CHECK(x.cq.unrouted() == 0);    // the empty handle
  CHECK(t.p[1].a.send_credits() == 8);
}

// A completion whose queue pair is gone is counted in unrouted() once, whether or not
// dispatch() has a fallback (it was counted twice without one).
TEST_CASE("dispatch() counts a completion of a destroyed queue pair once") {
  four_sends t;
  int seen = 0;
  t.x.cq.on(*t.a, [&](const completion<B>&) {
    ++seen;
    t.a.reset();  // the three after it have no queue pair
  });
  int total = 0;
  for (int i = 0; i < 100 && total < 4; ++i) total += std::max(0, t.x.cq.dispatch());
  CHECK(total == 4);
  CHECK(seen == 1);
  CHECK(t.x.cq.unrouted() == 3);
}

// An on() handler (or dispatch's fallback) that throws: dispatch was noexcept, so the
// program ended (std::terminate). Now the batch's other completions still reach their
// handlers, then the first exception leaves dispatch; the handler stays set.
TEST_CASE("an on() handler's exception leaves dispatch after the rest of the batch was delivered") {
  pairs_on_one_cq<3> t;
  auto& x = t.x;
  for (int i = 0; i < 3; ++i) t.write(i, 2);  // pair 2 has no handler: the fallback's
  int thrown = 0, second = 0, fell_back = 0;
  x.cq.on(t.p[0].a, [&](const completion<B>&) {
    ++thrown;
    throw std::runtime_error("from on()");
  });
  x.cq.on(t.p[1].a, [&](const completion<B>&) { ++second; });
  auto fallback = [&](const completion<B>&) {
    if (++fell_back == 1) throw std::logic_error("from the fallback");
  };
  int errors = 0;
  for (int i = 0; i < 100 && thrown + second + fell_back < 6; ++i) {
    try {
      (void)x.cq.dispatch(fallback);
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "from on()");
      ++errors;
    } catch (const std::logic_error& e) {
      CHECK(std::string(e.what()) == "from the fallback");
      ++errors;
    }
  }
  CHECK(thrown == 2);  // each of pair 0's completions reached its handler, which stayed set
  CHECK(second == 2);
  CHECK(fell_back == 2);
  CHECK(errors >= 1);  // one a batch at most: the first of that batch
  for (auto& q : t.p) CHECK(q.a.send_credits() == 8);
  CHECK(x.cq.poll() == 0);
}

// A handler that replaces itself and then throws is freed once, after it returns.
TEST_CASE("an on() handler that replaces itself and throws is freed once, and the new one runs") {
  four_sends t;
  bool destroyed = false;
  int replaced_calls = 0;
  t.x.cq.on(*t.a, [&, c = canary(&destroyed)](const completion<B>&) {
    t.x.cq.on(*t.a, [&](const completion<B>&) { ++replaced_calls; });
    CHECK_FALSE(destroyed);  // still running
    throw std::runtime_error("after replacing itself");
  });
  CHECK_THROWS_WITH_AS((void)t.x.cq.dispatch(), "after replacing itself", std::runtime_error);
  CHECK(destroyed);
  CHECK(replaced_calls == 3);  // the rest of the batch went to the new handler
  CHECK(t.a->send_credits() == 8);
}

// A handler that throws: the batch's other completions still reach it (they were lost,
// consumed from the CQ and never delivered), then the first exception leaves poll/wait,
// as it leaves dispatch; every completion of the batch has given its credits back.
TEST_CASE("a handler's exception leaves poll once the rest of the batch reached it, credits given back") {
  four_sends t;
  std::vector<std::uint64_t> seen;
  CHECK_THROWS_WITH_AS(t.x.cq.poll([&](const completion<B>& c) {
    seen.push_back(c.wr_id());
    if (seen.size() % 2 == 0) throw std::runtime_error(seen.size() == 2 ? "first" : "later");
  }), "first", std::runtime_error);  // the first exception; the later one is dropped
  CHECK(seen == std::vector<std::uint64_t>{10, 11, 12, 13});  // in order, none lost
  CHECK(t.a->send_credits() == 8);  // all four accounted
  CHECK(t.x.cq.poll() == 0);        // and consumed
}

TEST_CASE("a handler's exception leaves wait_for and a routed batch (two queue pairs) once the batch was delivered") {
  pairs_on_one_cq<2> t;
  auto& x = t.x;
  t.write(0, 2);
  t.write(1, 2);
  int seen = 0;
  CHECK_THROWS_AS(x.cq.wait_for(4, [&](const completion<B>&) {
    ++seen;
    throw std::logic_error("first");
  }), std::logic_error);
  CHECK(seen == 4);  // each completion of the batch, though each threw
  for (auto& q : t.p) CHECK(q.a.send_credits() == 8);
  CHECK(x.cq.poll() == 0);
}

// wait_for calls its handler through a pointer (one instantiation for every handler):
// a handler that moves the CQ away still gets its batch, and the wait then ends, the
// handle empty, as wait() and poll() do.
TEST_CASE("wait_for whose handler moves its CQ away gets the whole batch, then answers EBADF") {
  four_sends t;
  std::optional<completion_queue<B>> moved;
  int seen = 0;
  const wait_result r = t.x.cq.wait_for(8, [&](const completion<B>&) {
    ++seen;
    if (!moved) moved.emplace(std::move(t.x.cq));
  });
  CHECK(r.error() == EBADF);
  CHECK(seen == 4);
  CHECK(moved->poll() == 0);  // the batch was consumed, on the CQ that moved
  CHECK(moved->attached() == 1);
}

TEST_CASE("wait_for takes a const handler object and a handler of its own type, and calls each one") {
  four_sends t;
  int calls = 0;
  struct counting {
    int* calls;
    void operator()(const completion<B>&) const noexcept { ++*calls; }
  };
  const counting handler{&calls};
  CHECK(t.x.cq.wait_for(1, handler).count() == 4);  // one batch: all four
  CHECK(calls == 4);
  CHECK(t.x.cq.wait_for(1, counting{&calls}, std::chrono::milliseconds{1}).timed_out());
  CHECK(calls == 4);
}

// The erased handler took the handler's address as a `const void*`: a plain function and
// a volatile handler object, which wait() and poll() take, no longer compiled (audit 46).
namespace {
int plain_calls = 0;
void count_plain(const completion<B>&) noexcept { ++plain_calls; }
}  // namespace

TEST_CASE("wait_for takes a plain function and a volatile handler object, as wait() and poll() do") {
  plain_calls = 0;
  four_sends t;
  CHECK(t.x.cq.wait_for(1, count_plain).count() == 4);
  CHECK(plain_calls == 4);
  static_assert(noexcept(t.x.cq.wait_for(1, count_plain)));
  struct counting {
    int* calls;
    void operator()(const completion<B>&) volatile noexcept { ++*calls; }
  };
  int calls = 0;
  volatile counting v{&calls};
  four_sends u;
  CHECK(u.x.cq.wait_for(1, v).count() == 4);
  CHECK(calls == 4);
}

static_assert(!noexcept(std::declval<completion_queue<B>&>().poll([](const completion<B>&) {})));
static_assert(noexcept(std::declval<completion_queue<B>&>().poll([](const completion<B>&) noexcept {})));
static_assert(noexcept(std::declval<completion_queue<B>&>().poll()));
// The waits with their default timeout too (docs/polling.md: noexcept when the handler is).
static_assert(noexcept(std::declval<completion_queue<B>&>().wait([](const completion<B>&) noexcept {})));
static_assert(noexcept(std::declval<completion_queue<B>&>().wait()));
static_assert(noexcept(std::declval<completion_queue<B>&>().wait_for(1, [](const completion<B>&) noexcept {})));
static_assert(!noexcept(std::declval<completion_queue<B>&>().wait([](const completion<B>&) {})));
static_assert(!noexcept(std::declval<completion_queue<B>&>().wait_for(1, [](const completion<B>&) {})));

// A handler destroyed the queue pair of a batch's completions and made a new one on the
// same CQ, whose completion a nested dispatch polled: the batch's check for its queue
// pair compared the link's address, and the new queue pair's link, allocated where the
// old one was freed, passed it. The rest of the old queue pair's batch went to the new
// one's handler. (With a sanitizer the address is not reused: the plain build fails.)
TEST_CASE("a batch's queue pair destroyed by a handler: the rest never reach a new queue pair's handler") {
  four_sends t;
  const std::uint32_t old_qpn = t.a->qp_num();
  std::optional<qp_pair<rc>> n;
  std::vector<std::uint32_t> to_new;  // qp_num of each completion the new handler got
  int fallback = 0;
  t.x.cq.on(*t.a, [&](const completion<B>&) {
    if (n) return;
    t.a.reset();
    n.emplace(make_pair<rc>(t.x.pd, t.x.cq, t.y.pd, t.y.cq, qp_cap{8, 8}));
    t.x.cq.on(n->a, [&](const completion<B>& c) { to_new.push_back(c.qp_num()); });
    REQUIRE(n->a.write(t.src.local(0, 8), t.dst.remote().sub(0, 8), 99).ok());
    (void)t.x.cq.dispatch();  // the new queue pair's completion: its link is `last` now
  });
  (void)t.x.cq.dispatch([&](const completion<B>& c) {
    CHECK(c.qp_num() == old_qpn);
    ++fallback;
  });
  REQUIRE(n);
  CHECK(to_new == std::vector<std::uint32_t>{n->a.qp_num()});
  CHECK(fallback == 3);  // delivered as a destroyed queue pair's
  CHECK(t.x.cq.unrouted() == 3);
}

// With QP numbers reused at once (mlx5; the mock's reuse_qp_numbers), a queue pair made
// by a handler took the number of one it had destroyed, and the rest of the destroyed
// one's completions in the batch were routed and accounted to it: its receive count
// went below 0 and, once it was destroyed, the CQ's flushing() near 2^32 refused every
// create_qp.
TEST_CASE("completions of a destroyed queue pair are never routed to a new one that took its number") {
  mock::fabric fab(reusing_qp_numbers());
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(5 * 16);
  auto c = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> b(std::move(p.b));
  REQUIRE(c.b.post_recv(dst.local(0, 16), 100).ok());
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(b->post_recv(dst.local(16 + 16 * i, 16), i).ok());
  REQUIRE(c.a.send(src.local(0, 16), 1).ok());
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(p.a.send(src.local(0, 16), 10 + i).ok());
  REQUIRE(collect(x.cq, 5).size() == 5);
  const std::uint32_t b_qpn = b->qp_num();
  std::optional<queue_pair<B, rc, signal_all, qp_state::init>> n;
  std::vector<std::uint64_t> ids;
  const int got = y.cq.poll([&](const completion<B>& w) {
    ids.push_back(w.wr_id());
    if (n) return;
    b.reset();
    n.emplace(y.pd.create_qp<rc>(y.cq, qp_cap{4, 4}));
    REQUIRE(n->qp_num() == b_qpn);  // the number came back at once
  });
  CHECK(got == 5);
  CHECK(ids == std::vector<std::uint64_t>{100, 0, 1, 2, 3});
  CHECK(y.cq.unrouted() == 4);
  CHECK(n->posted_recvs() == 0);
  n.reset();
  CHECK(y.cq.flushing() <= 4);
  CHECK_NOTHROW((void)y.pd.create_qp<rc>(y.cq, qp_cap{4, 4}));
}

// A batch of one queue pair's successes is accounted whole before its handler runs. A
// handler that reset that queue pair had the rest of the batch counted again on the old
// one, as flushes still to come: the old queue pair looked done, the next reset let it
// go, and a receive still posted on it never flushed to the application.
TEST_CASE("reset() by a handler in the middle of its queue pair's batch: the rest and the flushes still come") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mx = x.pd.allocate<rw_access>(256);
  auto my = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> a(std::move(p.a));
  for (std::uint64_t id : {101, 102, 103}) REQUIRE(a->post_recv(mx.local(64 * (id - 100), 64), id).ok());
  REQUIRE(p.b.send(my.local(0, 8), 1).ok());
  REQUIRE(p.b.send(my.local(0, 8), 2).ok());
  REQUIRE(collect(y.cq, 2).size() == 2);  // x's CQ holds two receives of a: one batch
  std::optional<queue_pair<B, rc, signal_all, qp_state::init>> fresh;
  std::vector<std::uint64_t> handled;
  x.cq.on(*a, [&](const completion<B>& c) {
    handled.push_back(c.wr_id());
    if (!fresh) fresh.emplace(std::move(*a).reset());
  });
  int fallback = 0;
  (void)x.cq.dispatch([&](const completion<B>&) { ++fallback; });
  CHECK(handled == std::vector<std::uint64_t>{101, 102});
  CHECK(fallback == 0);
  CHECK(x.cq.flushing() == 1);  // receive 103's flush
  auto again = std::move(*fresh).reset();  // the old one is not done: kept
  for (int i = 0; i < 10 && handled.size() < 3; ++i) (void)x.cq.dispatch();
  REQUIRE(handled.size() == 3);
  CHECK(handled[2] == 103);
  CHECK(x.cq.flushing() == 0);
}

// The same with a signaled send: everything the old queue pair had was accounted, so
// reset() destroyed it at once, and the batch's rest went to the fallback, not to the
// handler that stays with the old queue pair.
TEST_CASE("reset() by a handler in the middle of its batch: the batch's rest reaches that handler") {
  four_sends t;
  std::optional<queue_pair<B, rc, signal_all, qp_state::init>> fresh;
  std::vector<std::uint64_t> handled;
  t.x.cq.on(*t.a, [&](const completion<B>& c) {
    handled.push_back(c.wr_id());
    if (!fresh) fresh.emplace(std::move(*t.a).reset());
  });
  int fallback = 0;
  (void)t.x.cq.dispatch([&](const completion<B>&) { ++fallback; });
  CHECK(handled == std::vector<std::uint64_t>{10, 11, 12, 13});
  CHECK(fallback == 0);
  CHECK(t.x.cq.unrouted() == 0);
}

// A destroyed one: its destruction counted the completions still in the CQ as its to come,
// and each of the batch's rest (polled and counted already) was taken off that count again:
// the CQ's room came back while a completion was still there, and it could overflow.
TEST_CASE("a queue pair destroyed in the middle of its batch: what is still in the CQ keeps its room") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;  // keeps a destroyed queue pair's completions
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq<busy_poll<2>>(8);
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc>(x.pd, cq, y.pd, y.cq, qp_cap{4, 4});
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> a(std::move(p.a));
  for (std::uint64_t i = 1; i <= 3; ++i) REQUIRE(a->write(src.local(0, 8), dst.remote().sub(0, 8), i).ok());
  (void)cq.poll([&](const completion<B>&) { a.reset(); });  // a batch of 2: the third stays in the CQ
  CHECK(cq.flushing() == 1);
  CHECK(cq.unrouted() == 1);
  (void)cq.poll();
  CHECK(cq.flushing() == 0);
}

// With QP numbers reused at once, a queue pair made and reset by a handler (retired, kept
// for its receive's flush) took the number of the batch's destroyed one: the rest of that
// batch went to the retired one's handler and counted as its flush, which then never came.
TEST_CASE("completions of a destroyed queue pair never reach a retired one that took its number") {
  mock::fabric fab(reusing_qp_numbers());
  side x(fab, "mock0"), y(fab, "mock1");
  auto mx = x.pd.allocate<rw_access>(512);
  auto my = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto z = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 0});
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> X(std::move(p.a));
  REQUIRE(X->post_recv(mx.local(0, 64), 101).ok());
  REQUIRE(X->post_recv(mx.local(64, 64), 102).ok());
  REQUIRE(p.b.send(my.local(0, 8), 1).ok());
  REQUIRE(p.b.send(my.local(0, 8), 2).ok());
  REQUIRE(z.a.write(mx.local(0, 8), my.remote().sub(0, 8), 301).ok());  // a second queue pair in the batch
  std::optional<queue_pair<B, rc, signal_all, qp_state::init>> Y, Y2;
  std::vector<std::uint64_t> to_y;
  x.cq.on(*X, [&](const completion<B>&) {
    if (Y) return;
    const std::uint32_t number = X->qp_num();
    X.reset();
    Y.emplace(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}));
    REQUIRE(Y->qp_num() == number);
    REQUIRE(Y->post_recv(mx.local(256, 64), 201).ok());
    x.cq.on(*Y, [&](const completion<B>& c) { to_y.push_back(c.wr_id()); });
    Y2.emplace(std::move(*Y).reset());  // retired: its receive flushes
  });
  (void)x.cq.dispatch();
  CHECK(to_y.empty());
  CHECK(x.cq.flushing() == 1);
  auto Y3 = std::move(*Y2).reset();  // Y is not done: kept
  for (int i = 0; i < 10 && to_y.empty(); ++i) (void)x.cq.dispatch();
  CHECK(to_y == std::vector<std::uint64_t>{201});
}
