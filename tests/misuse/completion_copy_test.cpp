// A completion handed to a callback may be kept after it returns.
#include "fixture.hpp"

#include <vector>

using namespace policy_test;

TEST_CASE("completions kept after the callback keep their values across later polls") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto pair = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  std::vector<completion<B>> kept;
  for (std::uint64_t id = 10; id < 14; ++id) {
    REQUIRE(pair.a.write(mr.local(), dst.remote(), id).ok());
    // One per poll: each poll reuses the same stack batch.
    while (x.cq.poll([&](const completion<B>& c) { kept.push_back(c); }) == 0) {
    }
  }
  REQUIRE(kept.size() == 4);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    CHECK(kept[i].wr_id() == 10 + i);
    CHECK(kept[i].ok());
    CHECK(kept[i].opcode() == wc_opcode::rdma_write);
  }
}
