#include "fixture.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

using namespace policy_test;

TEST_CASE("walkthrough: 1 MiB over RC, then a wrong rkey gives REM_ACCESS_ERR") {
  mock::fabric fab;
  side a(fab, "mock0"), b(fab, "mock1");
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
  CHECK(qa.send_credits() == 0);  // in ERR nothing may be posted, whatever slots came back
  CHECK(qa.send(mra.local(), 4).status == post_status::qp_error);
}

TEST_CASE("typestate: create gives INIT (receives only), connect gives RTS") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto q = x.pd.create_qp<rc, signal_every<8>>(x.cq, qp_cap{16, 16});
  static_assert(std::is_same_v<decltype(q), queue_pair<B, rc, signal_every<8>, qp_state::init>>);
  CHECK(q.query_state() == qp_state::init);
  auto rx = x.pd.allocate<rw_access>(64);
  CHECK(q.post_recv(rx.local(), 1).ok());  // allowed from INIT on
  CHECK(q.posted_recvs() == 1);
  auto peer = y.pd.create_qp<rc, signal_every<8>>(y.cq, qp_cap{16, 16});
  auto live = std::move(q).connect(peer.local_endpoint());
  static_assert(std::is_same_v<decltype(live), queue_pair<B, rc, signal_every<8>, qp_state::rts>>);
  CHECK_FALSE(q);  // moved into `live`
  CHECK(live.query_state() == qp_state::rts);
  CHECK(live.posted_recvs() == 1);
  CHECK(live.send_credits() == 16);
  static_assert(!std::is_copy_constructible_v<decltype(live)>);
}

// The starting PSN was the QP number's hash: a device that gives a destroyed QP's number
// to the next QP (mlx5; the mock with reuse_qp_numbers) gave it the same PSN too, so a
// SEND of the old connection still on the wire completed the new connection's receive
// (audit 16). Each queue pair starts at a PSN of its own (the IBA's advice: a random one).
TEST_CASE("a queue pair given a destroyed one's QP number starts at another PSN") {
  mock::fabric_config cfg;
  cfg.reuse_qp_numbers = true;
  mock::fabric fab(cfg);
  side x(fab, "mock0");
  std::uint32_t num = 0, psn = 0;
  {
    auto first = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
    num = first.qp_num();
    psn = first.local_endpoint().psn;
  }
  for (int i = 0; i < 4; ++i) {
    auto again = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
    REQUIRE(again.qp_num() == num);
    CHECK(again.local_endpoint().psn != psn);
    CHECK(again.local_endpoint().psn <= psn_mask);
    psn = again.local_endpoint().psn;
  }
  qp_options o;
  o.psn = 0x123456;  // one asked for is kept
  CHECK(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, o).local_endpoint().psn == 0x123456);
}

// A UC responder takes packets from the address it is connected to only (rxe_recv.c
// check_addr; docs/semantics.md#wrong-peer): a UC WRITE from another device, to a queue
// pair connected to one of this device's, completes (UC has no answer) and lands nowhere.
// The RC side of it is a conformance case ("not the responder's peer").
TEST_CASE("UC: a WRITE from another address than the responder's peer is dropped") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto t0 = x.pd.create_qp<uc>(x.cq, qp_cap{4, 4});
  auto p0 = x.pd.create_qp<uc>(x.cq, qp_cap{4, 4});
  auto s0 = y.pd.create_qp<uc>(y.cq, qp_cap{4, 4});
  const endpoint et = t0.local_endpoint(), ep = p0.local_endpoint();
  auto target = std::move(t0).connect(ep);
  auto peer = std::move(p0).connect(et);
  auto stranger = std::move(s0).connect(et);  // towards target, whose peer is on mock0
  auto dst = x.pd.allocate<rw_access>(64);
  auto src_x = x.pd.allocate<rw_access>(64);
  auto src_y = y.pd.allocate<rw_access>(64);
  std::memset(src_x.data(), 1, 64);
  std::memset(src_y.data(), 2, 64);
  REQUIRE(stranger.write(src_y.local(0, 8), dst.remote().sub(0, 8), 1).ok());
  CHECK(collect(y.cq, 1).at(0).status == wc_status::success);
  CHECK(dst.bytes()[0] == std::byte{0});  // dropped
  REQUIRE(peer.write(src_x.local(0, 8), dst.remote().sub(0, 8), 2).ok());  // the peer's lands
  CHECK(collect(x.cq, 1).at(0).status == wc_status::success);
  CHECK(dst.bytes()[0] == std::byte{1});
}

TEST_CASE("connect takes the smaller of the port's and the peer's MTU") {
  mock::fabric_config cfg;
  for (auto name : {"m0", "m1"}) {
    mock::device_config d;
    d.name = name;
    d.ports[0].max_mtu = mtu::mtu_1024;
    d.ports[0].active_mtu = mtu::mtu_1024;
    cfg.devices.push_back(d);
  }
  mock::fabric fab(cfg);
  side x(fab, "m0"), y(fab, "m1");
  auto qx = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto ey = qy.local_endpoint();
  ey.mtu = mtu::mtu_4096;  // the peer claims more than this port can do: 1024 is used
  CHECK_NOTHROW(std::move(qx).connect(ey));
}

TEST_CASE("connect on RoCE without the peer's GID is a clear setup error") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto qx = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto ey = qy.local_endpoint();
  ey.gid = {};
  try {
    auto live = std::move(qx).connect(ey);
    FAIL("connected without a GID");
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("needs a GRH") != std::string::npos);
  }
  CHECK(qx);  // still ours, still in INIT
}

TEST_CASE("connect options the spec cannot encode are refused before any transition, naming the option") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto qx = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  connect_options o;
  o.timeout = 40;  // above 31: 5 bits
  try {
    auto live = std::move(qx).connect(qy.local_endpoint(), o);
    FAIL("connected with timeout 40");
  } catch (const usage_error& e) {
    std::string w = e.what();
    CHECK(w.find("connect_options::timeout = 40") != std::string::npos);
  }
  CHECK(qx.query_state() == qp_state::init);  // untouched
}

// A device granting more than 32 SGEs made queue pairs whose every post of 33 or more
// was refused later, on the data path (rdmakit hands at most 32 to the device at once).
TEST_CASE("create_qp and create_srq refuse more than the 32 SGEs a post hands the device, on a device that has more") {
  mock::fabric_config cfg;
  cfg.devices.resize(1);
  cfg.devices[0].name = "wide";
  cfg.devices[0].limits.max_sge = 64;
  cfg.devices[0].limits.max_srq_sge = 64;
  mock::fabric fab(cfg);
  side x(fab, "wide");
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4, 33, 1}),
                       doctest::Contains("qp_cap::max_send_sge = 33 is above the 32 SGEs"), usage_error);
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4, 1, 64}),
                       doctest::Contains("qp_cap::max_recv_sge = 64 is above the 32 SGEs"), usage_error);
  CHECK(x.cq.attached() == 0);
  CHECK_THROWS_WITH_AS(x.pd.create_srq({.max_wr = 8, .max_sge = 33}),
                       doctest::Contains("max_sge 33 is above the 32 SGEs"), usage_error);
  auto q = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4, 32, 32});  // 32 is taken
  CHECK(q.caps().max_send_sge == 32);
}

