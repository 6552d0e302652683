#include "fixture.hpp"
#include "../../child_abort.hpp"
#include "../../sanitized.hpp"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace coro_test;


TEST_CASE("event_loop: timers resume in deadline order, and run() ends when every task has") {
  event_loop loop;
  std::vector<int> order;
  auto sleeper = [&](int id, std::chrono::milliseconds d) -> task<void> {
    co_await loop.sleep_for(d);
    order.push_back(id);
  };
  loop.spawn(sleeper(3, 30ms));
  loop.spawn(sleeper(1, 1ms));
  loop.spawn(sleeper(2, 15ms));
  CHECK(loop.tasks() == 3);
  loop.run();
  CHECK(loop.tasks() == 0);
  CHECK(order == std::vector<int>{1, 2, 3});
}

// As a WR's awaitable (async_queue_pair_test): a sleep destroyed by other code while a
// coroutine slept on it in place left that coroutine asleep for ever.
TEST_CASE("event_loop: a sleep destroyed while a coroutine awaits it in place refuses the wait") {
  event_loop loop;
  std::unique_ptr<decltype(loop.sleep_for(50ms))> s(new auto(loop.sleep_for(50ms)));  // (not movable)
  CHECK(destroyed_while_awaited(loop, s, [](auto& s) -> task<void> { co_await *s; }));
}

// The in-place awaiter lives to the end of its co_await's statement, which may wait
// again after it: another coroutine may then destroy the awaitable, nobody awaiting it
// any more. The awaiter's destructor read the freed awaitable (ASan: heap-use-after-free).
TEST_CASE("event_loop: a sleep destroyed after its co_await returned, in the same statement, is not touched again") {
  event_loop loop;
  std::unique_ptr<decltype(loop.sleep_for(1ms))> s(new auto(loop.sleep_for(1ms)));
  int x = 0;
  auto waiter = [&]() -> task<void> { x = (co_await *s, co_await loop.sleep_for(20ms), 2); };
  loop.spawn(waiter());
  loop.spawn(destroy_after(loop, s, 10ms));
  CHECK(run_within(loop, 2s));
  CHECK(x == 2);
}

// sleep_for took a steady_clock::duration: seconds::max() overflowed converting to it (at
// the caller's, undefined behaviour), came out negative, and the sleep ended at once.
TEST_CASE("event_loop: sleep_for a duration past the clock's range sleeps, not returns at once") {
  event_loop loop;
  bool woke = false;
  auto sleeper = [&]() -> task<void> {
    co_await loop.sleep_for(std::chrono::seconds::max());
    woke = true;
  };
  loop.spawn(sleeper());
  auto watch = [&]() -> task<void> { co_await loop.sleep_for(20ms); };
  loop.run(watch());
  CHECK_FALSE(woke);
  CHECK(loop.tasks() == 1);  // still asleep: the loop destroys it
}

TEST_CASE("event_loop: a task that throws stops run(), which can be called again for the rest") {
  event_loop loop;
  bool other_done = false;
  auto thrower = [&]() -> task<void> {
    co_await loop.sleep_for(1ms);
    throw std::runtime_error("task failed");
  };
  auto other = [&]() -> task<void> {
    co_await loop.sleep_for(20ms);
    other_done = true;
  };
  loop.spawn(thrower());
  loop.spawn(other());
  CHECK_THROWS_WITH_AS(loop.run(), "task failed", std::runtime_error);
  CHECK_FALSE(other_done);
  loop.run();
  CHECK(other_done);
}

// run(t) rethrew another task's exception from the turn t finished in, and t's value
// was lost, though its effects (here a SEND the peer received) had happened: a caller
// told it failed would repeat them (helper-104's audit). t's value comes back, and the
// next run() rethrows the other one.
TEST_CASE("event_loop: run(t) returns t's value when another task fails in the turn t finished in") {
  rig<> r;
  // The server's receive and the client's send complete in one turn (no wire latency).
  auto server = [](rts_qp<>& q, memory_region<B, rw>& m) -> task<void> {
    (void)co_await q.recv(m.local(0, 8));
    throw std::runtime_error("server task failed");
  };
  auto client = [](rts_qp<>& q, memory_region<B, rw>& m, bool& finished) -> task<int> {
    const wr_result<B> sent = co_await q.send(m.local(0, 8));
    finished = true;
    co_return sent.ok() ? 42 : -1;
  };
  r.loop.spawn(server(r.c.y(), r.mb));
  r.loop.poll();  // the receive is posted
  bool finished = false;
  int value = 0;
  CHECK_NOTHROW(value = r.loop.run(client(r.c.x(), r.ma, finished)));
  CHECK(finished);
  CHECK(value == 42);
  CHECK_THROWS_WITH_AS(r.loop.run(), "server task failed", std::runtime_error);
  CHECK(r.loop.tasks() == 0);
}

