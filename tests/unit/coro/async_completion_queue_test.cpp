#include "fixture.hpp"

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace coro_test;

namespace {
// Queue pairs used directly (not through async_queue_pair) on async completion queues.
struct plain_pair {
  using rts = queue_pair<B, rc, signal_all, qp_state::rts>;
  plain_pair() : a(bed.open(0), loop), b(bed.open(1), loop), ma(a.pd.allocate<rw>(256)), mb(b.pd.allocate<rw>(256)) {
    auto ia = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8});
    auto ib = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8});
    const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
    qa = std::move(ia).connect(eb);
    qb = std::move(ib).connect(ea);
  }
  testbed bed;
  event_loop loop;
  side a, b;
  memory_region<B, rw> ma, mb;
  rts qa, qb;
};
}  // namespace

TEST_CASE("async_completion_queue: next() gets the completions of queue pairs used directly") {
  plain_pair p;
  auto& loop = p.loop;
  auto& a = p.a;
  auto& b = p.b;
  auto& ma = p.ma;
  auto& mb = p.mb;
  auto& qa = p.qa;
  auto& qb = p.qb;
  REQUIRE(qb.post_recv(mb.local(0, 64), 7).ok());
  auto run = [&]() -> task<void> {
    REQUIRE(qa.send_imm(ma.local(0, 16), 0xabcd, 3).ok());
    std::optional<completion<B>> sent = co_await a.cq.next();
    std::optional<completion<B>> got = co_await b.cq.next();
    REQUIRE(sent);
    REQUIRE(got);
    CHECK(sent->wr_id() == 3);
    CHECK(got->wr_id() == 7);
    CHECK(got->imm() == 0xabcd);
    CHECK(qa.send_credits() == 8);  // the layer's accounting ran before the handover
    // Nothing more comes: a bounded wait says so.
    CHECK_FALSE(co_await b.cq.next(10ms));
  };
  loop.run(run());
}

TEST_CASE("async_completion_queue: next() awaited by a task of another event_loop is a usage_error") {
  plain_pair p;
  event_loop other;
  auto waits = [&]() -> task<void> { (void)co_await p.a.cq.next(10ms); };
  CHECK_THROWS_WITH_AS(other.run(waits()), doctest::Contains("another event_loop"), usage_error);
}

// As a WR's awaitable (async_queue_pair_test): a next() destroyed by other code while a
// coroutine awaited it in place left that coroutine waiting for ever, its timeout too.
TEST_CASE("async_completion_queue: a next() destroyed while a coroutine awaits it in place refuses the wait") {
  plain_pair p;
  std::optional<decltype(p.a.cq.next(50ms))> n;
  n.emplace(p.a.cq.next(50ms));
  CHECK(destroyed_while_awaited(p.loop, n, [](auto& n) -> task<void> { (void)co_await *n; }));
}

// One drain hands two completions to two waiting next()s. The first one's coroutine,
// resumed first, destroys the second next() before that one's coroutine resumed: the
// completion it had been given went with it, and no later next() ever saw it.
TEST_CASE("async_completion_queue: a completion given to a next() destroyed before its coroutine resumed goes to the next next()") {
  plain_pair p;
  std::optional<decltype(p.a.cq.next(1s))> second_next;
  second_next.emplace(p.a.cq.next(1s));
  std::optional<completion<B>> first_got, later;
  bool second_refused = false;
  auto first = [&]() -> task<void> {
    first_got = co_await p.a.cq.next(1s);
    second_next.reset();  // given the second completion already, its coroutine not resumed
    later = co_await p.a.cq.next(1s);
  };
  auto second = [&]() -> task<void> {
    try {
      (void)co_await *second_next;
    } catch (const usage_error&) {
      second_refused = true;
    }
  };
  auto post_two = [&]() -> task<void> {
    REQUIRE(p.qa.write(p.ma.local(0, 8), p.mb.remote().sub(0, 8), 1).ok());
    REQUIRE(p.qa.write(p.ma.local(0, 8), p.mb.remote().sub(0, 8), 2).ok());
    co_return;
  };
  p.loop.spawn(first());
  p.loop.spawn(second());
  p.loop.spawn(post_two());
  REQUIRE(run_within(p.loop, 5s));
  REQUIRE(first_got);
  CHECK(first_got->wr_id() == 1);
  CHECK(second_refused);
  REQUIRE(later);
  CHECK(later->wr_id() == 2);
}

