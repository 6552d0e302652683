#pragma once
// The responder: checks one request message (PSN, transport rules, keys and rights)
// and executes it (SEND into a receive, WRITE, READ and atomic responses).
#include <rdmakit/backends/mock/wire.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/grh.hpp>

#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// RC/UC: whether `m` comes from the address `d` is connected to, and on RC from the QP
// it is connected to. A device drops an RC/UC packet from another address (rxe_recv.c
// check_addr) and sends every answer to its own peer (rxe_resp.c send_ack: the QP's
// address and dest_qp_num), so an RC sender that is not the peer is never answered: the
// mock drops its requests, and it ends in RETRY_EXC_ERR as on a device (a device may
// have executed them: docs/semantics.md#wrong-peer).
inline bool from_peer(fabric_state& f, qp_obj* d, const message& m) {
  learn_route(f, d);
  return d->route_ok && d->route_dev == m.src_dev && d->route_port == m.src_port &&
         (m.type == qp_type::uc || d->attr.dest_qp_num == m.src_qpn);
}

// The QP a request is for, if it can take it (route, ports up, its device and port,
// transport, a receiving state); null drops the message.
inline qp_obj* responder_for(fabric_state& f, const message& m) {
  std::uint32_t dev = m.to_dev;
  std::uint8_t port = m.to_port;
  if (!m.routed && !route(f, m.av, dev, port)) return nullptr;
  if (!f.devices[m.src_dev].ports[m.src_port - 1].up || !f.devices[dev].ports[port - 1].up) return nullptr;
  qp_obj* d = find_qp(f, m.dest_qpn, m.dest_hint, m.epoch);
  if (!d) return nullptr;
  if (d->pd->ctx->dev != dev || d->attr.port_num != port || d->type != m.type) return nullptr;
  if (d->state != qp_state::rtr && d->state != qp_state::rts && d->state != qp_state::sqd) return nullptr;
  if (d->type != qp_type::ud && !from_peer(f, d, m)) return nullptr;
  return d;
}

// RC: a duplicate is answered again without executing twice (READ re-read, atomic
// replayed); a message ahead of sequence is dropped (the requester retransmits). A READ or
// atomic behind the expected PSN that this QP never executed is dropped too, as a device
// holds no responder resource for it (docs/semantics.md#rc-duplicates).
inline void answer_duplicate(fabric_state& f, qp_obj* d, const message& m) {
  response r;
  if (m.op == opcode::rdma_read) {
    const read_record* done = d->read_replay.find(m.psn);
    if (!done || done->rkey != m.rkey || m.remote_addr < done->addr ||
        m.remote_addr - done->addr + m.length > done->length)
      return;
    // (A region deregistered since is not read: the retry finds no answer.)
    if (m.length && !remote_mr_ok(f, d, m.rkey, m.remote_addr, m.length, access::remote_read)) return;
    if (RDMAKIT_UNLIKELY(m.length > d->lost_above)) return;  // lost again, as the first response
    r.data.resize(m.length);
    if (m.length) std::memcpy(r.data.data(), reinterpret_cast<const void*>(m.remote_addr), m.length);
  } else if (is_atomic(m.op)) {
    const atomic_record* done = d->atomic_replay.find(m.psn);
    if (!done) return;
    r.data.resize(8);
    std::memcpy(r.data.data(), &done->original, 8);
  }
  respond(f, m, std::move(r));
}

// An RC request ahead of the expected PSN (the ones before it lost, reordered or
// delayed): a PSN sequence error NAK, once until the expected request comes (IBA's
// class B error; rxe's check_psn), so that its requester resends at once instead of at
// its ACK timeout, or never with TIMEOUT 0 (audit 44). Behind an RNR NAK the requests
// that follow are dropped (gap_answer::rnr_nak; fault.rnr_nak_packets_behind).
RDMAKIT_NOINLINE inline void answer_gap(fabric_state& f, qp_obj* d, const message& m) {
  d->gap = qp_obj::gap_answer::seq_nak;
  response r;
  r.what = response::kind::seq_nak;
  respond(f, m, std::move(r));
}

