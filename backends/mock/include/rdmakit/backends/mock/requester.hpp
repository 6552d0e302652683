#pragma once
// The requester: issuing send WQEs as messages, responses and ACKs, go-back-N
// retransmission, the retry and RNR budgets.
#include <rdmakit/backends/mock/wire.hpp>
#include <rdmakit/detail/algorithm.hpp>

#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

/// Go-back-N: every WQE from `from` on that was sent goes back to the queue (one that
/// stopped at a bad SGE drops the status it held: issue() finds the fault again).
inline void rewind(qp_obj* q, send_wqe& from) {
  for (std::size_t i = sq_index(q, from.seq); i < q->sq.size(); ++i)
    if (q->sq[i].state == send_wqe::phase::issued) {
      q->sq[i].state = send_wqe::phase::queued;
      q->sq[i].status = wc_status::success;
      q->started_until = std::max(q->started_until, q->sq[i].seq + 1);
    }
  q->issue_from = std::min(q->issue_from, from.seq);
  q->next_psn = from.psn;
}

// An RC WQE whose head went out before its requester stopped at a bad SGE (rxe profile):
// in flight, holding its local fault's status until the head's answer (on_response).
inline bool stopped_at_bad_sge(const send_wqe& w) {
  return w.state == send_wqe::phase::issued && w.status != wc_status::success;
}

// Reported WQEs are done, so the search starts at report_from.
inline send_wqe* oldest_in_flight(qp_obj* q) {
  for (std::size_t i = sq_index(q, q->report_from); i < q->sq.size(); ++i)
    if (q->sq[i].state == send_wqe::phase::issued) return &q->sq[i];
  return nullptr;
}

inline void rearm_ack_timer(fabric_state& f, qp_obj* q) {
  if (q->rnr_wait) return;
  clock_ns t = ack_timeout_ns(q->attr.timeout);
  const bool in_flight = oldest_in_flight(q) != nullptr;
  if (in_flight && t)
    set_timer(f, q, f.now + t);
  else if (!in_flight)
    disarm_timer(f, q);
}


// rxe's requester sends a WQE's packets and the next WQEs' without waiting for an answer,
// and its responder, having refused one with an RNR NAK, NAKs the next with a PSN
// sequence error (once, until a packet in sequence comes). Whether a packet followed
// the one `w` had refused: a SEND's later packets (it needs the receive at its first),
// or a later WQE already sent.
inline bool rxe_packet_behind_rnr(qp_obj* q, const send_wqe& w) {
  const bool send = w.op == opcode::send || w.op == opcode::send_with_imm || w.op == opcode::send_with_inv;
  if (send && w.npkts > 1) return true;
  for (std::size_t i = sq_index(q, w.seq) + 1; i < q->sq.size(); ++i)
    if (q->sq[i].state == send_wqe::phase::issued) return true;
  return false;
}

// rxe's completer takes that sequence NAK as a transport retry, the first since an ACK
// only, with retry_cnt 7 endless: with none left the WQE fails RETRY_EXC_ERR (true),
// else the retry waits for the RNR timer (rxe 6.1, observed: within a millisecond of the
// RNR NAK, whatever the timers; row rnr_nak_packets_behind).
inline bool rxe_sequence_nak_exhausts(qp_obj* q, const send_wqe& w) {
  if (q->retry_started || !rxe_packet_behind_rnr(q, w)) return false;
  if (q->retries_left == 0) return true;
  if (q->attr.retry_cnt != 7) --q->retries_left;
  q->retry_started = true;
  return false;
}