// The on() handler of a queue pair used directly threw inside the loop's drain, which
// was noexcept: std::terminate(). Now the loop's run rethrows it and goes on after.
TEST_CASE("async_completion_queue: an on() handler's exception leaves the loop's run, which goes on after it") {
  plain_pair p;
  int calls = 0;
  p.a.cq.queue().on(p.qa, [&](const completion<B>&) {
    if (++calls == 1) throw std::runtime_error("from the handler");
  });
  REQUIRE(p.qa.write(p.ma.local(0, 8), p.mb.remote().sub(0, 8), 1).ok());
  REQUIRE(p.qa.write(p.ma.local(0, 8), p.mb.remote().sub(0, 8), 2).ok());
  auto pause = [&]() -> task<void> { co_await p.loop.sleep_for(20ms); };
  CHECK_THROWS_WITH_AS(p.loop.run(pause()), "from the handler", std::runtime_error);
  p.loop.run(pause());
  CHECK(calls == 2);
  CHECK(p.qa.send_credits() == 8);
}

// An on() handler runs inside the loop's drain of the CQ, which cannot finish until the
// handler returns: a run() there waited for tasks whose completions that drain still
// held, in epoll_wait for ever (found by an audit). run() and run(t) are refused there,
// as from a task; poll() does not block and stays allowed.
TEST_CASE("async_completion_queue: run() or run(t) from an on() handler the loop runs is refused; poll() works") {
  plain_pair p;
  // A refused run(t) had spawned t already: it ran later, on the handler's objects, gone
  // by then (an audit's use-after-free).
  bool value_ran = false;
  auto value = [&]() -> task<int> {
    value_ran = true;
    co_return 1;
  };
  std::vector<std::string> errors;
  bool polled = false;
  p.a.cq.queue().on(p.qa, [&](const completion<B>&) {
    errors.push_back(refusal([&] { p.loop.run(); }));
    errors.push_back(refusal([&] { (void)p.loop.run(value()); }));
    p.loop.poll();
    polled = true;
  });
  REQUIRE(p.qa.write(p.ma.local(0, 8), p.mb.remote().sub(0, 8), 1).ok());
  auto pause = [&]() -> task<void> { co_await p.loop.sleep_for(20ms); };
  p.loop.run(pause());
  REQUIRE(errors.size() == 2);
  for (const auto& e : errors) CHECK(e.find("from a completion handler") != std::string::npos);
  CHECK(polled);
  CHECK_FALSE(value_ran);
  CHECK(p.qa.send_credits() == 8);
}

// The same from a handler that the application's own poll of queue() runs: run() waited
// in epoll_wait for ever for a completion the rest of that poll's batch held (an audit:
// only the loop's own drain was refused).
TEST_CASE("async_completion_queue: run() or run(t) from an on() handler of the application's own poll is refused") {
  plain_pair p;
  auto pause = [&]() -> task<void> { co_await p.loop.sleep_for(20ms); };
  std::vector<std::string> errors;
  p.a.cq.queue().on(p.qa, [&](const completion<B>&) {
    errors.push_back(refusal([&] { p.loop.run(); }));
    errors.push_back(refusal([&] { p.loop.run(pause()); }));
  });
  REQUIRE(p.qa.write(p.ma.local(0, 8), p.mb.remote().sub(0, 8), 1).ok());
  std::size_t handled = 0;
  for (int i = 0; i < 1000 && handled == 0; ++i) handled = static_cast<std::size_t>(p.a.cq.queue().dispatch());
  REQUIRE(handled == 1);
  REQUIRE(errors.size() == 2);
  for (const auto& e : errors) CHECK(e.find("from a completion handler") != std::string::npos);
  CHECK(p.loop.tasks() == 0);
  p.loop.run();  // nothing left to run: returns
}

// The application's own wait() on queue() took the CQ's event and left it unarmed: no
// later completion raised one, and a coroutine awaiting a work request on that CQ slept
// for ever (found by an audit). The loop drains such a CQ on its next turn now.
TEST_CASE("async_completion_queue: after the application's own wait() on queue(), the loop still wakes for completions") {
  rig<> r;
  auto peer_cq = r.c.b.dev.create_cq<event_driven<>>(16);
  auto qd0 = r.c.a.pd.create_qp<rc>(r.c.a.cq.queue(), qp_cap{8, 8});
  auto qe0 = r.c.b.pd.create_qp<rc>(peer_cq, qp_cap{8, 8});
  const endpoint ed = qd0.local_endpoint(), ee = qe0.local_endpoint();
  auto qd = std::move(qd0).connect(ee);
  auto qe = std::move(qe0).connect(ed);
  REQUIRE(qd.post_recv(r.ma.local(512, 64), 7).ok());
  std::thread peer([&] {  // the remote side sends while this side sleeps in wait()
    std::this_thread::sleep_for(50ms);
    (void)qe.send(r.mb.local(0, 8), 9);
  });
  const wait_result got = r.c.a.cq.queue().wait(5s);
  peer.join();
  REQUIRE(got.count() == 1);
  auto write = [&]() -> task<wr_outcome> {
    co_return (co_await r.c.x().write(r.ma.local(8, 8), r.mb.remote().sub(8, 8)).within(2s)).outcome();
  };
  CHECK(r.loop.run(write()) == wr_outcome::completed);
}

