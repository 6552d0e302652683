// Errors that say what was wrong and what to do, once, and never advice that cannot work.
#include "fixture.hpp"

using namespace policy_test;

// A queue without slots said sq_full (or rq_full), whose advice (poll, then post again)
// cannot help, and the async layer waited for credits that never come.
TEST_CASE("max_send_wr = 0 is a receive-only queue pair (legal in verbs): sends say list_too_long, not sq_full") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto rx = x.pd.allocate<rw_access>(64);
  auto q = x.pd.create_qp<rc, signal_all>(x.cq, qp_cap{0, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  REQUIRE(q.post_recv(rx.local(), 1).ok());
  auto live = std::move(q).connect(peer.local_endpoint());
  CHECK(live.send_credits() == 0);
  const post_result r = live.send(rx.local(0, 8), 2);
  CHECK(r.status == post_status::list_too_long);
  CHECK(std::string(r.message()).find("max_send_wr") != std::string::npos);
  // One WR and no list: the message says why even one is too many (helper-98's audit).
  CHECK(std::string(r.message()).find("0 slots, so even one WR is too many") != std::string::npos);
  auto w = live.prepare(op::send{rx.local(0, 8)}, 3);
  CHECK(live.post(w).status == post_status::list_too_long);
  auto list = decltype(live)::make_batch<2>();
  (void)list.add(op::send{rx.local(0, 8)}, 4);
  CHECK(live.post(list).status == post_status::list_too_long);
  // And a send-only one: receives say the same.
  auto s = x.pd.create_qp<rc>(x.cq, qp_cap{8, 0});
  CHECK(s.post_recv(rx.local(), 5).status == post_status::list_too_long);
  const local_buffer two[] = {rx.local(0, 8), rx.local(8, 8)};
  CHECK(s.post_recvs(two, 6).status == post_status::list_too_long);
  auto too_shallow = [&] { return x.pd.create_qp<rc, signal_every<8>>(x.cq, qp_cap{4, 4}); };
  CHECK_THROWS_WITH_AS((void)too_shallow(), doctest::Contains("signal_every<8> signals every 8th WR"), usage_error);
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
  } catch (const usage_error& e) {
    const std::string w = e.what();
    CAPTURE(w);
    CHECK(w.find("above the device's max_cqe (100)") != std::string::npos);
    CHECK(w.find("separate send and receive CQs") != std::string::npos);
    CHECK(w.find("create it with at least 128") == std::string::npos);
  }
  try {
    (void)pd.create_qp<rc>(cq, qp_cap{64, 64 - 16});
    FAIL("a 100-entry CQ took 112 WRs");
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("max_cqe") != std::string::npos);
  }
}

TEST_CASE("LOC_LEN_ERR is explained for UD sends over the MTU too") {
  CHECK(std::string(explain(wc_status::loc_len_err)).find("path MTU") != std::string::npos);
  CHECK(std::string(explain(wc_status::loc_len_err)).find("receive buffer") != std::string::npos);
}

TEST_CASE("a WR of a post list the device refuses with EINVAL: the message names the rule it broke") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<all_access>(1024);
  auto dst = y.pd.allocate<all_access>(1024);
  auto pair = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 8, 1, 1, 0});
  using live_t = decltype(pair.a);
  auto refused = [&](auto add) {
    auto batch = live_t::template make_batch<4, 4>();
    CHECK(batch.write(mr.local(0, 8), dst.remote(), 1));  // a good one first
    CHECK(add(batch));
    auto r = pair.a.post(batch);
    CHECK(r.status == post_status::backend_error);
    CHECK(r.err == EINVAL);
    CHECK(r.posted == 1);
    CHECK(batch.size() == 1);  // only the refused WR is left
    return r;
  };
  const local_buffer three[3] = {mr.local(0, 8), mr.local(8, 8), mr.local(16, 8)};
  auto r1 = refused([&](auto& b) { return b.send(std::span<const local_buffer>(three), 2); });
  CHECK(r1.rule == post_rule::sge_count);
  CHECK(std::string(r1.message()).find("max_send_sge") != std::string::npos);
  auto r2 = refused([&](auto& b) { return b.write(mr.local(0, 600), dst.remote(), 3, send_flags::inline_data); });
  CHECK(r2.rule == post_rule::inline_size);
  CHECK(std::string(r2.message()).find("max_inline_data") != std::string::npos);
  auto r3 = refused([&](auto& b) { return b.fetch_add(mr.local(0, 16), dst.remote().sub(0, 8), 1, 4); });
  CHECK(r3.rule == post_rule::atomic_length);
  CHECK(std::string(r3.message()).find("exactly 8 bytes") != std::string::npos);
}

