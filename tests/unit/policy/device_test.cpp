#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("device: open by name, or the first one with an empty name") {
  mock::fabric fab;
  CHECK(device<B>::names() == std::vector<std::string>{"mock0", "mock1"});
  device<B> d1("mock1");
  CHECK(d1.name() == "mock1");
  device<B> first("");
  CHECK(first.name() == "mock0");
  CHECK(d1.attr().max_qp_wr > 0);
  device<B> moved = std::move(d1);
  CHECK(moved.name() == "mock1");
  CHECK_FALSE(static_cast<bool>(d1));
}

TEST_CASE("device: an unknown name says which devices exist") {
  mock::fabric fab;
  try {
    device<B> d("mlx5_7");
    FAIL("opened a device that does not exist");
  } catch (const verbs_error& e) {
    CHECK(e.errno_value() == ENODEV);
    std::string w = e.what();
    CHECK(w.find("mlx5_7") != std::string::npos);
    CHECK(w.find("mock0, mock1") != std::string::npos);
  }
}

TEST_CASE("device: ports and GIDs") {
  mock::fabric fab;
  device<B> d("mock0");
  auto p = d.port(1);
  CHECK(p.state == port_state::active);
  CHECK(p.layer == link_layer::ethernet);
  CHECK_THROWS_AS(d.port(2), verbs_error);
  auto gids = d.gids(1);
  REQUIRE(gids.size() >= 2);
  CHECK(gids[0].value.is_link_local());
  CHECK(d.default_gid_index(1) == 1);
  CHECK(d.gid(1, 1).value == gid::from_ipv4(10, 0, 0, 1));
}

TEST_CASE("device: InfiniBand ports use GID index 0 and LIDs") {
  mock::fabric_config cfg;
  mock::device_config dc;
  dc.name = "ib0";
  mock::port_config pc;
  pc.layer = link_layer::infiniband;
  dc.ports = {pc};
  cfg.devices = {dc, dc};
  cfg.devices[1].name = "ib1";
  mock::fabric fab(cfg);
  side x("ib0"), y("ib1");
  CHECK(x.dev.default_gid_index() == 0);
  CHECK(x.dev.port().lid != 0);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  CHECK(p.a.local_endpoint().lid == x.dev.port().lid);
  auto mr = x.pd.allocate<rw_access>(64);
  auto mr2 = y.pd.allocate<rw_access>(64);
  REQUIRE(p.b.post_recv(mr2.local(), 1).ok());
  REQUIRE(p.a.send(mr.local(0, 8), 2).ok());
  auto s = collect(y.cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].status == wc_status::success);
}