TEST_CASE("event_loop: waiting for something nothing can wake is a usage error, not a hang") {
  event_loop loop;
  mock::fabric fab;
  side s(fab, "mock0", loop);
  // A task waiting on a loop that has no source at all.
  event_loop bare;
  auto waits_forever = [](acq& cq) -> task<void> { (void)co_await cq.next(); };
  // The CQ belongs to `loop`, so `bare` has nothing registered.
  auto on_bare = [&]() -> task<void> { co_await waits_forever(s.cq); };
  bare.spawn(on_bare());
  CHECK_THROWS_AS(bare.run(), usage_error);
}

// Two tasks that failed in one turn: the loop kept the first failure only, so the
// second was lost (and run(t) lost t's own when another task's came first).
TEST_CASE("event_loop: failures of several tasks in one turn are each rethrown by a run(), in order") {
  event_loop loop;
  auto thrower = [&](const char* what) -> task<void> {
    co_await loop.sleep_for(1ms);
    throw std::runtime_error(what);
  };
  loop.spawn(thrower("first"));
  loop.spawn(thrower("second"));
  CHECK_THROWS_WITH_AS(loop.run(), "first", std::runtime_error);
  CHECK_THROWS_WITH_AS(loop.run(), "second", std::runtime_error);
  loop.run();  // nothing left
  CHECK(loop.tasks() == 0);
}

// Tasks failing with one exception object (rethrown from a shared future, a cache of
// errors...): the loop took the second for the first reported again and dropped it, so
// one run() rethrew for three failed tasks (an audit). Each task's failure is its own.
TEST_CASE("event_loop: tasks failing with the same exception object are each rethrown by a run()") {
  event_loop loop;
  const std::exception_ptr shared = std::make_exception_ptr(std::runtime_error("shared"));
  auto thrower = [&]() -> task<void> {
    co_await loop.sleep_for(1ms);
    std::rethrow_exception(shared);
  };
  for (int i = 0; i < 3; ++i) loop.spawn(thrower());
  int rethrown = 0;
  for (int i = 0; i < 5 && loop.tasks() + rethrown > 0; ++i) {
    try {
      loop.run();
      break;
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "shared");
      ++rethrown;
    }
  }
  CHECK(rethrown == 3);
  CHECK(loop.tasks() == 0);
}

TEST_CASE("event_loop: poll() runs what is ready without sleeping") {
  event_loop loop;
  int steps = 0;
  auto stepper = [&]() -> task<void> {
    ++steps;
    co_await loop.sleep_for(1h);
    ++steps;
  };
  loop.spawn(stepper());
  loop.poll();
  loop.poll();
  CHECK(steps == 1);
  CHECK(loop.tasks() == 1);
}

namespace event_loop_test {  // named: a coroutine frame's field types need linkage
// Counts its live instances.
struct counted {
  static inline int live = 0;
  int v = 0;
  explicit counted(int x) : v(x) { ++live; }
  counted(counted&& o) noexcept : v(o.v) { ++live; }
  counted& operator=(counted&&) = default;
  ~counted() { --live; }
};
}  // namespace event_loop_test
using event_loop_test::counted;

// run(t) that rethrows another task's exception left t running with references to its
// own dead locals (the result's optional, a "finished" flag), which t wrote when the loop
// ran again (UBSan: an invalid bool; the value was built in a dead frame, never destroyed).
TEST_CASE("event_loop: run(t) that rethrows another task's exception leaves t running safely") {
  event_loop loop;
  auto fails = [&]() -> task<void> {
    co_await loop.sleep_for(1ms);
    throw std::runtime_error("the other task failed");
  };
  auto slow = [&]() -> task<counted> {
    co_await loop.sleep_for(20ms);
    co_return counted(7);
  };
  bool slow_void_done = false;
  auto slow_void = [&]() -> task<void> {
    co_await loop.sleep_for(20ms);
    slow_void_done = true;
  };
  loop.spawn(fails());
  CHECK_THROWS_WITH_AS((void)loop.run(slow()), "the other task failed", std::runtime_error);
  loop.spawn(fails());
  CHECK_THROWS_WITH_AS(loop.run(slow_void()), "the other task failed", std::runtime_error);
  CHECK(loop.tasks() == 2);  // both keep running
  loop.run();
  CHECK(slow_void_done);
  CHECK(counted::live == 0);  // the value nobody took back was destroyed
  CHECK(loop.run(slow()).v == 7);
  CHECK(counted::live == 0);
}

