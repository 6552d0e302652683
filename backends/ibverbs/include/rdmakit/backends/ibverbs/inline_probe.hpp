#pragma once
// The largest inline send per QP type, which ibv_device_attr does not report, found by
// creating throwaway QPs. Probed when asked (device open, a refused create_qp) and never
// cached: the backend keeps no process-wide state keyed by context.
#include <rdmakit/config.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

/// Largest max_inline_data that ibv_create_qp accepts for `type` on this device
/// (and grants at least as much as asked), found by creating QPs: descending powers
/// of two, then a binary search between the last success and the first failure.
/// 0 when the device has no inline support or a probe QP cannot be created at all.
inline std::uint32_t probe_max_inline(ibv_context* ctx, ibv_qp_type type) {
  const int saved_errno = errno;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) return 0;
  ibv_cq* cq = ibv_create_cq(ctx, 2, nullptr, nullptr, 0);
  if (!cq) {
    ibv_dealloc_pd(pd);
    return 0;
  }
  auto accepts = [&](std::uint32_t inline_bytes) {
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = type;
    ia.cap.max_send_wr = 1;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = inline_bytes;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    if (!qp) return false;
    const bool granted = ia.cap.max_inline_data >= inline_bytes;
    ibv_destroy_qp(qp);
    return granted;
  };
  std::uint32_t ok = 0;       // largest value known to work
  std::uint32_t bad = 65536;  // smallest value known (or assumed) to fail
  for (std::uint32_t p = 32768; p >= 16; p /= 2) {
    if (accepts(p)) {
      ok = p;
      break;
    }
    bad = p;
  }
  while (bad - ok > 1) {
    const std::uint32_t mid = ok + (bad - ok) / 2;
    (accepts(mid) ? ok : bad) = mid;
  }
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  errno = saved_errno;
  return ok;
}

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