// Whether the message is the next one to execute (PSN on RC, a new sequence on UC,
// the Q_Key on UD).
inline bool in_sequence(fabric_state& f, qp_obj* d, const message& m) {
  if (m.type == qp_type::rc) {
    const std::uint32_t diff = (m.psn - d->expected_psn) & psn_mask;
    if (diff == 0) {
      d->gap = qp_obj::gap_answer::none;
      return true;
    }
    if (diff >= (1u << 23))
      answer_duplicate(f, d, m);  // behind
    else if (d->gap == qp_obj::gap_answer::none)
      answer_gap(f, d, m);  // ahead: the requests before it were lost or delayed
    return false;
  }
  if (m.type == qp_type::uc) {
    d->expected_psn = m.psn;  // every UC message starts a new sequence
    return true;
  }
  return m.qkey == d->attr.qkey;
}

inline void advance_psn(qp_obj* d, const message& m) { d->expected_psn = (m.psn + m.npkts) & psn_mask; }

// No receive posted: RC answers RNR NAK, UC consumes the message's PSNs, UD drops it.
inline void receiver_not_ready(fabric_state& f, qp_obj* d, const message& m) {
  if (m.type == qp_type::rc) {
    d->gap = qp_obj::gap_answer::rnr_nak;
    response r;
    r.what = response::kind::rnr_nak;
    r.rnr_timer = d->attr.min_rnr_timer;
    respond(f, m, std::move(r));
  } else if (m.type == qp_type::uc) {
    advance_psn(d, m);
  }
}

// A request the QP's access flags do not allow, or outside any region (RC: NAK and the
// QP's async error; UC/UD: silently dropped).
inline void refuse(fabric_state& f, qp_obj* d, const message& m, wc_status nak_status, async_event_type ev) {
  if (m.type != qp_type::rc) return;
  respond(f, m, nak(nak_status));
  responder_error(f, d, ev);
}

// Where the QP's receives come from: its shared receive queue, or its own.
inline slot_ring<recv_wqe>& receives(qp_obj* d) { return d->srq ? d->srq->wqes : d->rq; }

// The 40 bytes a UD receive starts with, as a device writes them for the sender's GID
// type (docs/semantics.md#ud): RoCE v2 from an IPv4-mapped GID, 20 zero bytes and the
// packet's IPv4 header (identification 0, don't fragment, TTL the hop limit, UDP);
// otherwise a GRH: IPv6's layout, next header UDP (RoCE v2) or IB's 0x1B. The rxe
// profile sends with hop limit 64 whatever the address handle asks, and leaves the
// IPv4 checksum 0 (rxe 6.1, observed).
inline void write_grh_area(const fabric_state& f, const message& m, std::uint8_t (&out)[grh_bytes]) {
  std::memset(out, 0, grh_bytes);
  const global_route& r = m.av.grh;
  const std::uint8_t hop_limit = f.as_rxe() ? 64 : r.hop_limit;
  const bool roce_v2 = m.sgid_type == gid_type::roce_v2;
  // After the network header: UDP (RoCE v2), BTH 12, DETH 8, the immediate, the payload, ICRC 4.
  const std::uint32_t after = (roce_v2 ? 8u : 0u) + 12 + 8 + (m.op == opcode::send_with_imm ? 4u : 0u) + m.length + 4;
  auto put16 = [&](int at, std::uint32_t v) {
    out[at] = static_cast<std::uint8_t>(v >> 8);
    out[at + 1] = static_cast<std::uint8_t>(v);
  };
  if (roce_v2 && m.sgid.is_ipv4_mapped()) {
    std::uint8_t* h = out + 20;
    h[0] = 0x45;
    h[1] = r.traffic_class;
    put16(22, 20 + after);
    put16(26, 0x4000);
    h[8] = hop_limit;
    h[9] = 17;  // UDP
    std::memcpy(h + 12, m.sgid.raw.data() + 12, 4);
    std::memcpy(h + 16, r.dgid.raw.data() + 12, 4);
    if (!f.as_rxe()) put16(30, rdmakit::detail::ipv4_header_sum(reinterpret_cast<const std::byte*>(h)));
    return;
  }
  const std::uint32_t flow = r.flow_label & 0xfffff;
  out[0] = static_cast<std::uint8_t>(0x60 | r.traffic_class >> 4);
  out[1] = static_cast<std::uint8_t>((r.traffic_class & 0x0fu) << 4 | flow >> 16);
  put16(2, flow & 0xffff);
  put16(4, after);
  out[6] = roce_v2 ? 17 : 0x1b;
  out[7] = hop_limit;
  std::memcpy(out + 8, m.sgid.raw.data(), 16);
  std::memcpy(out + 24, r.dgid.raw.data(), 16);
}

