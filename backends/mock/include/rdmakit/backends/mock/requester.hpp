#pragma once
// The requester: issuing send WQEs as messages, responses and ACKs, go-back-N
// retransmission, the retry and RNR budgets.
#include <rdmakit/backends/mock/wire.hpp>

#include <algorithm>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

/// Go-back-N: every WQE from `from` on that was sent goes back to the queue.
inline void rewind(qp_obj* q, send_wqe& from) {
  bool on = false;
  for (auto& w : q->sq) {
    if (&w == &from) on = true;
    if (on && w.state == send_wqe::phase::issued) w.state = send_wqe::phase::queued;
  }
  q->next_psn = from.psn;
}

inline send_wqe* oldest_in_flight(qp_obj* q) {
  for (auto& w : q->sq)
    if (w.state == send_wqe::phase::issued) return &w;
  return nullptr;
}

inline void rearm_ack_timer(fabric_state& f, qp_obj* q) {
  if (q->rnr_wait) return;
  clock_ns t = ack_timeout_ns(q->attr.timeout);
  if (oldest_in_flight(q) && t)
    set_timer(f, q, f.now + t);
  else if (!oldest_in_flight(q))
    disarm_timer(f, q);
}

inline void on_response(fabric_state& f, std::uint32_t qpn, std::uint64_t seq, std::uint32_t psn, const response& r) {
  auto it = f.qps.find(qpn);
  if (it == f.qps.end()) return;
  qp_obj* q = it->second;
  if (q->state != qp_state::rts && q->state != qp_state::sqd) return;
  send_wqe* w = nullptr;
  for (auto& x : q->sq)
    if (x.seq == seq) w = &x;
  if (!w || w->state != send_wqe::phase::issued || w->psn != psn) return;
  switch (r.what) {
    case response::kind::ack:
      w->state = send_wqe::phase::done;
      w->status = wc_status::success;
      if (w->op == opcode::rdma_read || is_atomic(w->op)) {
        // The local region may have been deregistered since the WR was issued: the HCA
        // writes only into live regions, else the WR fails (LOC_PROT_ERR), as hardware.
        bool live = true;
        for (const auto& s : w->sges) live = live && local_sge_ok(f, q->pd, s, true);
        if (live)
          scatter(w->sges, r.data.data(), r.data.size());
        else
          w->status = wc_status::loc_prot_err;
      }
      q->retries_left = q->attr.retry_cnt;
      q->rnr_left = q->attr.rnr_retry;
      break;
    case response::kind::rnr_nak:
      if (q->attr.rnr_retry != 7 && q->rnr_left == 0) {
        w->state = send_wqe::phase::done;
        w->status = wc_status::rnr_retry_exc_err;
        break;
      }
      if (q->attr.rnr_retry != 7) --q->rnr_left;
      rewind(q, *w);
      q->rnr_wait = true;
      set_timer(f, q, f.now + rnr_timer_ns(r.rnr_timer));
      break;
    case response::kind::nak:
      w->state = send_wqe::phase::done;
      w->status = r.status;
      break;
  }
  report_sends(f, q);
  if (q->state == qp_state::err) return;
  rearm_ack_timer(f, q);
  issue(f, q);
}

inline void on_deadline(fabric_state& f, qp_obj* q) {
  q->deadline = 0;
  f.timed.erase(q);
  if (q->state != qp_state::rts && q->state != qp_state::sqd) return;
  if (q->rnr_wait) {
    q->rnr_wait = false;
    issue(f, q);
    return;
  }
  send_wqe* w = oldest_in_flight(q);
  if (!w) return;
  if (q->retries_left == 0) {
    w->state = send_wqe::phase::done;
    w->status = wc_status::retry_exc_err;
    report_sends(f, q);
    return;
  }
  --q->retries_left;
  rewind(q, *w);
  issue(f, q);
}

/// The requester side: sends every queued WQE it may (fence and rd_atomic limits).
inline void issue(fabric_state& f, qp_obj* q) {
  if (q->state != qp_state::rts || q->rnr_wait) return;
  auto& dev = device_of(q);
  const std::uint32_t mtu = path_mtu_bytes(q);
  std::uint32_t reads_in_flight = 0;
  bool earlier_reads_pending = false;
  bool sent_any = false;
  for (auto& w : q->sq) {
    if (w.state == send_wqe::phase::issued && is_read_or_atomic(w.op)) {
      ++reads_in_flight;
      earlier_reads_pending = true;
    }
    if (w.state != send_wqe::phase::queued) continue;
    if (has_all(w.flags, send_flags::fence) && earlier_reads_pending) break;
    if (is_read_or_atomic(w.op) && reads_in_flight >= q->attr.max_rd_atomic) break;
    bool ok = true;
    if (!w.is_inline)
      for (const auto& s : w.sges) ok = ok && local_sge_ok(f, q->pd, s, is_read_or_atomic(w.op));
    if (!ok) {
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_prot_err;
      break;
    }
    if (q->type == qp_type::ud && w.length > mtu) {
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_len_err;
      break;
    }
    message m;
    m.src_qpn = q->qpn;
    m.src_dev = q->pd->ctx->dev;
    m.src_port = q->attr.port_num;
    m.type = q->type;
    m.op = w.op;
    m.wqe_seq = w.seq;
    m.length = w.length;
    m.imm = w.imm;
    m.solicited = has_all(w.flags, send_flags::solicited);
    m.remote_addr = w.remote_addr;
    m.rkey = w.rkey;
    m.compare_add = w.compare_add;
    m.swap = w.swap;
    if (q->type == qp_type::ud) {
      m.av = w.ud_av;
      m.dest_qpn = w.remote_qpn;
      m.qkey = w.remote_qkey;
    } else {
      m.av = q->attr.av;
      m.dest_qpn = q->attr.dest_qp_num;
    }
    const auto& sg = dev.ports[m.src_port - 1].gids;
    if (m.av.grh.sgid_index < sg.size()) m.sgid = sg[m.av.grh.sgid_index].value;
    if (carries_payload(w.op)) m.payload = w.is_inline ? w.inline_data : gather(w.sges, w.length);
    m.psn = q->next_psn;
    m.npkts = is_atomic(w.op) ? 1 : packets_for(w.length, mtu);
    q->next_psn = (q->next_psn + m.npkts) & psn_mask;
    w.psn = m.psn;
    w.npkts = m.npkts;
    w.state = send_wqe::phase::issued;
    if (is_read_or_atomic(w.op)) {
      ++reads_in_flight;
      earlier_reads_pending = true;
    }
    if (q->type != qp_type::rc) w.state = send_wqe::phase::done;  // UC/UD: complete once sent
    sent_any = true;
    transmit(f, q, std::move(m));
  }
  if (q->type == qp_type::rc && sent_any && q->deadline == 0) rearm_ack_timer(f, q);
  report_sends(f, q);
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
