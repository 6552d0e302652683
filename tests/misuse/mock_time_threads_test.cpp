// Simulated time and threads: once a second thread uses a mock fabric, its clock follows
// the wall clock, so a peer that reaches RTR 50 ms late on another thread is reached by
// RC retransmission, as on a NIC (instead of the retry budget burning in microseconds).
#include "fixture.hpp"

#include <atomic>
#include <future>
#include <thread>

using namespace policy_test;

TEST_CASE("a peer that reaches RTR 50 ms late on another thread is still reached by RC retries") {
  using namespace std::chrono;
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::memcpy(src.data(), "late peer", 10);
  std::promise<endpoint> peer_ep, my_ep;
  std::atomic<bool> done{false};
  std::thread peer([&] {
    auto qb = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
    peer_ep.set_value(qb.local_endpoint());
    const endpoint ea = my_ep.get_future().get();
    std::this_thread::sleep_for(milliseconds(50));  // late: the first WRITE finds it in INIT
    auto b = std::move(qb).connect(ea);
    while (!done.load()) std::this_thread::sleep_for(milliseconds(1));
  });
  auto qa = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  const endpoint eb = peer_ep.get_future().get();
  my_ep.set_value(qa.local_endpoint());
  auto a = std::move(qa).connect(eb);  // default: 67 ms ACK timeout, 6 retries
  const auto t0 = steady_clock::now();
  REQUIRE(a.write(src.local(0, 10), dst.remote(), 1).ok());
  std::vector<seen> got;
  while (got.empty() && steady_clock::now() - t0 < seconds(5)) {
    (void)x.cq.poll([&](const completion<B>& c) { got.push_back(copy(c)); });
    std::this_thread::yield();
  }
  const auto took = steady_clock::now() - t0;
  done = true;
  peer.join();
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(took >= milliseconds(45));
  CHECK(std::memcmp(dst.data(), "late peer", 10) == 0);
}

TEST_CASE("one thread alone still jumps the clock: a retry budget toward a peer that never answers ends at once") {
  using namespace std::chrono;
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<rw_access>(64);
  auto qb = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});  // never connected
  auto a = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8}).connect(qb.local_endpoint());
  const auto t0 = steady_clock::now();
  REQUIRE(a.write(src.local(0, 8), remote_region<>::unchecked(0, 0, 0), 1).ok());
  auto got = collect(x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::retry_exc_err);
  CHECK(steady_clock::now() - t0 < milliseconds(400));  // 7 × 67 ms simulated, not waited
  CHECK(fab.now() >= milliseconds(7 * 67));
}

// A thread that only flips ports (or injects faults) did not count as using the fabric:
// the one thread that posted kept jumping the clock, and an RC WRITE posted while the
// peer's port was down for 50 ms of wall time spent its whole retry budget in that time.
TEST_CASE("a port flipped from another thread paces the clock: RC retries outlast a 50 ms unplug") {
  using namespace std::chrono;
  mock::fabric fab;
  std::atomic<int> stage{0};  // 1: connected; 2: port down; 3: posted
  wc_status status = wc_status::general_err;
  std::thread worker([&] {  // the only thread that calls verbs
    side x(fab, "mock0"), y(fab, "mock1");
    auto src = x.pd.allocate<rw_access>(64);
    auto dst = y.pd.allocate<rw_access>(64);
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});  // 67 ms ACK timeout, 6 retries
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    const bool posted = p.a.write(src.local(0, 8), dst.remote().sub(0, 8), 1).ok();
    stage = 3;
    const auto t0 = steady_clock::now();
    while (posted && status == wc_status::general_err && steady_clock::now() - t0 < seconds(5))
      (void)x.cq.poll([&](const completion<B>& c) { status = c.status(); });
  });
  while (stage.load() != 1) std::this_thread::yield();
  fab.set_port_up("mock1", 1, false);
  stage = 2;
  while (stage.load() != 3) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(50));
  fab.set_port_up("mock1", 1, true);
  worker.join();
  CHECK(status == wc_status::success);
}

// A thread asleep in wait() on an event-driven CQ was not woken when another thread
// posted a message toward it over a wire with latency: scheduling the message notified
// no one, so the sleeper woke at its timeout, or never with hours::max() (audit 42).
TEST_CASE_TEMPLATE("with wire latency, a waiter asleep on its CQ wakes for a message another thread posted", P,
                   event_driven<>, adaptive<>) {
  using namespace std::chrono;
  for (const mock::clock_mode mode : {mock::clock_mode::automatic, mock::clock_mode::simulated}) {
    INFO("clock mode " << static_cast<int>(mode));
    mock::fabric_config cfg;
    cfg.latency = microseconds(10);
    cfg.clock = mode;
    mock::fabric fab(cfg);
    side x(fab, "mock0");
    device<B> dy(fab, "mock1");
    auto pdy = dy.create_pd();
    auto scq = dy.create_cq<P>(64);
    auto src = x.pd.allocate<rw_access>(64);
    auto dst = pdy.allocate<rw_access>(64);
    auto p = make_pair<rc>(x.pd, x.cq, pdy, scq, qp_cap{8, 8});
    REQUIRE(p.b.post_recv(dst.local(0, 8), 1).ok());
    std::atomic<int> stage{0};
    wait_result r{0};
    steady_clock::time_point woke;
    std::thread waiter([&] {
      (void)scq.poll();
      stage = 1;
      r = scq.wait([](const completion<B>&) {}, seconds(5));
      woke = steady_clock::now();
    });
    while (stage.load() != 1) std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(30));  // asleep by now
    const auto posted = steady_clock::now();
    REQUIRE(p.a.post(op::send<>{src.local(0, 8)}, 7).ok());  // and no call after it
    waiter.join();
    CHECK(r.count() == 1);
    CHECK(woke - posted < seconds(2));  // its timeout is 5 s
  }
}