// Takes the oldest receive. On an SRQ whose armed limit this crosses (fewer WRs left than
// the limit), SRQ_LIMIT_REACHED is raised once and the limit disarmed.
inline recv_wqe take_receive(fabric_state& f, qp_obj* d) {
  auto& q = receives(d);
  recv_wqe r = std::move(q.front());
  q.pop_front();
  if (srq_obj* s = d->srq; s && s->attr.limit && s->wqes.size() < s->attr.limit) {
    s->attr.limit = 0;
    async_event ev;
    ev.type = async_event_type::srq_limit_reached;
    ev.object = s;
    raise_async(f, s->pd->ctx, ev);
  }
  return r;
}

inline void receive_send(fabric_state& f, qp_obj* d, const message& m) {
  const bool ud = m.type == qp_type::ud;
  if (receives(d).empty()) return receiver_not_ready(f, d, m);
  // Checked where the bytes that came reach (head_bytes: the leading packets only).
  const std::uint64_t need = std::uint64_t{m.head_bytes ? m.head_bytes : m.length} + (ud ? grh_bytes : 0);
  const recv_wqe& rw = receives(d).front();
  bool sges_ok = true;
  // An SRQ's receives are checked against its own PD; rxe 6.1 checks them against the
  // QP's (docs/semantics.md#rxe-differs).
  pd_obj* pd = d->srq && !f.as_rxe() ? d->srq->pd : d->pd;
  std::uint64_t room = 0;  // bytes of the SGEs so far: all of them after the loop
  for (const auto& s : rw.sges) {
    // rxe looks an SGE up only once the data reaches it, and checks the bytes it copies
    // there, not the SGE's whole length (fault.recv_sge_past_region_unreached.rc); the
    // spec checks them all.
    if (!f.as_rxe()) {
      sges_ok = sges_ok && local_sge_ok(f, pd, s, true);
    } else if (room < need && s.length != 0) {
      auto copied = s;
      if (need - room < copied.length) copied.length = static_cast<std::uint32_t>(need - room);
      sges_ok = sges_ok && local_sge_ok(f, pd, copied, true);
    }
    room += s.length;
  }
  if (sges_ok && room >= need && m.head_bytes) {
    // The leading packets of a message whose last never came: written, and the receive
    // waits for the rest (a flush completes it).
    scatter(rw.sges, m.bytes(), m.byte_count());
    return;
  }
  const recv_wqe taken = take_receive(f, d);  // rw is gone now
  cq_entry e;
  e.wc.wr_id = taken.wr_id;
  e.wc.qp_num = d->qpn;
  // A failed receive keeps opcode SEND (0), as rxe reports it: the opcode is undefined
  // unless the status is success (ibv_poll_cq(3)), and RECV would hide a program that
  // reads it first.
  if (!sges_ok || room < need) {
    // rxe reports every receive-side fault as LOC_QP_OP_ERR and NAKs with REM_OP_ERR.
    e.wc.status = f.as_rxe() ? wc_status::loc_qp_op_err : sges_ok ? wc_status::loc_len_err : wc_status::loc_prot_err;
    // rxe copies a datagram's GRH area before its payload: a UD receive too small for the
    // payload has the 40 bytes written when it fails (rxe 6.1, observed; the spec leaves
    // a failed receive's bytes undefined, and the spec profile writes none).
    if (ud && sges_ok && f.as_rxe() && room >= grh_bytes) {
      std::uint8_t grh[grh_bytes];
      write_grh_area(f, m, grh);
      scatter(taken.sges, grh, grh_bytes);
    }
    // rxe writes an RC or UC message packet by packet, and each packet SGE by SGE: what
    // it wrote before the fault stays (fault.recv_too_small_after_packets.rc,
    // fault.recv_sge_bad_mid_packet.rc).
    if (!ud && f.as_rxe()) {
      const std::uint64_t written =
          rxe_bytes_before_receive_fault(f, pd, taken.sges, need, room, mtu_bytes(d->attr.path_mtu));
      if (written) scatter(taken.sges, m.bytes(), written);
    }
    // Lost to an overrun: the QP is in ERR, and the message is not answered.
    if (!recv_cqe(f, d, e, m.solicited)) return;
    // A UD datagram that does not fit costs its receive, not the QP: the QP stays in RTS
    // and later datagrams are delivered (docs/semantics.md#ud; rxe 6.1 takes the QP down).
    if (ud && sges_ok && !f.as_rxe()) return;
    to_error(f, d);
    if (m.type == qp_type::rc)
      respond(f, m, nak(f.as_rxe() || !sges_ok ? wc_status::rem_op_err : wc_status::rem_inv_req_err));
    return;
  }
  if (ud) {
    // A datagram without a GRH (InfiniBand within the subnet) leaves the 40 bytes alone
    // and unflagged (ibv_poll_cq(3): they hold the GRH only when IBV_WC_GRH is set).
    if (m.av.is_global) {
      std::uint8_t grh[grh_bytes];
      write_grh_area(f, m, grh);
      scatter(taken.sges, grh, grh_bytes);
      e.wc.flags = wc_flags::grh;
    }
    scatter(taken.sges, m.bytes(), m.byte_count(), grh_bytes);
    e.wc.src_qp = m.src_qpn;
    // On InfiniBand the packet's LRH names the sender's LID and service level; RoCE has
    // no LRH, and devices report 0 (rxe 6.1 does).
    if (const std::uint16_t slid = f.devices[m.src_dev].ports[m.src_port - 1].lid) {
      e.wc.slid = slid;
      e.wc.sl = m.av.sl;
    }
  } else {
    scatter(taken.sges, m.bytes(), m.byte_count());
    if (f.as_rxe()) e.wc.flags = wc_flags::grh;  // rxe flags RC/UC receives too
  }
  e.wc.byte_len = static_cast<std::uint32_t>(need);
  if (m.op == opcode::send_with_imm) {
    e.wc.flags |= wc_flags::with_imm;
    e.wc.imm_data = m.imm;
  }
  if (m.op == opcode::send_with_inv) {
    if (!invalidate_window(f, d, f.as_rxe(), m.imm)) {
      // The receive fails and the QP goes to ERR; the requester gets a NAK (an invalid
      // request), where rxe 6.1 acknowledges the SEND (deviations.hpp,
      // mw.send_inv_region_rkey).
      e.wc.status = wc_status::rem_inv_req_err;
      if (!recv_cqe(f, d, e, m.solicited)) return;  // lost to an overrun: in ERR, unanswered
      to_error(f, d);
      if (m.type == qp_type::rc) {
        if (f.as_rxe())
          acknowledge(f, m);
        else
          respond(f, m, nak(wc_status::rem_inv_req_err));
      }
      return;
    }
    // rxe 6.1 sets no WITH_INV (deviations.hpp, mw.recv_with_inv_flag): GRH alone.
    if (!f.as_rxe()) e.wc.flags |= wc_flags::with_inv;
    e.wc.imm_data = m.imm;  // the rkey, host order (ibv_wc::invalidated_rkey)
  }
  e.wc.opcode = wc_opcode::recv;
  // A completion lost to an overrun took the QP to ERR: the message is not acknowledged.
  if (!recv_cqe(f, d, e, m.solicited) || ud) return;
  advance_psn(d, m);
  if (m.type == qp_type::rc) acknowledge(f, m);
}

