#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("endpoint: value type with equality") {
  endpoint a;
  CHECK(a.mtu == mtu::mtu_1024);
  CHECK(a.gid.is_zero());
  endpoint b = a;
  b.qpn = 5;
  CHECK(a != b);
  b.qpn = 0;
  CHECK(a == b);
}

TEST_CASE("a queue pair describes itself: RoCEv2 IPv4-mapped GID, 24-bit PSN, port MTU") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto q = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  auto e = q.local_endpoint();
  CHECK(e.qpn == q.qp_num());
  CHECK(e.psn <= psn_mask);
  CHECK(e.gid == gid::from_ipv4(10, 0, 0, 1));
  CHECK(q.gid_index() == 1);
  CHECK(e.mtu == x.dev.port(1).active_mtu);
  qp_options o;
  o.psn = 0xffffff;  // the largest (a wider one is refused: queue_pair_test)
  auto q2 = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, o);
  CHECK(q2.local_endpoint().psn == 0xffffff);
}