// A CQ used directly, wrapped with completions in it: the constructor's drain ran their
// on() handler, whose loop.poll() (allowed there) reached the CQ's watch before anything
// owned it: bad_weak_ptr out of a noexcept callback, std::terminate (found by an audit).
TEST_CASE("async_completion_queue: a CQ wrapped with completions whose handler calls loop.poll()") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  auto ma = a.pd.allocate<rw>(256);
  auto mb = b.pd.allocate<rw>(256);
  auto cq = a.dev.create_cq<event_driven<>>(64);
  auto ia = a.pd.create_qp<rc>(cq, qp_cap{8, 8});
  auto ib = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8});
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto qa = std::move(ia).connect(eb);
  auto qb = std::move(ib).connect(ea);
  (void)cq.wait(0ms);  // arms the CQ: its first completion raises an event
  int calls = 0;
  cq.on(qa, [&](const completion<B>&) {
    ++calls;
    loop.poll();
  });
  REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 1).ok());
  REQUIRE(qa.write(ma.local(8, 8), mb.remote().sub(8, 8), 2).ok());
  acq wrapped(loop, std::move(cq));
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (calls < 2 && std::chrono::steady_clock::now() < end) loop.poll();
  CHECK(calls == 2);
}

TEST_CASE("async_completion_queue: completions nobody awaits yet are kept, oldest first") {
  plain_pair p;
  auto& loop = p.loop;
  auto& a = p.a;
  auto& ma = p.ma;
  auto& mb = p.mb;
  auto& qa = p.qa;
  for (std::uint64_t i = 1; i <= 3; ++i) REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), i).ok());
  auto run = [&]() -> task<void> {
    co_await loop.sleep_for(1ms);  // the loop drains the CQ meanwhile
    CHECK(a.cq.pending() == 3);
    for (std::uint64_t i = 1; i <= 3; ++i) {
      auto c = co_await a.cq.next();
      REQUIRE(c);
      CHECK(c->wr_id() == i);
    }
  };
  loop.run(run());
}

// `co_await std::move(n)` moves the awaitable into the coroutine frame (GCC 12): a
// second one, or one on a moved-from next(), dereferenced a null source and crashed.
TEST_CASE("async_completion_queue: a next() awaited again after a move is refused with usage_error, not a crash") {
  plain_pair p;
  auto& loop = p.loop;
  auto& a = p.a;
  auto run = [&]() -> task<void> {
    auto n = a.cq.next(1ms);
    CHECK_FALSE(co_await std::move(n));
    CHECK((co_await usage_error_of_await(n)).find("moved from or awaited") != std::string::npos);
    auto first = a.cq.next(1ms);
    auto second = std::move(first);
    CHECK_THROWS_AS((void)co_await std::move(first), usage_error);
    CHECK_FALSE(co_await std::move(second));  // the moved-to one still works
  };
  loop.run(run());
}

// Awaited in place (as clang awaits `co_await std::move(n)`: no move into the frame), a
// next() that gave its value waited again for the next one, where GCC refused it.
TEST_CASE("async_completion_queue: a next() awaited in place gives one value; awaited again, usage_error") {
  plain_pair p;
  auto run = [&]() -> task<void> {
    auto n = p.a.cq.next(1ms);
    CHECK_FALSE(co_await in_place{n});  // timed out: an empty value is a value too
    auto n_again = in_place{n};
    CHECK((co_await usage_error_of_await(n_again)).find("awaited already") != std::string::npos);
    REQUIRE(p.qb.post_recv(p.mb.local(0, 64), 7).ok());
    REQUIRE(p.qa.send(p.ma.local(0, 8), 3).ok());
    auto got = p.b.cq.next(1s);
    CHECK(co_await in_place{got});
    auto got_again = in_place{got};
    CHECK((co_await usage_error_of_await(got_again)).find("awaited already") != std::string::npos);
  };
  p.loop.run(run());
}