inline void receive_write(fabric_state& f, qp_obj* d, const message& m) {
  const bool imm = m.op == opcode::rdma_write_with_imm;
  if (!has_all(d->attr.access_flags, access::remote_write))
    return refuse(f, d, m, wc_status::rem_inv_req_err, async_event_type::qp_req_err);
  mr_obj* target =
      m.length ? remote_mr_ok(f, d, m.rkey, m.remote_addr, m.length, access::remote_write, &d->rkeys) : nullptr;
  if (m.length && !target) {
    // rxe refuses the rkey on a message's first packet, and only its last one, which
    // carries the immediate, would take a receive: a longer message takes none.
    const bool first_packet_has_imm = !f.as_rxe() || m.length <= mtu_bytes(d->attr.path_mtu);
    // (UC: rxe takes a receive of a shared receive queue before the rkey check and
    // completes it, the QP staying in RTS; the spec drops the message, no NAK, and so
    // does rxe for a QP's own receive queue: uc.write_imm_bad_rkey_takes_srq_receive.)
    const bool takes_receive = m.type == qp_type::rc || (m.type == qp_type::uc && f.as_rxe() && d->srq);
    // rxe checks for a receive (check_resource) before the rkey (check_rkey): an RC packet
    // that carries the immediate and finds none is RNR NAKed
    // (fault.write_imm_bad_rkey_no_receive.responder).
    if (f.as_rxe() && m.type == qp_type::rc && imm && first_packet_has_imm && receives(d).empty())
      return receiver_not_ready(f, d, m);
    if (takes_receive && imm && first_packet_has_imm && !receives(d).empty()) {  // the receive the immediate would have used
      cq_entry e;
      e.wc.wr_id = take_receive(f, d).wr_id;
      e.wc.qp_num = d->qpn;
      // Local: the protection error is on this side's memory (ibv_poll_cq(3): "during the
      // processing of a RDMA Write with Immediate ... the Remote Access Error NAK was sent").
      e.wc.status = f.as_rxe() ? wc_status::rem_access_err : wc_status::loc_access_err;
      if (!recv_cqe(f, d, e, m.solicited)) return;  // lost to an overrun: in ERR, unanswered
    }
    return refuse(f, d, m, wc_status::rem_access_err, async_event_type::qp_access_err);
  }
  if (m.head_bytes) {  // the leading packets of a message whose last never came: written, no more
    std::memmove(reinterpret_cast<void*>(m.remote_addr), m.bytes(), m.byte_count());
    return;
  }
  if (imm && receives(d).empty()) {
    // Only the last packet, which carries the immediate, takes a receive (IBA 9.7.5.1: RNR
    // NAKs answer an RDMA WRITE's LAST or ONLY packet with immediate): the ones before it
    // were written as they came (rxe too, observed).
    const std::uint64_t before_last = std::uint64_t{m.npkts - 1} * mtu_bytes(d->attr.path_mtu);
    if (m.npkts > 1 && before_last < m.length) std::memmove(reinterpret_cast<void*>(m.remote_addr), m.bytes(), before_last);
    return receiver_not_ready(f, d, m);
  }
  // memmove: a message delivered within its post reads the sender's buffer, which a
  // loopback WRITE's target may overlap (the device reads the packet before it writes it).
  if (m.length) std::memmove(reinterpret_cast<void*>(m.remote_addr), m.bytes(), m.length);
  if (imm) {
    cq_entry e;
    e.wc.wr_id = take_receive(f, d).wr_id;
    e.wc.qp_num = d->qpn;
    e.wc.opcode = wc_opcode::recv_rdma_with_imm;
    e.wc.byte_len = m.length;
    e.wc.flags = f.as_rxe() ? wc_flags::with_imm | wc_flags::grh : wc_flags::with_imm;
    e.wc.imm_data = m.imm;
    if (!recv_cqe(f, d, e, m.solicited)) return;  // lost to an overrun: the QP is in ERR
  }
  advance_psn(d, m);
  if (m.type == qp_type::rc) acknowledge(f, m);
}

