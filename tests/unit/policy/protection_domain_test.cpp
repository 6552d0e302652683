#include "fixture.hpp"

#include <array>
#include <span>
#include <type_traits>

using namespace policy_test;

TEST_CASE("protection domain: regions over caller memory and allocated memory") {
  mock::fabric fab;
  side x(fab, "mock0");
  std::array<std::byte, 256> buf{};
  auto borrowed = x.pd.register_memory<access::local_write>(std::span<std::byte>(buf));
  CHECK(borrowed.data() == buf.data());
  CHECK(borrowed.size() == 256);
  auto owned = x.pd.allocate<rw_access>(4096);
  CHECK(reinterpret_cast<std::uintptr_t>(owned.data()) % 4096 == 0);
  CHECK(owned.bytes()[100] == std::byte{0});
  CHECK(owned.lkey() != borrowed.lkey());
  CHECK_THROWS_AS(x.pd.register_memory<access::local_write>(nullptr, 0), usage_error);
}

TEST_CASE("protection domain: separate send and receive CQs are accounted separately") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto scq = x.dev.create_cq(16);
  auto rcq = x.dev.create_cq(32);
  auto q = x.pd.create_qp<rc>(scq, rcq, qp_cap{16, 32});
  CHECK(scq.reserved() == 16);
  CHECK(rcq.reserved() == 32);
  CHECK_THROWS_AS(x.pd.create_qp<rc>(scq, rcq, qp_cap{1, 1}), usage_error);
}

TEST_CASE("a region of another protection domain is refused with LOC_PROT_ERR") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto other_pd = x.dev.create_pd();
  auto foreign = other_pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  REQUIRE(p.a.write(foreign.local(), dst.remote(), 1).ok());
  auto s = collect(x.cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].status == wc_status::loc_prot_err);
  CHECK(p.a.in_error());
  CHECK(p.a.first_error() == wc_status::loc_prot_err);
}

// A CQ of another device (or another device object: another context) reached the
// backend: the mock refused it with EINVAL, ibv_create_qp sends the CQ's handle, which the
// kernel looks up among the PD's context's objects, where it may name another CQ (audit
// 34, F3). Refused by rdmakit, for queue pairs and pools alike, before any is made.
TEST_CASE("protection domain: a CQ of another device or device object is refused, naming both") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  device<B> x2(fab, "mock0");  // the same device, another context
  auto cq2 = x2.create_cq(64);
  for (auto* cq : {&y.cq, &cq2}) {
    CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(*cq, qp_cap{4, 4}),
                         doctest::Contains("completion queue was created from another device object"), usage_error);
    CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(x.cq, *cq, qp_cap{4, 4}),
                         doctest::Contains("completion queue was created from another device object"), usage_error);
    CHECK_THROWS_WITH_AS((void)x.pd.create_qp_pool<rc>(*cq, 2, qp_cap{4, 4}),
                         doctest::Contains("completion queue was created from another device object"), usage_error);
    CHECK(cq->attached() == 0);
  }
  CHECK(x.cq.attached() == 0);
}

TEST_CASE("protection domain: address handles from an endpoint carry a GRH on RoCE") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto q = y.pd.create_qp<ud>(y.cq, qp_cap{4, 4});
  auto ah = x.pd.create_ah(q.local_endpoint());
  CHECK(ah.attr().is_global);
  CHECK(ah.attr().grh.dgid == q.local_endpoint().gid);
  CHECK(ah.attr().grh.sgid_index == 1);
  endpoint no_gid;
  CHECK_THROWS_AS(x.pd.create_ah(no_gid), usage_error);
}

TEST_CASE("protection domain: ah_options name the port, the source GID and the hop limit") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto q = y.pd.create_qp<ud>(y.cq, qp_cap{4, 4});
  auto ah = x.pd.create_ah(q.local_endpoint(), {.gid_index = 0, .hop_limit = 7});
  CHECK(ah.attr().grh.sgid_index == 0);
  CHECK(ah.attr().grh.hop_limit == 7);
  CHECK(ah.attr().port_num == 1);
  CHECK_THROWS(x.pd.create_ah(q.local_endpoint(), {.port = 9}));
}

namespace {

// Generic code over the side type (so over B): the free factories need no `.template`.
template <class Side>
void use_free_factories(Side& x) {
  std::array<std::byte, 64> buf{};
  auto borrowed = register_memory<access::local_write>(x.pd, std::span<std::byte>(buf));
  auto owned = allocate<rw_access>(x.pd, 4096);
  auto pool = create_pool<rw_access>(x.pd, 64, 4);
  auto one_cq = create_qp<rc>(x.pd, x.cq, qp_cap{.max_send_wr = 8, .max_recv_wr = 8});
  auto two_cqs = create_qp<uc, signal_every<4>>(x.pd, x.cq, x.cq, qp_cap{.max_send_wr = 8, .max_recv_wr = 8});
  auto qps = create_qp_pool<rc>(x.pd, x.cq, 3, qp_cap{.max_send_wr = 2, .max_recv_wr = 2});
  CHECK(borrowed.data() == buf.data());
  CHECK(owned.size() == 4096);
  CHECK(pool.slots() == 4);
  static_assert(std::is_same_v<typename decltype(two_cqs)::signaling_policy, signal_every<4>>);
  CHECK(one_cq.qp_num() != two_cqs.qp_num());
  CHECK(qps.size() == 3);
  CHECK(x.cq.reserved() == 16 + 16 + 12);
}

}  // namespace

TEST_CASE("protection domain: the template factories as free functions, for generic code") {
  mock::fabric fab;
  side x(fab, "mock0");
  use_free_factories(x);
}
