#pragma once
// post_send and post_recv of backends::mock: each WR is checked as a device checks it
// (the first refused one is bad_wr, those before it are posted), queued, and the
// engine runs what is due.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/engine.hpp>

#include <cstdint>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// A QP that may not post sends yet (RESET, INIT, RTR).
inline bool below_rts(const qp_obj* q) noexcept {
  return q->state == qp_state::reset || q->state == qp_state::init || q->state == qp_state::rtr;
}

// send_wr_error's answer for a WR rxe's provider posts and its requester fails
// (LOC_QP_OP_ERR, the QP to ERR): not an errno, never returned by a verb.
inline constexpr int fails_at_issue = -1;

// send_wr_error's checks past the length (below).
RDMAKIT_ALWAYS_INLINE int send_wr_rest_error(const fabric_state& f, const qp_obj* q,
                                             const rdmakit::backends::mock::send_wr& w, std::uint64_t total,
                                             bool as_rxe) noexcept {
  const bool inl = has_all(w.flags, send_flags::inline_data);
  if (inl && (total > q->caps.max_inline_data || (!as_rxe && is_read_or_atomic(w.op)))) return EINVAL;
  if (is_atomic(w.op) && (total < 8 || (!as_rxe && (w.num_sge != 1 || total != 8)) || (w.atomic.remote_addr & 7) != 0))
    return EINVAL;
  if (is_read_or_atomic(w.op) && q->attr.max_rd_atomic == 0 && !as_rxe && opcode_allowed(q->type, w.op))
    return EINVAL;  // max_rd_atomic 0 can never issue it: refuse instead of stalling
  if (is_local_op(w.op) && (inl || w.num_sge != 0)) return EINVAL;  // no data: no SGEs, nothing inline
  if (w.op == opcode::bind_mw) {
    if (!w.bind_mw.window || (!as_rxe && w.bind_mw.window->type != mw_type::type2)) return EINVAL;
    if (as_rxe && (w.imm_data != 0 || (q->type != qp_type::rc && q->type != qp_type::uc))) return EINVAL;
  }
  // A destroyed address handle is refused, not read: a device would read freed memory.
  if (q->type == qp_type::ud &&
      (!w.ud.address || !f.ahs.count(w.ud.address) || (!as_rxe && w.ud.address->pd != q->pd)))
    return EINVAL;
  if (q->sq.size() >= q->caps.max_send_wr) return ENOMEM;
  return 0;
}

// rxe 6.1 posts a message above 2^31 bytes if the rest is right, and its requester
// fails it (deviations.hpp, posting.message_over_2g). Out of line: rare.
RDMAKIT_NOINLINE inline int rxe_send_wr_over_2g(const fabric_state& f, const qp_obj* q,
                                                const rdmakit::backends::mock::send_wr& w, std::uint64_t total) {
  const int e = send_wr_rest_error(f, q, w, total, true);
  return e != 0 ? e : fails_at_issue;
}

// Why a device refuses send WR `w` on `q` now (EINVAL for a malformed WR, ENOMEM for a
// full send queue; a QP below RTS is post_below_rts's), or 0, or fails_at_issue; `total`
// gets its length. The send queue counts every slot still held, unsignaled WRs waiting
// for a later signaled completion included.
// `as_rxe`: rxe's provider accepts an opcode the transport lacks (the WR fails later), an
// atomic whose SGEs hold 8 bytes or more in any number of SGEs (the first 8 take the
// result), and a READ or an atomic marked inline (its SGEs are then lost: see on_response).
// It writes a WR into its ring whatever the QP's state (the kernel's doorbell refuses
// below RTS: post_send) and takes a READ or an atomic on a QP whose max_rd_atomic is 0 (it
// never issues: the requester waits for a credit that never comes, rxe_req.c check_init_depth).
// It accepts a UD WR whose AH is of another PD (the requester fails it: LOC_QP_OP_ERR)
// and a BIND_MW WR naming a type 1 window (the kernel binds it as ibv_bind_mw would); it
// refuses a BIND_MW whose imm_data is not 0, or on a QP that is not RC or UC
// (rdma-core providers/rxe/rxe.c, validate_send_wr).
inline int send_wr_error(const fabric_state& f, const qp_obj* q, const rdmakit::backends::mock::send_wr& w,
                         std::uint64_t& total) noexcept {
  const bool as_rxe = f.as_rxe();
  if (w.num_sge < 0 || static_cast<std::uint32_t>(w.num_sge) > q->caps.max_send_sge ||
      (w.num_sge && !w.sg_list) || (!as_rxe && !opcode_allowed(q->type, w.op)))
    return EINVAL;
  for (int i = 0; i < w.num_sge; ++i) total += w.sg_list[i].length;
  if (RDMAKIT_UNLIKELY(total > (1ull << 31))) return as_rxe ? rxe_send_wr_over_2g(f, q, w, total) : EINVAL;
  return send_wr_rest_error(f, q, w, total, as_rxe);
}