inline void receive_read(fabric_state& f, qp_obj* d, const message& m) {
  if (!has_all(d->attr.access_flags, access::remote_read) || d->attr.max_dest_rd_atomic == 0)
    return refuse(f, d, m, wc_status::rem_inv_req_err, async_event_type::qp_req_err);
  if (m.length && !remote_mr_ok(f, d, m.rkey, m.remote_addr, m.length, access::remote_read))
    return refuse(f, d, m, wc_status::rem_access_err, async_event_type::qp_access_err);
  response r;
  r.data.resize(m.length);
  if (m.length) std::memcpy(r.data.data(), reinterpret_cast<const void*>(m.remote_addr), m.length);
  d->read_replay.record({m.psn, m.rkey, m.remote_addr, m.length});
  advance_psn(d, m);
  if (RDMAKIT_UNLIKELY(m.length > d->lost_above)) return;  // its response packets exceed a link's MTU
  respond(f, m, std::move(r));
}

inline void receive_atomic(fabric_state& f, qp_obj* d, const message& m) {
  if (!has_all(d->attr.access_flags, access::remote_atomic) || d->attr.max_dest_rd_atomic == 0)
    return refuse(f, d, m, wc_status::rem_inv_req_err, async_event_type::qp_req_err);
  if (!remote_mr_ok(f, d, m.rkey, m.remote_addr, 8, access::remote_atomic))
    return refuse(f, d, m, wc_status::rem_access_err, async_event_type::qp_access_err);
  std::uint64_t old = 0;
  std::memcpy(&old, reinterpret_cast<const void*>(m.remote_addr), 8);
  const std::uint64_t next =
      m.op == opcode::atomic_fetch_and_add ? old + m.compare_add : (old == m.compare_add ? m.swap : old);
  std::memcpy(reinterpret_cast<void*>(m.remote_addr), &next, 8);
  d->atomic_replay.record({m.psn, old});
  response r;
  r.data.resize(8);
  std::memcpy(r.data.data(), &old, 8);
  advance_psn(d, m);
  respond(f, m, std::move(r));
}