// rxe's requester, run by a doorbell (a post_send) while the WQE at issue_from waits for
// its RNR timer, goes on with the WQEs it had not sent (rxe 6.1, observed; it resends
// from the refused one only when the timer fires). The responder, still expecting the
// refused packet, drops them, NAKing the first with a PSN sequence error: a transport
// retry, as for packets already behind at the RNR NAK (fault.rnr_nak_packets_behind):
// with none left the WQE ahead fails RETRY_EXC_ERR. The WQEs stay queued for the
// timer's resend. Walked: SENDs and WRITEs whose SGEs are good; a READ, an atomic, a
// local operation, a fence or a bad SGE ends the walk (not modelled: a bad SGE stops
// rxe's requester for good, row fault.send_sge_bad_behind_unacknowledged).
RDMAKIT_NOINLINE inline void rxe_doorbell_in_rnr_wait(fabric_state& f, qp_obj* q) {
  if (!f.as_rxe() || q->type != qp_type::rc) return;
  send_wqe* head = wqe_at(q, q->issue_from);
  if (!head || head->state != send_wqe::phase::queued) return;
  std::size_t i = sq_index(q, std::max(q->rnr_resume_seq, head->seq + 1));
  bool sends = false;  // a packet goes out
  for (; i < q->sq.size(); ++i) {
    const send_wqe& w = q->sq[i];
    const bool plain = w.op == opcode::send || w.op == opcode::send_with_imm || w.op == opcode::send_with_inv ||
                       w.op == opcode::rdma_write || w.op == opcode::rdma_write_with_imm;
    if (w.state != send_wqe::phase::queued || !plain || has_all(w.flags, send_flags::fence)) break;
    bool ok = true;
    if (!w.is_inline)
      for (const auto& s : w.sges) ok = ok && local_sge_ok(f, q->pd, s, false);
    if (!ok) break;
    sends = true;
  }
  q->rnr_resume_seq = i < q->sq.size() ? q->sq[i].seq : q->next_seq;
  if (!sends || q->retry_started) return;
  if (q->retries_left == 0) {  // its completion takes the QP to ERR, which ends the RNR wait
    head->state = send_wqe::phase::done;
    head->status = wc_status::retry_exc_err;
    report_sends(f, q);
    return;
  }
  if (q->attr.retry_cnt != 7) --q->retries_left;
  q->retry_started = true;
}

// rxe (rxe_comp.c copy_data) lands a READ response, or an atomic's 8 result bytes, SGE by
// SGE: it looks up only the SGEs the bytes reach, and checks the bytes it copies there,
// and what it wrote before a bad SGE stays (opcode.atomic_sge_past_result_unreached,
// opcode.atomic_result_split_bad_sge, fault.read_response_sge_bad_after_bytes).
RDMAKIT_NOINLINE inline void rxe_land_response(fabric_state& f, qp_obj* q, send_wqe& w, const response& r) {
  if (w.is_inline) {  // its bytes took the place of its SGEs: nothing to land in
    w.status = wc_status::loc_prot_err;
    return;
  }
  const std::uint64_t need = r.data.size();
  std::uint64_t at = 0;
  bool ok = true;
  for (const auto& s : w.sges) {
    if (at >= need) break;
    auto copied = s;
    if (need - at < copied.length) copied.length = static_cast<std::uint32_t>(need - at);
    ok = ok && local_sge_ok(f, q->pd, copied, true);
    at += s.length;
  }
  std::uint64_t written = need;
  if (!ok) {
    w.status = wc_status::loc_prot_err;
    written = rxe_bytes_before_receive_fault(f, q->pd, w.sges, need, need, path_mtu_bytes(q));
  }
  if (written) scatter(w.sges, r.data.data(), written);
}

// One transport retry from `w`, the oldest WQE in flight (its ACK timer fired, or a
// PSN sequence NAK came): false when RETRY_CNT is spent. rxe's completer never counts
// RETRY_CNT 7 down (rxe_comp.c): for ever (row retry_cnt_7).
inline bool transport_retry(qp_obj* q, send_wqe& w, bool as_rxe) {
  if (q->retries_left == 0) {
    if (!as_rxe || q->attr.retry_cnt != 7) return false;
  } else {
    --q->retries_left;
  }
  q->retry_started = true;
  rewind(q, w);
  return true;
}