// queue() hands out the CQ itself. One assigned through it, or moved out of it, was no
// longer the CQ the loop waited on: completions of queue pairs made on the new one never
// woke a coroutine. And the moved-out one's descriptor, once closed, could be reused by
// the next async CQ's channel, which the first one then unregistered as it went.
TEST_CASE("async_completion_queue: a CQ replaced or moved out through queue() is a usage_error, not a silent hang") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  SUBCASE("replaced") {
    acq c(loop, a.dev.create_cq<event_driven<>>(64));
    c.queue() = a.dev.create_cq<event_driven<>>(128);
    CHECK_THROWS_WITH_AS(async_queue_pair(c, a.pd.create_qp<rc>(c.queue(), qp_cap{4, 4})),
                         doctest::Contains("queue()"), usage_error);
    auto wait = [&]() -> task<void> { (void)co_await c.next(50ms); };
    CHECK_THROWS_WITH_AS(loop.run(wait()), doctest::Contains("queue()"), usage_error);
  }
  // Reported once, the replaced CQ was then let be: a later run() waited for its next()
  // to time out (without a timeout, for ever), and completions on the CQ it was made
  // with, which the loop no longer drained, kept its descriptor readable: the loop spun.
  // Each run() says it now, at its first turn, until the async CQ is destroyed.
  SUBCASE("replaced, reported, and run again") {
    std::optional<acq> c(std::in_place, loop, a.dev.create_cq<event_driven<>>(64));
    c->queue() = a.dev.create_cq<event_driven<>>(128);
    int refused = 0;
    auto waits = [&]() -> task<void> {
      try {
        (void)co_await c->next(10s);
      } catch (const usage_error& e) {
        refused += std::string(e.what()).find("queue()") != std::string::npos;
      }
    };
    auto sleeps = [&]() -> task<void> { co_await loop.sleep_for(10s); };
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(loop.run(waits()), doctest::Contains("queue()"), usage_error);
    loop.run(waits());  // the first next() resumes with the error, a new one is refused at once
    CHECK(refused == 2);
    CHECK_THROWS_WITH_AS(loop.run(sleeps()), doctest::Contains("queue()"), usage_error);
    CHECK_THROWS_WITH_AS(loop.poll(), doctest::Contains("queue()"), usage_error);
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    c.reset();  // the loop runs on without it
    auto short_sleep = [&]() -> task<int> {
      co_await loop.sleep_for(1ms);
      co_return 7;
    };
    CHECK(loop.run(short_sleep()) == 7);
  }
  SUBCASE("moved out and destroyed, then another async CQ made") {
    std::optional<acq> first(std::in_place, loop, a.dev.create_cq<event_driven<>>(64));
    { auto taken = std::move(first->queue()); }
    acq second(loop, a.dev.create_cq<event_driven<>>(64));  // (took the freed descriptor number)
    first.reset();
    auto ma = a.pd.allocate<rw>(256);
    auto mb = b.pd.allocate<rw>(256);
    auto ia = a.pd.create_qp<rc>(second.queue(), qp_cap{4, 4});
    auto ib = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{4, 4});
    const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
    auto qa = std::move(ia).connect(eb);
    auto qb = std::move(ib).connect(ea);
    auto run = [&]() -> task<void> {
      REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 5).ok());
      std::optional<completion<B>> c = co_await second.next(2s);
      REQUIRE(c);
      CHECK(c->wr_id() == 5);
    };
    loop.run(run());
  }
}

// next(hours::max()) overflowed converting to steady_clock::duration: nullopt at once.
TEST_CASE("async_completion_queue: next() with a timeout past the clock's range waits for the completion") {
  plain_pair p;
  auto& loop = p.loop;
  auto& a = p.a;
  auto& ma = p.ma;
  auto& mb = p.mb;
  auto& qa = p.qa;
  auto later = [&]() -> task<void> {
    co_await loop.sleep_for(20ms);
    REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 9).ok());
  };
  auto run = [&]() -> task<void> {
    std::optional<completion<B>> c = co_await a.cq.next(std::chrono::hours::max());
    REQUIRE(c);
    CHECK(c->wr_id() == 9);
  };
  loop.spawn(later());
  loop.run(run());
}

TEST_CASE("async_completion_queue: simulated latency and retries (the mock's clock) advance without a busy wait") {
  mock::fabric_config cfg;
  cfg.latency = std::chrono::microseconds(50);
  testbed bed(cfg);
  event_loop loop;
  connected<> c(bed, loop);
  auto ma = c.a.pd.allocate<rw>(4096);
  auto mb = c.b.pd.allocate<rw>(4096);
  bed.fab.inject(mock::fault{mock::fault_kind::drop, c.x().qp_num(), 2});  // RC retransmits
  auto run = [&]() -> task<int> {
    int ok = 0;
    for (int i = 0; i < 4; ++i) ok += (co_await c.x().write(ma.local(0, 64), mb.remote().sub(0, 64))).ok();
    co_return ok;
  };
  CHECK(loop.run(run()) == 4);
}

