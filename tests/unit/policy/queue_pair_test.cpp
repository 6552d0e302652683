#include "fixture.hpp"

#include <array>
#include <cstring>
#include <numeric>

using namespace policy_test;

TEST_CASE("walkthrough: 1 MiB over RC, then a wrong rkey gives REM_ACCESS_ERR") {
  mock::fabric fab;
  side a("mock0"), b("mock1");
  constexpr std::size_t mib = 1 << 20;
  auto mra = a.pd.allocate<rw_access>(mib);
  auto mrb = b.pd.allocate<rw_access>(mib);
  const qp_cap caps{128, 128, 2, 2, 0};
  auto qa0 = a.pd.create_qp<rc>(a.cq, caps);
  auto qb0 = b.pd.create_qp<rc>(b.cq, caps);
  auto qa = std::move(qa0).connect(qb0.local_endpoint());
  auto qb = std::move(qb0).connect(qa.local_endpoint());

  std::iota(reinterpret_cast<unsigned char*>(mra.data()), reinterpret_cast<unsigned char*>(mra.data()) + mib, 0);
  REQUIRE(qb.post_recv(mrb.local(), 1).ok());
  REQUIRE(qa.send(mra.local(), 2).ok());
  auto sa = collect(a.cq, 1);
  auto sb = collect(b.cq, 1);
  REQUIRE(sa.size() == 1);
  REQUIRE(sb.size() == 1);
  CHECK(sa[0].status == wc_status::success);
  CHECK(sb[0].status == wc_status::success);
  CHECK(sb[0].byte_len == mib);
  CHECK(std::memcmp(mra.data(), mrb.data(), mib) == 0);

  auto bad = remote_region<>::unchecked(mrb.remote().addr(), mrb.remote().rkey() + 1, mib);
  REQUIRE(qa.write(mra.local(), bad, 3).ok());
  std::string msg;
  (void)a.cq.wait([&](const completion<B>& c) { msg = c.status_message(); CHECK(c.status() == wc_status::rem_access_err); });
  CHECK(msg.find("remote key") != std::string::npos);
  CHECK(qa.in_error());
  CHECK(qa.send(mra.local(), 4).status == post_status::qp_error);
}