inline void on_response(fabric_state& f, const reply_to& to, const response& r) {
  qp_obj* q = find_sender(f, to.qpn, to.hint, to.epoch, to.serial);
  if (!q) return;
  if (q->state != qp_state::rts && q->state != qp_state::sqd) return;
  const std::uint32_t psn = to.psn;
  send_wqe* w = wqe_at(q, to.seq);
  if (!w || w->state != send_wqe::phase::issued || w->psn != psn) return;
  switch (r.what) {
    case response::kind::ack:
      w->state = send_wqe::phase::done;
      w->status = wc_status::success;
      if (w->op == opcode::rdma_read || is_atomic(w->op)) {
        // The local region may have been deregistered since the WR was issued: the HCA
        // writes only into live regions, else the WR fails (LOC_PROT_ERR), as hardware.
        // rxe writes SGE by SGE, what the bytes reach (rxe_land_response).
        if (f.as_rxe()) {
          rxe_land_response(f, q, *w, r);
        } else {
          bool live = true;
          for (const auto& s : w->sges) live = live && local_sge_ok(f, q->pd, s, true);
          if (live)
            scatter(w->sges, r.data.data(), r.data.size());
          else
            w->status = wc_status::loc_prot_err;
        }
      }
      q->retries_left = q->attr.retry_cnt;
      q->rnr_left = q->attr.rnr_retry;
      q->retry_started = false;
      break;
    case response::kind::rnr_nak:
      if (q->attr.rnr_retry != 7 && q->rnr_left == 0) {
        w->state = send_wqe::phase::done;
        w->status = wc_status::rnr_retry_exc_err;
        break;
      }
      if (q->attr.rnr_retry != 7) --q->rnr_left;
      // rxe's requester does not wait for the RNR timer to build the next packet, which
      // meets the bad SGE: its fault follows (bad_sge_reached; rxe 6.1, observed).
      if (stopped_at_bad_sge(*w)) break;
      if (f.as_rxe() && rxe_sequence_nak_exhausts(q, *w)) {
        w->state = send_wqe::phase::done;
        w->status = wc_status::retry_exc_err;
        break;
      }
      q->rnr_resume_seq = q->issue_from;  // what it had not sent yet (rxe_doorbell_in_rnr_wait)
      rewind(q, *w);
      q->rnr_wait = true;
      set_timer(f, q, f.now + rnr_timer_ns(r.rnr_timer));
      break;
    case response::kind::nak:
      w->state = send_wqe::phase::done;
      w->status = r.status;
      break;
    case response::kind::bad_sge_reached:  // no NAK came first: the local fault it holds
      w->state = send_wqe::phase::done;
      break;
    case response::kind::seq_nak:  // the responder expected an earlier request: resend it
      if (send_wqe* oldest = oldest_in_flight(q); oldest && !transport_retry(q, *oldest, f.as_rxe())) {
        oldest->state = send_wqe::phase::done;
        oldest->status = wc_status::retry_exc_err;
      }
      break;
  }
  report_sends(f, q);
  if (q->state == qp_state::err) return;
  rearm_ack_timer(f, q);
  issue(f, q);
}

inline void on_deadline(fabric_state& f, qp_obj* q) {
  q->deadline = 0;
  untime(f, q);
  if (q->state != qp_state::rts && q->state != qp_state::sqd) return;
  if (q->rnr_wait) {
    q->rnr_wait = false;
    issue(f, q);
    return;
  }
  send_wqe* w = oldest_in_flight(q);
  if (!w) return;
  if (!transport_retry(q, *w, f.as_rxe())) {
    w->state = send_wqe::phase::done;
    w->status = wc_status::retry_exc_err;
    report_sends(f, q);
    return;
  }
  issue(f, q);
}

// Whether any of the first `upto` WQEs is still in flight (a fenced LOCAL_INV waits).
inline bool in_flight_before(const qp_obj* q, std::size_t upto) {
  for (std::size_t i = 0; i < upto; ++i)
    if (q->sq[i].state == send_wqe::phase::issued) return true;
  return false;
}

// Issued READs and atomics among the first `upto` WQEs (the rd_atomic limit and fences).
inline std::uint32_t reads_issued_before(qp_obj* q, std::size_t upto) {
  std::uint32_t n = 0;
  for (std::size_t i = 0; i < upto; ++i)
    n += q->sq[i].state == send_wqe::phase::issued && is_read_or_atomic(q->sq[i].op);
  return n;
}