TEST_CASE("async_completion_queue: refuses an empty completion queue (a busy_poll one does not compile)") {
  event_loop loop;
  CHECK_THROWS_AS(acq(loop, completion_queue<B, event_driven<>>{}), usage_error);
}

TEST_CASE("async_completion_queue: a moved-from one throws usage_error, and so does a queue pair made on it") {
  mock::fabric fab;
  event_loop loop;
  side a(fab, "mock0", loop);
  acq moved = std::move(a.cq);
  CHECK_THROWS_WITH_AS((void)a.cq.queue(), doctest::Contains("async_completion_queue::queue(): this"), usage_error);
  CHECK_THROWS_AS((void)a.cq.pending(), usage_error);
  CHECK_THROWS_AS((void)a.cq.next(), usage_error);
  CHECK_THROWS_AS((void)a.cq.next(1ms), usage_error);
  auto attach = [&] { return async_queue_pair(a.cq, a.pd.create_qp<rc>(moved.queue(), qp_cap{8, 8})); };
  CHECK_THROWS_AS(attach(), usage_error);
  CHECK(moved.pending() == 0);  // the state went with the move
}

// A handler set with queue().on() may destroy the async completion queue it runs from
// (its last owner), or another one whose event the loop took in the same epoll_wait: the
// drain went on in the freed object, and the loop called the other's freed watch.
TEST_CASE("async_completion_queue: a handler may destroy its own async CQ, or another one, while the loop drains") {
  mock::fabric fab;
  event_loop loop;
  device<B> da(fab, "mock0"), db(fab, "mock1");
  auto pa = da.create_pd();
  auto pb = db.create_pd();
  std::optional<acq> ca(std::in_place, loop, da.create_cq<event_driven<>>(64));
  std::optional<acq> cb(std::in_place, loop, db.create_cq<event_driven<>>(64));
  auto ma = pa.allocate<rw>(256);
  auto mb = pb.allocate<rw>(256);
  auto ia = pa.create_qp<rc>(ca->queue(), qp_cap{8, 8});
  auto ib = pb.create_qp<rc>(cb->queue(), qp_cap{8, 8});
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto qa = std::move(ia).connect(eb);
  auto qb = std::move(ib).connect(ea);
  int calls = 0;
  SUBCASE("its own") {
    ca->queue().on(qa, [&](const completion<B>&) {
      ++calls;
      ca.reset();
    });
  }
  SUBCASE("the other one, whose event came in the same turn") {
    auto drop_both = [&](const completion<B>&) {
      ++calls;
      ca.reset();
      cb.reset();
    };
    ca->queue().on(qa, drop_both);
    cb->queue().on(qb, drop_both);
    REQUIRE(qb.post_recv(mb.local(0, 64), 7).ok());
    REQUIRE(qa.send(ma.local(0, 8), 3).ok());  // a receive completion for cb too
  }
  REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 1).ok());
  REQUIRE(qa.write(ma.local(8, 8), mb.remote().sub(8, 8), 2).ok());
  auto idle = [&]() -> task<void> { co_await loop.sleep_for(20ms); };
  loop.run(idle());
  // Once a handler dropped them, the queues deliver the rest of that batch, no more.
  CHECK(calls >= 1);
  CHECK(calls <= 3);
  CHECK_FALSE(ca.has_value());
}

// Two sides on a fabric that gives a destroyed QP's number to the next QP made (as mlx5
// does), each with 256 registered bytes.
struct reused_numbers {
  static mock::fabric_config config() {
    mock::fabric_config c;
    c.reuse_qp_numbers = true;
    return c;
  }
  testbed bed{config()};
  event_loop loop;
  side a{bed.open(0), loop}, b{bed.open(1), loop};
  memory_region<B, rw> ma = a.pd.allocate<rw>(256), mb = b.pd.allocate<rw>(256);
};