// The send queue entry for an accepted WR: inline data is copied now (the caller may
// reuse the buffer as soon as post_send returns), UD sends keep their address vector.
// `e` is a reused SQ slot holding an old WQE: every field is set here (the vectors keep
// their capacity), except the UD address fields, which only UD QPs read.
// A BIND_MW WR's own fields (type 1 binds fill these themselves). Out of line: rare.
RDMAKIT_NOINLINE inline void fill_bind_fields(send_wqe& e, const rdmakit::backends::mock::send_wr& w) {
  e.mw_index = w.bind_mw.window->rkey >> 8;
  e.mw_named_rkey = w.bind_mw.window->user_rkey;
  e.mw_rkey = w.bind_mw.rkey;
  e.mw_lkey = w.bind_mw.region ? w.bind_mw.region->lkey : 0;
  e.mw_length = w.bind_mw.region ? w.bind_mw.length : 0;
  e.mw_rights = w.bind_mw.rights;
}

// `MayBeUd` false: a WR of a queue pair known not to be UD (a type 1 bind), whose null UD
// address GCC's -Wnull-dereference would otherwise see read.
template <bool MayBeUd = true>
RDMAKIT_ALWAYS_INLINE void fill_send_wqe(send_wqe& e, qp_obj* q, const rdmakit::backends::mock::send_wr& w,
                                                std::uint64_t total) {
  e.seq = q->next_seq++;
  e.wr_id = w.wr_id;
  e.op = w.op;
  e.flags = w.flags;
  e.signaled = q->sq_sig_all || has_all(w.flags, send_flags::signaled);
  e.length = static_cast<std::uint32_t>(total);  // an atomic's: 8, or under rxe its SGEs' (send_wr_error)
  e.sges.assign(w.sg_list, static_cast<std::size_t>(w.num_sge));
  e.is_inline = has_all(w.flags, send_flags::inline_data);
  if (e.is_inline)
    gather_into(e.sges, e.inline_data);
  else
    e.inline_data.clear();
  e.imm = w.op == opcode::local_inv || w.op == opcode::send_with_inv ? w.invalidate_rkey : w.imm_data;
  if (RDMAKIT_UNLIKELY(w.op == opcode::bind_mw && w.bind_mw.window)) fill_bind_fields(e, w);
  const bool atomic = is_atomic(w.op);
  e.remote_addr = w.op == opcode::bind_mw ? w.bind_mw.addr : atomic ? w.atomic.remote_addr : w.rdma.remote_addr;
  e.rkey = atomic ? w.atomic.rkey : w.rdma.rkey;
  e.compare_add = atomic ? w.atomic.compare_add : 0;
  e.swap = atomic ? w.atomic.swap : 0;
  if (MayBeUd && q->type == qp_type::ud) {
    e.ud_av = w.ud.address->attr;
    e.ud_port = 1;
    e.remote_qpn = w.ud.remote_qpn;
    e.remote_qkey = w.ud.remote_qkey;
    e.ud_ah_other_pd = w.ud.address->pd != q->pd;  // accepted at post by the rxe profile only
  }
  e.state = send_wqe::phase::queued;
  e.status = wc_status::success;
  e.reported = false;
  e.psn = 0;
  e.npkts = 1;
}

// A WR send_wr_error says rxe posts and fails (fails_at_issue): queued already failed, so
// issue() stops at it and report_sends completes it in its turn, before any SGE is read.
RDMAKIT_NOINLINE inline void fill_failing_send_wqe(send_wqe& e, qp_obj* q, const rdmakit::backends::mock::send_wr& w,
                                                   std::uint64_t total) {
  fill_send_wqe(e, q, w, total);
  e.state = send_wqe::phase::done;
  e.status = wc_status::loc_qp_op_err;
}

// Queues send WR `w`, or says why not (send_wr_error's errno; fails_at_issue is queued).
RDMAKIT_ALWAYS_INLINE int queue_send(fabric_state& f, qp_obj* q, const rdmakit::backends::mock::send_wr& w) {
  std::uint64_t total = 0;
  if (const int err = send_wr_error(f, q, w, total)) {
    if (err != fails_at_issue) return err;
    fill_failing_send_wqe(q->sq.push_back(), q, w, total);
    return 0;
  }
  fill_send_wqe(q->sq.push_back(), q, w, total);
  return 0;
}

