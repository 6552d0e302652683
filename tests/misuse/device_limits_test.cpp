// The mock enforces the object limits it reports (max_qp, max_cq, max_mr, max_pd,
// max_ah): one more fails with ENOMEM, as on hardware, and destroying one makes room.
#include "fixture.hpp"

#include <optional>
#include <vector>

using namespace policy_test;

namespace {
mock::fabric_config two_of_each() {
  mock::fabric_config cfg;
  cfg.devices.resize(1);
  cfg.devices[0].name = "small";
  auto& l = cfg.devices[0].limits;
  l.max_qp = l.max_cq = l.max_mr = l.max_pd = l.max_ah = 2;
  return cfg;
}
template <class F>
void refused(F&& make, const char* limit) {
  try {
    (void)make();
    FAIL("created one more than " << std::string(limit));
  } catch (const verbs_error& e) {
    CHECK(e.errno_value() == ENOMEM);
    CHECK(std::string(e.what()).find(limit) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("a third QP, CQ, MR, PD or AH on a device whose limits are 2 fails with ENOMEM") {
  mock::fabric fab(two_of_each());
  device<B> d(fab, "small");
  auto pd = d.create_pd();
  std::optional<protection_domain<B>> pd2(d.create_pd());
  refused([&] { return d.create_pd(); }, "max_pd");
  pd2.reset();
  CHECK(d.create_pd());  // room again

  auto cq = d.create_cq(64);
  std::optional<completion_queue<B>> cq2(d.create_cq(64));
  refused([&] { return d.create_cq(64); }, "max_cq");
  cq2.reset();

  auto q1 = pd.create_qp<rc>(cq, qp_cap{4, 4});
  std::optional<queue_pair<B, rc>> q2(pd.create_qp<rc>(cq, qp_cap{4, 4}));
  refused([&] { return pd.create_qp<rc>(cq, qp_cap{4, 4}); }, "max_qp");
  q2.reset();
  CHECK(pd.create_qp<rc>(cq, qp_cap{4, 4}));

  auto m1 = pd.allocate<rw_access>(64);
  std::optional<memory_region<B, rw_access>> m2(pd.allocate<rw_access>(64));
  refused([&] { return pd.allocate<rw_access>(64); }, "max_mr");
  m2.reset();
  CHECK(pd.allocate<rw_access>(64));

  auto a1 = pd.create_ah(q1.local_endpoint());
  std::optional<address_handle<B>> a2(pd.create_ah(q1.local_endpoint()));
  refused([&] { return pd.create_ah(q1.local_endpoint()); }, "max_ah");
  a2.reset();
  CHECK(pd.create_ah(q1.local_endpoint()));
}