// An async queue pair destroyed with a WR outstanding made its CQ drop the completions of
// its QP number, for good: a queue pair used directly that the device later gave the same
// number (mlx5 reuses them; the mock with reuse_qp_numbers) had its completions dropped
// too, and next() never saw them.
TEST_CASE_FIXTURE(reused_numbers, "async_completion_queue: a queue pair used directly that reuses a destroyed async queue pair's number gets its completions") {
  std::uint32_t gone = 0;
  {
    async_queue_pair<B, rc> doomed(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8}));
    gone = doomed.qp_num();
    auto never = doomed.recv(ma.local(0, 64));  // outstanding when its queue pair goes
  }
  SUBCASE("the CQ drained empty in between") {
    auto idle = [&]() -> task<void> { co_await loop.sleep_for(1ms); };
    loop.run(idle());
  }
  SUBCASE("at once") {}
  auto ia = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8});
  REQUIRE(ia.qp_num() == gone);  // the device gave the number again
  auto ib = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8});
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto qa = std::move(ia).connect(eb);
  auto qb = std::move(ib).connect(ea);
  auto run = [&]() -> task<void> {
    REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 5).ok());
    std::optional<completion<B>> c = co_await a.cq.next(2s);
    REQUIRE(c);
    CHECK(c->wr_id() == 5);
    CHECK(c->qp_num() == gone);
  };
  loop.run(run());
}

// The same number given again inside one batch: a queue pair used directly has an on()
// handler that destroys an async queue pair whose completions are later in the batch,
// then makes a queue pair that the device gives its number. The rest of the batch is the
// destroyed one's, but the new number being attached let them through to next(), with
// the async layer's own wr_ids (audit 16).
TEST_CASE_FIXTURE(reused_numbers, "async_completion_queue: a destroyed async queue pair's completions in the batch stay dropped when a handler gives its number again") {
  bool async_again = false;
  SUBCASE("the new one used directly") {}
  SUBCASE("the new one an async queue pair") { async_again = true; }
  auto pd0 = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8});
  auto pe0 = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8});
  const endpoint ed = pd0.local_endpoint(), ee = pe0.local_endpoint();
  auto d = std::move(pd0).connect(ee);
  auto e = std::move(pe0).connect(ed);
  std::optional<rts_qp<>> x;
  {
    async_queue_pair<B, rc> ix(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8}));
    async_queue_pair<B, rc> iy(b.cq, b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8}));
    const endpoint ex = ix.local_endpoint(), ey = iy.local_endpoint();
    x.emplace(std::move(ix).connect(ey));
    auto y = std::move(iy).connect(ex);
    const std::uint32_t gone = x->qp_num();
    std::optional<queue_pair<B, rc>> fresh_direct;
    std::optional<async_queue_pair<B, rc>> fresh_async;
    a.cq.queue().on(d, [&](const completion<B>&) {
      x.reset();
      if (async_again)
        fresh_async.emplace(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8}));
      else
        fresh_direct.emplace(a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8}));
    });
    std::vector<wr_outcome> outcomes;
    auto await_one = [](auto aw, std::vector<wr_outcome>& out) -> task<void> {
      const auto r = co_await std::move(aw);
      out.push_back(r.outcome());
    };
    auto run = [&]() -> task<void> {
      REQUIRE(d.write(ma.local(0, 8), mb.remote().sub(0, 8), 7).ok());  // first in the batch
      for (int i = 0; i < 3; ++i) loop.spawn(await_one(x->write(ma.local(8, 8), mb.remote().sub(8, 8)), outcomes));
      co_return;
    };
    loop.run(run());
    auto rest = [&]() -> task<void> {
      std::optional<completion<B>> c = co_await a.cq.next(50ms);  // the batch is drained here
      CHECK_FALSE(c.has_value());  // none of the destroyed one's
    };
    loop.run(rest());
    REQUIRE((fresh_async || fresh_direct));
    CHECK((fresh_async ? fresh_async->qp_num() : fresh_direct->qp_num()) == gone);
    CHECK(outcomes == std::vector<wr_outcome>(3, wr_outcome::cancelled));
  }
}