TEST_CASE("PSNs wider than 24 bits and a gid_index naming an empty GID slot are refused, not masked or used") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, {.psn = 0xabcdef01u}),
                       doctest::Contains("qp_options::psn = 2882400001 is out of range (0..16777215)"), usage_error);
  REQUIRE_FALSE(x.dev.gid(1, 5).valid);
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, {.gid_index = 5}),
                       doctest::Contains("qp_options::gid_index = 5 names an empty slot"), usage_error);
  CHECK(x.cq.attached() == 0);  // nothing was left attached
  // Past the table (16 entries on the mock): the device's query_gid refusal came out as
  // a verbs_error naming ibv_query_gid, not the option.
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, {.gid_index = 16}),
                       doctest::Contains("qp_options::gid_index = 16 is past the 16-entry GID table of port 1"),
                       usage_error);
  // Local access or window binding in remote_access: "unknown bits in qp_access_flags",
  // a verbs_error, at RESET→INIT.
  CHECK_THROWS_WITH_AS(
      x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, {.remote_access = access::remote_write | access::local_write}),
      doctest::Contains("qp_options::remote_access = "), usage_error);
  CHECK(x.cq.attached() == 0);

  auto qx = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  endpoint peer = qy.local_endpoint();
  peer.psn = 0x1000005;
  CHECK_THROWS_WITH_AS((void)std::move(qx).connect(peer), doctest::Contains("endpoint::psn (peer) = 16777221"),
                       usage_error);
  CHECK(qx.query_state() == qp_state::init);  // untouched
}

TEST_CASE("create_qp: a gid_index above 255 is refused even where the GID table is larger (rxe: 1024)") {
  // It was accepted (the slot is valid there) and the 8-bit sgid_index of connect()'s
  // address vector made 300 slot 44.
  using G = big_gid_table;
  mock::fabric fab;
  basic_side<G> x(fab, "mock0");
  REQUIRE(x.dev.gid(1, 300).valid);
  CHECK_THROWS_WITH_AS(x.pd.create_qp<rc>(x.cq, qp_cap{4, 4}, {.gid_index = 300}),
                       doctest::Contains("qp_options::gid_index = 300 is above 255"), usage_error);
  CHECK(x.cq.attached() == 0);
}

TEST_CASE("connect to QP number 0 or 1 (the subnet's management QPs) is refused before any transition") {
  // A peer's record with QPN 0 (a zeroed or garbled field) connected, and every send
  // then ended in a retry error far from the cause.
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  for (std::uint32_t qpn : {0u, 1u}) {
    auto qx = x.pd.create_qp<uc>(x.cq, qp_cap{4, 4});
    endpoint peer = qy.local_endpoint();
    peer.qpn = qpn;
    const std::string says = "endpoint::qpn (peer) = " + std::to_string(qpn) + " names";
    CHECK_THROWS_WITH_AS((void)std::move(qx).connect(peer), doctest::Contains(says.c_str()), usage_error);
    CHECK(qx.query_state() == qp_state::init);  // untouched
  }
}

TEST_CASE("an RC connect allowing no READ or atomic in flight (max_rd_atomic 0) is refused; UC ignores it") {
  // rxe takes a READ or an atomic posted on such a queue pair and never runs it: the
  // queue pair stalls behind it (its requester has no slot to start one), without an
  // error, until it goes to ERR. The mock said EINVAL at the post.
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto qx = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  CHECK_THROWS_WITH_AS((void)std::move(qx).connect(qy.local_endpoint(), {.max_rd_atomic = 0}),
                       doctest::Contains("connect_options::max_rd_atomic = 0 leaves no READ or atomic"), usage_error);
  CHECK(qx.query_state() == qp_state::init);  // untouched
  auto ux = x.pd.create_qp<uc>(x.cq, qp_cap{4, 4});
  auto uy = y.pd.create_qp<uc>(y.cq, qp_cap{4, 4});
  CHECK(std::move(ux).connect(uy.local_endpoint(), {.max_rd_atomic = 0}).query_state() == qp_state::rts);
}

// The default max_rd_atomic (16) is clamped to the device's max_qp_init_rd_atom: on a
// device that allows none, the clamp made the 0 the check above refuses, and the
// connect went through (audit 48): a READ was then refused with a text naming no cause
// (spec profile) or posted and never run, stalling what came after it (rxe profile).
TEST_CASE("an RC connect on a device that initiates no READ or atomic (max_qp_init_rd_atom 0) is refused by name") {
  for (const auto profile : {mock::device_profile::spec, mock::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    mock::fabric_config cfg;
    cfg.profile = profile;
    cfg.devices = mock::default_devices();
    for (auto& d : cfg.devices) d.limits.max_qp_init_rd_atom = 0;
    mock::fabric fab(cfg);
    side x(fab, "mock0"), y(fab, "mock1");
    auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
    auto qx = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
    CHECK_THROWS_WITH_AS((void)std::move(qx).connect(qy.local_endpoint()),
                         doctest::Contains("max_qp_init_rd_atom is 0"), usage_error);
    CHECK(qx.query_state() == qp_state::init);  // untouched
    auto ux = x.pd.create_qp<uc>(x.cq, qp_cap{4, 4});  // UC initiates none: connects
    auto uy = y.pd.create_qp<uc>(y.cq, qp_cap{4, 4});
    CHECK(std::move(ux).connect(uy.local_endpoint()).query_state() == qp_state::rts);
  }
}

TEST_CASE("send/write with immediate: the receiver sees the value in host order") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::memcpy(src.data(), "hello, world", 12);
  REQUIRE(p.b.post_recv(dst.local(), 1).ok());
  REQUIRE(p.b.post_recv(dst.local(), 2).ok());
  REQUIRE(p.a.send_imm(src.local(0, 5), 0x11223344, 10).ok());
  REQUIRE(p.a.write_imm(src.local(7, 5), dst.remote().sub(32, 5), 0xA0B0C0D0, 11).ok());
  auto r = collect(y.cq, 2);
  REQUIRE(r.size() == 2);
  CHECK(r[0].op == wc_opcode::recv);
  CHECK(r[0].has_imm);
  CHECK(r[0].imm == 0x11223344u);
  CHECK(r[0].byte_len == 5);
  CHECK(r[1].op == wc_opcode::recv_rdma_with_imm);
  CHECK(r[1].imm == 0xA0B0C0D0u);
  CHECK(r[1].byte_len == 5);
  CHECK(std::memcmp(dst.data(), "hello", 5) == 0);
  CHECK(std::memcmp(dst.data() + 32, "world", 5) == 0);
  auto s = collect(x.cq, 2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].op == wc_opcode::send);
  CHECK(s[1].op == wc_opcode::rdma_write);
}

TEST_CASE("RDMA READ, compare-and-swap and fetch-and-add on RC") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto local = x.pd.allocate<access::local_write>(64);
  auto remote = y.pd.allocate<all_access>(64);
  std::memcpy(remote.data(), "remote bytes", 12);
  std::uint64_t counter = 100;
  std::memcpy(remote.data() + 16, &counter, 8);

  REQUIRE(p.a.read(local.local(0, 12), remote.remote(), 1).ok());
  REQUIRE(p.a.fetch_add(local.local(16, 8), remote.remote().sub(16, 8), 5, 2).ok());
  REQUIRE(p.a.compare_swap(local.local(24, 8), remote.remote().sub(16, 8), 105, 7, 3).ok());
  auto s = collect(x.cq, 3);
  REQUIRE(s.size() == 3);
  CHECK(s[0].op == wc_opcode::rdma_read);
  CHECK(s[1].op == wc_opcode::fetch_add);
  CHECK(s[2].op == wc_opcode::comp_swap);
  for (auto& c : s) CHECK(c.status == wc_status::success);
  CHECK(std::memcmp(local.data(), "remote bytes", 12) == 0);
  std::uint64_t old_add = 0, old_cas = 0, now = 0;
  std::memcpy(&old_add, local.data() + 16, 8);
  std::memcpy(&old_cas, local.data() + 24, 8);
  std::memcpy(&now, remote.data() + 16, 8);
  CHECK(old_add == 100);
  CHECK(old_cas == 105);
  CHECK(now == 7);
}

