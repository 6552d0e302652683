// Mock fabrics: destroyed in any order, before or after the devices opened from them,
// and opened explicitly on two threads at once.
#include "fixture.hpp"

#include <memory>
#include <thread>

using namespace policy_test;

TEST_CASE("fabrics destroyed in creation order leave current() on a live fabric") {
  auto a = std::make_unique<mock::fabric>();
  auto b = std::make_unique<mock::fabric>();
  CHECK(&mock::fabric::current() == b.get());
  a.reset();  // not the newest: b stays current
  CHECK(&mock::fabric::current() == b.get());
  b.reset();  // none left: the process default, never a destroyed one
  device<B> d("mock0");
  auto pd = d.create_pd();
  auto mr = pd.allocate<rw_access>(64);
  CHECK(mr.local().length == 64);
}

TEST_CASE("a fabric destroyed before the devices opened from it: they keep working") {
  mock::fabric_config cfg;
  cfg.devices.resize(3);
  for (int i = 0; i < 3; ++i) cfg.devices[static_cast<std::size_t>(i)].name = "only" + std::to_string(i);
  auto fab = std::make_unique<mock::fabric>(cfg);
  device<B> d0(*fab, "only0");
  device<B> d2(*fab, "only2");
  fab.reset();
  CHECK(d2.name() == "only2");
  auto pd0 = d0.create_pd();
  auto pd2 = d2.create_pd();
  auto cq0 = d0.create_cq(64);
  auto cq2 = d2.create_cq(64);
  auto mr0 = pd0.allocate<rw_access>(64);
  auto mr2 = pd2.allocate<rw_access>(64);
  auto pair = make_pair<rc>(pd0, cq0, pd2, cq2, qp_cap{8, 8});
  std::memcpy(mr0.data(), "fabric gone", 12);
  REQUIRE(pair.a.write(mr0.local(0, 12), mr2.remote(), 1).ok());
  REQUIRE(collect(cq0, 1).size() == 1);
  CHECK(std::memcmp(mr2.data(), "fabric gone", 12) == 0);
}

TEST_CASE("device(fabric, name) opens from that fabric only, whatever is current") {
  mock::fabric_config cfg;
  cfg.devices.resize(1);
  cfg.devices[0].name = "mine";
  mock::fabric mine(cfg);
  mock::fabric newer;  // current() is this one; it has no device "mine"
  device<B> d(mine, "mine");
  CHECK(d.name() == "mine");
  CHECK_THROWS_WITH_AS(device<B>(newer, "mine"), doctest::Contains("no device named \"mine\""), verbs_error);
}

TEST_CASE("two fabrics on two threads, devices opened explicitly: independent runs") {
  auto run = [](std::uint64_t seed, int* ok) {
    mock::fabric_config cfg;
    cfg.seed = seed;
    mock::fabric fab(cfg);
    device<B> dx(fab, "mock0"), dy(fab, "mock1");
    auto px = dx.create_pd();
    auto py = dy.create_pd();
    auto cx = dx.create_cq(64);
    auto cy = dy.create_cq(64);
    auto src = px.allocate<rw_access>(64);
    auto dst = py.allocate<rw_access>(64);
    auto pair = make_pair<rc>(px, cx, py, cy, qp_cap{8, 8});
    for (std::uint64_t i = 0; i < 200; ++i) {
      if (!pair.b.post_recv(dst.local(), i).ok() || !pair.a.send(src.local(0, 8), i).ok()) return;
      if (collect(cx, 1).size() != 1 || collect(cy, 1).size() != 1) return;
    }
    *ok = 1;
  };
  int ok1 = 0, ok2 = 0;
  std::thread t1(run, 1, &ok1), t2(run, 2, &ok2);
  t1.join();
  t2.join();
  CHECK(ok1 == 1);
  CHECK(ok2 == 1);
}