// Destroying the loop destroyed every task at once, the one running the destructor too:
// its frame went while it ran (ASan: heap-use-after-free), and run() read the dead loop.
TEST_CASE("event_loop: destroyed from inside one of its tasks, it lets that task run on, then run() says so") {
  struct on_destroy {
    bool& flag;
    ~on_destroy() { flag = true; }
  };
  auto loop = std::make_unique<event_loop>();
  bool other_gone = false, other_woke = false, killer_gone = false, killer_went_on = false;
  auto other = [&]() -> task<void> {
    on_destroy g{other_gone};
    co_await loop->sleep_for(1h);
    other_woke = true;
  };
  SUBCASE("the task finishes after destroying its loop") {
    auto killer = [&]() -> task<void> {
      on_destroy g{killer_gone};
      co_await loop->sleep_for(1ms);
      loop.reset();
      killer_went_on = true;  // its frame is still there
    };
    loop->spawn(other());
    loop->spawn(killer());
    CHECK_THROWS_WITH_AS(loop->run(), doctest::Contains("destroyed by one of its own tasks"), usage_error);
  }
  SUBCASE("the task waits again after destroying its loop, and is destroyed then") {
    auto killer = [&]() -> task<void> {
      on_destroy g{killer_gone};
      auto later = loop->sleep_for(1h);  // its awaiter keeps what it needs of the loop
      co_await loop->sleep_for(1ms);
      loop.reset();
      killer_went_on = true;
      co_await later;
    };
    loop->spawn(other());
    SUBCASE("run()") {
      loop->spawn(killer());
      CHECK_THROWS_WITH_AS(loop->run(), doctest::Contains("destroyed by one of its own tasks"), usage_error);
    }
    SUBCASE("run(t)") {
      CHECK_THROWS_WITH_AS(loop->run(killer()), doctest::Contains("destroyed by one of its own tasks"), usage_error);
    }
  }
  CHECK(killer_went_on);
  CHECK(killer_gone);
  CHECK(other_gone);
  CHECK_FALSE(other_woke);
}

TEST_CASE("event_loop: run(t) whose task destroys the loop and finishes returns its value") {
  auto loop = std::make_unique<event_loop>();
  auto killer = [&]() -> task<int> {
    co_await loop->sleep_for(1ms);
    loop.reset();
    co_return 42;
  };
  CHECK(loop->run(killer()) == 42);
}

// sleep_for's awaiter held its loop's state by reference: made on a loop that was then
// destroyed, and awaited by a task of another loop, it armed its timer in freed memory
// (ASan: heap-use-after-free), and the task then waited for a timer nothing runs.
TEST_CASE("event_loop: a sleep_for awaited after its loop was destroyed is a usage_error, not a use after free") {
  auto gone = std::make_unique<event_loop>();
  event_loop other;
  bool went_on = false;
  auto sleeper = [&]() -> task<void> {
    auto s = gone->sleep_for(1ms);
    gone.reset();
    co_await s;
    went_on = true;
  };
  CHECK_THROWS_WITH_AS(other.run(sleeper()), doctest::Contains("was destroyed"), usage_error);
  CHECK_FALSE(went_on);
}

// A sleep made on one loop and awaited by a task of another: the first loop would resume
// that task in its own turn (and not at all while the other one runs).
TEST_CASE("event_loop: a sleep_for awaited by a task of another event_loop is a usage_error") {
  event_loop loop, other;
  auto sleeper = [&]() -> task<void> { co_await loop.sleep_for(1ms); };
  CHECK_THROWS_WITH_AS(other.run(sleeper()), doctest::Contains("another event_loop"), usage_error);
}

// A sleep awaited by a second coroutine while the first slept took the first one's
// resumption: the first never woke (run() then had nothing left to wake it).
TEST_CASE("event_loop: a sleep_for awaited by a second coroutine is a usage_error; the first still wakes") {
  event_loop loop;
  using sleep_type = decltype(loop.sleep_for(10ms));
  sleep_type* sleeping = nullptr;
  bool first_woke = false;
  std::string refused;
  auto first = [&]() -> task<void> {
    auto s = loop.sleep_for(10ms);
    sleeping = &s;
    co_await s;
    first_woke = true;
  };
  auto second = [&]() -> task<void> {
    try {
      auto& s = *sleeping;  // (GCC 12 would copy `*sleeping` into the frame)
      co_await s;           // while `first` sleeps on it
    } catch (const usage_error& e) {
      refused = e.what();
    }
  };
  loop.spawn(first());
  loop.spawn(second());
  CHECK_NOTHROW(loop.run());
  CHECK(first_woke);
  CHECK(refused.find("awaited by another coroutine") != std::string::npos);
}