// A post_send on a QP below RTS: EINVAL. The spec profile refuses the first WR. rxe's
// provider writes each WR it accepts into the ring (bad_wr: the one it refused, if any),
// then the kernel's doorbell fails; the WQEs stay, for the next post in RTS to send
// first (the move to RTS does not issue them: doorbell_owed), or a move to ERR to flush.
RDMAKIT_NOINLINE inline int post_below_rts(fabric_state& f, qp_obj* q, rdmakit::backends::mock::send_wr* wr,
                                           rdmakit::backends::mock::send_wr** bad_wr) noexcept {
  auto* w = wr;
  if (f.as_rxe()) {
    for (; w; w = w->next)
      if (queue_send(f, q, *w)) break;
    if (w != wr) q->doorbell_owed = true;
  }
  if (bad_wr) *bad_wr = w;
  return EINVAL;
}

}  // namespace mock::detail

namespace backends {

namespace mockd = rdmakit::mock::detail;

RDMAKIT_DECL int mock::post_send(qp q, send_wr* wr, send_wr** bad_wr) noexcept {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  if (RDMAKIT_UNLIKELY(mockd::below_rts(q))) return mockd::post_below_rts(f, q, wr, bad_wr);
  int err = 0;
  send_wr* w = wr;
  for (; w; w = w->next)
    if ((err = mockd::queue_send(f, q, *w))) break;
  if (bad_wr) *bad_wr = err ? w : nullptr;
  if (q->state == qp_state::err) {
    mockd::posted_in_error(f, q);
  } else {
    mockd::issue(f, q);
  }
  mockd::run_due(f);
  return err;
}

RDMAKIT_DECL int mock::post_recv(qp q, recv_wr* wr, recv_wr** bad_wr) noexcept {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  int err = 0;
  recv_wr* w = wr;
  for (; w; w = w->next) {
    if (q->state == qp_state::reset || q->srq) {  // a QP on an SRQ has no receive queue of its own
      err = EINVAL;
      // rxe's provider refuses these before it looks at a WR: bad_wr stays NULL
      // (posting.recv_refused_bad_wr).
      if (f.as_rxe()) {
        if (bad_wr) *bad_wr = nullptr;
        return err;
      }
      break;
    }
    if (w->num_sge < 0 || static_cast<std::uint32_t>(w->num_sge) > q->caps.max_recv_sge ||
        (w->num_sge && !w->sg_list)) {
      err = EINVAL;
      break;
    }
    if (q->rq.size() >= q->caps.max_recv_wr) {
      err = ENOMEM;
      break;
    }
    mockd::recv_wqe r;
    r.wr_id = w->wr_id;
    r.sges.assign(w->sg_list, static_cast<std::size_t>(w->num_sge));
    q->rq.push_back() = std::move(r);
    if (q->state == qp_state::err) mockd::posted_in_error(f, q);
  }
  if (bad_wr) *bad_wr = err ? w : nullptr;
  mockd::run_due(f);
  return err;
}

// Type 1 bind: as rxe's provider, a BIND_MW WR on the send queue.
RDMAKIT_DECL int mock::bind_mw(qp q, mw w, mr m, std::uint64_t addr, std::uint64_t length, access rights,
                               std::uint64_t wr_id, send_flags flags) noexcept {
  if (!q || !w || w->type != mw_type::type1) return EINVAL;
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  // As rxe's provider: checked here, then posted as a BIND_MW WR with the next key byte.
  if (!m) return EINVAL;  // also to unbind: providers read the region's lkey (a null one crashes them)
  if (m && m->pd != w->pd) return EPERM;
  send_wr wr;
  wr.wr_id = wr_id;
  wr.op = opcode::bind_mw;
  wr.flags = flags & ~send_flags::inline_data;
  if (q->state == qp_state::reset || q->state == qp_state::init || q->state == qp_state::rtr) return EINVAL;
  if (!mockd::opcode_allowed(q->type, opcode::bind_mw)) return EINVAL;  // UD: rxe's validate_send_wr
  if (q->sq.size() >= q->caps.max_send_wr) return ENOMEM;
  const std::uint32_t next = (w->user_rkey & ~0xFFu) | ((w->user_rkey + 1) & 0xFFu);
  auto& e = q->sq.push_back();
  wr.bind_mw = {nullptr, next, m, addr, length, rights};
  mockd::fill_send_wqe<false>(e, q, wr, 0);
  e.mw_index = w->rkey >> 8;
  e.mw_named_rkey = w->user_rkey;
  e.mw_rkey = next;
  e.mw_lkey = m->lkey;
  e.mw_length = length;
  e.mw_rights = rights;
  e.remote_addr = addr;
  w->user_rkey = next;
  if (q->state == qp_state::err)
    mockd::posted_in_error(f, q);
  else
    mockd::issue(f, q);
  mockd::run_due(f);
  return 0;
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
