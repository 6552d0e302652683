// Objects the documentation lets threads share (docs/ownership-and-threads.md, "Threads":
// different queue pairs and CQs may be used from different threads), used so from two
// threads at once. Run under ThreadSanitizer: a data race there is a failure.
#include "fixture.hpp"

#include <array>
#include <thread>

using namespace policy_test;

TEST_CASE("UD queue pairs on one shared receive queue, created and destroyed on two threads, each with its own CQ") {
  mock::fabric fab;
  side y(fab, "mock0");
  auto srq = y.pd.create_srq({.max_wr = 64, .max_sge = 1});
  // One UD queue pair stays on the SRQ throughout: its receives must keep room for the GRH.
  auto keep = y.pd.create_qp<ud>(y.cq, srq, qp_cap{4, 0});
  constexpr int rounds = 300;
  auto churn = [&] {
    auto cq = y.dev.create_cq(128);
    for (int i = 0; i < rounds; ++i) {
      auto q = y.pd.create_qp<ud>(cq, srq, qp_cap{4, 0});
      (void)q;
    }
  };
  std::thread a(churn), b(churn);
  a.join();
  b.join();
  // A lost update of the SRQ's count of UD queue pairs would have dropped the GRH offset
  // while `keep` is still on it: a receive too small for the GRH would then be taken.
  auto buf = y.pd.allocate<rw_access>(64);
  CHECK(srq.post_recv(buf.local(0, 39), 1).status == post_status::recv_too_small);
  CHECK(srq.post_recv(buf.local(0, 64), 2).ok());
}
