#pragma once
// Asynchronous events, completion entries (send, receive, flush), SQ slot release,
// the ACK timer, and moving a QP to ERR.
#include <rdmakit/backends/mock/rules.hpp>
#include <rdmakit/detail/algorithm.hpp>

#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// ---------------------------------------------------------------- events and completions

inline void post_async(fabric_state& f, std::uint32_t dev, const async_event& ev) {
  for (auto* c : f.contexts)
    if (c->dev == dev) c->push_async(ev);
  f.cv.notify_all();
}

/// An asynchronous event of one context: queued, and the threads waiting in
/// get_async_event woken (the eventfd alone wakes only the coroutine layer).
inline void raise_async(fabric_state& f, context_obj* c, const async_event& ev) {
  c->push_async(ev);
  f.cv.notify_all();
}

/// Drops the events not yet read that name `object` (a CQ, QP or SRQ being destroyed)
/// from every context, as the kernel drops a destroyed object's.
inline void drop_async_events(fabric_state& f, const void* object) noexcept {
  for (auto* c : f.contexts) {
    auto& q = c->async_q;
    q.erase(std::remove_if(q.begin(), q.end(), [&](const async_event& e) { return e.object == object; }), q.end());
    c->async_ready.sync(!q.empty());
  }
}

/// Adds a CQE; false when it is lost: the CQ was full (CQ_ERR raised) or, on the spec
/// profile, is in error since it was (IBA C11-37: it takes no more completions; rxe
/// loses only what does not fit).
inline void lose_to_full_cq(fabric_state& f, cq_obj* cq);
inline bool push_cqe(fabric_state& f, cq_obj* cq, const cq_entry& e, bool solicited) {
  if (RDMAKIT_UNLIKELY(static_cast<int>(cq->entries.size()) >= cq->capacity || cq->overrun)) {
    if (!cq->overrun) lose_to_full_cq(f, cq);
    return false;
  }
  cq->entries.push_back() = e;
  // ibv_req_notify_cq(3): a failed completion is solicited too. rxe 6.1 marks a send
  // completion unsolicited whatever its status, a receive's by its packet's SE bit (a
  // flush, with no packet, solicited): its callers pass that (deviations.hpp,
  // cq.solicited_arm_failed_completion).
  const bool error = e.wc.status != wc_status::success && !f.as_rxe();
  if (cq->armed && (!cq->solicited_only || solicited || error)) {
    cq->armed = false;
    if (cq->channel) {
      cq->channel->events.push_back(cq);
      cq->channel->ready.sync(true);
      f.cv.notify_all();
    }
  }
  return true;
}

/// A completion that found `cq` full is lost: CQ_ERR, and on the spec profile the CQ takes
/// no more (rxe takes the next once there is room).
inline void lose_to_full_cq(fabric_state& f, cq_obj* cq) {
  async_event ev;
  ev.type = async_event_type::cq_err;
  ev.object = cq;
  raise_async(f, cq->ctx, ev);
  cq->overrun = !f.as_rxe();
}

inline void release_slots(fabric_state& f, qp_obj* q, std::uint64_t upto) {
  while (!q->sq.empty() && q->sq.front().reported && q->sq.front().seq <= upto) q->sq.pop_front();
  (void)f;
}

inline void retire_front_on_completion(fabric_state& f, qp_obj* q) {
  if (f.cfg.slots != slot_release::on_completion) return;
  while (!q->sq.empty() && q->sq.front().reported) q->sq.pop_front();
}

inline void to_error(fabric_state& f, qp_obj* q);

/// A completion of `q` was lost to its CQ's overrun (push_cqe). IBA C9-218: the QP goes to
/// ERR with an affiliated error, QP_FATAL (mlx5 raises it for every QP of the CQ; the spec
/// for each that completes into it), and its flushes are lost with the CQ. rxe (6.1): a
/// lost receive completion moves its QP to ERR, silently; a lost send completion, nothing.
inline void lost_completion(fabric_state& f, qp_obj* q, bool send) {
  if (q->state == qp_state::err || (send && f.as_rxe())) return;
  if (!f.as_rxe()) {
    async_event ev;
    ev.type = async_event_type::qp_fatal;
    ev.qp_num = q->qpn;
    ev.object = q;
    raise_async(f, q->pd->ctx, ev);
  }
  to_error(f, q);
}