TEST_CASE("a single send the device refuses with EINVAL: the rule is read back from the refused WR") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<all_access>(1024);
  auto dst = y.pd.allocate<all_access>(1024);
  auto pair = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 8, 1, 1, 0});
  const local_buffer three[3] = {mr.local(0, 8), mr.local(8, 8), mr.local(16, 8)};
  auto sges = pair.a.send(std::span<const local_buffer>(three), 5);
  CHECK(sges.status == post_status::backend_error);
  CHECK(sges.rule == post_rule::sge_count);
  CHECK(std::string(sges.message()).find("max_send_sge") != std::string::npos);
  auto big_inline = pair.a.write(mr.local(0, 600), dst.remote(), 6, send_flags::inline_data);
  CHECK(big_inline.rule == post_rule::inline_size);
  auto wide = pair.a.fetch_add(mr.local(0, 16), dst.remote().sub(0, 8), 1, 7);
  CHECK(wide.rule == post_rule::atomic_length);
  const auto odd = remote_region<all_access>::unchecked(dst.remote().addr() + 4, dst.remote().rkey(), 8);
  auto misaligned = pair.a.fetch_add(mr.local(0, 8), odd, 1, 8);
  CHECK(misaligned.rule == post_rule::atomic_alignment);
  CHECK(std::string(misaligned.message()).find("aligned") != std::string::npos);
  // Inline data on a READ or an atomic: the generic "too many SGEs, inline data above
  // max_inline_data, ..." named nothing that was wrong (the spec profile refuses it).
  auto read_inline = pair.a.read(mr.local(0, 8), dst.remote().sub(0, 8), 10, send_flags::inline_data);
  CHECK(read_inline.rule == post_rule::inline_op);
  CHECK(std::string(read_inline.message()).find("cannot be sent inline") != std::string::npos);
  CHECK(pair.a.fetch_add(mr.local(0, 8), dst.remote().sub(0, 8), 1, 11, send_flags::inline_data).rule ==
        post_rule::inline_op);
  CHECK(pair.a.send_credits() == 16);  // nothing refused took a credit
  CHECK(pair.a.write(mr.local(0, 8), dst.remote(), 9).ok());
}

TEST_CASE("first_error() is the root cause even when separate CQs hand out the flushes first") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto rcq = x.dev.create_cq(64);
  auto mr = x.pd.allocate<rw_access>(64);
  auto qa = x.pd.create_qp<rc>(x.cq, rcq, qp_cap{8, 8});
  auto qb = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  auto ea = qa.local_endpoint();
  REQUIRE(qa.post_recv(mr.local(), 1).ok());
  auto a = std::move(qa).connect(qb.local_endpoint());
  auto b = std::move(qb).connect(ea);
  REQUIRE(a.write(mr.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 2).ok());  // bad rkey
  auto flushed = collect(rcq, 1);  // the receive CQ first: its flush
  REQUIRE(flushed.size() == 1);
  CHECK(flushed[0].status == wc_status::wr_flush_err);
  CHECK(a.first_error() == wc_status::wr_flush_err);  // all we know so far
  auto failed = collect(x.cq, 1);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].status == wc_status::rem_access_err);
  CHECK(a.first_error() == wc_status::rem_access_err);
}

// Providers add a WR's SGE lengths in 32 bits (rdma-core 44's rxe: `unsigned int
// length`), and so did rdmakit: SGEs of 2 GiB + 2 GiB + 16 B added up to 16, which
// auto-inline took for a small message and flagged inline, so a provider would copy
// 4 GiB into its WQE ring. Such lists are refused before the device now.
TEST_CASE("SGE lists longer than 2 GiB are refused before the device, and never flagged inline") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<all_access>(1024);
  auto dst = y.pd.allocate<all_access>(1024);
  auto pair = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 8, 4, 4, 64});
  // Never read: every post below is refused before it reaches the device.
  const local_buffer huge[3] = {{mr.local().addr, 0x80000000u, mr.local().lkey},
                                {mr.local().addr, 0x80000000u, mr.local().lkey},
                                mr.local(0, 16)};
  const std::span<const local_buffer> sgl(huge);
  auto refused_for_length = [](post_result r) {
    CHECK(r.status == post_status::backend_error);
    CHECK(r.err == EINVAL);
    CHECK(r.rule == post_rule::message_size);
    CHECK(std::string(r.message()).find("2 GiB") != std::string::npos);
  };
  refused_for_length(pair.a.write(sgl, dst.remote(), 1));
  refused_for_length(pair.a.send(sgl, 2));
  refused_for_length(pair.b.post_recv(sgl, 3));
  // Exactly 2 GiB is the largest message: not refused for its length (the mock then
  // refuses the unregistered bytes only when it runs the WR).
  const local_buffer two_gib[2] = {{mr.local().addr, 0x7ffffff0u, mr.local().lkey}, mr.local(0, 16)};
  CHECK(pair.b.post_recv(std::span<const local_buffer>(two_gib), 4).ok());

  auto batch = decltype(pair.a)::make_batch<4, 3>();
  CHECK(batch.write(mr.local(0, 8), dst.remote(), 5));
  CHECK(batch.write(sgl, dst.remote(), 6));  // kept, and refused at post, as a bad wr_id is
  auto r = pair.a.post(batch);
  refused_for_length(r);
  CHECK(r.posted == 0);
  CHECK(batch.size() == 2);
  batch.clear();
  CHECK(batch.write(mr.local(0, 8), dst.remote(), 7));
  CHECK(pair.a.post(batch).ok());  // clear() forgets the refused WR
  CHECK(collect(x.cq, 1).size() == 1);

  CHECK_THROWS_WITH_AS((void)pair.a.prepare<3>(op::write{sgl, dst.remote()}, 8),
                       doctest::Contains("more than 2 GiB"), usage_error);
  CHECK(pair.a.send_credits() == 16);  // nothing refused took a credit

  auto srq = y.pd.create_srq({.max_wr = 4, .max_sge = 3});
  refused_for_length(srq.post_recv(sgl, 9));
}