TEST_CASE("small sends go inline: the buffer needs no lkey and may be reused at once") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 64});
  CHECK(p.a.caps().max_inline_data >= 64);
  auto dst = y.pd.allocate<rw_access>(256);
  char stack_buf[32] = "not registered anywhere";
  local_buffer unregistered{reinterpret_cast<std::uint64_t>(stack_buf), 24, 0};
  REQUIRE(p.b.post_recv(dst.local(), 1).ok());
  REQUIRE(p.a.send(unregistered, 2).ok());
  std::memset(stack_buf, 'x', sizeof stack_buf);  // inline data was copied at post time
  auto r = collect(y.cq, 1);
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == wc_status::success);
  CHECK(std::memcmp(dst.data(), "not registered anywhere", 24) == 0);

  // Above the inline limit the lkey is used: an unregistered buffer is a LOC_PROT_ERR.
  char big[128] = {};
  REQUIRE(p.b.post_recv(dst.local(), 3).ok());
  REQUIRE(p.a.send(local_buffer{reinterpret_cast<std::uint64_t>(big), 128, 0}, 4).ok());
  auto s = collect(x.cq, 2);
  REQUIRE(s.size() == 2);
  CHECK(s[1].status == wc_status::loc_prot_err);
}

TEST_CASE_FIXTURE(inline_pair, "send_flags::no_auto_inline: a WR that fits max_inline_data is read from its buffer, and the flag stays in rdmakit") {
  REQUIRE(p.a.write(unregistered, dst.remote(), 1).ok());  // inline on its own: no lkey read
  REQUIRE(p.a.write(unregistered, dst.remote(), 2, send_flags::no_auto_inline | send_flags::inline_data).ok());
  // Not inline: the device reads the buffer through lkey 0, which no region has.
  REQUIRE(p.a.write(unregistered, dst.remote(), 3, send_flags::no_auto_inline).ok());
  const auto r = collect(x.cq, 3);
  REQUIRE(r.size() == 3);
  CHECK(r[0].status == wc_status::success);
  CHECK(r[1].status == wc_status::success);  // asked inline explicitly: it is
  CHECK(r[2].status == wc_status::loc_prot_err);
  CHECK(has_any(flag_recording::seen, send_flags::inline_data));
  CHECK_FALSE(has_any(flag_recording::seen, send_flags::no_auto_inline));
}

TEST_CASE("can_post(n): true while n more WRs fit the send queue, false when it is full or in ERR") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  CHECK(p.a.can_post());
  CHECK(p.a.can_post(8));
  CHECK_THROWS_AS((void)p.a.can_post(9), usage_error);  // never: more than the send queue holds
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(p.a.write(src.local(0, 8), dst.remote(), i).ok());
  CHECK(p.a.can_post(2));
  CHECK_FALSE(p.a.can_post(3));
  for (std::uint64_t i = 6; i < 8; ++i) REQUIRE(p.a.write(src.local(0, 8), dst.remote(), i).ok());
  CHECK_FALSE(p.a.can_post());
  REQUIRE(collect(x.cq, 2).size() == 2);  // WRs 3 and 7 give back all eight slots
  CHECK(p.a.can_post(8));
  auto wrong = remote_region<>::unchecked(dst.remote().addr(), dst.remote().rkey() ^ 1, 64);
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(p.a.write(src.local(0, 8), wrong, 10 + i).ok());
  REQUIRE_FALSE(collect(x.cq, 4).empty());
  REQUIRE(p.a.in_error());
  CHECK_FALSE(p.a.can_post());  // in ERR nothing may be posted
}

// Queue pairs keep their CQs alive, so a CQ's handle may go first: but then nothing polls
// it again, and a queue pair whose credits ran out was told sq_full ("poll the completion
// queue") for ever, with nothing left to poll (audit 37).
TEST_CASE("a queue pair whose CQ handle is gone is refused cq_gone at once, not sq_full once its credits ran out") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> a;
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> b;
  {
    auto cq = x.dev.create_cq(16);
    auto p = make_pair<rc>(x.pd, cq, y.pd, y.cq, qp_cap{4, 4});
    a.emplace(std::move(p.a));
    b.emplace(std::move(p.b));
    REQUIRE(a->write(src.local(0, 8), dst.remote(), 1).ok());
    CHECK(collect(cq, 1).size() == 1);
  }  // the only handle of a's CQ goes: nothing polls it again
  const post_result r = a->write(src.local(0, 8), dst.remote(), 2);
  CHECK(r.status == post_status::cq_gone);
  CHECK(std::string(r.message()).find("no completion_queue handle") != std::string::npos);
  CHECK_FALSE(a->can_post());
  auto list = queue_pair<B, rc, signal_all, qp_state::rts>::make_batch<2>();
  REQUIRE(list.add(op::write{src.local(0, 8), dst.remote()}, 3));
  CHECK(a->post(list).status == post_status::cq_gone);
  CHECK(a->post_recv(src.local(8, 8), 14).status == post_status::cq_gone);
  std::vector<local_buffer> two{src.local(8, 8), src.local(16, 8)};
  CHECK(a->post_recvs(two, 20).status == post_status::cq_gone);
  // Its peer, whose CQ has its handle, goes on.
  CHECK(b->write(src.local(0, 8), dst.remote(), 30).status != post_status::cq_gone);
}

TEST_CASE("scatter/gather lists on send, receive and READ") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 3, 3});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::memcpy(src.data(), "AAAABBBBCCCC", 12);
  std::array<local_buffer, 2> rsgl{dst.local(0, 6), dst.local(32, 6)};
  REQUIRE(p.b.post_recv(rsgl, 1).ok());
  std::array<local_buffer, 3> gather{src.local(8, 4), src.local(0, 4), src.local(4, 4)};
  REQUIRE(p.a.send(gather, 2).ok());
  auto r = collect(y.cq, 1);
  REQUIRE(r.size() == 1);
  CHECK(r[0].byte_len == 12);
  CHECK(std::memcmp(dst.data(), "CCCCAA", 6) == 0);
  CHECK(std::memcmp(dst.data() + 32, "AABBBB", 6) == 0);

  std::array<local_buffer, 2> scatter{src.local(40, 3), src.local(50, 3)};
  REQUIRE(p.a.read(scatter, dst.remote(), 3).ok());
  REQUIRE(p.a.write(std::span<const local_buffer>(gather.data(), 2), dst.remote().sub(16, 8), 4).ok());
  auto s = collect(x.cq, 3);
  REQUIRE(s.size() == 3);
  CHECK(std::memcmp(src.data() + 40, "CCC", 3) == 0);
  CHECK(std::memcmp(src.data() + 50, "CAA", 3) == 0);
  CHECK(std::memcmp(dst.data() + 16, "CCCCAAAA", 8) == 0);

  std::array<local_buffer, 4> too_many{src.local(0, 1), src.local(1, 1), src.local(2, 1), src.local(3, 1)};
  auto res = p.a.send(too_many, 5);  // above max_send_sge: the device says EINVAL
  CHECK(res.status == post_status::backend_error);
  CHECK(res.err == EINVAL);
  CHECK(p.a.send_credits() == 8);  // nothing was charged for it
}

