// UD (docs/semantics.md#ud and the UD rows of #fault-statuses).
#include "deviations.hpp"
#include "harness.hpp"

#include <rdmakit/grh.hpp>

#include <algorithm>
#include <span>

using namespace conf;

namespace {
template <class B>
struct ud_pair {
  explicit ud_pair(fixture<B>& f) : fx(f) {
    auto p = f.make_pair({.type = qp_type::ud, .caps = {16, 16, 2, 2, 0}});
    a = p.first;
    b = p.second;
    ah = f.make_ah(f.loopback_av());
  }
  fixture<B>& fx;
  endpoint<B> a, b;
  typename B::ah ah{};
};
}  // namespace

CONFORMANCE_CASE("ud: SEND lands after a 40-byte GRH; byte_len includes it; src_qp names the sender") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(1024);
  auto& dst = fx.make_buffer(2048);
  src.fill(13);
  REQUIRE(fx.post_recv(p.b, 1, {dst.sge(0, 2048)}) == 0);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.sge(0, 500)}) == 0);
  auto s = fx.poll_one(p.a.send_cq);
  CHECK(s.status == wc_status::success);
  CHECK(s.op == wc_opcode::send);
  CHECK(s.qp_num == p.a.num);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.op == wc_opcode::recv);
  CHECK(r.byte_len == 500 + grh_bytes);
  CHECK(r.src_qp == p.a.num);
  CHECK(r.qp_num == p.b.num);
  CHECK(has_all(r.flags, wc_flags::grh));
  CHECK_FALSE(has_any(r.flags, wc_flags::with_imm));
  CHECK(dst.holds(13, grh_bytes, 500));
  // RoCE has no LRH: no LID or service level to report (the GRH names the sender).
  CHECK(r.slid == 0);
  CHECK(r.sl == 0);
}

// What a UD server needs to answer a client it was not told about: the client's GID,
// in the area's layout for the GID's type (docs/semantics.md#ud). Each valid GID of the
// port in turn, sent to itself.
CONFORMANCE_CASE("ud: the GRH area names the sender's GID, in the layout of its GID type") {
  fixture<B> fx;
  const auto want = expected(ids::ud_grh_hop_limit, backend_traits<B>::profile());
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(64);
  auto& dst = fx.make_buffer(256);
  int checked = 0;
  for (std::uint32_t i = 0; i < std::min<std::uint32_t>(fx.port.gid_tbl_len, 4); ++i) {
    const gid_entry g = B::query_gid(fx.ctx, fx.port_num, static_cast<int>(i));
    if (!g.valid) continue;
    CAPTURE(i);
    CAPTURE(g.value.to_string());
    ah_attr av = fx.loopback_av();
    av.grh.sgid_index = static_cast<std::uint8_t>(i);
    av.grh.dgid = g.value;
    av.grh.hop_limit = 9;
    const auto ah = fx.make_ah(av);
    dst.clear(std::byte{0xee});
    REQUIRE(fx.post_recv(p.b, 1, {dst.sge(0, 256)}) == 0);
    REQUIRE(fx.post_ud(p.a, 2, ah, p.b.num, default_qkey, {src.sge(0, 32)}) == 0);
    CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
    const auto r = fx.poll_one(p.b.recv_cq);
    REQUIRE(r.status == wc_status::success);
    const auto info = parse_grh(std::span<const std::byte>(dst.data(), grh_bytes));
    REQUIRE(info);
    CHECK(info->source == g.value);
    CHECK(info->destination == g.value);
    CHECK(info->ipv4 == (g.type == gid_type::roce_v2 && g.value.is_ipv4_mapped()));
    CHECK(info->hop_limit == (want.hop_limit < 0 ? 9 : want.hop_limit));
    ++checked;
  }
  CHECK(checked > 0);
}

CONFORMANCE_CASE("ud: SEND_WITH_IMM carries the immediate") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(512);
  src.fill(3);
  REQUIRE(fx.post_recv(p.b, 1, {dst.sge(0, 512)}) == 0);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.sge(0, 100)}, opcode::send_with_imm,
                     to_be32(0xabcdef01)) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 100 + grh_bytes);
  CHECK(has_all(r.flags, wc_flags::with_imm | wc_flags::grh));
  CHECK(from_be32(r.imm) == 0xabcdef01);
  CHECK(dst.holds(3, grh_bytes, 100));
}

