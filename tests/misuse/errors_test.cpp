// Errors that say what was wrong and what to do, once, and never advice that cannot work.
#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("max_send_wr = 0 is a receive-only queue pair (legal in verbs): sends say sq_full") {
  mock::fabric fab;
  side x("mock0"), y("mock1");
  auto rx = x.pd.allocate<rw_access>(64);
  auto q = x.pd.create_qp<rc, signal_all>(x.cq, qp_cap{0, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  REQUIRE(q.post_recv(rx.local(), 1).ok());
  auto live = std::move(q).connect(peer.local_endpoint());
  CHECK(live.send_credits() == 0);
  CHECK(live.send(rx.local(0, 8), 2).status == post_status::sq_full);
  auto too_shallow = [&] { return x.pd.create_qp<rc, signal_every<8>>(x.cq, qp_cap{4, 4}); };
  CHECK_THROWS_WITH_AS((void)too_shallow(), doctest::Contains("signal_every<8> signals every 8-th WR"), verbs_error);
}

TEST_CASE("a CQ too small for its queue pairs: the advice stays within the device's max_cqe") {
  mock::fabric_config cfg;
  cfg.devices.resize(1);
  cfg.devices[0].name = "tiny";
  cfg.devices[0].limits.max_cqe = 100;
  mock::fabric fab(cfg);
  device<B> d(fab, "tiny");
  auto pd = d.create_pd();
  auto cq = d.create_cq(100);
  try {
    (void)pd.create_qp<rc>(cq, qp_cap{64, 64});
    FAIL("a 100-entry CQ took 128 WRs");
  } catch (const verbs_error& e) {
    const std::string w = e.what();
    CAPTURE(w);
    CHECK(w.find("above the device's max_cqe (100)") != std::string::npos);
    CHECK(w.find("separate send and receive CQs") != std::string::npos);
    CHECK(w.find("create it with at least 128") == std::string::npos);
  }
  try {
    (void)pd.create_qp<rc>(cq, qp_cap{64, 64 - 16});
    FAIL("a 100-entry CQ took 112 WRs");
  } catch (const verbs_error& e) {
    CHECK(std::string(e.what()).find("max_cqe") != std::string::npos);
  }
}

TEST_CASE("LOC_LEN_ERR is explained for UD sends over the MTU too") {
  CHECK(std::string(explain(wc_status::loc_len_err)).find("path MTU") != std::string::npos);
  CHECK(std::string(explain(wc_status::loc_len_err)).find("receive buffer") != std::string::npos);
}