TEST_CASE("post lists: one doorbell; a partly posted list reports its bad_wr") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 16});
  auto src = x.pd.allocate<rw_access>(256);
  auto dst = y.pd.allocate<rw_access>(256);
  auto b = p.a.make_batch<4>();
  CHECK(b.write(src.local(0, 8), dst.remote(), 1));
  CHECK(b.read(src.local(8, 8), dst.remote(), 2));
  CHECK(b.send(src.local(0, 4), 3, send_flags::signaled));
  CHECK(b.write_imm(src.local(0, 4), dst.remote(), 9, 4));
  CHECK_FALSE(b.write(src.local(), dst.remote(), 5));  // full
  REQUIRE(p.b.post_recv(dst.local(64, 64), 100).ok());
  REQUIRE(p.b.post_recv(dst.local(128, 64), 101).ok());
  auto res = p.a.post(b);
  REQUIRE(res.ok());
  CHECK(res.posted == 4);
  CHECK(b.empty());
  auto s = collect(x.cq, 3);
  // WR 2 and WR 4 (positions 2 and 4: every 2nd) and WR 3 (asked for): a signal asked
  // for does not move the policy's own.
  REQUIRE(s.size() == 3);
  CHECK(s[0].wr_id == 2);
  CHECK(s[1].wr_id == 3);
  CHECK(s[2].wr_id == 4);
  CHECK(p.a.unsignaled_run() == 0);
  CHECK(p.a.send_credits() == 8);

  // The third WR asks for inline data above max_inline_data: the device refuses it and
  // the first two are posted.
  auto c = p.a.make_batch<4>();
  CHECK(c.write(src.local(0, 8), dst.remote(), 10));
  CHECK(c.write(src.local(0, 8), dst.remote(), 11));
  CHECK(c.write(src.local(0, 200), dst.remote(), 12, send_flags::inline_data));
  CHECK(c.write(src.local(0, 8), dst.remote(), 13));
  auto part = p.a.post(c);
  CHECK(part.status == post_status::backend_error);
  CHECK(part.err == EINVAL);
  CHECK(part.posted == 2);
  CHECK(c.size() == 2);  // the posted ones are dropped: what is left was not posted
  CHECK(p.a.send_credits() == 6);  // the two posted
  REQUIRE(p.a.write(src.local(0, 8), dst.remote(), 14, send_flags::signaled).ok());
  std::vector<seen> got;
  for (int i = 0; i < 100 && p.a.send_credits() < 8; ++i)
    for (auto& g : collect(x.cq, 1, 1)) got.push_back(g);
  CHECK(p.a.send_credits() == 8);
  REQUIRE(!got.empty());
  CHECK(got.back().wr_id == 14);
}

TEST_CASE("UC: send and RDMA WRITE") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<uc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::memcpy(src.data(), "uc-write", 8);
  REQUIRE(p.a.write(src.local(0, 8), dst.remote(), 1).ok());  // unsignaled
  REQUIRE(p.b.post_recv(dst.local(32, 32), 2).ok());
  REQUIRE(p.a.send(src.local(0, 8), 3, send_flags::signaled).ok());
  auto s = collect(x.cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].wr_id == 3);
  CHECK(p.a.send_credits() == 8);  // the unsignaled WRITE's slot came back with it
  CHECK(std::memcmp(dst.data(), "uc-write", 8) == 0);
  auto r = collect(y.cq, 1);
  REQUIRE(r.size() == 1);
  CHECK(r[0].wr_id == 2);
}

TEST_CASE("runtime errors surface as statuses: receive too small, flushes, RNR, no hang") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  connect_options co;
  co.rnr_retry = 1;
  co.retry_cnt = 1;
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8}, co);
  auto src = x.pd.allocate<rw_access>(256);
  auto dst = y.pd.allocate<rw_access>(256);

  SUBCASE("the receiver's buffer is too small: LOC_LEN_ERR there, REM_INV_REQ_ERR here, then flushes") {
    REQUIRE(p.b.post_recv(dst.local(0, 4), 1).ok());
    REQUIRE(p.b.post_recv(dst.local(8, 64), 2).ok());
    REQUIRE(p.a.send(src.local(0, 64), 10).ok());
    REQUIRE(p.a.send(src.local(0, 8), 11).ok());
    std::string msg;
    auto s = collect(x.cq, 2);
    REQUIRE(s.size() == 2);
    CHECK(s[0].status == wc_status::rem_inv_req_err);
    CHECK(s[1].status == wc_status::wr_flush_err);
    auto r = collect(y.cq, 2);
    REQUIRE(r.size() == 2);
    CHECK(r[0].status == wc_status::loc_len_err);
    CHECK(r[1].status == wc_status::wr_flush_err);
    CHECK(r[1].recv);  // flushed receives are still known as receives
    CHECK(r[1].wr_id == 2);
    CHECK(p.a.in_error());
    CHECK(p.b.in_error());
    auto again = p.a.send(src.local(0, 8), 12);
    CHECK(again.status == post_status::qp_error);
    CHECK(std::string(again.message()).find("ERR") != std::string::npos);
    CHECK(p.b.post_recv(dst.local(), 3).status == post_status::qp_error);
    // A bad wr_id is named before the error (post_recv_ tests the error first, and
    // recv_refusal_ tells them apart in the old order).
    CHECK(p.b.post_recv(dst.local(), std::uint64_t{1} << 63).status == post_status::bad_wr_id);
  }
  SUBCASE("no receive posted: RNR retries run out, RNR_RETRY_EXC_ERR with a hint") {
    REQUIRE(p.a.send(src.local(0, 8), 20).ok());
    std::string msg;
    int n = x.cq.wait([&](const completion<B>& c) { msg = c.status_message(); }, std::chrono::milliseconds{2000}).count();
    CHECK(n == 1);
    CHECK(msg.find("RNR retry counter exceeded") != std::string::npos);
    CHECK(msg.find("post receives") != std::string::npos);
  }
  SUBCASE("the peer is gone: RETRY_EXC_ERR, not a hang") {
    p.b = {};  // destroyed
    REQUIRE(p.a.write(src.local(0, 8), remote_region<>::unchecked(0x1000, 1, 8), 30).ok());
    std::string msg;
    int n = x.cq.wait([&](const completion<B>& c) { msg = c.status_message(); }, std::chrono::milliseconds{2000}).count();
    CHECK(n == 1);
    CHECK(msg.find("transport retry counter exceeded") != std::string::npos);
  }
}

TEST_CASE("receive queue credits: rq_full instead of ENOMEM; post_recvs posts a list") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto q = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  auto mr = x.pd.allocate<access::local_write>(64);
  std::array<local_buffer, 3> bufs{mr.local(0, 8), mr.local(8, 8), mr.local(16, 8)};
  auto r = q.post_recvs(bufs, 100);
  CHECK(r.ok());
  CHECK(r.posted == 3);
  CHECK(q.post_recvs(bufs, 200).status == post_status::rq_full);
  CHECK(q.post_recv(mr.local(), 5).ok());
  CHECK(q.post_recv(mr.local(), 6).status == post_status::rq_full);
  CHECK(q.post_recv(mr.local(), std::uint64_t{1} << 63).status == post_status::bad_wr_id);  // named before rq_full
  CHECK(q.posted_recvs() == 4);
  // A queue pair made without receive slots: no poll ever makes room.
  auto send_only = x.pd.create_qp<rc>(x.cq, qp_cap{4, 0});
  CHECK(send_only.post_recv(mr.local(), 1).status == post_status::list_too_long);
}

// Audit 30, F2: post_recvs tested the room before a UD buffer's size, so a list with a
// buffer too small for the GRH was rq_full on a full queue (a retry after a poll met the
// same buffer again) and list_too_long without receive slots; post_recv says
// recv_too_small first, as the shared receive queue's post_recvs does.
TEST_CASE("post_recvs names a UD buffer too small for the GRH before a full or slotless receive queue") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto mr = x.pd.allocate<access::local_write>(256);
  const std::array<local_buffer, 1> small{mr.local(64, 39)};
  auto q = x.pd.create_qp<ud>(x.cq, qp_cap{4, 1});
  REQUIRE(q.post_recv(mr.local(0, 64), 1).ok());  // the receive queue is full now
  CHECK(q.post_recv(small[0], 2).status == post_status::recv_too_small);
  CHECK(q.post_recvs(small, 3).status == post_status::recv_too_small);
  auto none = x.pd.create_qp<ud>(x.cq, qp_cap{4, 0});
  CHECK(none.post_recv(small[0], 4).status == post_status::recv_too_small);
  CHECK(none.post_recvs(small, 5).status == post_status::recv_too_small);
}