CONFORMANCE_CASE("ud: the GRH fills a 40-byte first SGE and the data goes to the second") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(256);
  auto& grh = fx.make_buffer(64);
  auto& data = fx.make_buffer(256);
  src.fill(17);
  REQUIRE(fx.post_recv(p.b, 1, {grh.sge(0, grh_bytes), data.sge(0, 256)}) == 0);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.sge(0, 200)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 200 + grh_bytes);
  CHECK(data.holds(17, 0, 200));
}

CONFORMANCE_CASE("ud: a GRH that straddles two SGEs: the data follows it in the second") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(256);
  auto& head = fx.make_buffer(64);
  auto& data = fx.make_buffer(256);
  src.fill(29);
  data.clear(std::byte{0xee});
  REQUIRE(fx.post_recv(p.b, 1, {head.sge(0, 30), data.sge(0, 256)}) == 0);  // GRH: 30 + 10 bytes
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.sge(0, 200)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 200 + grh_bytes);
  CHECK(data.holds(29, grh_bytes - 30, 200));
  CHECK(data.data()[grh_bytes - 30 + 200] == std::byte{0xee});  // nothing past the data
}

CONFORMANCE_CASE("ud: a message of exactly the path MTU goes through") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  const std::uint32_t mtu = mtu_bytes(fx.port.active_mtu);
  auto& src = fx.make_buffer(mtu);
  auto& dst = fx.make_buffer(mtu + grh_bytes);
  src.fill(23);
  REQUIRE(fx.post_recv(p.b, 1, {dst.whole()}) == 0);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.whole()}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == mtu + grh_bytes);
  CHECK(dst.holds(23, grh_bytes, mtu));
}

CONFORMANCE_CASE("ud: a SEND larger than the path MTU") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  std::string_view id = ids::ud_over_mtu;
  std::uint32_t bad_key = 0;  // xor-ed into the SGE's lkey
  SUBCASE("from a valid SGE") {}
  SUBCASE("from an SGE with a bad lkey: which of the two faults is reported") {
    id = ids::ud_over_mtu_bad_lkey;
    bad_key = 0x5a5a00;
  }
  const auto want = expected(id, backend_traits<B>::profile());
  const std::uint32_t mtu = mtu_bytes(fx.port.active_mtu);
  auto& src = fx.make_buffer(mtu + 1);
  auto& dst = fx.make_buffer(2 * mtu + grh_bytes);
  REQUIRE(fx.post_recv(p.b, 1, {dst.whole()}) == 0);
  CHECK(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {{src.addr(0), mtu + 1, src.lkey() ^ bad_key}}) ==
        want.post_errno);
  auto s = fx.poll_one(p.a.send_cq);
  CHECK(s.wr_id == 2);
  CONF_CHECK_STATUS(want.req, s.status);
  if (want.resp.is_nothing()) CHECK(fx.drain(p.b.recv_cq).empty());
  if (want.stays_rts != tri::either)
    CHECK((B::query_qp_state(p.a.qp) == qp_state::rts) == (want.stays_rts == tri::yes));
}

