// The mock never writes outside a live region: a READ or atomic whose local region is
// deregistered while it is outstanding fails with LOC_PROT_ERR when its response comes.
#include "fixture.hpp"

#include <optional>
#include <vector>

using namespace policy_test;

namespace {
// Two RC queue pairs on a fabric whose wire takes 10 µs (simulated), so a READ stays
// outstanding after the post.
struct slow_pair {
  static mock::fabric_config slow() {
    mock::fabric_config c;
    c.latency = std::chrono::microseconds(10);
    return c;
  }
  mock::fabric fab{slow()};
  side x{fab, "mock0"}, y{fab, "mock1"};
  queue_pair<B, rc, signal_all, qp_state::rts> a, b;
  memory_region<B, all_access> remote = y.pd.allocate<all_access>(64);
  slow_pair() {
    auto qa = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
    auto qb = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
    auto ea = qa.local_endpoint();
    a = std::move(qa).connect(qb.local_endpoint());
    b = std::move(qb).connect(ea);
    std::memset(remote.data(), 0x5a, remote.size());
  }
};
}  // namespace

// Posts `op` into a caller-owned buffer of `bytes` registered for it, deregisters the
// buffer while the WR is outstanding, then polls: LOC_PROT_ERR, every byte untouched.
template <class Op>
void deregistered_while_outstanding(std::size_t bytes, Op op) {
  slow_pair p;
  std::vector<std::byte> buf(bytes, std::byte{0});
  std::optional<memory_region<B, rw_access>> local(p.x.pd.register_memory<rw_access>(buf.data(), buf.size()));
  REQUIRE(op(p, local->local()).ok());
  local.reset();  // deregistered; the bytes stay ours
  auto got = collect(p.x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::loc_prot_err);
  for (auto b : buf) REQUIRE(b == std::byte{0});
}

TEST_CASE("READ into a region deregistered while outstanding: LOC_PROT_ERR, the memory is untouched") {
  deregistered_while_outstanding(64, [](slow_pair& p, const local_buffer& l) {
    return p.a.read(l, p.remote.remote(), 1);
  });
}

TEST_CASE("atomic into a region deregistered while outstanding: LOC_PROT_ERR, the memory is untouched") {
  deregistered_while_outstanding(8, [](slow_pair& p, const local_buffer& l) {
    return p.a.fetch_add(l, p.remote.remote().sub(0, 8), 1, 1);
  });
}

TEST_CASE("READ into a region still registered: the data arrives (the check is not over-eager)") {
  slow_pair p;
  auto local = p.x.pd.allocate<rw_access>(64);
  REQUIRE(p.a.read(local.local(), p.remote.remote(), 1).ok());
  auto got = collect(p.x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(std::to_integer<int>(local.data()[63]) == 0x5a);
}