// Where RC/UC messages of `q` go, routed once per modify_qp (learn_route, which issue(),
// the only caller, ran first) and found once per qp_epoch.
inline void address_from_qp(fabric_state& f, qp_obj* q, message& m) {
  m.av = q->attr.av;
  m.dest_qpn = q->attr.dest_qp_num;
  m.routed = q->route_ok;
  m.to_dev = q->route_dev;
  m.to_port = q->route_port;
  if (q->peer_epoch != f.qp_epoch) {
    auto it = f.qps.find(q->attr.dest_qp_num);
    q->peer = it == f.qps.end() ? nullptr : it->second;
    q->peer_epoch = f.qp_epoch;
  }
  m.dest_hint = q->peer;
}

// The header fields of the request message for WQE `w` of `q` (all but its payload,
// PSN and packet count): every field a reused message may hold is set.
RDMAKIT_ALWAYS_INLINE void fill_request(fabric_state& f, qp_obj* q, const send_wqe& w, const device_rt& dev,
                                        message& m) {
  m.src_qpn = q->qpn;
  m.src_dev = q->pd->ctx->dev;
  m.src_port = q->attr.port_num;
  m.type = q->type;
  m.op = w.op;
  m.wqe_seq = w.seq;
  m.length = w.length;
  m.head_bytes = 0;
  m.read_at_delivery = false;
  m.check_sender = false;
  m.imm = w.imm;
  m.solicited = has_all(w.flags, send_flags::solicited);
  m.remote_addr = w.remote_addr;
  m.rkey = w.rkey;
  m.compare_add = w.compare_add;
  m.swap = w.swap;
  m.epoch = f.qp_epoch;
  m.src_hint = q;
  m.src_serial = q->serial;
  if (q->type == qp_type::ud) {
    m.av = w.ud_av;
    m.dest_qpn = w.remote_qpn;
    m.qkey = w.remote_qkey;
    m.dest_hint = nullptr;
    m.routed = false;
    m.to_dev = 0;
    m.to_port = 0;
  } else {
    m.qkey = 0;
    address_from_qp(f, q, m);
  }
  const auto& sg = dev.ports[m.src_port - 1].gids;
  const bool have_sgid = m.av.grh.sgid_index < sg.size();
  m.sgid = have_sgid ? sg[m.av.grh.sgid_index].value : gid{};
  m.sgid_type = have_sgid ? sg[m.av.grh.sgid_index].type : gid_type::ib;
}

// rxe's status for a send WQE with a bad SGE: copy_data meets the SGEs in list order,
// and the first it cannot read decides: an lkey lookup_mr refuses (unknown, another
// PD's region) is LOC_QP_OP_ERR, a range rxe_mr_copy refuses (mr_check_range: the
// lkey is fine) LOC_PROT_ERR. An empty SGE is never looked up.
inline wc_status rxe_bad_send_sge_status(fabric_state& f, pd_obj* pd, const sge_list& sges) {
  for (const auto& s : sges)
    if (!local_sge_ok(f, pd, s, false))
      return local_sge_key_ok(f, pd, s) ? wc_status::loc_prot_err : wc_status::loc_qp_op_err;
  return wc_status::loc_prot_err;
}

// rxe copies a SEND's or WRITE's bytes packet by packet and looks an SGE up when a packet
// reaches it: the whole packets before the first byte it cannot read are sent (and the
// responder writes them) before the WQE fails (rxe 6.1, observed). Sends those, if any.
// On RC the responder's answer to them comes first (rxe on one device: the responder
// handles each packet as it is sent, and the completer its NAK, before the requester
// builds the next): a NAK decides the WQE's status (rxe 6.1, observed), else its local
// fault does. So the WQE (its status set: the fault) stays in flight, and a
// bad_sge_reached response follows the head (deliver). True when it does.
RDMAKIT_NOINLINE inline bool send_head_before_bad_sge(fabric_state& f, qp_obj* q, send_wqe& w, std::uint32_t mtu) {
  if (q->type == qp_type::ud || !carries_payload(w.op) || w.is_inline) return false;
  std::uint64_t readable = 0;
  for (const auto& s : w.sges) {
    if (local_sge_ok(f, q->pd, s, false)) {
      readable += s.length;
      continue;
    }
    // A range that runs past its MR: the bytes inside it are read.
    const mr_obj* mr = find_mr(f, f.by_lkey, nullptr, s.lkey);
    if (mr && mr->pd == q->pd && s.addr >= mr->addr && s.addr < mr->addr + mr->length)
      readable += mr->addr + mr->length - s.addr;
    break;
  }
  const std::uint64_t whole = readable / mtu * mtu;
  if (whole == 0 || whole >= w.length) return false;
  message& m = f.outbox;
  fill_request(f, q, w, device_of(q), m);
  m.head_bytes = static_cast<std::uint32_t>(whole);
  m.view = nullptr;
  gather_head(w.sges, whole, m.payload);
  m.psn = q->next_psn;
  m.npkts = m.head_bytes / mtu;
  if (q->type == qp_type::rc) {
    w.state = send_wqe::phase::issued;
    w.psn = m.psn;
    w.npkts = m.npkts;
    q->next_psn = (q->next_psn + m.npkts) & psn_mask;
  }
  transmit(f, q, m);  // UC: the WQE is done: its completion and the QP's ERR follow
  return q->type == qp_type::rc;
}

