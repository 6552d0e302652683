#pragma once
// The queue-pair verbs of backends::mock: creation checked against the device
// limits, destruction (which flushes nothing: the QP is gone), and modify_qp checked
// against the IB spec's transition table. Every call takes the fabric lock.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/engine.hpp>
#include <rdmakit/detail/owning_ptr.hpp>

#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace backends {

namespace mockd = rdmakit::mock::detail;

RDMAKIT_DECL mock::qp mock::create_qp(pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps, bool sq_sig_all) {
  return create_qp_on_srq(p, send_cq, recv_cq, nullptr, type, caps, sq_sig_all);
}

// create_qp with `s` null; on an SRQ the receive capacities are ignored and granted as 0.
RDMAKIT_DECL mock::qp mock::create_qp_on_srq(pd p, cq send_cq, cq recv_cq, srq s, qp_type type, qp_cap& caps,
                                             bool sq_sig_all) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  const auto& limits = f.devices[p->ctx->dev].cfg.limits;
  auto bad = [&](const std::string& what) { mockd::fail("ibv_create_qp", EINVAL, what); };
  if (!send_cq || !recv_cq) bad("a QP needs a send CQ and a receive CQ");
  if (send_cq->ctx != p->ctx || recv_cq->ctx != p->ctx) bad("the CQs belong to another device than the PD");
  if (s && s->pd->ctx != p->ctx) bad("the SRQ belongs to another device than the PD");
  if (s) {
    caps.max_recv_wr = 0;
    caps.max_recv_sge = 0;
  }
  if (type != qp_type::rc && type != qp_type::uc && type != qp_type::ud) bad("unknown QP type");
  auto limit = [&](std::uint32_t v, std::uint32_t max, const char* cap, const char* dev_cap) {
    if (v > max)
      bad(detail::cat(cap, " ", v, " exceeds the device's ", dev_cap, " ", max, ": ask for at most ", max,
                      " (query_device reports it; mock: or raise device_config::limits.", dev_cap, ")"));
  };
  limit(caps.max_send_wr, limits.max_qp_wr, "max_send_wr", "max_qp_wr");
  limit(caps.max_recv_wr, limits.max_qp_wr, "max_recv_wr", "max_qp_wr");
  limit(caps.max_send_sge, limits.max_sge, "max_send_sge", "max_sge");
  limit(caps.max_recv_sge, limits.max_sge, "max_recv_sge", "max_sge");
  limit(caps.max_inline_data, limits.max_inline_data, "max_inline_data", "max_inline_data");
  auto& dev = f.devices[p->ctx->dev];
  mockd::check_room(dev.count.qp, limits.max_qp, "ibv_create_qp", "queue pairs", "max_qp", dev);
  // What may throw (allocations) comes first; then the counts and links, which cannot.
  auto q = detail::make_unique_owner<mockd::qp_obj>();
  q->pd = p;
  q->send_cq = send_cq;
  q->recv_cq = recv_cq;
  q->type = type;
  if (f.as_rxe()) {
    // rxe sizes a send WQE for the larger of the SGEs and the inline data, and grants
    // both from it (docs/semantics.md §13, create.grants_rounded_up).
    const std::uint32_t wqe = std::max(caps.max_send_sge * 16, caps.max_inline_data);
    caps.max_send_sge = std::min(wqe / 16, limits.max_sge);  // at least as asked: checked above
    caps.max_inline_data = wqe;
  }
  q->caps = caps;  // the spec profile grants exactly what was asked
  q->sq_sig_all = sq_sig_all;
  q->srq = s;
  const bool reuse = !f.free_qpns.empty();  // fabric_config::reuse_qp_numbers
  std::uint32_t next = f.next_qpn;
  q->qpn = reuse ? f.free_qpns.back()
                 : mockd::cyclic_number(next, mockd::first_qpn, mockd::last_qpn, f.qps.size(),
                                        [&](std::uint32_t n) { return f.qps.count(n) != 0; }, "ibv_create_qp",
                                        "QP numbers");
  q->sq.reserve(std::min<std::uint32_t>(caps.max_send_wr, 1024));  // a full SQ of a usual depth allocates no more
  f.qps[q->qpn] = q.get();
  if (reuse)
    f.free_qpns.pop_back();
  else
    f.next_qpn = next;
  q->serial = ++f.qps_made;
  ++dev.count.qp;
  if (s) ++s->qps;
  ++send_cq->qps;
  ++recv_cq->qps;
  ++p->children;
  return q.release();
}

RDMAKIT_DECL int mock::destroy_qp(qp q) noexcept {
  if (!q) return EINVAL;
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  // Like providers that clean the CQ (mlx5): completions of a destroyed QP are not
  // returned. rxe leaves them, and polls return them after the destroy.
  if (!f.as_rxe())
    for (auto* c : {q->send_cq, q->recv_cq})
      c->entries.remove_if([&](const mockd::cq_entry& x) { return x.wc.qp_num == q->qpn; });
  mockd::disarm_timer(f, q);
  mockd::drop_due_flushes(f, q);  // as rxe: flushes not written by the destroy never are
  if (q->windows)
    for (auto& [i, w] : f.mws)
      if (w->qp == q) mockd::attach_window(w, w->mr, nullptr);  // stays bound, usable through no QP
  // Its events not yet read go with it, as the kernel drops a destroyed object's
  // (a queue of them grew without end, and a QP given its number inherited them).
  mockd::drop_async_events(f, q);
  f.qps.erase(q->qpn);
  ++f.qp_epoch;  // hints naming it (messages, peers) go stale
  if (f.cfg.reuse_qp_numbers) {
    try {
      f.free_qpns.push_back(q->qpn);
    } catch (...) {  // out of memory: the number is not given again
    }
  }
  --q->send_cq->qps;
  --q->recv_cq->qps;
  if (q->srq) --q->srq->qps;
  --q->pd->children;
  --f.devices[q->pd->ctx->dev].count.qp;
  delete q;
  return 0;
}

RDMAKIT_DECL std::uint32_t mock::qp_num(qp q) noexcept { return q->qpn; }

RDMAKIT_DECL void mock::modify_qp(qp q, const qp_attr& a, qp_attr_mask mask) {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  mockd::modify_qp_locked(f, q, a, mask);
}

RDMAKIT_DECL qp_state mock::query_qp_state(qp q) {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  return q->state;
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