TEST_CASE("reset(): a queue pair in ERR becomes a fresh INIT one on the same CQs, and reconnects") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  const auto reserved = x.cq.reserved();
  const auto old_qpn = p.a.qp_num();
  REQUIRE(p.a.write(src.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 1).ok());  // bad rkey
  REQUIRE(p.a.write(src.local(0, 8), dst.remote(), 2).ok());  // outstanding when the QP breaks
  (void)collect(x.cq, 2);
  REQUIRE(p.a.in_error());

  auto fresh_a = std::move(p.a).reset();
  auto fresh_b = std::move(p.b).reset();
  static_assert(std::is_same_v<decltype(fresh_a), queue_pair<B, rc, signal_every<4>, qp_state::init>>);
  CHECK_FALSE(p.a);
  CHECK(fresh_a.qp_num() != old_qpn);
  CHECK(fresh_a.query_state() == qp_state::init);
  CHECK_FALSE(fresh_a.in_error());
  CHECK(fresh_a.send_credits() == 8);
  CHECK(x.cq.attached() == 1);
  CHECK(x.cq.reserved() == reserved);

  const auto ea = fresh_a.local_endpoint();
  auto a = std::move(fresh_a).connect(fresh_b.local_endpoint());
  auto b = std::move(fresh_b).connect(ea);
  std::memcpy(src.data(), "again", 6);
  REQUIRE(a.write(src.local(0, 6), dst.remote(), 3, send_flags::signaled).ok());
  auto got = collect(x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(std::memcmp(dst.data(), "again", 6) == 0);
  CHECK_THROWS_AS((void)std::move(p.a).reset(), usage_error);  // moved from
}

TEST_CASE("reset(): outstanding receives and sends complete as flushes with their wr_ids, and credits stay apart") {
  mock::fabric_config slow;
  slow.latency = std::chrono::milliseconds{1};  // sends stay outstanding until the clock moves
  mock::fabric fab(slow);
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  const auto old_qpn = p.a.qp_num();
  REQUIRE(p.a.post_recv(src.local(0, 8), 11).ok());
  REQUIRE(p.a.post_recv(src.local(8, 8), 12).ok());
  REQUIRE(p.a.write(src.local(16, 8), dst.remote(), 21).ok());  // unsignaled, in flight
  REQUIRE(p.a.write(src.local(24, 8), dst.remote(), 22, send_flags::signaled).ok());
  const auto reserved = x.cq.reserved();

  auto fresh = std::move(p.a).reset();
  CHECK(x.cq.attached() == 1);
  CHECK(x.cq.reserved() == reserved);  // the new QP's promise; the flushes are counted apart
  CHECK(x.cq.flushing() == 5);  // with the drain marker's (21 is unsignaled)
  CHECK(fresh.posted_recvs() == 0);
  CHECK(fresh.send_credits() == 8);

  auto got = collect(x.cq, 4);
  REQUIRE(got.size() == 4);
  std::vector<std::uint64_t> ids;
  for (const auto& c : got) {
    CHECK(c.status == wc_status::wr_flush_err);
    CHECK(c.qp_num == old_qpn);
    ids.push_back(c.wr_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::uint64_t>{11, 12, 21, 22});
  CHECK(x.cq.unrouted() == 0);
  CHECK(fresh.send_credits() == 8);
  CHECK(fresh.posted_recvs() == 0);
  CHECK_FALSE(fresh.in_error());

  // The next reset (or destruction) lets the old QP go, with its entries.
  auto again = std::move(fresh).reset();
  CHECK(x.cq.flushing() == 0);
  CHECK(x.cq.attached() == 1);
  again = {};
  p.b = {};
  CHECK(x.cq.attached() == 0);
  CHECK(x.cq.reserved() == 0);
}

TEST_CASE("reset(): nothing outstanding destroys the old QP at once; receives outstanding need room beside the new QP") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto cq = x.dev.create_cq(6);
  auto mr = x.pd.allocate<access::local_write>(64);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{2, 2});
  auto idle = std::move(q).reset();
  CHECK(cq.flushing() == 0);
  REQUIRE(idle.post_recv(mr.local(0, 8), 1).ok());
  REQUIRE(idle.post_recv(mr.local(8, 8), 2).ok());
  auto busy = std::move(idle).reset();  // 4 entries promised + 2 flushes: 6 fit
  CHECK(cq.reserved() == 4);
  CHECK(cq.flushing() == 2);
  auto got = collect(cq, 2);
  CHECK(got.size() == 2);
  CHECK(cq.flushing() == 0);  // each flush polled gives its entry back
}

// The device refusing the new queue pair (here its max_qp, which the old one still
// counts in while its receives are outstanding) destroys the old one too: the error was
// the bare ibv_create_qp refusal ("destroy one first"), silent on the handle now empty
// and on the receives that will not complete.
TEST_CASE("reset(): the new queue pair refused by the device: the error says the queue pair is now empty") {
  mock::fabric_config cfg;
  cfg.devices.resize(1);
  cfg.devices[0].name = "one_qp";
  cfg.devices[0].limits.max_qp = 1;
  mock::fabric fab(cfg);
  side x(fab, "one_qp");
  auto mr = x.pd.allocate<access::local_write>(64);
  auto q = x.pd.create_qp<rc>(x.cq, qp_cap{2, 2});
  const auto qpn = q.qp_num();
  REQUIRE(q.post_recv(mr.local(0, 8), 1).ok());
  try {
    (void)std::move(q).reset();
    FAIL("reset() made a second queue pair on a device of max_qp 1");
  } catch (const verbs_error& e) {
    const std::string w = e.what();
    CAPTURE(w);
    CHECK(e.verb() == std::string_view("ibv_create_qp"));
    CHECK(e.errno_value() == ENOMEM);
    CHECK(w.find("max_qp") != std::string::npos);
    CHECK(w.find("reset()") != std::string::npos);
    CHECK(w.find(detail::cat("QP ", detail::hex(qpn), " was destroyed")) != std::string::npos);
    CHECK(w.find("1 outstanding") != std::string::npos);
    CHECK(w.find("now empty") != std::string::npos);
  }
  CHECK_FALSE(q);
  (void)collect(x.cq, 1, 10);  // a poll finding the CQ empty gives the destroyed QP's room back
  CHECK(x.cq.reserved() + x.cq.flushing() == 0);
  auto again = x.pd.create_qp<rc>(x.cq, qp_cap{2, 2});  // the device's count is back too
  CHECK(again);
}

// Checks that std::move(q).reset() throws usage_error naming `need` and leaves q a
// queue pair (not moved from).
template <class QP>
void reset_refused(QP& q, std::string_view need) {
  std::optional<decltype(std::move(q).reset())> fresh;
  try {
    fresh.emplace(std::move(q).reset());
  } catch (const usage_error& e) {
    CHECK(std::string_view(e.what()).find(need) != std::string_view::npos);
  }
  REQUIRE_FALSE(fresh.has_value());
  REQUIRE(q);
}

