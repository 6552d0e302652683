#include "fixture.hpp"

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
