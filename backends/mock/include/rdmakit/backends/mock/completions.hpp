#pragma once
// Asynchronous events, completion entries (send, receive, flush), SQ slot release,
// the ACK timer, and moving a QP to ERR.
#include <rdmakit/backends/mock/rules.hpp>

#include <algorithm>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// ---------------------------------------------------------------- events and completions

inline void post_async(fabric_state& f, std::uint32_t dev, const async_event& ev) {
  for (auto* c : f.contexts)
    if (c->dev == dev) c->async_q.push_back(ev);
  f.cv.notify_all();
}

/// Adds a CQE; false when the CQ was full (the CQE is lost and CQ_ERR raised).
inline bool push_cqe(fabric_state& f, cq_obj* cq, const cq_entry& e, bool solicited) {
  if (static_cast<int>(cq->entries.size()) >= cq->capacity) {
    async_event ev;
    ev.type = async_event_type::cq_err;
    ev.object = cq;
    cq->ctx->async_q.push_back(ev);
    f.cv.notify_all();
    return false;
  }
  cq->entries.push_back(e);
  const bool error = e.wc.status != wc_status::success;
  if (cq->armed && (!cq->solicited_only || solicited || error)) {
    cq->armed = false;
    if (cq->channel) {
      cq->channel->events.push_back(cq);
      f.cv.notify_all();
    }
  }
  return true;
}

inline void release_slots(fabric_state& f, qp_obj* q, std::uint64_t upto) {
  while (!q->sq.empty() && q->sq.front().reported && q->sq.front().seq <= upto) q->sq.pop_front();
  (void)f;
}

inline void retire_front_on_completion(fabric_state& f, qp_obj* q) {
  if (f.cfg.slots != slot_release::on_completion) return;
  while (!q->sq.empty() && q->sq.front().reported) q->sq.pop_front();
}

inline void send_cqe(fabric_state& f, qp_obj* q, send_wqe& w, wc_status status) {
  cq_entry e;
  e.wc.wr_id = w.wr_id;
  e.wc.status = status;
  e.wc.qp_num = q->qpn;
  if (status == wc_status::success) {
    e.wc.opcode = completion_opcode(w.op);
    e.wc.byte_len = w.length;
  }
  e.release_upto = f.cfg.slots == slot_release::on_signaled_poll ? w.seq : 0;
  if (!push_cqe(f, q->send_cq, e, false)) release_slots(f, q, w.seq);
}

inline void recv_cqe(fabric_state& f, qp_obj* q, const cq_entry& e, bool solicited) {
  push_cqe(f, q->recv_cq, e, solicited);
}

inline void flush_recv(fabric_state& f, qp_obj* q, const recv_wqe& r) {
  cq_entry e;
  e.wc.wr_id = r.wr_id;
  e.wc.status = wc_status::wr_flush_err;
  e.wc.qp_num = q->qpn;
  e.wc.opcode = wc_opcode::recv;
  recv_cqe(f, q, e, false);
}

inline void disarm_timer(fabric_state& f, qp_obj* q) {
  q->deadline = 0;
  q->rnr_wait = false;
  f.timed.erase(q);
}

inline void set_timer(fabric_state& f, qp_obj* q, clock_ns at) {
  q->deadline = at;
  f.timed.insert(q);
}

/// Moves a QP to ERR: every outstanding send WR and posted receive completes with
/// WR_FLUSH_ERR, in queue order, signaled or not.
inline void to_error(fabric_state& f, qp_obj* q) {
  if (q->state == qp_state::err) return;
  q->state = qp_state::err;
  disarm_timer(f, q);
  q->held.clear();
  for (auto& w : q->sq) {
    if (w.reported) continue;
    w.reported = true;
    w.state = send_wqe::phase::done;
    w.status = wc_status::wr_flush_err;
    send_cqe(f, q, w, wc_status::wr_flush_err);
  }
  retire_front_on_completion(f, q);
  auto rq = std::move(q->rq);
  q->rq.clear();
  for (auto& r : rq) flush_recv(f, q, r);
}

/// Reports finished send WQEs in SQ order; an error completion moves the QP to ERR.
inline void report_sends(fabric_state& f, qp_obj* q) {
  for (auto& w : q->sq) {
    if (w.reported) continue;
    if (w.state != send_wqe::phase::done) break;
    w.reported = true;
    const bool error = w.status != wc_status::success;
    if (w.signaled || error) {
      send_cqe(f, q, w, w.status);
    } else if (f.cfg.slots == slot_release::on_signaled_poll) {
      // keeps its slot until a later signaled completion is polled
    }
    if (error) {
      retire_front_on_completion(f, q);
      to_error(f, q);
      return;
    }
  }
  retire_front_on_completion(f, q);
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
