#pragma once
// ibv_modify_qp's work, checked against the IB spec's transition table, for a caller that
// holds the fabric lock: the verb itself, and the connection manager moving its QPs
// while its ids are locked (a peer may destroy its id meanwhile).
#include <rdmakit/backends/mock/checks.hpp>
#include <rdmakit/backends/mock/clock.hpp>
#include <rdmakit/backends/mock/completions.hpp>
#include <rdmakit/backends/mock/requester.hpp>
#include <rdmakit/detail/qp_transitions.hpp>
#include <rdmakit/detail/text.hpp>

#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

inline void modify_qp_locked(fabric_state& f, qp_obj* q, const qp_attr& a, qp_attr_mask mask) {
  using m = qp_attr_mask;
  const qp_state cur = q->state;
  const qp_state next = has_all(mask, m::state) ? a.state : cur;
  auto bad = [&](const std::string& what) {
    fail("ibv_modify_qp", EINVAL,
         rdmakit::detail::cat(to_string(q->type), " QP ", rdmakit::detail::hex(q->qpn), " ", to_string(cur), "->", to_string(next), ": ",
                              what));
  };
  if (has_all(mask, m::cur_state) && a.cur_state != cur)
    bad(rdmakit::detail::cat("cur_state says ", to_string(a.cur_state), " but the QP is in ", to_string(cur)));
  auto rule = rdmakit::detail::rule_for(cur, next, q->type);
  if (!rule.legal) bad("not a legal transition");
  const qp_attr_mask allowed = m::state | rule.required | rule.optional;
  if (auto extra = mask & ~allowed; extra != m::none)
    bad(rdmakit::detail::cat("attribute(s) ", to_string(extra), " are not allowed here (required: ",
                             to_string(rule.required), ", optional: ", to_string(rule.optional), ")"));
  if (auto missing = rule.required & ~mask; missing != m::none)
    bad(rdmakit::detail::cat("missing required attribute(s) ", to_string(missing), " (required: ",
                             to_string(rule.required), ")"));
  validate_attr(f, q, a, mask);
  if (next == qp_state::err && cur != qp_state::err) reserve_for_error(q);  // all or nothing

  auto& s = q->attr;
  if (has_all(mask, m::port)) s.port_num = a.port_num;
  if (has_all(mask, m::pkey_index)) s.pkey_index = a.pkey_index;
  if (has_all(mask, m::access_flags)) s.access_flags = a.access_flags;
  if (has_all(mask, m::qkey)) s.qkey = a.qkey;
  if (has_all(mask, m::av)) {
    s.av = a.av;
    s.av.port_num = s.port_num;
  }
  if (has_all(mask, m::path_mtu)) s.path_mtu = a.path_mtu;
  if (has_all(mask, m::dest_qpn)) s.dest_qp_num = a.dest_qp_num;
  if (has_all(mask, m::rq_psn)) s.rq_psn = a.rq_psn & psn_mask;
  if (has_all(mask, m::sq_psn)) s.sq_psn = a.sq_psn & psn_mask;
  if (has_all(mask, m::max_dest_rd_atomic)) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (has_all(mask, m::max_qp_rd_atomic)) s.max_rd_atomic = a.max_rd_atomic;
  if (has_all(mask, m::min_rnr_timer)) s.min_rnr_timer = a.min_rnr_timer;
  if (has_all(mask, m::timeout)) s.timeout = a.timeout;
  if (has_all(mask, m::retry_cnt)) s.retry_cnt = a.retry_cnt;
  if (has_all(mask, m::rnr_retry)) s.rnr_retry = a.rnr_retry;
  q->route_known = false;  // the address or destination may have changed
  q->peer_epoch = 0;

  switch (next) {
    case qp_state::reset:
      // Everything outstanding is dropped without completions. rxe has flushed a QP in
      // ERR into its CQs already (rxe_qp_error runs its tasks): the rxe profile writes the
      // flushes still due first (qp.err_then_reset_keeps_flushes).
      disarm_timer(f, q);
      if (cur == qp_state::err && q->flush_due && f.as_rxe()) {
        drop_due_flushes(f, q);
        write_flushes(f, q);
      }
      drop_due_flushes(f, q);
      q->sq.clear();
      q->rq.clear();
      q->held.clear();
      q->atomic_replay.clear();
      q->read_replay.clear();
      q->doorbell_owed = false;
      if (cur != qp_state::err) ++q->times_left;
      q->state = qp_state::reset;
      break;
    case qp_state::err:
      to_error(f, q);
      break;
    case qp_state::rtr:
      q->state = next;
      if (cur == qp_state::init) q->expected_psn = s.rq_psn;
      break;
    case qp_state::rts:
      q->state = next;
      if (cur == qp_state::rtr) {
        q->next_psn = s.sq_psn;
        q->retries_left = s.retry_cnt;
        q->rnr_left = s.rnr_retry;
        q->retry_started = false;
      }
      // WQEs a post below RTS left in the ring (rxe profile) wait for the next post's
      // doorbell, which issues them first: nothing else issues, as nothing was sent yet.
      // rxe's move from SQD does not run the requester either: what was posted in SQD
      // waits for that doorbell too (posting.send_in_sqd_waits_for_doorbell).
      if (q->doorbell_owed || (cur == qp_state::sqd && f.as_rxe()))
        q->doorbell_owed = false;
      else
        issue(f, q);
      run_due(f);
      break;
    case qp_state::sqd:
      if (cur == qp_state::rts) {
        q->started_until = std::max(q->started_until, q->issue_from);
        // rxe 6.1 raises SQ_DRAINED at every move to SQD (deviations.hpp, async.sq_drained_unasked).
        q->sq_draining = f.as_rxe() || (has_all(mask, m::en_sqd_async_notify) && a.en_sqd_async_notify);
      }
      q->state = next;
      if (q->sq_draining) note_sq_drained(f, q);
      break;
    default:
      q->state = next;
      break;
  }
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