// run() from inside one of the loop's tasks waited for every task, the caller too, which
// could not finish until run() returned: it blocked for ever on a loop with a completion
// queue, and on this bare loop ended with a message about sources nothing can wake.
TEST_CASE("event_loop: run(), run(t) and poll() called from one of its own tasks are refused, saying why; t never runs") {
  event_loop loop;
  bool other_ran = false;
  auto other = [&]() -> task<void> {
    co_await loop.sleep_for(20ms);
    other_ran = true;
  };
  // A refused run(t) had spawned t already: it ran later, on the caller's objects, gone
  // by then (an audit's use-after-free).
  bool value_ran = false;
  auto value = [&]() -> task<int> {
    value_ran = true;
    co_return 1;
  };
  std::vector<std::string> errors;
  auto reenters = [&]() -> task<void> {
    errors.push_back(refusal([&] { loop.run(); }));
    errors.push_back(refusal([&] { (void)loop.run(value()); }));
    errors.push_back(refusal([&] { loop.poll(); }));
    co_return;
  };
  loop.spawn(other());
  loop.spawn(reenters());
  loop.run();
  CHECK(other_ran);
  REQUIRE(errors.size() == 3);
  for (const auto& e : errors) CHECK(e.find("from inside one of its own tasks") != std::string::npos);
  CHECK_FALSE(value_ran);
  CHECK(loop.tasks() == 0);
}

#if !RDMAKIT_CORO_IBVERBS
// A completion queue or device_events made on (or destroyed off) a loop another thread
// was running changed its list of descriptors while that thread read it: TSan's races,
// and now and then a freed device_events' progress called (ASan; audit 49). Made there,
// it is a usage_error; destroyed there (a destructor cannot throw), the program ends,
// saying why. Best effort, as for a CQ (a registration just before the loop's thread
// enters run() is not seen).
TEST_CASE("event_loop: an async completion queue made on a loop another thread is running is a usage_error") {
  testbed bed;
  event_loop loop;
  device<B> dev = bed.open(0);
  std::atomic<bool> inside{false};
  auto sleeper = [&]() -> task<void> {
    inside = true;
    co_await loop.sleep_for(400ms);
  };
  loop.spawn(sleeper());
  std::string error;
  std::thread other([&] {
    while (!inside) std::this_thread::yield();
    error = refusal([&] { acq cq(loop, dev.create_cq<event_driven<>>(16)); });
  });
  loop.run();
  other.join();
  CHECK(error.find("another thread is inside") != std::string::npos);
  acq later(loop, dev.create_cq<event_driven<>>(16));  // the loop idle: fine
}

#if !defined(RDMAKIT_TEST_TSAN)  // (a fork of a threaded program: not under TSan)
TEST_CASE("event_loop: an async completion queue or the loop destroyed while another thread runs it ends the program") {
  for (const bool whole_loop : {false, true}) {
    CAPTURE(whole_loop);
    testbed bed;
    device<B> dev = bed.open(0);
    std::optional<event_loop> loop(std::in_place);
    std::optional<acq> cq(std::in_place, *loop, dev.create_cq<event_driven<>>(16));
    std::atomic<bool> inside{false};
    auto sleeper = [&]() -> task<void> {
      inside = true;
      co_await loop->sleep_for(600ms);
    };
    loop->spawn(sleeper());
    std::thread runner([&] { loop->run(); });
    while (!inside) std::this_thread::yield();
    // (The runner's mark on the loop is in the child's memory too.)
    const auto ended = child_abort::run_in_child([&] {
      if (whole_loop) loop.reset();
      else cq.reset();
    });
    CHECK(ended.aborted);
    CHECK(ended.said.find("while another thread is inside run(), poll() or spawn() of that event_loop") !=
          std::string::npos);
    runner.join();
  }
}
#endif
#endif

// A loop is its thread's (docs/coroutines.md), but nothing said so: spawn() from a second
// thread while the first was inside run() pushed onto the task list run() was reading (a
// data race, TSan), and epoll_wait was never woken for the new task.
TEST_CASE("event_loop: spawn(), run() or poll() from another thread while one runs the loop is a usage_error") {
  event_loop loop;
  std::atomic<bool> inside{false};
  auto sleeper = [&]() -> task<void> {
    inside = true;
    co_await loop.sleep_for(400ms);
  };
  auto noop = []() -> task<void> { co_return; };
  loop.spawn(sleeper());
  std::vector<std::string> errors;
  std::thread other([&] {
    while (!inside) std::this_thread::yield();
    errors.push_back(refusal([&] { loop.spawn(noop()); }));
    errors.push_back(refusal([&] { loop.run(); }));
    errors.push_back(refusal([&] { loop.poll(); }));
  });
  loop.run();
  other.join();
  REQUIRE(errors.size() == 3);
  for (const auto& e : errors) CHECK(e.find("another thread is inside") != std::string::npos);
  // Handed over in turn, as when a loop is built on one thread and run on another: fine.
  bool ran = false;
  auto marks = [&]() -> task<void> {
    ran = true;
    co_return;
  };
  std::thread later([&] {
    loop.spawn(marks());
    loop.run();
  });
  later.join();
  CHECK(ran);
  CHECK(loop.tasks() == 0);
}
