#include "fixture.hpp"

#include <cstring>

using namespace policy_test;

TEST_CASE("UD: an address handle names the destination; receives start with the 40-byte GRH") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto dest = ah.to(p.b.qp_num());
  CHECK(dest.qpn == p.b.qp_num());
  CHECK(dest.qkey == default_qkey);
  CHECK(dest.ah == ah.native());

  auto tx = x.pd.allocate<access::local_write>(256);
  auto rx = y.pd.allocate<access::local_write>(256);
  std::memcpy(tx.data(), "datagram", 8);
  CHECK(p.b.post_recv(rx.local(0, 39), 1).status == post_status::recv_too_small);
  REQUIRE(p.b.post_recv(rx.local(), 2).ok());
  REQUIRE(p.a.send(dest, tx.local(0, 8), 3).ok());
  seen r{};
  int n = 0;
  for (int i = 0; i < 100 && n == 0; ++i) n = y.cq.poll([&](const completion<B>& c) {
    r = copy(c);
    CHECK(c.has_grh());
    CHECK(c.src_qp() == p.a.qp_num());
    CHECK(c.payload_len() == 8);
  });
  REQUIRE(n == 1);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 48);
  CHECK(r.payload_offset == 40);
  CHECK(std::memcmp(rx.data() + r.payload_offset, "datagram", 8) == 0);

  address_handle<B> moved = std::move(ah);
  CHECK(moved);
  CHECK_FALSE(ah);
}

TEST_CASE("UD: a datagram too large for its receive costs that receive, not the queue pair") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto tx = x.pd.allocate<access::local_write>(256);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(p.b.post_recv(rx.local(0, 40 + 10), 1).ok());  // room for 10 bytes
  REQUIRE(p.a.send(ah.to(p.b.qp_num()), tx.local(0, 100), 2).ok());
  auto got = collect(y.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::loc_len_err);
  CHECK_FALSE(p.b.in_error());  // the device keeps the UD QP in RTS, and so does the layer
  CHECK(p.b.posted_recvs() == 0);
  REQUIRE(p.b.post_recv(rx.local(), 3).ok());
  REQUIRE(p.a.send(ah.to(p.b.qp_num()), tx.local(0, 100), 4).ok());
  got = collect(y.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[0].wr_id == 3);
  auto back = y.pd.create_ah(p.a.local_endpoint());
  CHECK(p.b.send(back.to(p.a.qp_num()), rx.local(0, 8), 5).ok());  // its sends are not refused
}

TEST_CASE("UD: send with immediate data reaches the peer with WITH_IMM") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(128);
  REQUIRE(p.b.post_recv(rx.local(), 1).ok());
  REQUIRE(p.a.send_imm(ah.to(p.b.qp_num()), tx.local(0, 4), 0xCAFE, 2).ok());
  auto s = collect(y.cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].has_imm);
  CHECK(s[0].imm == 0xCAFEu);
}

TEST_CASE("UD: the endpoint carries the Q_Key, so ah.to(endpoint) reaches a QP with its own Q_Key") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto sender = x.pd.create_qp<ud>(x.cq, qp_cap{8, 8}).activate();
  auto receiver = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8}, {.qkey = 0x2222beef}).activate();
  const endpoint peer = receiver.local_endpoint();
  CHECK(peer.qkey == 0x2222beefu);
  auto ah = x.pd.create_ah(peer);
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(receiver.post_recv(rx.local(), 1).ok());
  std::memcpy(tx.data(), "default!peerkey!", 16);
  REQUIRE(sender.send(ah.to(peer.qpn), tx.local(0, 8), 2).ok());  // the default Q_Key: dropped
  REQUIRE(sender.send(ah.to(peer), tx.local(8, 8), 3).ok());      // the peer's: delivered
  (void)collect(x.cq, 2);
  auto got = collect(y.cq, 1, 200);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(std::memcmp(rx.data() + got[0].payload_offset, "peerkey!", 8) == 0);
  CHECK(receiver.posted_recvs() == 0);
}

TEST_CASE("UD: the mock refuses a send through an address handle that was destroyed") {
  // The ud_address is valid while its handle lives (docs/transports.md); the mock checks
  // that it still names a live handle, as a stand-in must not read a destroyed one.
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(256);
  std::optional<address_handle<B>> ah;
  ah.emplace(x.pd.create_ah(p.b.local_endpoint()));
  const auto dest = ah->to(p.b.qp_num());
  ah.reset();
  const post_result r = p.a.send(dest, tx.local(0, 8), 1);
  CHECK(r.status == post_status::backend_error);
  CHECK(r.err == EINVAL);
  CHECK(x.cq.poll() == 0);
}

// The address vector keeps the source GID index in 8 bits: 256 was slot 0, 257 slot 1,
// and -255 slot 1, all accepted; an empty slot failed only at send time.
TEST_CASE("create_ah: a gid_index outside the port's GID table, or naming an empty slot, is a usage_error") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  const endpoint peer = p.b.local_endpoint();
  for (int bad : {256, 257, -255, -1})
    CHECK_THROWS_WITH_AS((void)x.pd.create_ah(peer, {.gid_index = bad}),
                         doctest::Contains(bad > 0 ? "is above 255" : "not a valid slot"), usage_error);
  const auto len = x.dev.port().gid_tbl_len;
  CHECK_THROWS_AS((void)x.pd.create_ah(peer, {.gid_index = static_cast<int>(len) - 1}), usage_error);  // empty
  CHECK_NOTHROW((void)x.pd.create_ah(peer, {.gid_index = x.dev.default_gid_index()}));
}

TEST_CASE("create_ah: a gid_index above 255 is refused even where the GID table is larger (rxe: 1024)") {
  // The table check passed 300 on such a port, and the 8-bit sgid_index made it slot 44.
  using G = big_gid_table;
  mock::fabric fab;
  basic_side<G> x(fab, "mock0"), y(fab, "mock1");
  REQUIRE(x.dev.port().gid_tbl_len == 1024);
  REQUIRE(x.dev.gid(1, 300).valid);
  auto qy = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8});
  const endpoint peer = qy.local_endpoint();
  CHECK_THROWS_WITH_AS((void)x.pd.create_ah(peer, {.gid_index = 300}),
                       doctest::Contains("ah_options::gid_index = 300 is above 255"), usage_error);
  CHECK_NOTHROW((void)x.pd.create_ah(peer, {.gid_index = 1}));
}