/// A send CQE for `w`. When it is lost, `q` may go to ERR here, its flushes retiring WQEs:
/// the caller finds its place again by sequence number.
inline void send_cqe(fabric_state& f, qp_obj* q, send_wqe& w, wc_status status) {
  cq_entry e;
  e.wc.wr_id = w.wr_id;
  e.wc.status = status;
  e.wc.qp_num = q->qpn;
  if (status == wc_status::success) {
    e.wc.opcode = completion_opcode(w.op);
    e.wc.byte_len = w.length;
    // rxe marks the sender's completion of a WR with immediate too (imm_data 0).
    if (f.as_rxe() && (w.op == opcode::send_with_imm || w.op == opcode::rdma_write_with_imm))
      e.wc.flags = wc_flags::with_imm;
  }
  const std::uint64_t seq = w.seq;
  e.release_upto = f.cfg.slots == slot_release::on_signaled_poll ? seq : 0;
  if (RDMAKIT_UNLIKELY(!push_cqe(f, q->send_cq, e, false))) {
    release_slots(f, q, seq);
    lost_completion(f, q, true);
  }
}

/// A receive CQE; false when it is lost to the CQ's overrun (then `q` is in ERR).
inline bool recv_cqe(fabric_state& f, qp_obj* q, const cq_entry& e, bool solicited) {
  if (RDMAKIT_LIKELY(push_cqe(f, q->recv_cq, e, solicited))) return true;
  lost_completion(f, q, false);
  return false;
}

// rxe writes a QP's flushes as it enters ERR (rxe_qp_error runs its tasks at once), and
// those that find the CQ full are lost with a CQ_ERR. The mock writes them later
// (flush_later), when the program may have polled room since: the rxe profile loses
// those that had no room when they became due, the CQ's entries now and those polled
// since counted as taken. No limit on the spec profile (semantics.md §13,
// cq.flushes_due_while_full). Sends first, then receives, on a CQ both use.
inline std::uint64_t room_when_due(const fabric_state& f, const cq_obj* cq, std::uint64_t mark) {
  if (!f.as_rxe()) return UINT64_MAX;
  const std::uint64_t used = cq->entries.size() + (cq->taken - mark);
  const auto cap = static_cast<std::uint64_t>(cq->capacity);
  return used < cap ? cap - used : 0;
}

/// Takes one entry of `room` (room_when_due); false when none is left.
inline bool take_room(std::uint64_t& room) {
  if (room == 0) return false;
  --room;
  return true;
}

inline void flush_recv(fabric_state& f, qp_obj* q, const recv_wqe& r, std::uint64_t& room) {
  if (!take_room(room)) return lose_to_full_cq(f, q->recv_cq);  // (q is in ERR already)
  cq_entry e;
  e.wc.wr_id = r.wr_id;
  e.wc.status = wc_status::wr_flush_err;
  e.wc.qp_num = q->qpn;  // opcode SEND, as rxe's flushed receives (receive_send says why)
  recv_cqe(f, q, e, true);  // (rxe: a completion without a packet is solicited)
}

// f.timed holds each QP with a deadline once; qp_obj::timed_slot makes both O(1).
inline void untime(fabric_state& f, qp_obj* q) {
  if (!q->timed_slot) return;
  qp_obj* last = f.timed.back();
  f.timed[q->timed_slot - 1] = last;
  last->timed_slot = q->timed_slot;
  f.timed.pop_back();
  q->timed_slot = 0;
}

inline void disarm_timer(fabric_state& f, qp_obj* q) {
  q->deadline = 0;
  q->rnr_wait = false;
  untime(f, q);
}

// A thread asleep on the fabric (wait_for_event) slept for as long as nothing was
// pending: an event or timer scheduled by another thread meanwhile, which no one else
// may run (its poster makes no further call), must end that sleep (audit 42).
inline void wake_sleepers(fabric_state& f) {
  if (RDMAKIT_UNLIKELY(f.sleepers != 0)) f.cv.notify_all();
}

inline void set_timer(fabric_state& f, qp_obj* q, clock_ns at) {
  q->deadline = at;
  if (q->timed_slot) return;
  f.timed.push_back(q);
  q->timed_slot = f.timed.size();
  wake_sleepers(f);
}