// A CQ sized for one queue pair cannot hold a new one beside the old one's flushes:
// the reset used to be made anyway, and once the new queue pair's WRs completed before
// the flushes were polled the CQ overflowed (CQ_ERR; the mock drops the completion, a
// device fails every QP on the CQ): completions lost, send credits never back.
TEST_CASE("reset(): a CQ without room for the new queue pair beside the old one's flushes refuses, and nothing changes") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(4);
  auto mr = x.pd.allocate<rw_access>(64);
  auto rmr = y.pd.allocate<rw_access>(64);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{2, 2});
  const auto qpn = q.qp_num();
  REQUIRE(q.post_recv(mr.local(0, 8), 1).ok());
  REQUIRE(q.post_recv(mr.local(8, 8), 2).ok());
  reset_refused(q, "at least 6 entries");  // as it was: the same QP, in INIT, its receives posted
  CHECK(q.qp_num() == qpn);
  CHECK(q.query_state() == qp_state::init);
  CHECK(q.posted_recvs() == 2);
  CHECK(cq.reserved() == 4);
  CHECK(cq.flushing() == 0);
  // It still works: connected, its receives and sends complete, none lost.
  auto peer0 = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto live = std::move(q).connect(peer0.local_endpoint());
  auto peer = std::move(peer0).connect(live.local_endpoint());
  REQUIRE(peer.send(rmr.local(0, 8), 10).ok());
  REQUIRE(peer.send(rmr.local(0, 8), 11).ok());
  REQUIRE(live.write(mr.local(0, 8), rmr.remote(), 5).ok());
  REQUIRE(live.write(mr.local(0, 8), rmr.remote(), 6).ok());
  CHECK(collect(cq, 4).size() == 4);
  CHECK(live.send_credits() == 2);
  CHECK(live.posted_recvs() == 0);
  CHECK_FALSE(x.dev.next_event(std::chrono::milliseconds{0}).has_value());  // no CQ_ERR
}

// An unsignaled send still holding its slot (no signaled WR after it was polled) makes
// the old QP go at once, but its completion may still be in the CQ, so its entry stays
// held (flushing()). The check before the reset left it out: the new queue pair's
// create_qp then refused, after the old one was destroyed, and the handle was empty.
TEST_CASE("reset(): an unsignaled send outstanding counts in the room check, and a refusal changes nothing") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(4);
  auto mr = x.pd.allocate<rw_access>(64);
  auto rmr = y.pd.allocate<rw_access>(64);
  auto q0 = x.pd.create_qp<rc, signal_manual>(cq, qp_cap{2, 2});
  auto peer0 = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto q = std::move(q0).connect(peer0.local_endpoint());
  auto peer = std::move(peer0).connect(q.local_endpoint());
  REQUIRE(q.write(mr.local(0, 8), rmr.remote(), 1).ok());  // unsignaled: its slot is held
  REQUIRE(q.send_credits() == 1);
  const auto qpn = q.qp_num();
  reset_refused(q, "at least 6 entries");  // 4 + its entry + the drain marker's
  CHECK(q.qp_num() == qpn);
  CHECK(cq.reserved() == 4);
  CHECK(cq.flushing() == 0);
  // On a CQ with room for those entries, the same reset is made.
  auto roomy = x.dev.create_cq(6);
  auto r0 = x.pd.create_qp<rc, signal_manual>(roomy, qp_cap{2, 2});
  auto peer1 = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto r = std::move(r0).connect(peer1.local_endpoint());
  REQUIRE(r.write(mr.local(0, 8), rmr.remote(), 2).ok());
  auto again = std::move(r).reset();
  CHECK(again);
  CHECK(roomy.reserved() + roomy.flushing() == 6);
}
// A failed send and its flushes give no slot back: counted as still to come, they made
// a reset after an error look short of room even once all of them were polled.
template <class S>
void reset_after_polled_error_fits() {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(4);
  auto mr = x.pd.allocate<rw_access>(64);
  auto q0 = x.pd.create_qp<rc, S>(cq, qp_cap{2, 2});
  auto peer0 = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  auto q = std::move(q0).connect(peer0.local_endpoint());
  auto peer = std::move(peer0).connect(q.local_endpoint());
  REQUIRE(q.write(mr.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 1).ok());  // REM_ACCESS_ERR
  REQUIRE(q.write(mr.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 2, send_flags::signaled).ok());
  auto got = collect(cq, 2);
  CHECK(got.size() == 2);
  REQUIRE(q.in_error());
  auto fresh = std::move(q).reset();  // everything polled: nothing to keep room for
  CHECK(cq.flushing() == 0);
  CHECK(cq.reserved() == 4);
  CHECK(fresh.send_credits() == 2);
}

TEST_CASE("reset() after an error whose completions were all polled fits a CQ sized for the queue pair") {
  SUBCASE("signal_all") { reset_after_polled_error_fits<signal_all>(); }
  SUBCASE("signal_every<2>") { reset_after_polled_error_fits<signal_every<2>>(); }
  SUBCASE("signal_manual") { reset_after_polled_error_fits<signal_manual>(); }
}

// Under selective signaling a flush does not say whether its WR was signaled: every send
// completion of the old queue pair was counted against its signaled ones, and flushes of
// unsignaled WRs posted before a signaled one made it look done (or, after a polled
// failure of an unsignaled WR, reset() destroyed it at once): the signaled WR's flush
// never reached the application.
TEST_CASE("reset() under selective signaling: a signaled WR's flush comes whatever unsignaled ones flush first") {
  mock::fabric_config cfg;
  cfg.latency = std::chrono::microseconds(5);  // the WRITEs are still in flight at reset()
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq<busy_poll<1>>(16);  // a poll takes one completion
  auto mr = x.pd.allocate<rw_access>(64);
  auto rmr = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc, signal_manual>(x.pd, cq, y.pd, y.cq, qp_cap{4, 0});
  auto& q = p.a;
  std::vector<std::uint64_t> ids;
  auto keep = [&](const completion<B>& c) { ids.push_back(c.wr_id()); };
  std::optional<queue_pair<B, rc, signal_manual, qp_state::init>> fresh;  // keeps the old one's chain
  SUBCASE("flushes of unsignaled WRs first") {
    REQUIRE(q.write(mr.local(0, 8), rmr.remote().sub(0, 8), 1).ok());
    REQUIRE(q.write(mr.local(0, 8), rmr.remote().sub(0, 8), 2).ok());
    REQUIRE(q.write(mr.local(0, 8), rmr.remote().sub(0, 8), 3, send_flags::signaled).ok());
    auto q2 = std::move(q).reset();
    (void)cq.poll(keep);  // one flush, an unsignaled WR's
    fresh.emplace(std::move(q2).reset());  // the old queue pair is not done
  }
  SUBCASE("after a polled failure of an unsignaled WR") {
    REQUIRE(q.write(mr.local(0, 8), remote_region<>::unchecked(0x1000, 0xdead, 8), 1).ok());  // REM_ACCESS_ERR
    REQUIRE(q.write(mr.local(0, 8), rmr.remote().sub(0, 8), 3, send_flags::signaled).ok());
    for (int i = 0; i < 1000 && ids.empty(); ++i) (void)cq.poll(keep);  // the failure
    fresh.emplace(std::move(q).reset());
  }
  for (int i = 0; i < 1000 && (ids.empty() || ids.back() != 3); ++i) (void)cq.poll(keep);
  REQUIRE_FALSE(ids.empty());
  CHECK(ids.back() == 3);
  CHECK(cq.unrouted() == 0);
}

namespace {
// An RC pair under signal_every<4> whose WRITEs stay in flight (5 us of wire latency),
// its first queue pair on a CQ of 16 entries, for reset() while sends are out.
struct in_flight_every4 {
  in_flight_every4(mock::fabric_config cfg, std::uint32_t depth)
      : fab(with_latency(std::move(cfg))), p(make_pair<rc, signal_every<4>>(x.pd, cq, y.pd, y.cq, qp_cap{depth, 0})) {}
  // WRITEs with wr_ids first..last (the 4th of a run is signaled, the others not).
  void write(std::uint64_t first, std::uint64_t last) {
    for (std::uint64_t id = first; id <= last; ++id)
      REQUIRE(p.a.write(src.local(0, 8), dst.remote().sub(0, 8), id).ok());
  }
  static mock::fabric_config with_latency(mock::fabric_config cfg) {
    cfg.latency = std::chrono::microseconds(5);
    return cfg;
  }
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  completion_queue<B> cq = x.dev.create_cq(16);
  memory_region<B, rw_access> src = x.pd.allocate<rw_access>(64);
  memory_region<B, rw_access> dst = y.pd.allocate<rw_access>(64);
  qp_pair<rc, signal_every<4>> p;
};
}  // namespace