// A post list longer than the whole send queue got sq_full ("poll, then post again")
// for ever, and can_post(n) stayed false: the documented retry loops never ended. The
// same for more receives at once than the receive queue holds.
TEST_CASE("a list longer than its queue is refused as such, not as a queue to wait for") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<all_access>(1024);
  auto dst = y.pd.allocate<all_access>(1024);
  auto pair = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 8});
  auto batch = decltype(pair.a)::make_batch<32>();
  for (std::uint64_t i = 0; i < 32; ++i) REQUIRE(batch.write(mr.local(0, 8), dst.remote(), i));
  const post_result r = pair.a.post(batch);
  CHECK(r.status == post_status::list_too_long);
  CHECK(r.posted == 0);
  CHECK(std::string(r.message()).find("split it") != std::string::npos);
  CHECK(std::string(to_string(r.status)) == "list_too_long");
  CHECK(batch.size() == 32);
  CHECK(pair.a.send_credits() == 16);
  CHECK(pair.a.can_post(16));
  CHECK_THROWS_WITH_AS((void)pair.a.can_post(17), doctest::Contains("never fit"), usage_error);
  // A list that fits the queue but not the credits left is still sq_full.
  REQUIRE(pair.a.write(mr.local(0, 8), dst.remote(), 40).ok());
  auto sixteen = decltype(pair.a)::make_batch<16>();
  for (std::uint64_t i = 0; i < 16; ++i) REQUIRE(sixteen.write(mr.local(0, 8), dst.remote(), i));
  CHECK(pair.a.post(sixteen).status == post_status::sq_full);
  CHECK_FALSE(pair.a.can_post(16));
  CHECK(collect(x.cq, 1).size() == 1);
  CHECK(pair.a.post(sixteen).ok());
  // Receives: 9 at once on a receive queue of 8.
  std::vector<local_buffer> nine(9, dst.local(0, 64));
  const post_result rr = pair.b.post_recvs(nine, 100);
  CHECK(rr.status == post_status::list_too_long);
  CHECK(rr.posted == 0);
  CHECK(pair.b.post_recvs(std::span<const local_buffer>(nine).first(8), 100).ok());
}

// After a failure under selective signaling, the unsignaled WRs that completed before it
// have no completion, so the ledger counts them until the queue pair is replaced. On a
// CQ sized exactly for the queue pair, reset() was refused with "poll the CQ", which
// could never help (helper-102's audit): the message now says so.
TEST_CASE("reset() refused after a failure under selective signaling: the message does not promise that polling helps") {
  mock::fabric fab;
  device<B> d0(fab, "mock0"), d1(fab, "mock1");
  auto pd0 = d0.create_pd();
  auto pd1 = d1.create_pd();
  const qp_cap caps{.max_send_wr = 16, .max_recv_wr = 16};
  auto cq0 = d0.create_cq(32);
  auto cq1 = d1.create_cq(32);
  auto m0 = pd0.allocate<access::local_write | access::remote_write>(4096);
  auto m1 = pd1.allocate<access::local_write | access::remote_write>(4096);
  auto a0 = pd0.create_qp<rc, signal_every<8>>(cq0, caps);
  auto b0 = pd1.create_qp<rc, signal_every<8>>(cq1, caps);
  const auto ea = a0.local_endpoint();
  auto a = std::move(a0).connect(b0.local_endpoint());
  auto b = std::move(b0).connect(ea);
  for (std::uint64_t i = 0; i < 16; ++i) REQUIRE(b.post_recv(m1.local(64 * i, 64), i).ok());
  for (std::uint64_t i = 0; i < 15; ++i) REQUIRE(a.send(m0.local(0, 8), 100 + i).ok());
  const auto bad = remote_region<>::unchecked(m1.remote().addr(), m1.remote().rkey() + 1, 64);
  REQUIRE(a.post(op::write{m0.local(0, 8), bad}, 999).ok());  // the 16th WR: signaled
  int failed = 0;
  for (int i = 0; i < 20; ++i) (void)cq0.poll([&](const completion<B>& c) { failed += !c.ok(); });
  REQUIRE(failed == 1);
  REQUIRE(a.in_error());
  CHECK_THROWS_WITH_AS((void)std::move(a).reset(),
                       doctest::Contains("not those of unsignaled WRs that completed unseen before the failure"),
                       usage_error);
}