CONFORMANCE_CASE("ud: a receive smaller than payload + 40 loses the datagram, not the QP") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  const auto want = expected(ids::ud_recv_too_small, backend_traits<B>::profile());
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  REQUIRE(fx.post_recv(p.b, 1, {dst.sge(0, 100 + grh_bytes - 1)}) == 0);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.sge(0, 100)}) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(p.a.send_cq).status);
  auto got = fx.drain(p.b.recv_cq);
  if (got.empty()) {
    CHECK_MESSAGE(want.resp.allows_nothing(), "no receive completion, expected " << want.resp.to_string());
  } else {
    CHECK(got[0].wr_id == 1);
    CONF_CHECK_STATUS(want.resp, got[0].status);
  }
  // Where only the datagram is lost, the QP stays in RTS and the next one is delivered
  // (into receive 1 if the drop left it posted, else receive 3).
  const qp_state st = B::query_qp_state(p.b.qp);
  if (want.stays_rts == tri::yes) CHECK(st == qp_state::rts);
  if (st != qp_state::rts) {
    CHECK_MESSAGE(want.stays_rts == tri::either, "the receiver left RTS");
    return;
  }
  REQUIRE(fx.post_recv(p.b, 3, {dst.sge(0, 256)}) == 0);
  REQUIRE(fx.post_ud(p.a, 4, p.ah, p.b.num, default_qkey, {src.sge(0, 50)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq, "the next datagram");
  CHECK(r.status == wc_status::success);
  CHECK(r.wr_id == (got.empty() ? 1u : 3u));
  CHECK(r.byte_len == 50 + grh_bytes);
}

CONFORMANCE_CASE("ud: a Q_Key mismatch is dropped silently; the receive stays posted") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(512);
  src.fill(1);
  REQUIRE(fx.post_recv(p.b, 1, {dst.sge(0, 512)}) == 0);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey + 1, {src.sge(0, 50)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  CHECK(fx.drain(p.b.recv_cq).empty());
  REQUIRE(fx.post_ud(p.a, 3, p.ah, p.b.num, default_qkey, {src.sge(0, 60)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.wr_id == 1);
  CHECK(r.byte_len == 60 + grh_bytes);
  CHECK(B::query_qp_state(p.b.qp) == qp_state::rts);
}

CONFORMANCE_CASE("ud: with no receive posted the message is dropped, not held") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(512);
  src.fill(1);
  REQUIRE(fx.post_ud(p.a, 2, p.ah, p.b.num, default_qkey, {src.sge(0, 50)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  fx.settle();
  REQUIRE(fx.post_recv(p.b, 1, {dst.sge(0, 512)}) == 0);
  CHECK(fx.drain(p.b.recv_cq).empty());
  REQUIRE(fx.post_ud(p.a, 3, p.ah, p.b.num, default_qkey, {src.sge(0, 70)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(p.b.recv_cq);
  CHECK(r.byte_len == 70 + grh_bytes);
}

CONFORMANCE_CASE("ud: one QP receives from two senders and tells them apart by src_qp") {
  fixture<B> fx;
  ud_pair<B> p(fx);
  auto c = fx.make_qp({.type = qp_type::ud});
  fx.bring_up(c, 0);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(1024);
  REQUIRE(fx.post_recv_list(p.b, {{1, {dst.sge(0, 512)}}, {2, {dst.sge(512, 512)}}}).rc == 0);
  REQUIRE(fx.post_ud(p.a, 10, p.ah, p.b.num, default_qkey, {src.sge(0, 10)}) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::success);
  REQUIRE(fx.post_ud(c, 20, p.ah, p.b.num, default_qkey, {src.sge(0, 20)}) == 0);
  CHECK(fx.poll_one(c.send_cq).status == wc_status::success);
  auto r = fx.poll(p.b.recv_cq, 2);
  REQUIRE(r.size() == 2);
  CHECK(r[0].src_qp == p.a.num);
  CHECK(r[0].byte_len == 10 + grh_bytes);
  CHECK(r[1].src_qp == c.num);
  CHECK(r[1].byte_len == 20 + grh_bytes);
}

CONFORMANCE_CASE("ud: a SEND through an address handle of another PD") {
  fixture<B> fx;
  const auto want = expected(ids::ud_ah_other_pd, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair({.type = qp_type::ud});
  auto ah = fx.make_ah(fx.loopback_av(), fx.make_pd());
  auto& buf = fx.make_buffer(2048);
  REQUIRE(fx.post_recv(b, 50, {buf.sge(0, 1024)}) == 0);
  typename B::sge s;
  B::set_sge(s, buf.addr(1024), 64, buf.lkey());
  typename B::send_wr wr{};
  B::set_send(wr, 1, opcode::send, send_flags::signaled, &s, 1);
  B::set_ud(wr, ah, b.num, default_qkey);
  (void)check_post_outcome<B>(fx, a, wr, want, "the SEND's completion");
  CHECK((fx.wait_state(a, qp_state::rts) == qp_state::rts) == (want.stays_rts != tri::no));
  fx.settle();
  CHECK(fx.drain(b.recv_cq).empty());  // nothing was delivered
}
