// Mock fabrics: objects that devices are opened from, passed explicitly. A fabric you
// construct is never used implicitly: the one-line `device<B> dev("mock0")` opens from
// the process default fabric, the same object on every thread and for the whole run.
// Fabrics are destroyed in any order, before or after the devices opened from them,
// on any thread (ASan+UBSan in CI, asserts off).
#include "fixture.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace policy_test;

namespace {

/// A side opened by name only: what the one-line default gives.
struct by_name {
  device<B> dev;
  protection_domain<B> pd;
  completion_queue<B> cq;
  explicit by_name(const char* name) : dev(name), pd(dev.create_pd()), cq(dev.create_cq(256)) {}
};

/// Sends `n` UD datagrams from x to y; returns how many y received.
template <class X, class Y>
std::size_t ud_received(X& x, Y& y, int n) {
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{64, 64});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto tx = x.pd.template allocate<rw_access>(64);
  auto rx = y.pd.template allocate<rw_access>(std::size_t{64} * static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    if (!p.b.post_recv(rx.local(std::size_t{64} * static_cast<std::size_t>(i), 64), static_cast<std::uint64_t>(i)).ok())
      return 0;
  for (int i = 0; i < n; ++i)
    if (!p.a.send(ah.to(p.b.qp_num()), tx.local(0, 8), 1000 + static_cast<std::uint64_t>(i)).ok()) return 0;
  (void)collect(x.cq, static_cast<std::size_t>(n), 1000);
  std::size_t ok = 0;
  for (const auto& s : collect(y.cq, static_cast<std::size_t>(n), 1000)) ok += s.status == wc_status::success;
  return ok;
}

/// A fabric whose devices have other names than the default's, so a device opened by
/// name from the wrong fabric cannot go unnoticed.
mock::fabric_config named(const std::string& prefix) {
  mock::fabric_config cfg;
  cfg.devices.resize(2);
  cfg.devices[0].name = prefix + "0";
  cfg.devices[1].name = prefix + "1";
  return cfg;
}

}  // namespace

TEST_CASE("a fabric you construct is never used by device(name): its names, ports and faults stay its own") {
  mock::fabric local(named("local"));
  CHECK(device<B>::names() == std::vector<std::string>{"mock0", "mock1"});
  CHECK(device<B>::names(local) == std::vector<std::string>{"local0", "local1"});
  CHECK_THROWS_WITH_AS(device<B>("local0"), doctest::Contains("no device named \"local0\""), verbs_error);
  device<B> d("mock0");  // the default fabric's
  CHECK(d.name() == "mock0");
  device<B> l(local, "local0");
  CHECK(l.name() == "local0");
}

TEST_CASE("a port unplugged and faults injected on a local fabric do not reach devices opened by name") {
  mock::fabric local;  // the same device names as the default fabric
  local.set_port_up("mock0", 1, false);
  local.inject(mock::fault{mock::fault_kind::drop, 0, 0, 1.0, {}});  // every message, forever
  {
    // On the local fabric, explicitly: unplugged, and nothing arrives.
    side lx(local, "mock0"), ly(local, "mock1");
    CHECK(lx.dev.port().state == port_state::down);
    CHECK(ud_received(ly, lx, 4) == 0);
  }
  const auto local_packets = local.packets_sent();
  by_name x("mock0"), y("mock1");
  CHECK(x.dev.port().state == port_state::active);
  CHECK(y.dev.port().state == port_state::active);
  CHECK(ud_received(x, y, 8) == 8);
  CHECK(local.packets_sent() == local_packets);  // nothing went over the local wire
}

TEST_CASE("the default fabric is one object: on every thread, across the lifetime of other fabrics") {
  mock::fabric* const first = &mock::default_fabric();
  CHECK(&mock::default_fabric() == first);
  {
    mock::fabric a(named("a"));
    auto b = std::make_unique<mock::fabric>(named("b"));
    CHECK(&mock::default_fabric() == first);
    CHECK(&mock::default_fabric() != &a);
    CHECK(&mock::default_fabric() != b.get());
    CHECK(device<B>("mock1").name() == "mock1");
    b.reset();
    CHECK(&mock::default_fabric() == first);
  }
  CHECK(&mock::default_fabric() == first);

  // Another thread makes its own fabric and keeps it while this one opens by name.
  std::promise<void> made, done;
  auto made_f = made.get_future();
  auto done_f = done.get_future().share();
  mock::fabric* seen_there = nullptr;
  std::string there_error;
  std::thread other([&] {
    try {
      mock::fabric mine(named("mine"));
      seen_there = &mock::default_fabric();
      device<B> d("mock0");  // the default fabric's, not `mine`
      made.set_value();
      done_f.wait();
    } catch (const std::exception& e) {
      there_error = e.what();
      made.set_value();
    }
  });
  made_f.wait();
  std::string here_error;
  try {
    by_name x("mock0"), y("mock1");
    CHECK(ud_received(x, y, 4) == 4);
  } catch (const std::exception& e) {
    here_error = e.what();
  }
  done.set_value();
  other.join();
  CHECK(there_error == "");
  CHECK(here_error == "");
  CHECK(seen_there == first);
  CHECK(&mock::default_fabric() == first);
}