// The requester's WQE `w` could not read its bytes when its message went out: it fails
// as if its SGE had been bad at the post, and nothing behind it goes out (what is on the
// wire already is dropped at delivery, or arrives out of sequence).
// (The spec profile's: the rxe profile reads at the post, as rxe, and meets a bad SGE there.)
RDMAKIT_NOINLINE inline void fail_unreadable_send(fabric_state& f, qp_obj* q, send_wqe& w) {
  w.state = send_wqe::phase::done;
  w.status = wc_status::loc_prot_err;
  for (std::size_t i = sq_index(q, w.seq + 1); i < q->sq.size(); ++i)
    if (q->sq[i].state == send_wqe::phase::issued) q->sq[i].state = send_wqe::phase::queued;
  q->issue_from = std::min(q->issue_from, w.seq);
  report_sends(f, q);
}

// Spec profile: a SEND's or WRITE's bytes are read from the sender's buffer when its
// message reaches the responder: a device reads them by DMA some time after the post,
// and until the WR's completion the buffer is the device's. A program that writes it
// before then sends what it wrote, as it may on a device (docs/mock.md#send-buffers).
// A UC or UD WR, sent once read, completes here; an RC WR waits for its ACK.
// False when the message is not to be executed: its WQE is no longer in flight
// (completed, flushed, reset or destroyed: a device would not have read it), or its
// region went away.
RDMAKIT_NOINLINE inline bool read_sender_bytes(fabric_state& f, message& m) {
  qp_obj* q = find_sender(f, m.src_qpn, m.src_hint, m.epoch, m.src_serial);
  send_wqe* w = q && (q->state == qp_state::rts || q->state == qp_state::sqd) ? wqe_at(q, m.wqe_seq) : nullptr;
  if (!w || w->state != send_wqe::phase::issued || w->psn != m.psn) return false;
  for (const auto& s : w->sges)
    if (!local_sge_ok(f, q->pd, s, false, &q->lkeys)) {
      fail_unreadable_send(f, q, *w);
      return false;
    }
  if (w->sges.size() == 1)
    m.view = reinterpret_cast<const std::uint8_t*>(w->sges[0].addr);
  else
    gather_into(w->sges, m.payload);
  if (q->type != qp_type::rc) {  // (the buffer is read before anything runs the program's code)
    w->state = send_wqe::phase::done;
    report_sends(f, q);
  }
  return true;
}

// A UC or UD message read at its post because a fault hit it (sent_at_post): whether its
// QP is still the one that sent it, and has not left RTS/SQD since. One whose WR was then
// flushed (a WR ahead of it failed, the QP went to ERR) or dropped (reset, destroyed)
// does not land, as one read at arrival would not (a device sends its WRs in order).
RDMAKIT_NOINLINE inline bool sender_stayed(fabric_state& f, const message& m) {
  const qp_obj* q = find_sender(f, m.src_qpn, m.src_hint, m.epoch, m.src_serial);
  return q && q->times_left == m.sender_left;
}

