// The walkthrough from the issue, step by step: two RC ends that exchange their
// QPN/LID/GID/PSN like two processes would, a 1 MiB SEND, then a WRITE with a wrong rkey.
#include "harness.hpp"

using namespace conf;

namespace {

constexpr std::size_t mib = 1u << 20;

/// What the two ends exchange out of band.
struct wire_info {
  std::uint32_t qpn = 0;
  std::uint16_t lid = 0;
  gid g{};
  std::uint32_t psn = 0;
};

template <class B>
struct side {
  side(fixture<B>& fx, std::uint32_t psn)
      : pd(fx.make_pd()),
        buf(fx.make_buffer(mib, acc::local_write | acc::remote_read | acc::remote_write, pd)),
        cq(fx.make_cq(1024)),
        ep(fx.make_qp({.caps = {128, 128, 2, 2, 0}}, cq, cq, pd)),
        me{ep.num, fx.port.lid, fx.gid.value, psn} {}

  void connect(fixture<B>& fx, const wire_info& peer) {
    qp_attr a;
    a.state = qp_state::init;
    a.pkey_index = 0;
    a.port_num = fx.port_num;
    a.access_flags = acc::remote_read | acc::remote_write;
    B::modify_qp(ep.qp, a, qp_attr_mask::state | qp_attr_mask::pkey_index | qp_attr_mask::port |
                               qp_attr_mask::access_flags);
    a.state = qp_state::rtr;
    a.path_mtu = fx.port.active_mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.av.is_global = true;
    a.av.dlid = peer.lid;
    a.av.grh.dgid = peer.g;
    a.av.grh.sgid_index = static_cast<std::uint8_t>(fx.gid_index);
    a.av.grh.hop_limit = 1;
    a.av.port_num = fx.port_num;
    B::modify_qp(ep.qp, a, qp_attr_mask::state | qp_attr_mask::av | qp_attr_mask::path_mtu |
                               qp_attr_mask::dest_qpn | qp_attr_mask::rq_psn | qp_attr_mask::max_dest_rd_atomic |
                               qp_attr_mask::min_rnr_timer);
    a.state = qp_state::rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = me.psn;
    a.max_rd_atomic = 1;
    B::modify_qp(ep.qp, a, qp_attr_mask::state | qp_attr_mask::timeout | qp_attr_mask::retry_cnt |
                               qp_attr_mask::rnr_retry | qp_attr_mask::sq_psn | qp_attr_mask::max_qp_rd_atomic);
    CHECK(B::query_qp_state(ep.qp) == qp_state::rts);
  }

  typename B::pd pd;
  buffer<B>& buf;
  typename B::cq cq;
  endpoint<B> ep;
  wire_info me;
};

template <class B>
std::pair<side<B>, side<B>> connected_sides(fixture<B>& fx) {
  REQUIRE(fx.gid.valid);
  side<B> client(fx, 0x1111), server(fx, 0x2222);
  CHECK(B::cq_capacity(client.cq) >= 1024);
  CHECK(client.ep.caps.max_send_wr >= 128);
  CHECK(client.ep.caps.max_recv_wr >= 128);
  CHECK(client.ep.caps.max_send_sge >= 2);
  client.connect(fx, server.me);
  server.connect(fx, client.me);
  return {client, server};
}

}  // namespace

CONFORMANCE_CASE("walkthrough: a 1 MiB SEND between two RC ends") {
  fixture<B> fx;
  REQUIRE(fx.port.max_msg_sz >= mib);
  auto [client, server] = connected_sides(fx);
  client.buf.fill(99);
  REQUIRE(fx.post_recv(server.ep, 1, {server.buf.whole()}) == 0);
  REQUIRE(fx.post_send(client.ep, 2, opcode::send, {client.buf.whole()}) == 0);
  auto c = fx.poll_one(client.cq, "the 1 MiB send");
  CHECK(c.status == wc_status::success);
  CHECK(c.wr_id == 2);
  CHECK(c.op == wc_opcode::send);
  auto r = fx.poll_one(server.cq, "the 1 MiB receive");
  CHECK(r.status == wc_status::success);
  CHECK(r.wr_id == 1);
  CHECK(r.byte_len == mib);
  CHECK(server.buf.holds(99, 0, mib));
}

CONFORMANCE_CASE("walkthrough: the same connection, an RDMA WRITE with a wrong rkey -> REM_ACCESS_ERR") {
  fixture<B> fx;
  auto [client, server] = connected_sides(fx);
  client.buf.fill(5);
  REQUIRE(fx.post_rdma(client.ep, 3, opcode::rdma_write, client.buf.sge(0, 4096), server.buf.addr(0),
                       server.buf.rkey() ^ 0x800000) == 0);
  auto c = fx.poll_one(client.cq, "the failed write");
  CHECK(c.wr_id == 3);
  CHECK(c.status == wc_status::rem_access_err);
  CHECK(fx.wait_state(client.ep, qp_state::err) == qp_state::err);
  CHECK(server.buf.u64(0) == 0);
  // With the right rkey, on a fresh connection, the same WRITE lands.
  auto [c2, s2] = connected_sides(fx);
  c2.buf.fill(5);
  REQUIRE(fx.post_rdma(c2.ep, 4, opcode::rdma_write, c2.buf.sge(0, 4096), s2.buf.addr(0), s2.buf.rkey()) == 0);
  CHECK(fx.poll_one(c2.cq).status == wc_status::success);
  CHECK(s2.buf.holds(5, 0, 4096));
}
