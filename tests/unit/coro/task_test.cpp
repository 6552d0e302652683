#include "fixture.hpp"

#include <memory>
#include <stdexcept>
#include <string>

using namespace coro_test;

namespace {
struct tracked {
  explicit tracked(int& alive) : alive_(alive) { ++alive_; }
  ~tracked() { --alive_; }
  int& alive_;
};

task<int> value(int v) { co_return v; }
task<int> sum_of(int a, int b) { co_return co_await value(a) + co_await value(b); }
task<std::string> fails() {
  throw std::runtime_error("from the coroutine");
  co_return "";
}
task<void> holds(int& alive, event_loop& loop) {
  tracked t(alive);
  co_await loop.sleep_for(1h);  // never reached in the test: the loop goes first
}
}  // namespace

TEST_CASE("task: values pass through nested awaits") {
  event_loop loop;
  CHECK(loop.run(sum_of(2, 40)) == 42);
}

TEST_CASE("task: an exception escaping the coroutine is rethrown where it is awaited") {
  event_loop loop;
  auto outer = [](event_loop&) -> task<bool> {
    try {
      (void)co_await fails();
    } catch (const std::runtime_error& e) {
      co_return std::string(e.what()) == "from the coroutine";
    }
    co_return false;
  };
  CHECK(loop.run(outer(loop)));
  CHECK_THROWS_WITH_AS(loop.run(fails()), "from the coroutine", std::runtime_error);
}

TEST_CASE("task: destroying an unstarted or unfinished task destroys its frame") {
  int alive = 0;
  {
    event_loop loop;
    auto t = holds(alive, loop);
    CHECK(alive == 0);  // lazy: nothing ran
    CHECK_FALSE(t.done());
  }
  CHECK(alive == 0);
  {
    event_loop loop;
    loop.spawn(holds(alive, loop));
    loop.poll();  // starts it: it sleeps
    CHECK(alive == 1);
    CHECK(loop.tasks() == 1);
  }  // the loop destroys the unfinished task
  CHECK(alive == 0);
}

TEST_CASE("task: an empty task is refused when awaited or spawned") {
  event_loop loop;
  task<int> empty;
  CHECK_FALSE(empty);
  CHECK_THROWS_AS(loop.run(std::move(empty)), usage_error);
  CHECK_THROWS_AS(loop.spawn(task<void>{}), usage_error);
}

TEST_CASE("task: a task awaited a second time is refused with usage_error, not resumed or taken again") {
  event_loop loop;
  auto make_inner = [&]() -> task<std::string> {
    co_await loop.sleep_for(5ms);
    co_return "the value";
  };
  task<std::string> inner = make_inner();
  std::string first_got;
  bool second_refused = false;
  auto first = [&]() -> task<void> { first_got = co_await std::move(inner); };
  auto second = [&]() -> task<void> {
    try {
      (void)co_await std::move(inner);  // while `first` awaits it
    } catch (const usage_error& e) {
      second_refused = std::string(e.what()).find("already awaited") != std::string::npos;
    }
  };
  loop.spawn(first());
  loop.spawn(second());
  loop.run();
  CHECK(first_got == "the value");
  CHECK(second_refused);

  // Once finished, its value is not taken again.
  task<std::string> done = make_inner();
  auto twice = [&]() -> task<bool> {
    const std::string v = co_await std::move(done);
    try {
      (void)co_await std::move(done);
    } catch (const usage_error&) {
      co_return v == "the value";
    }
    co_return false;
  };
  CHECK(loop.run(twice()));
}

// The awaited task's variable stayed the frame's owner: destroying it while a coroutine
// awaited it destroyed the frame under the awaiter, which was never resumed (run() then
// slept for ever with a completion queue on the loop). Awaiting now moves the frame into
// the awaiting coroutine.
TEST_CASE("task: the task variable may go while its coroutine is awaited; the awaiter still gets the value") {
  event_loop loop;
  auto sleeper = [&]() -> task<int> {
    co_await loop.sleep_for(10ms);
    co_return 42;
  };
  std::optional<task<int>> child(sleeper());
  int got = 0;
  auto parent = [&]() -> task<void> { got = co_await std::move(*child); };
  auto dropper = [&]() -> task<void> {
    co_await loop.sleep_for(1ms);
    CHECK_FALSE(*child);  // empty: the awaiting coroutine holds the frame
    child.reset();
  };
  loop.spawn(parent());
  loop.spawn(dropper());
  loop.run();
  CHECK(got == 42);
}

// The awaiter `operator co_await` returns is public API too. Awaited in place (as clang
// does) a second time, it resumed a finished coroutine; awaited by a second coroutine, it
// resumed one suspended on something else (a SEGV under ASan).
TEST_CASE("task: the awaiter of operator co_await, awaited twice or by two coroutines, is refused") {
  event_loop loop;
  auto make_inner = [&]() -> task<int> {
    co_await loop.sleep_for(5ms);
    co_return 7;
  };

  SUBCASE("twice in one coroutine, after it finished") {
    auto a = make_inner().operator co_await();
    auto twice = [&]() -> task<std::string> {
      const int v = co_await in_place{a};
      try {
        (void)co_await in_place{a};
      } catch (const usage_error& e) {
        co_return std::to_string(v) + " " + e.what();
      }
      co_return "not refused";
    };
    const std::string got = loop.run(twice());
    CHECK(got.rfind("7 ", 0) == 0);
    CHECK(got.find("already awaited") != std::string::npos);
  }
  SUBCASE("by a second coroutine while the first awaits it") {
    auto a = make_inner().operator co_await();
    int first_got = 0;
    std::string second_error;
    auto first = [&]() -> task<void> { first_got = co_await in_place{a}; };
    auto second = [&]() -> task<void> {
      try {
        (void)co_await in_place{a};
      } catch (const usage_error& e) {
        second_error = e.what();
      }
    };
    loop.spawn(first());
    loop.spawn(second());
    loop.run();
    CHECK(first_got == 7);
    CHECK(second_error.find("another coroutine") != std::string::npos);
  }
}

// Each await of a task that finished at once nested a resumption: GCC makes the
// symmetric transfer a real tail call only when optimizing, so at -O0, -Og or under ASan
// a loop of a million such awaits overflowed the stack (SIGSEGV).
TEST_CASE("task: a loop of two million awaits of tasks that finish at once runs in constant stack") {
  auto one = []() -> task<int> { co_return 1; };
  auto sum = [&]() -> task<long> {
    long s = 0;
    for (int i = 0; i < (1 << 21); ++i) s += co_await one();
    co_return s;
  };
  event_loop loop;
  CHECK(loop.run(sum()) == (1 << 21));
}