// The other side of that: a destroyed async queue pair's completions that a device
// leaves in the CQ (rxe) are still dropped, however many empty drains came before them
// while the queue pair lived, and a queue pair used directly afterwards gets its own.
TEST_CASE("async_completion_queue: completions a destroyed async queue pair left in the CQ (rxe) never reach next()") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;
  testbed bed(cfg);
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  auto ma = a.pd.allocate<rw>(256);
  auto mb = b.pd.allocate<rw>(256);
  auto pa = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8});
  auto pb = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8});
  std::optional<rts_qp<>> x;
  {
    async_queue_pair<B, rc> ia(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8}));
    async_queue_pair<B, rc> ib(b.cq, b.pd.create_qp<rc>(b.cq.queue(), qp_cap{8, 8}));
    const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
    x.emplace(std::move(ia).connect(eb));
    auto y = std::move(ib).connect(ea);
    auto run = [&]() -> task<void> {
      for (int i = 0; i < 3; ++i) CHECK((co_await x->write(ma.local(0, 8), mb.remote().sub(0, 8))).ok());
      co_await loop.sleep_for(1ms);  // empty drains while x lives
      // Two WRs complete at once (zero latency) and stay in the CQ: x goes before a drain.
      auto w1 = x->write(ma.local(0, 8), mb.remote().sub(0, 8));
      auto w2 = x->write(ma.local(8, 8), mb.remote().sub(8, 8));
      x.reset();
      CHECK((co_await std::move(w1)).outcome() == wr_outcome::cancelled);
      CHECK((co_await std::move(w2)).outcome() == wr_outcome::cancelled);
    };
    loop.run(run());
  }
  const endpoint ea = pa.local_endpoint(), eb = pb.local_endpoint();
  auto qa = std::move(pa).connect(eb);
  auto qb = std::move(pb).connect(ea);
  auto run = [&]() -> task<void> {
    CHECK_FALSE(co_await a.cq.next(5ms));  // the two left in the CQ were dropped
    REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 6).ok());
    std::optional<completion<B>> c = co_await a.cq.next(2s);
    REQUIRE(c);
    CHECK(c->wr_id() == 6);
  };
  loop.run(run());
  CHECK(a.cq.pending() == 0);
}

// An async completion queue outliving its event_loop, awaited by a task of another loop:
// the wait and its timeout were on the destroyed loop, which nothing runs any more, so
// the task never resumed (next(50ms) hung for ever while the new loop had a source of its
// own; here, with none, the new loop said nothing could wake it, blaming the wrong loop).
TEST_CASE("async_completion_queue: awaited after its event_loop was destroyed, a usage_error, not a hang") {
  testbed bed;
  auto loop = std::make_unique<event_loop>();
  auto a = std::make_unique<side>(bed.open(0), *loop);
  loop.reset();
  event_loop other;
  bool went_on = false;
  auto waits = [&]() -> task<void> {
    (void)co_await a->cq.next(50ms);
    went_on = true;
  };
  CHECK_THROWS_WITH_AS(other.run(waits()), doctest::Contains("was destroyed"), usage_error);
  CHECK_FALSE(went_on);
  CHECK(a->cq.pending() == 0);
}

// A next() moved while a coroutine awaited it left that coroutine's wait registered with
// no source: the completion that came for it dereferenced a null pointer (SIGSEGV).
TEST_CASE("async_completion_queue: a next() moved while awaited stays with its coroutine; the moved-to one is refused") {
  plain_pair p;
  auto& loop = p.loop;
  auto& a = p.a;
  auto& ma = p.ma;
  auto& mb = p.mb;
  auto& qa = p.qa;
  using next_type = decltype(a.cq.next());
  next_type* waiting = nullptr;
  std::optional<completion<B>> got;
  auto first = [&]() -> task<void> {
    auto n = a.cq.next();
    waiting = &n;
    got = co_await n;
  };
  std::string refused;
  auto second = [&]() -> task<void> {
    REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 5).ok());
    auto moved = std::move(*waiting);  // while `first` awaits it
    refused = co_await usage_error_of_await(moved);
    co_await loop.sleep_for(20ms);
  };
  loop.spawn(first());
  loop.run(second());
  CHECK(refused.find("awaited") != std::string::npos);
  REQUIRE(got);
  CHECK(got->wr_id() == 5);
}

// A next() that had its completion, its coroutine not yet resumed, awaited by a second
// coroutine: that one took the resumption (with nothing: as if timed out), the first
// never woke, and the wait it registered resumed the second again later.
TEST_CASE("async_completion_queue: a next() awaited by a second coroutine before the first resumed is refused") {
  plain_pair p;
  auto& loop = p.loop;
  auto& a = p.a;
  auto& ma = p.ma;
  auto& mb = p.mb;
  auto& qa = p.qa;
  using next_type = decltype(a.cq.next());
  next_type* waiting = nullptr;
  std::optional<completion<B>> got;
  auto first = [&]() -> task<void> {
    auto n = a.cq.next();
    waiting = &n;
    got = co_await n;
  };
  std::string refused;
  // Its timer is due in the turn that drains the completion: it is queued before
  // `first`'s resumption, and runs first.
  auto second = [&]() -> task<void> {
    REQUIRE(qa.write(ma.local(0, 8), mb.remote().sub(0, 8), 5).ok());
    co_await loop.sleep_for(0ms);
    REQUIRE_FALSE(got);  // (else `first` finished: *waiting is gone)
    try {
      auto& n = *waiting;  // awaited in place (GCC 12 would move `*waiting` into the frame)
      (void)co_await n;
    } catch (const usage_error& e) {
      refused = e.what();
    }
    co_await loop.sleep_for(20ms);
  };
  loop.spawn(first());
  loop.run(second());
  CHECK(refused.find("awaited") != std::string::npos);
  REQUIRE(got);
  CHECK(got->wr_id() == 5);
}

