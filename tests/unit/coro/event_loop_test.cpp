#include "fixture.hpp"

#include <string>
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