// A device writes the flushes of a queue pair moved to ERR after modify_qp returns (rxe's
// tasks, a NIC's hardware; the mock once a poll has found nothing), so a poll may find
// the CQ empty before they come. Under selective signaling the old queue pair was let go
// on such a poll: the next reset() destroyed it, and its flushes, the signaled WR's among
// them, vanished with it (spec profile: a destroyed QP's completions are cleaned out) or
// reached no handler (rxe profile: left in the CQ, unrouted). A drain marker posted after
// them now says when the last one came.
TEST_CASE("reset() under selective signaling: the old queue pair waits for its flushes, though a poll finds the CQ empty first") {
  for (const auto profile : {mock::device_profile::spec, mock::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    mock::fabric_config cfg;
    cfg.profile = profile;
    in_flight_every4 t(cfg, 8);
    auto& cq = t.cq;
    std::vector<std::uint64_t> ids;
    cq.on(t.p.a, [&](const completion<B>& c) {
      CHECK(c.status() == wc_status::wr_flush_err);
      ids.push_back(c.wr_id());
    });
    t.write(1, 6);
    auto q2 = std::move(t.p.a).reset();  // 4 is signaled, 1-3, 5 and 6 are not
    CHECK(cq.poll() == 0);  // the flushes are not written yet
    auto q3 = std::move(q2).reset();  // lets go of what is done
    for (int i = 0; i < 100 && ids.size() < 6; ++i) (void)cq.dispatch();
    CHECK(ids == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6});
    CHECK(cq.unrouted() == 0);
    (void)cq.dispatch();  // empty
    CHECK(cq.flushing() == 0);
  }
}

// With the send queue full at reset() the drain marker waits for a slot, and is posted
// once a flush gives one back, after the flushes were written: the spec flushes it, rxe
// 6.1 sometimes never completes a WR posted then (lose_posts_in_error). A marker that
// never comes would hold the old queue pair and its room for good; it is given up a
// second after the reset, at a poll that finds the CQ empty.
TEST_CASE("reset() under selective signaling with the send queue full: the drain marker waits for a slot, or is given up") {
  for (const bool lost : {false, true}) {
    CAPTURE(lost);
    mock::fabric_config cfg;
    cfg.profile = mock::device_profile::rxe;  // slots come back as WRs complete
    cfg.lose_posts_in_error = lost;
    in_flight_every4 t(cfg, 4);
    auto& cq = t.cq;
    std::vector<std::uint64_t> ids;
    cq.on(t.p.a, [&](const completion<B>& c) { ids.push_back(c.wr_id()); });
    t.write(1, 4);
    REQUIRE(t.p.a.send_credits() == 0);
    auto q2 = std::move(t.p.a).reset();
    CHECK(cq.flushing() == 5);  // four sends and the marker
    for (int i = 0; i < 100 && ids.size() < 4; ++i) (void)cq.dispatch();
    CHECK(ids == std::vector<std::uint64_t>{1, 2, 3, 4});
    for (int i = 0; i < 4; ++i) (void)cq.dispatch();  // the marker, if it comes
    CHECK(ids.size() == 4);  // (never delivered)
    CHECK(cq.unrouted() == 0);
    if (!lost) {
      CHECK(cq.flushing() == 0);
    } else {
      CHECK(cq.flushing() == 1);  // the marker's entry, until it is given up
      std::this_thread::sleep_for(detail::drain_grace + std::chrono::milliseconds(50));
      (void)cq.dispatch();  // empty, past the deadline
      CHECK(cq.flushing() == 0);
    }
    auto q3 = std::move(q2).reset();  // lets the old one go
    CHECK(cq.flushing() == 0);
  }
}

// A UD queue pair posts no drain marker (its sends need an address). It was let go at
// the first poll that found its send CQ empty, but a device writes the flushes after
// modify_qp returns (the mock after such a poll): its room came back while its flushes
// were still to come, a second queue pair fitted, and the CQ overran; a second reset
// destroyed it, its flushes never delivered, a signaled WR's among them (audit 47, F1).
// It is kept as a lost drain marker is: until a poll finds the CQ empty a second
// (drain_grace) after the reset.
TEST_CASE_TEMPLATE("reset() of a UD queue pair with unsignaled sends out keeps its room until its flushes can have come",
                   S, signal_manual, signal_every<4>) {
  mock::fabric_config cfg;
  cfg.latency = std::chrono::microseconds(50);
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(14);  // 8 sends, and room for the 6 flushes of a reset
  auto tx = x.pd.allocate<access::local_write>(64);
  auto receiver = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8}).activate();
  auto ah = x.pd.create_ah(receiver.local_endpoint());
  const auto to = ah.to(receiver.local_endpoint());
  auto q = x.pd.create_qp<ud, S>(cq, qp_cap{8, 0}).activate();
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(q.post(op::ud_send{tx.local(0, 16), to}, 100 + i).ok());
  auto fresh = std::move(q).reset();
  CHECK(cq.flushing() == 6);
  std::vector<std::uint64_t> ids;
  auto keep = [&](const completion<B>& c) {
    CHECK(c.status() == wc_status::wr_flush_err);
    ids.push_back(c.wr_id());
  };
  CHECK(cq.poll(keep) == 0);  // empty: the flushes are written after it
  CHECK(cq.flushing() == 6);  // still held
  const auto second = [&] { return x.pd.create_qp<ud, S>(cq, qp_cap{6, 0}); };
  CHECK_THROWS_AS((void)second(), usage_error);  // 8 + 6 + 6 > 14
  auto again = std::move(fresh).reset();  // keeps the first one: its flushes may still come
  for (int i = 0; i < 100 && ids.size() < 6; ++i) (void)cq.poll(keep);
  CHECK(ids == std::vector<std::uint64_t>{100, 101, 102, 103, 104, 105});
  CHECK(cq.unrouted() == 0);
  std::this_thread::sleep_for(detail::drain_grace + std::chrono::milliseconds(50));
  CHECK(cq.poll() == 0);  // empty, past the grace
  CHECK(cq.flushing() == 0);
  CHECK_NOTHROW((void)second());
}

// A handler reset its queue pair, which kept it for the rest of the batch, then reset the
// queue pair that reset returned: that second reset let the first one go (its
// completions were all accounted, by the batch), and the batch's rest reached the fallback.
TEST_CASE("reset() twice in one batch: the rest of the batch still reaches the old queue pair's handler") {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  auto src = x.pd.allocate<rw_access>(256);
  auto dst = y.pd.allocate<rw_access>(256);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> a(std::move(p.a));
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(a->write(src.local(0, 8), dst.remote().sub(0, 8), 10 + i).ok());
  std::optional<queue_pair<B, rc, signal_all, qp_state::init>> fresh;
  std::vector<std::uint64_t> handled;
  x.cq.on(*a, [&](const completion<B>& c) {
    handled.push_back(c.wr_id());
    if (handled.size() == 1) fresh.emplace(std::move(*a).reset());  // keeps a for the batch's rest
    else if (handled.size() == 2) fresh.emplace(std::move(*fresh).reset());
  });
  int fallback = 0;
  CHECK(x.cq.dispatch([&](const completion<B>&) { ++fallback; }) == 4);  // one batch of a's 4 successes
  CHECK(handled == std::vector<std::uint64_t>{10, 11, 12, 13});
  CHECK(fallback == 0);
  CHECK(x.cq.unrouted() == 0);
}

