// A wait on the mock keeps its wall-clock timeout and lets other threads in, even when
// simulated time never runs dry (rnr_retry = 7 toward a peer that posts no receive).
#include "fixture.hpp"

#include <atomic>
#include <chrono>
#include <thread>

using namespace policy_test;

TEST_CASE("event-driven wait(300 ms) returns at its timeout under an endless RNR retry; other threads proceed") {
  using namespace std::chrono;
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq<event_driven<>>(64);
  auto src = x.pd.allocate<rw_access>(64);
  connect_options co;
  co.rnr_retry = 7;  // forever
  auto qa = x.pd.create_qp<rc>(cq, qp_cap{8, 8});
  auto qb = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  auto ea = qa.local_endpoint();
  auto a = std::move(qa).connect(qb.local_endpoint(), co);
  auto b = std::move(qb).connect(ea, co);
  REQUIRE(a.send(src.local(0, 8), 1).ok());  // b never posts a receive

  std::atomic<bool> waiting{true};
  std::atomic<int> other_calls{0};
  std::thread other([&] {
    while (waiting.load() && other_calls.load() < 20) {
      (void)B::device_names(fab);  // takes the fabric lock
      ++other_calls;
    }
  });
  const auto t0 = steady_clock::now();
  const auto r = cq.wait([](const completion<B>&) {}, milliseconds(300));
  const auto took = steady_clock::now() - t0;
  const int calls_during_wait = other_calls.load();
  waiting = false;
  other.join();
  CHECK(r.timed_out());  // nothing completed
  CHECK(took >= milliseconds(290));
  CHECK(took < seconds(5));
  CHECK(calls_during_wait >= 5);  // the other thread was not locked out for the whole wait
}