/// The WQE of sequence number `seq` (they are consecutive in the SQ), or null.
inline send_wqe* wqe_at(qp_obj* q, std::uint64_t seq) {
  if (q->sq.empty() || seq < q->sq.front().seq) return nullptr;
  const std::uint64_t i = seq - q->sq.front().seq;
  return i < q->sq.size() ? &q->sq[i] : nullptr;
}

/// The position of the first WQE at or after sequence number `seq` (lower bounds kept
/// by the QP may point at WQEs already released).
inline std::size_t sq_index(const qp_obj* q, std::uint64_t seq) {
  if (q->sq.empty() || seq <= q->sq.front().seq) return 0;
  const std::uint64_t i = seq - q->sq.front().seq;
  return i < q->sq.size() ? static_cast<std::size_t>(i) : q->sq.size();
}

/// Completes every unreported send WQE with WR_FLUSH_ERR, in queue order. By sequence
/// number: a full CQ makes send_cqe release slots at the front.
inline void flush_sends(fabric_state& f, qp_obj* q, std::uint64_t& room) {
  for (std::uint64_t seq = q->sq.empty() ? q->next_seq : q->sq.front().seq; seq < q->next_seq; ++seq) {
    send_wqe* w = wqe_at(q, seq);
    if (!w || w->reported) continue;
    w->reported = true;
    w->state = send_wqe::phase::done;
    w->status = wc_status::wr_flush_err;
    if (take_room(room)) {
      send_cqe(f, q, *w, wc_status::wr_flush_err);
    } else {
      lose_to_full_cq(f, q->send_cq);
      release_slots(f, q, seq);
    }
  }
  retire_front_on_completion(f, q);
}

/// Makes the room to_error(q) may fill (its flushes in the CQs, a CQ's event on its
/// channel, CQ_ERR and LAST_WQE_REACHED events), so that ibv_modify_qp to ERR, a setup
/// verb, either moves the QP or runs out of memory before anything changed.
inline void reserve_for_error(qp_obj* q) {
  std::size_t sends = 0;
  for (const auto& w : q->sq) sends += !w.reported;
  const std::size_t recvs = q->rq.size();
  auto room = [](cq_obj* cq, std::size_t flushes) {
    cq->entries.reserve(std::min(cq->entries.size() + flushes, static_cast<std::size_t>(cq->capacity)));
    if (cq->channel) cq->channel->events.reserve(cq->channel->events.size() + 2);  // both CQs may share it
  };
  if (q->send_cq == q->recv_cq) {
    room(q->send_cq, sends + recvs);
  } else {
    room(q->send_cq, sends);
    room(q->recv_cq, recvs);
  }
  // At most three events (each CQ's CQ_ERR, LAST_WQE_REACHED), on one context or more.
  for (context_obj* c : {q->send_cq->ctx, q->recv_cq->ctx, q->pd->ctx}) c->async_q.reserve(c->async_q.size() + 3);
}

/// Writes the flushes of QP `q` in ERR now: every outstanding send WR and posted receive
/// completes with WR_FLUSH_ERR, in queue order, signaled or not.
inline void write_flushes(fabric_state& f, qp_obj* q) {
  std::uint64_t send_room = room_when_due(f, q->send_cq, q->flush_mark_send);
  std::uint64_t own_recv_room = room_when_due(f, q->recv_cq, q->flush_mark_recv);
  std::uint64_t& recv_room = q->recv_cq == q->send_cq ? send_room : own_recv_room;
  flush_sends(f, q, send_room);
  auto rq = std::move(q->rq);
  q->rq.clear();
  for (auto& r : rq) flush_recv(f, q, r, recv_room);
}

/// Takes `q` off the list of QPs whose flushes are due (destroyed or reset: they never come).
inline void drop_due_flushes(fabric_state& f, qp_obj* q) {
  if (!q->flush_due) return;
  qp_obj* before = nullptr;
  for (qp_obj* p = f.first_due; p != q; p = p->next_due) before = p;
  (before ? before->next_due : f.first_due) = q->next_due;
  if (f.last_due == q) f.last_due = before;
  q->flush_due = false;
  q->next_due = nullptr;
}