// The old queue pair held room for every unsignaled WR it had out, as each might flush;
// those that had completed unseen never did, and the room stayed held, though a poll
// found the CQ empty, until that queue pair was reset again or destroyed. It comes back
// with the drain marker, polled after every send completion of the old queue pair.
TEST_CASE("reset() under selective signaling: room held for unsignaled WRs comes back with the drain marker") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(16);
  auto mr = x.pd.allocate<rw_access>(128);
  auto rmr = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc, signal_every<4>>(x.pd, cq, y.pd, y.cq, qp_cap{4, 4});
  auto& q = p.a;
  REQUIRE(q.write(mr.local(0, 8), rmr.remote().sub(0, 8), 1).ok());  // complete unseen
  REQUIRE(q.write(mr.local(0, 8), rmr.remote().sub(0, 8), 2).ok());
  REQUIRE(q.post_recv(mr.local(64, 64), 3).ok());
  auto q2 = std::move(q).reset();
  CHECK(cq.flushing() == 4);  // two sends, a receive and the marker
  const auto got = collect(cq, 1);  // the receive's flush
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 3);
  (void)cq.poll();  // empty
  CHECK(cq.flushing() == 0);
  CHECK_NOTHROW((void)x.pd.create_qp<rc, signal_every<4>>(cq, qp_cap{4, 4}));  // 8 + 8: the live depths
}

// The older generation used to be destroyed by the next reset() whatever it still had
// to complete: its flushes vanished with it (an awaiter of one waited for ever).
TEST_CASE("reset() twice before polling: the first queue pair's flushes still come, with their wr_ids") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto cq = x.dev.create_cq(16);
  auto mr = x.pd.allocate<access::local_write>(64);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{2, 2});
  const auto first = q.qp_num();
  REQUIRE(q.post_recv(mr.local(0, 8), 1).ok());
  REQUIRE(q.post_recv(mr.local(8, 8), 2).ok());
  auto second = std::move(q).reset();
  REQUIRE(second.post_recv(mr.local(16, 8), 3).ok());
  const auto second_qpn = second.qp_num();
  auto third = std::move(second).reset();
  CHECK(cq.flushing() == 3);
  CHECK(cq.attached() == 1);
  auto got = collect(cq, 3);
  REQUIRE(got.size() == 3);
  std::vector<std::pair<std::uint32_t, std::uint64_t>> ids;
  for (const auto& c : got) {
    CHECK(c.status == wc_status::wr_flush_err);
    ids.emplace_back(c.qp_num, c.wr_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{first, 1}, {first, 2}, {second_qpn, 3}});
  CHECK(cq.unrouted() == 0);
  CHECK(cq.flushing() == 0);
  auto fourth = std::move(third).reset();  // the polled generations go now
  CHECK(cq.flushing() == 0);
  CHECK(cq.reserved() == 4);
  fourth = {};
  CHECK(cq.reserved() == 0);
  CHECK(cq.attached() == 0);
}

// The room flushes hold was not counted for a queue pair created beside them.
TEST_CASE("create_qp beside the flushes of a reset queue pair counts their room until they are polled") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto cq = x.dev.create_cq(8);
  auto mr = x.pd.allocate<access::local_write>(64);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{2, 2});
  REQUIRE(q.post_recv(mr.local(0, 8), 1).ok());
  REQUIRE(q.post_recv(mr.local(8, 8), 2).ok());
  auto fresh = std::move(q).reset();
  REQUIRE(cq.flushing() == 2);
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(cq, qp_cap{2, 1}),
                       doctest::Contains("2 entries held by completions that queue pairs replaced by reset() or destroyed"), usage_error);
  // It fits once they are polled: the advice says so first (it said to make the CQ larger).
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(cq, qp_cap{2, 1}), doctest::Contains(": poll the CQ first"),
                       usage_error);
  CHECK(collect(cq, 2).size() == 2);
  CHECK(cq.flushing() == 0);
  auto other = x.pd.create_qp<rc>(cq, qp_cap{2, 1});
  CHECK(cq.reserved() == 7);
}

// A device that does not clean the CQ at destroy_qp (rxe, and the mock as rxe) returns a
// destroyed queue pair's unpolled completions to later polls: their room in the CQ is
// not free until they are polled, or a poll finds the CQ empty.
TEST_CASE("destroying a queue pair keeps the room of its unpolled completions until they are polled") {
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;
  mock::fabric fab(cfg);
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(4);
  REQUIRE(cq.capacity() == 7);  // rxe grants 2^k - 1 (create.grants_rounded_up): 4 + 4 do not fit
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::uint32_t gone = 0;
  {
    auto p = make_pair<rc>(x.pd, cq, y.pd, y.cq, qp_cap{4, 0});
    for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(p.a.post(op::write{src.local(0, 8), dst.remote()}, i).ok());
    gone = p.a.qp_num();
  }  // destroyed with its 4 completions in the CQ
  CHECK(cq.reserved() == 0);
  CHECK(cq.flushing() == 4);
  // A queue pair in its place could overflow the CQ: 4 entries taken, 4 more promised.
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(cq, qp_cap{4, 0}),
                       doctest::Contains("4 entries held by completions that queue pairs replaced by reset() or destroyed"),
                       usage_error);
  const auto left = collect(cq, 4);
  REQUIRE(left.size() == 4);
  CHECK(left[0].qp_num == gone);
  CHECK(wr_ids_of(left) == std::vector<std::uint64_t>{0, 1, 2, 3});
  CHECK(cq.unrouted() == 4);
  CHECK(cq.flushing() == 0);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{4, 0});
  CHECK(cq.reserved() == 4);
}

TEST_CASE("a destroyed queue pair's room comes back at the first poll that finds the CQ empty") {
  mock::fabric fab;  // the specification's device cleans the CQ at destroy_qp, as mlx5 does
  side x(fab, "mock0"), y(fab, "mock1");
  auto cq = x.dev.create_cq(4);
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  {
    auto p = make_pair<rc>(x.pd, cq, y.pd, y.cq, qp_cap{4, 0});
    for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(p.a.post(op::write{src.local(0, 8), dst.remote()}, i).ok());
  }
  CHECK(cq.flushing() == 3);
  CHECK_THROWS_AS((void)x.pd.create_qp<rc>(cq, qp_cap{4, 0}), usage_error);
  CHECK(cq.poll([](const auto&) {}) == 0);  // empty: the device dropped them
  CHECK(cq.flushing() == 0);
  CHECK(cq.unrouted() == 0);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{4, 0});
  CHECK(cq.reserved() == 4);
}

// A responder the device moved to ERR (a peer's WRITE with a bad rkey) learns so from no
// completion of its own: in_error() stays false, and the only sign is the device's
// QP_ACCESS_ERR event, which a program told apart by comparing backend handles
// (helper-102's audit). raised(ev) says whose event it is, as shared_receive_queue's does.
TEST_CASE("queue_pair::raised: the device's event about this queue pair, not another's") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  const auto wrong = remote_region<access::remote_write>::unchecked(dst.remote().addr(), dst.remote().rkey() ^ 1, 64);
  REQUIRE(p.a.write(src.local(), wrong, 1).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  const std::optional<async_event> ev = y.dev.next_event(std::chrono::seconds(1));
  REQUIRE(ev.has_value());
  CHECK(ev->type == async_event_type::qp_access_err);
  CHECK(p.b.raised(*ev));
  CHECK_FALSE(p.b.in_error());
  CHECK_FALSE(p.a.raised(*ev));
  CHECK_FALSE(decltype(p.b){}.raised(*ev));  // an empty handle
  async_event other = *ev;
  other.type = async_event_type::srq_limit_reached;  // not a queue pair's event
  CHECK_FALSE(p.b.raised(other));
  auto fresh = std::move(p.b).reset();  // the new queue pair's events are its own
  CHECK_FALSE(fresh.raised(*ev));
}
