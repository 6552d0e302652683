#include "fixture.hpp"

#include <atomic>
#include <string>
#include <thread>

using namespace coro_test;

TEST_CASE("device_events: a port going down and up is awaited on the loop") {
  mock::fabric fab;
  event_loop loop;
  side a(fab, "mock0", loop);
  device_events<B> events(loop, a.dev);
  auto run = [&]() -> task<void> {
    CHECK_FALSE(co_await events.next(5ms));  // nothing yet
    fab.set_port_up("mock0", 1, false);
    std::optional<async_event> down = co_await events.next(1s);
    REQUIRE(down);
    CHECK(down->type == async_event_type::port_err);
    CHECK(down->port_num == 1);
    fab.set_port_up("mock0", 1, true);
    std::optional<async_event> up = co_await events.next(1s);
    REQUIRE(up);
    CHECK(up->type == async_event_type::port_active);
  };
  loop.run(run());
}

// next(hours::max()) overflowed converting to steady_clock::duration: nullopt at once.
TEST_CASE("device_events: next() with a timeout past the clock's range waits for the event") {
  mock::fabric fab;
  event_loop loop;
  side a(fab, "mock0", loop);
  device_events<B> events(loop, a.dev);
  auto later = [&]() -> task<void> {
    co_await loop.sleep_for(20ms);
    fab.set_port_up("mock0", 1, false);
  };
  auto run = [&]() -> task<void> {
    std::optional<async_event> ev = co_await events.next(std::chrono::hours::max());
    REQUIRE(ev);
    CHECK(ev->type == async_event_type::port_err);
  };
  loop.spawn(later());
  loop.run(run());
}

TEST_CASE("device_events: keeps the device open; events outlive no one") {
  mock::fabric fab;
  event_loop loop;
  std::optional<device_events<B>> events;
  {
    device<B> dev(fab, "mock0");
    events.emplace(loop, dev);
  }  // the handle goes; the events object keeps the device open
  fab.set_port_up("mock0", 1, false);
  auto run = [&]() -> task<void> {
    auto ev = co_await events->next(1s);
    CHECK(ev);
  };
  loop.run(run());
}

TEST_CASE("device_events: a shared receive queue's limit event wakes the loop") {
  mock::fabric fab;
  event_loop loop;
  side a(fab, "mock0", loop), b(fab, "mock1", loop);
  device_events<B> events(loop, b.dev);
  auto srq = b.pd.create_srq({.max_wr = 8});
  auto qa0 = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8});
  auto qb0 = b.pd.create_qp<rc>(b.cq.queue(), srq, qp_cap{8, 0});
  auto qa = std::move(qa0).connect(qb0.local_endpoint());
  auto qb = std::move(qb0).connect(qa.local_endpoint());
  auto ma = a.pd.allocate<rw>(256);
  auto mb = b.pd.allocate<rw>(256);
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(srq.post_recv(mb.local(i * 64, 64), i).ok());
  srq.arm_limit(3);
  auto run = [&]() -> task<void> {
    REQUIRE(qa.send(ma.local(0, 8), 1).ok());
    REQUIRE(qa.send(ma.local(0, 8), 2).ok());  // 2 receives left: below the limit of 3
    std::optional<async_event> ev = co_await events.next(1s);
    REQUIRE(ev);
    CHECK(ev->type == async_event_type::srq_limit_reached);
    CHECK(srq.raised(*ev));
  };
  loop.run(run());
}

TEST_CASE("device_events: a moved-from one throws usage_error") {
  mock::fabric fab;
  event_loop loop;
  device<B> dev(fab, "mock0");
  device_events<B> events(loop, dev);
  device_events<B> moved = std::move(events);
  CHECK_THROWS_WITH_AS((void)events.next(), doctest::Contains("device_events::next(): this"), usage_error);
  CHECK_THROWS_AS((void)events.next(1ms), usage_error);
}

// The awaitable of next() shares its code with async_completion_queue::next(): awaited
// again after `co_await std::move(n)` took it, it dereferenced a null source.
TEST_CASE("device_events: a next() awaited again after a move is refused with usage_error, not a crash") {
  mock::fabric fab;
  event_loop loop;
  device<B> dev(fab, "mock0");
  device_events<B> events(loop, dev);
  auto run = [&]() -> task<void> {
    auto n = events.next(1ms);
    CHECK_FALSE(co_await std::move(n));
    CHECK_FALSE((co_await usage_error_of_await(n)).empty());
    // Awaited in place (as clang awaits `co_await std::move(m)`), the same next() waited
    // again for the next value instead.
    auto m = events.next(1ms);
    CHECK_FALSE(co_await in_place{m});
    auto m_again = in_place{m};
    CHECK_FALSE((co_await usage_error_of_await(m_again)).empty());
  };
  loop.run(run());
}

// A second reader of one device's events used to be taken on: on the same loop epoll
// refused the descriptor (a verbs_error "epoll_ctl ... File exists"), on another loop
// both read the one queue and each took some of the events.
TEST_CASE("device_events: a second one on the same device is a usage_error; next_event() too while one awaits") {
  mock::fabric fab;
  event_loop loop, other;
  device<B> dev(fab, "mock0");
  std::optional<device_events<B>> events;
  events.emplace(loop, dev);
  CHECK_THROWS_WITH_AS(device_events<B>(loop, dev), doctest::Contains("already awaited"), usage_error);
  CHECK_THROWS_WITH_AS(device_events<B>(other, dev), doctest::Contains("already awaited"), usage_error);
  CHECK_THROWS_WITH_AS((void)dev.next_event(), doctest::Contains("device_events"), usage_error);
  fab.set_port_up("mock0", 1, false);
  auto run = [&]() -> task<void> {
    auto ev = co_await events->next(1s);  // the refusals took nothing
    REQUIRE(ev);
    CHECK(ev->type == async_event_type::port_err);
  };
  loop.run(run());
  events.reset();
  CHECK_FALSE(dev.next_event().has_value());  // the device's own reader again
  device_events<B> again(other, dev);         // and a new watcher, on another loop
  fab.set_port_up("mock0", 1, true);
  auto run2 = [&]() -> task<void> {
    auto ev = co_await again.next(1s);
    REQUIRE(ev);
    CHECK(ev->type == async_event_type::port_active);
  };
  other.run(run2());
  // Another device object opened on the same device has events of its own.
  device<B> second(fab, "mock0");
  device_events<B> beside(loop, second);
}

TEST_CASE("device_events: made while next_event() waits on another thread: one of the two is refused") {
  // Each event goes to one reader: a device_events made while a next_event() call waits
  // would lose to that call the events it is there to await. Whichever comes first, the
  // other is a usage_error.
  mock::fabric fab;
  device<B> dev(fab, "mock0");
  event_loop loop;
  std::atomic<int> refused{0};
  std::thread reader([&] {
    try {
      (void)dev.next_event(400ms);
    } catch (const usage_error&) {
      ++refused;
    }
  });
  std::this_thread::sleep_for(50ms);  // the reader waits by now, most likely (either order is checked)
  try {
    device_events<B> events(loop, dev);
    reader.join();  // while it exists
  } catch (const usage_error& e) {
    ++refused;
    CHECK(std::string(e.what()).find("next_event") != std::string::npos);
    reader.join();
  }
  CHECK(refused.load() == 1);
}