/// The flushes of `q`, in ERR, come later (write_due_flushes), as a device writes them
/// after the verb that caused them returns. Unless a CQ of `q` is armed: a thread may
/// sleep on its channel, and the device's event would wake it.
inline void flush_later(fabric_state& f, qp_obj* q) {
  if (!q->flush_due) {  // from now on, as far as room_when_due is concerned
    q->flush_mark_send = q->send_cq->taken;
    q->flush_mark_recv = q->recv_cq->taken;
  }
  if (q->send_cq->armed || q->recv_cq->armed) {
    drop_due_flushes(f, q);  // (in queue order: none of its flushes may overtake these)
    return write_flushes(f, q);
  }
  if (q->flush_due) return;
  q->flush_due = true;
  (f.last_due ? f.last_due->next_due : f.first_due) = q;
  f.last_due = q;
}

/// A WR posted to `q` in ERR: flushed with the rest while they are still due, and after
/// they were written unless fabric_config::lose_posts_in_error says otherwise.
inline void posted_in_error(fabric_state& f, qp_obj* q) {
  if (q->flush_due || !f.cfg.lose_posts_in_error) flush_later(f, q);
}

/// Writes every flush that is due; false when none was. Run when a poll finds its CQ
/// empty and before a wait blocks: the device's own time to write them.
inline bool write_due_flushes(fabric_state& f) {
  if (!f.first_due) return false;
  while (qp_obj* q = f.first_due) {
    f.first_due = q->next_due;
    if (!f.first_due) f.last_due = nullptr;
    q->flush_due = false;
    q->next_due = nullptr;
    write_flushes(f, q);
  }
  return true;
}

/// Moves a QP to ERR: every outstanding send WR and posted receive will complete with
/// WR_FLUSH_ERR (flush_later); a QP on an SRQ raises QP_LAST_WQE_REACHED instead of
/// flushing the SRQ's receives.
inline void to_error(fabric_state& f, qp_obj* q) {
  if (q->state == qp_state::err) return;
  q->state = qp_state::err;
  ++q->times_left;
  disarm_timer(f, q);
  q->held.clear();
  flush_later(f, q);
  if (q->srq && !f.as_rxe()) {
    // The SRQ's receives are not the QP's to flush: the QP says it will take no more
    // (rxe 6.1 raises nothing).
    async_event ev;
    ev.type = async_event_type::qp_last_wqe_reached;
    ev.qp_num = q->qpn;
    ev.object = q;
    raise_async(f, q->pd->ctx, ev);
  }
}

/// SQ_DRAINED, once a QP in SQD that owes it has reported every WQE it had started.
inline void note_sq_drained(fabric_state& f, qp_obj* q) {
  if (q->state != qp_state::sqd) return void(q->sq_draining = false);
  for (std::size_t i = sq_index(q, q->report_from); i < q->sq.size() && q->sq[i].seq < q->started_until; ++i)
    if (!q->sq[i].reported) return;
  q->sq_draining = false;
  async_event ev;
  ev.type = async_event_type::sq_drained;
  ev.qp_num = q->qpn;
  ev.object = q;
  raise_async(f, q->pd->ctx, ev);
}

/// Reports finished send WQEs in SQ order; an error completion moves the QP to ERR.
/// Starts at report_from: every WQE before it is reported already.
inline void report_sends(fabric_state& f, qp_obj* q) {
  std::size_t i = sq_index(q, q->report_from);
  while (i < q->sq.size()) {
    send_wqe& w = q->sq[i];
    if (w.reported) {
      ++i;
      continue;
    }
    if (w.state != send_wqe::phase::done) break;
    w.reported = true;
    const std::uint64_t seq = w.seq;
    q->report_from = seq + 1;
    const bool error = w.status != wc_status::success;
    if (w.signaled || error) {
      send_cqe(f, q, w, w.status);
      i = sq_index(q, seq + 1);  // a full CQ makes send_cqe release slots at the front
    } else {
      ++i;  // unsignaled (on_signaled_poll): keeps its slot until a later signaled completion is polled
    }
    if (error) {
      retire_front_on_completion(f, q);
      to_error(f, q);
      return;
    }
  }
  retire_front_on_completion(f, q);
  if (RDMAKIT_UNLIKELY(q->sq_draining)) note_sq_drained(f, q);
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
