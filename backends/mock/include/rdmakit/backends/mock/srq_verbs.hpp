#pragma once
// The shared-receive-queue verbs of backends::mock: creation checked against the
// device limits, posting, the limit (low watermark) and destruction, refused while a
// queue pair uses the SRQ. The responder takes receives from it (responder.hpp).
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/engine.hpp>
#include <rdmakit/detail/owning_ptr.hpp>

#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace backends {

namespace mockd = rdmakit::mock::detail;

RDMAKIT_DECL mock::srq mock::create_srq(pd p, srq_attr& attr) {
  if (!p) mockd::fail("ibv_create_srq", EINVAL, "no protection domain");
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  auto& dev = f.devices[p->ctx->dev];
  const auto& limits = dev.cfg.limits;
  auto bad = [&](const std::string& what) { mockd::fail("ibv_create_srq", EINVAL, what); };
  if (limits.max_srq == 0) mockd::fail("ibv_create_srq", EOPNOTSUPP, "the device has no shared receive queues");
  if (attr.max_wr == 0 || attr.max_wr > limits.max_srq_wr)
    bad(detail::cat("max_wr ", attr.max_wr, " is outside 1..", limits.max_srq_wr, " (the device's max_srq_wr)"));
  if (attr.max_sge == 0 || attr.max_sge > limits.max_srq_sge)
    bad(detail::cat("max_sge ", attr.max_sge, " is outside 1..", limits.max_srq_sge, " (the device's max_srq_sge)"));
  // rxe's ring has a power of two of slots, one kept empty, and takes that many receives;
  // its create reports max_wr as asked, its query the ring (srq.ring_above_max_wr).
  std::uint32_t capacity = attr.max_wr;
  if (f.as_rxe()) {  // (in 64 bits: a test may raise max_srq_wr to 2^32 - 1)
    std::uint64_t slots = 2;
    while (slots < std::uint64_t{attr.max_wr} + 1) slots *= 2;
    capacity = static_cast<std::uint32_t>(slots - 1);
  }
  // A limit is armed as arm_srq_limit arms it: up to what the SRQ takes (rxe: its ring,
  // rxe_srq_chk_attr's index_mask; srq.create_limit_above_max_wr).
  if (attr.limit > capacity)
    bad(detail::cat("limit ", attr.limit, " is above max_wr ", capacity));
  mockd::check_room(dev.count.srq, limits.max_srq, "ibv_create_srq", "shared receive queues", "max_srq", dev);
  auto s = detail::make_unique_owner<mockd::srq_obj>();
  s->pd = p;
  s->attr = attr;  // granted exactly as asked; the limit armed
  s->capacity = capacity;
  f.srqs.insert(s.get());  // the last step that may throw
  ++dev.count.srq;
  ++p->children;
  return s.release();
}

RDMAKIT_DECL int mock::destroy_srq(srq s) noexcept {
  if (!s) return EINVAL;
  auto& f = mockd::fab_of(s);
  std::lock_guard lk(f.mu);
  if (s->qps) return EBUSY;  // as ib_destroy_srq_user: queue pairs still take receives from it
  auto* ctx = s->pd->ctx;
  mockd::drop_async_events(f, s);  // no event may name a freed SRQ
  --s->pd->children;
  --f.devices[ctx->dev].count.srq;
  f.srqs.erase(s);
  delete s;
  return 0;
}

RDMAKIT_DECL int mock::post_srq_recv(srq s, recv_wr* wr, recv_wr** bad_wr) noexcept {
  auto& f = mockd::fab_of(s);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  int err = 0;
  recv_wr* w = wr;
  for (; w; w = w->next) {
    if (w->num_sge < 0 || static_cast<std::uint32_t>(w->num_sge) > s->attr.max_sge || (w->num_sge && !w->sg_list)) {
      err = EINVAL;
      break;
    }
    if (s->wqes.size() >= s->capacity) {
      err = ENOMEM;
      break;
    }
    mockd::recv_wqe r;
    r.wr_id = w->wr_id;
    r.sges.assign(w->sg_list, static_cast<std::size_t>(w->num_sge));
    s->wqes.push_back() = std::move(r);
  }
  if (bad_wr) *bad_wr = err ? w : nullptr;
  mockd::run_due(f);  // an RNR retry may be waiting for this receive
  return err;
}

RDMAKIT_DECL int mock::arm_srq_limit(srq s, std::uint32_t limit) noexcept {
  if (!s) return EINVAL;
  auto& f = mockd::fab_of(s);
  std::lock_guard lk(f.mu);
  if (limit > s->capacity) return EINVAL;
  s->attr.limit = limit;
  return 0;
}

RDMAKIT_DECL srq_attr mock::query_srq(srq s) {
  auto& f = mockd::fab_of(s);
  std::lock_guard lk(f.mu);
  srq_attr a = s->attr;
  a.max_wr = s->capacity;
  return a;
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