TEST_CASE("two fabrics on two threads, alive at once: independent of each other and of the default") {
  // a's fabric drops every message and has a port unplugged; b's is clean. Different
  // device names, so a name-only open of either would fail.
  struct result {
    std::size_t received = 0;
    std::size_t by_name_received = 0;
    bool default_untouched = false;
    std::chrono::nanoseconds clock{};
    std::string error;
  };
  std::atomic<int> ready{0};
  auto run = [&](const std::string& prefix, bool lossy, std::chrono::milliseconds advance, result* r) {
    try {
      mock::fabric_config cfg = named(prefix);
      cfg.seed = lossy ? 7 : 8;
      mock::fabric fab(cfg);
      if (lossy) {
        fab.inject(mock::fault{mock::fault_kind::drop, 0, 0, 1.0, {}});
        fab.set_port_up(prefix + "1", 1, false);
      }
      side x(fab, (prefix + "0").c_str()), y(fab, (prefix + "1").c_str());
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();  // both fabrics exist from here on
      fab.advance(advance);
      r->clock = fab.now();
      r->received = ud_received(x, y, 8);
      // Opened by name while both fabrics exist: the default fabric, untouched by either.
      by_name dx("mock0"), dy("mock1");
      r->default_untouched = device<B>::names() == std::vector<std::string>{"mock0", "mock1"} &&
                             dy.dev.port().state == port_state::active;
      r->by_name_received = ud_received(dx, dy, 8);
      ready.fetch_add(1);
      while (ready.load() < 4) std::this_thread::yield();  // neither fabric goes before both are done
    } catch (const std::exception& e) {
      r->error = e.what();
      ready.fetch_add(2);
    }
  };
  result ra, rb;
  std::thread ta(run, "a", true, std::chrono::milliseconds(5), &ra);
  std::thread tb(run, "b", false, std::chrono::milliseconds(9), &rb);
  ta.join();
  tb.join();
  CHECK(ra.error == "");
  CHECK(rb.error == "");
  CHECK(ra.received == 0);  // a's faults and unplugged port
  CHECK(rb.received == 8);  // never reach b
  CHECK(ra.by_name_received == 8);
  CHECK(rb.by_name_received == 8);
  CHECK(ra.default_untouched);
  CHECK(rb.default_untouched);
  CHECK(ra.clock >= std::chrono::milliseconds(5));
  CHECK(ra.clock < std::chrono::milliseconds(9));  // b's advance is not a's
  CHECK(rb.clock >= std::chrono::milliseconds(9));
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

namespace {
/// A fabric with a connection in use: an RC write posted and not polled yet.
struct busy_fabric {
  std::optional<mock::fabric> fab;
  std::optional<side> x, y;
  std::optional<memory_region<B, rw_access>> src, dst;
  std::optional<qp_pair<rc>> pair;
  explicit busy_fabric(int i) {
    mock::fabric_config cfg;
    cfg.seed = static_cast<std::uint64_t>(i + 1);
    cfg.latency = std::chrono::microseconds(5);  // the write is still on the wire
    fab.emplace(cfg);
    x.emplace(*fab, "mock0");
    y.emplace(*fab, "mock1");
    src.emplace(x->pd.allocate<rw_access>(64));
    dst.emplace(y->pd.allocate<rw_access>(64));
    pair.emplace(make_pair<rc>(x->pd, x->cq, y->pd, y->cq, qp_cap{8, 8}));
    std::memset(src->data(), 'a' + i, 64);
    REQUIRE(pair->a.write(src->local(0, 16), dst->remote(), 1).ok());
  }
  /// The posted write completes and lands; then a second one.
  bool still_works(int i) {
    auto first = collect(x->cq, 1);
    if (first.size() != 1 || first[0].status != wc_status::success) return false;
    if (!pair->a.write(src->local(16, 16), dst->remote().sub(16, 16), 2).ok()) return false;
    auto second = collect(x->cq, 1);
    if (second.size() != 1 || second[0].status != wc_status::success) return false;
    for (int k = 0; k < 32; ++k)
      if (static_cast<char>(dst->data()[k]) != 'a' + i) return false;
    return true;
  }
};
}  // namespace

TEST_CASE("three fabrics with connections in flight, the fabric objects destroyed in every order") {
  std::array<int, 3> order{0, 1, 2};
  int runs = 0;
  do {
    CAPTURE(order[0]);
    CAPTURE(order[1]);
    CAPTURE(order[2]);
    std::vector<std::unique_ptr<busy_fabric>> f;
    for (int i = 0; i < 3; ++i) f.push_back(std::make_unique<busy_fabric>(i));
    // The fabric objects go in this order (the last on another thread) while their
    // devices are open and a write is in flight; then every connection still works.
    for (int step = 0; step < 3; ++step) {
      const auto k = static_cast<std::size_t>(order[static_cast<std::size_t>(step)]);
      if (step < 2) {
        f[k]->fab.reset();
      } else {
        std::thread([&] { f[k]->fab.reset(); }).join();
      }
    }
    for (int i = 0; i < 3; ++i) CHECK(f[static_cast<std::size_t>(i)]->still_works(i));
    // Then the handles, in the reverse of the permutation.
    for (int step = 2; step >= 0; --step) f[static_cast<std::size_t>(order[static_cast<std::size_t>(step)])].reset();
    ++runs;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(runs == 6);
}

TEST_CASE("device(fabric, name) opens from that fabric only, whatever other fabrics exist") {
  mock::fabric_config cfg;
  cfg.devices.resize(1);
  cfg.devices[0].name = "mine";
  mock::fabric mine(cfg);
  mock::fabric newer;  // made later; it has no device "mine"
  device<B> d(mine, "mine");
  CHECK(d.name() == "mine");
  CHECK_THROWS_WITH_AS(device<B>(newer, "mine"), doctest::Contains("no device named \"mine\""), verbs_error);
  CHECK_THROWS_WITH_AS(device<B>("mine"), doctest::Contains("no device named \"mine\""), verbs_error);
}
