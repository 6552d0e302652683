#pragma once
// Memory windows in the engine: BIND_MW and LOCAL_INV as they reach the head of the
// send queue, and the invalidation a SEND_WITH_INV asks of its responder
// (docs/semantics.md#memory-windows; the IBA rules rxe 6.1 also follows).
#include <rdmakit/backends/mock/rules.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// Binds `w` to region `m` through `q` (type 2; null: none), or unbinds it (both null),
// keeping the counts by which dereg_mr and destroy_qp find a region's or QP's windows
// without walking every window.
inline void attach_window(mw_obj* w, mr_obj* m, qp_obj* q) noexcept {
  if (w->mr) --w->mr->windows;
  if (w->qp) --w->qp->windows;
  w->mr = m;
  w->qp = q;
  if (m) ++m->windows;
  if (q) ++q->windows;
}

// A BIND_MW WQE: MW_BIND_ERR unless it names the window by its rkey now and the window
// may be bound to that part of the region with those rights. A zero length unbinds
// (type 1 only).
inline wc_status execute_bind(fabric_state& f, qp_obj* q, const send_wqe& e) {
  auto it = f.mws.find(e.mw_index);
  if (it == f.mws.end()) return wc_status::mw_bind_err;
  mw_obj* w = it->second;
  // The window as the poster named it (ibv_mw::rkey) is not the window now: a bind
  // before it failed, or its rkey was never updated after a type 2 bind (rxe: EINVAL).
  if (e.mw_named_rkey != w->rkey) return wc_status::mw_bind_err;
  mr_obj* m = nullptr;
  if (e.mw_length) {
    m = find_mr(f, f.by_lkey, nullptr, e.mw_lkey);
    if (!m) return wc_status::mw_bind_err;
  }
  if (w->type == mw_type::type2 && (w->length != 0 || w->pd != q->pd || !m)) return wc_status::mw_bind_err;
  if (m) {
    if (m->pd != w->pd || !has_all(m->flags, access::mw_bind)) return wc_status::mw_bind_err;
    if (has_any(e.mw_rights, access::remote_write | access::remote_atomic) && !has_all(m->flags, access::local_write))
      return wc_status::mw_bind_err;
    if (e.remote_addr < m->addr || e.remote_addr + e.mw_length > m->addr + m->length ||
        e.remote_addr + e.mw_length < e.remote_addr)
      return wc_status::mw_bind_err;
  }
  w->rkey = (w->rkey & ~0xFFu) | (e.mw_rkey & 0xFFu);
  attach_window(w, m, w->type == mw_type::type2 ? q : nullptr);
  w->addr = m ? e.remote_addr : 0;
  w->length = m ? e.mw_length : 0;
  w->rights = m ? e.mw_rights : access::none;
  return wc_status::success;
}

// Invalidates the type 2 window `rkey` names for QP `q`: a window of its PD, or with
// `any_pd` of any PD of its device, as rxe's SEND_WITH_INV looks the rkey up in the
// receiving device's pool (deviations.hpp mw.send_inv_other_pd; never another device's);
// false if it cannot (an unknown or stale key, a region's key, a type 1 window, another
// PD or device).
inline bool invalidate_window(fabric_state& f, const qp_obj* q, bool any_pd, std::uint32_t rkey) {
  if (!is_mw_key(rkey)) return false;
  mw_obj* w = find_mw(f, rkey);
  if (!w || w->type != mw_type::type2) return false;
  if (any_pd ? w->pd->ctx->dev != q->pd->ctx->dev : w->pd != q->pd) return false;
  attach_window(w, nullptr, nullptr);
  w->addr = w->length = 0;
  w->rights = access::none;
  return true;
}

// A local WQE (BIND_MW, LOCAL_INV) run when it reaches the head of the send queue.
inline wc_status execute_local(fabric_state& f, qp_obj* q, const send_wqe& e) {
  if (e.op == opcode::bind_mw) return execute_bind(f, q, e);
  // rxe takes LOCAL_INV on RC only (its opcode table), where the IBA has it on UC too
  // (deviations.hpp, mw.local_inv_on_uc).
  if (f.as_rxe() && q->type == qp_type::uc) return wc_status::loc_qp_op_err;
  return invalidate_window(f, q, false, e.imm) ? wc_status::success : wc_status::loc_qp_op_err;
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