// The head of an RC message whose requester stopped at a bad SGE after it (rxe profile)
// is followed by the requester's own bad_sge_reached, behind any answer the responder
// gave it (send_head_before_bad_sge). Out of line: off the usual delivery.
RDMAKIT_NOINLINE inline void follow_head_with_bad_sge(fabric_state& f, const message& m) {
  response r;
  r.what = response::kind::bad_sge_reached;
  respond(f, m, std::move(r));
}

// Checks and executes one request message.
inline void execute_request(fabric_state& f, const message& m) {
  qp_obj* d = responder_for(f, m);
  if (!d || !in_sequence(f, d, m)) return;
  switch (m.op) {
    case opcode::send:
    case opcode::send_with_imm:
    case opcode::send_with_inv: return receive_send(f, d, m);
    case opcode::rdma_write:
    case opcode::rdma_write_with_imm: return receive_write(f, d, m);
    case opcode::rdma_read: return receive_read(f, d, m);
    case opcode::atomic_cmp_and_swp:
    case opcode::atomic_fetch_and_add: return receive_atomic(f, d, m);
    case opcode::bind_mw:
    case opcode::local_inv: return;  // never sent
  }
}

/// The responder side: one request message.
inline void deliver(fabric_state& f, const message& m) {
  execute_request(f, m);
  if (RDMAKIT_UNLIKELY(m.head_bytes != 0) && m.type == qp_type::rc) follow_head_with_bad_sge(f, m);
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
