#pragma once
// The wire: scheduled delivery on the simulated clock, fault injection (drop,
// duplicate, reorder, delay), responses and NAKs. The requester and responder are
// declared here and defined in requester.hpp and responder.hpp.
#include <rdmakit/backends/mock/completions.hpp>

#include <algorithm>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

inline void schedule(fabric_state& f, clock_ns when, std::function<void()> fn) {
  f.wire.push(wire_event{when, f.order++, std::move(fn)});
}

inline void deliver(fabric_state& f, const message& m);
inline void on_response(fabric_state& f, std::uint32_t qpn, std::uint64_t seq, std::uint32_t psn, const response& r);
inline void issue(fabric_state& f, qp_obj* q);

inline bool fault_hits(fabric_state& f, fault& ft, std::uint32_t src) {
  if (ft.src_qp_num && ft.src_qp_num != src) return false;
  if (ft.count == 0 && ft.probability <= 0) return false;
  if (ft.probability < 1.0 && uniform_01(f.rng) >= ft.probability) return false;
  return true;
}

/// Puts a message on the wire, applying injected faults.
inline void transmit(fabric_state& f, qp_obj* q, message m) {
  f.packets += m.npkts;
  clock_ns at = f.now + static_cast<clock_ns>(f.cfg.latency.count());
  bool drop = false, dup = false, hold = false;
  for (auto it = f.faults.begin(); it != f.faults.end();) {
    if (!fault_hits(f, *it, q->qpn)) {
      ++it;
      continue;
    }
    switch (it->kind) {
      case fault_kind::drop: drop = true; break;
      case fault_kind::duplicate: dup = true; break;
      case fault_kind::reorder: hold = true; break;
      case fault_kind::delay: at += static_cast<clock_ns>(it->delay.count()); break;
    }
    if (it->count && --it->count == 0)
      it = f.faults.erase(it);
    else
      ++it;
  }
  if (drop) return;
  if (hold) {
    q->held.push_back(std::move(m));
    return;
  }
  fabric_state* fp = &f;
  schedule(f, at, [fp, m] { deliver(*fp, m); });
  if (dup) schedule(f, at, [fp, m] { deliver(*fp, m); });
  // Messages held back by a reorder fault go right after this one.
  for (auto& h : q->held) schedule(f, at, [fp, h] { deliver(*fp, h); });
  q->held.clear();
}

inline void respond(fabric_state& f, const message& m, response r) {
  fabric_state* fp = &f;
  std::uint32_t qpn = m.src_qpn;
  std::uint64_t seq = m.wqe_seq;
  std::uint32_t psn = m.psn;
  schedule(f, f.now + static_cast<clock_ns>(f.cfg.latency.count()),
           [fp, qpn, seq, psn, r = std::move(r)] { on_response(*fp, qpn, seq, psn, r); });
}

inline response nak(wc_status s) {
  response r;
  r.what = response::kind::nak;
  r.status = s;
  return r;
}

inline void responder_error(fabric_state& f, qp_obj* q, async_event_type type) {
  async_event ev;
  ev.type = type;
  ev.qp_num = q->qpn;
  ev.object = q;
  q->pd->ctx->async_q.push_back(ev);
  to_error(f, q);
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