// poll() and wait() on queue() (rather than dispatch(), which the loop runs) took an
// async_queue_pair's completions for their own caller: the coroutine awaiting the WR
// never heard of it. They now go to the async layer whichever call polls them, and are
// not in the count of the call (docs/polling.md: count() is the completions delivered).
TEST_CASE_FIXTURE(rig<>, "async_completion_queue: poll() or wait() on queue() leaves an async_queue_pair's completions to it") {
  auto thief = [&]() -> int {
    int n = 0;
    SUBCASE("poll()") { n = c.a.cq.queue().poll(); }
    SUBCASE("wait()") { n = c.a.cq.queue().wait(0ms).count(); }
    SUBCASE("wait_for(1, f)") {
      n = c.a.cq.queue()
              .wait_for(1, [](const completion<B>&) { FAIL("an async_queue_pair's completion was handed out"); }, 20ms)
              .count();
    }
    SUBCASE("poll(f)") {
      n = c.a.cq.queue().poll([](const completion<B>&) { FAIL("an async_queue_pair's completion was handed out"); });
    }
    return n;
  };
  auto run = [&]() -> task<void> {
    auto w = c.x().write(ma.local(0, 8), mb.remote().sub(0, 8));
    CHECK(thief() == 0);  // the WRITE's completion, polled by the thief: not its, nor in its count
    CHECK((co_await w.within(2s)).ok());
  };
  loop.run(run());
}

// Audit 30, F1: an async queue pair destroyed with a WR outstanding, its completion still
// in the CQ (a device that keeps a destroyed QP's completions, as rxe; or later in the
// batch whose handler destroyed it, on any device), reached the application's own
// poll(f) or dispatch on queue(): unrouted, with the async layer's slot token as its
// wr_id, and in the call's count. docs/coroutines.md: dropped, and in no call's count.
TEST_CASE("async_completion_queue: a destroyed async queue pair's completion reaches no poll(f) or dispatch of queue()") {
  bool in_batch = false;
  mock::fabric_config cfg;
  SUBCASE("destroyed before the poll, rxe profile") { cfg.profile = mock::device_profile::rxe; }
  SUBCASE("destroyed by a handler earlier in the batch") { in_batch = true; }
  bool through_dispatch = false;
  SUBCASE("poll(f)") {}
  SUBCASE("dispatch(f)") { through_dispatch = true; }
  testbed bed{cfg};
  event_loop loop;
  side a{bed.open(0), loop}, b{bed.open(1), loop};
  auto ma = a.pd.allocate<rw>(256);
  auto mb = b.pd.allocate<rw>(256);
  // x: an async queue pair; its peer y and d, e: queue pairs used directly, on the same
  // CQs (the loop never runs: every poll here is the application's).
  std::optional<rts_qp<>> x;
  auto iy = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{4, 4});
  {
    async_queue_pair<B, rc> ix(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{4, 4}));
    x.emplace(std::move(ix).connect(iy.local_endpoint()));
  }
  auto y = std::move(iy).connect(x->local_endpoint());
  auto pd0 = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{4, 4});
  auto pe0 = b.pd.create_qp<rc>(b.cq.queue(), qp_cap{4, 4});
  const endpoint ed = pd0.local_endpoint(), ee = pe0.local_endpoint();
  auto d = std::move(pd0).connect(ee);
  auto e = std::move(pe0).connect(ed);
  if (in_batch) REQUIRE(d.write(ma.local(0, 8), mb.remote().sub(0, 8), 42).ok());  // its completion first
  {
    auto never = x->recv(ma.local(64, 64));  // posted now, awaited by nobody
    REQUIRE(y.send(mb.local(0, 16), 7).ok());
    REQUIRE(b.cq.queue().poll() == 1);  // the message landed: x's receive completion waits in a's CQ
    if (!in_batch) x.reset();
  }
  int seen = 0;
  auto f = [&](const completion<B>& c) {
    if (c.wr_id() == 42) return x.reset();  // the direct queue pair's WRITE: destroy the async one
    ++seen;
  };
  int n = 0;
  for (int i = 0; i < 100 && n == 0; ++i) n = through_dispatch ? a.cq.queue().dispatch(f) : a.cq.queue().poll(f);
  CHECK(seen == 0);
  CHECK(n == (in_batch ? 1 : 0));  // the direct queue pair's WRITE only
  CHECK(a.cq.queue().poll(f) == 0);
  CHECK(seen == 0);
}