/// The requester side: sends every queued WQE it may (fence and rd_atomic limits),
/// from issue_from on (every WQE before it is issued or done).
///
/// The direct case: a post that sends one message while nothing else is on the wire
/// (no fault, no latency, not inside run_due) would have run_due deliver it right
/// after this call, before anything else. It is delivered at the end of this call
/// instead, without a wire slot, borrowing the bytes of a one-SGE WQE.
// rxe's loopback handles a READ's or an atomic's response before its requester goes on
// (the responder and completer run inline), so a fault the response finds (a bad result
// SGE) stops the WRs behind it before they go: the rxe profile, without a latency or
// faults, sends nothing past one until its response came (on_response issues again).
// Asked only after a READ or an atomic went: a WRITE or a SEND pays nothing for it.
inline bool waits_for_answer(const fabric_state& f, const qp_obj* q) {
  return f.as_rxe() && f.cfg.latency.count() == 0 && f.faults.empty() && q->held.empty();
}

inline void issue(fabric_state& f, qp_obj* q) {
  if (q->state != qp_state::rts && !(q->state == qp_state::sqd && q->issue_from < q->started_until)) return;
  if (RDMAKIT_UNLIKELY(q->rnr_wait)) return rxe_doorbell_in_rnr_wait(f, q);
  std::size_t i = sq_index(q, q->issue_from);
  if (i == q->sq.size()) return report_sends(f, q);  // nothing queued (an ACK's call, usually)
  const bool may_direct = f.faults.empty() && q->held.empty() && f.cfg.latency.count() == 0 && !f.running &&
                          f.wire_now.empty() && f.wire_later.empty();
  bool direct = false;
  auto& dev = device_of(q);
  if (q->type != qp_type::ud) learn_route(f, q);  // (its lost_above, tested below)
  const std::uint32_t mtu = path_mtu_bytes(q);
  // Counted only when a READ, an atomic or a fence needs it: then as the full walk would.
  std::uint32_t reads_in_flight = 0;
  bool reads_counted = false;
  bool sent_any = false;
  // SQD: only the WQEs started before it (their retries); RTS: all of them.
  const std::size_t end = q->state == qp_state::rts ? q->sq.size() : sq_index(q, q->started_until);
  for (; i < end; ++i) {
    send_wqe& w = q->sq[i];
    if (w.state != send_wqe::phase::queued) {
      // Nothing goes out past a failed WQE, its completion waiting behind one in flight
      // (done) or its head sent before a bad SGE (stopped_at_bad_sge).
      if (RDMAKIT_UNLIKELY(w.status != wc_status::success)) break;
      if (reads_counted && w.state == send_wqe::phase::issued && is_read_or_atomic(w.op)) ++reads_in_flight;
      continue;
    }
    if (!opcode_allowed(q->type, w.op)) {  // accepted at post only by the rxe profile
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_qp_op_err;
      break;
    }
    const bool fenced = has_all(w.flags, send_flags::fence);
    if (!reads_counted && (fenced || is_read_or_atomic(w.op))) {
      reads_in_flight = reads_issued_before(q, i);
      reads_counted = true;
    }
    if (fenced && reads_in_flight > 0) break;  // local operations too (a LOCAL_INV behind a READ)
    // A fenced LOCAL_INV waits for every WQE before it (IBA's Local Invalidate Fence;
    // rxe_wqe_is_fenced), not only READs and atomics: a SEND still in RNR wait ahead of
    // it keeps the window usable (audit 44).
    if (RDMAKIT_UNLIKELY(fenced && w.op == opcode::local_inv) && in_flight_before(q, i)) break;
    if (is_local_op(w.op)) {  // BIND_MW, LOCAL_INV: done here, in the queue's order
      w.state = send_wqe::phase::done;
      w.status = execute_local(f, q, w);
      if (w.status != wc_status::success) break;
      continue;
    }
    if (is_read_or_atomic(w.op) && reads_in_flight >= q->attr.max_rd_atomic) break;
    const bool ud_over_mtu = q->type == qp_type::ud && w.length > mtu;
    if (q->type == qp_type::ud) {
      if (ud_over_mtu && f.as_rxe()) {  // rxe: SUCCESS, nothing sent, before its SGEs are looked at
        w.state = send_wqe::phase::done;
        continue;
      }
      if (RDMAKIT_UNLIKELY(w.ud_ah_other_pd)) {  // rxe: no address vector for it (ud.ah_other_pd)
        w.state = send_wqe::phase::done;
        w.status = wc_status::loc_qp_op_err;
        break;
      }
    }
    bool ok = true;
    // rxe looks at a READ's or an atomic's result SGEs only when the response comes
    // (on_response): the remote side runs first.
    if (!w.is_inline && !(f.as_rxe() && is_read_or_atomic(w.op)))
      for (const auto& s : w.sges)
        if (!local_sge_ok(f, q->pd, s, is_read_or_atomic(w.op), &q->lkeys)) {
          ok = false;
          break;
        }
    if (!ok) {
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_prot_err;
      if (f.as_rxe()) {
        w.status = rxe_bad_send_sge_status(f, q->pd, w.sges);
        if (send_head_before_bad_sge(f, q, w, mtu)) sent_any = true;  // the ACK timer: the head may be lost
      }
      break;
    }
    if (ud_over_mtu) {
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_len_err;
      break;
    }
    // Without faults (or messages they hold back) the message is built in its wire slot,
    // or in f.direct (above); otherwise in the outbox for transmit(). All are reused:
    // every field is set below.
    // (A message longer than lost_above goes through transmit(), which loses it.)
    const bool fits = w.length <= q->lost_above;
    direct = may_direct && fits && !sent_any && i + 1 == q->sq.size();
    const bool plain = !direct && fits && f.faults.empty() && q->held.empty();
    wire_event* slot = plain ? &schedule(f, f.now + static_cast<clock_ns>(f.cfg.latency.count()), false) : nullptr;
    message& m = direct ? f.direct : plain ? slot->m : f.outbox;
    fill_request(f, q, w, dev, m);
    m.view = nullptr;
    if (!carries_payload(w.op))
      m.payload.clear();
    else if (direct && !w.is_inline && w.sges.size() == 1)
      m.view = reinterpret_cast<const std::uint8_t*>(w.sges[0].addr);
    else if (w.is_inline)
      m.payload.assign(w.inline_data.begin(), w.inline_data.end());
    else if (!direct && !f.as_rxe())
      m.read_at_delivery = true;  // its WQE holds the buffer until it arrives (read_sender_bytes)
    else
      gather_into(w.sges, m.payload);  // delivered in this call; rxe copies in the post
    m.psn = q->next_psn;
    m.npkts = is_atomic(w.op) ? 1 : packets_for(w.length, mtu);
    q->next_psn = (q->next_psn + m.npkts) & psn_mask;
    w.psn = m.psn;
    w.npkts = m.npkts;
    w.state = send_wqe::phase::issued;
    if (is_read_or_atomic(w.op)) ++reads_in_flight;
    if (q->type != qp_type::rc && !m.read_at_delivery) w.state = send_wqe::phase::done;  // UC/UD: complete once sent
    sent_any = true;
    if (direct) {
      f.packets += m.npkts;
      ++f.order;  // the order its wire event would have taken
    } else if (plain) {
      f.packets += m.npkts;
      scheduled(f, *slot);
    } else {
      transmit(f, q, m);
    }
    if (RDMAKIT_UNLIKELY(is_read_or_atomic(w.op)) && !direct && waits_for_answer(f, q)) {
      ++i;
      break;
    }
  }
  q->issue_from = i < q->sq.size() ? q->sq[i].seq : q->next_seq;
  // rearm_ack_timer, knowing a WQE is in flight (the one just sent; not rnr_wait).
  if (q->type == qp_type::rc && sent_any && q->deadline == 0)
    if (const clock_ns t = ack_timeout_ns(q->attr.timeout)) set_timer(f, q, f.now + t);
  report_sends(f, q);
  // (A completion report_sends lost to an overrun may have flushed the WR: not sent.)
  if (direct && RDMAKIT_LIKELY(q->state != qp_state::err)) {
    f.running = true;  // as inside run_due
    deliver(f, f.direct);
    f.running = false;
  }
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE

// The responder, whose deliver() (declared in wire.hpp) the requester calls: included
// alone, this header would use an inline function it never defines.
#include <rdmakit/backends/mock/responder.hpp>
