#pragma once
// The wire: scheduled delivery on the simulated clock, fault injection (drop,
// duplicate, reorder, delay), responses and NAKs. The requester and responder are
// declared here and defined in requester.hpp and responder.hpp.
#include <rdmakit/backends/mock/completions.hpp>
#include <rdmakit/backends/mock/windows.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>

#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// A new event at `when` (the caller fills its message or response): into wire_now when
// it is due now, which keeps that queue sorted by (when, order), else into the heap.
// An event due later wakes the threads asleep on the fabric (wake_sleepers); one due now
// runs before the verb that made it returns (run_due).
inline wire_event& schedule(fabric_state& f, clock_ns when, bool is_response) {
  const bool now = when == f.now && (f.wire_now.empty() || f.wire_now.back().when <= when);
  wire_event* ev;
  if (now) {
    ev = &f.wire_now.push_back();
  } else {
    ev = &f.wire_later.emplace_back();
    wake_sleepers(f);
  }
  ev->when = when;
  ev->order = f.order++;
  ev->is_response = is_response;
  return *ev;
}
// Called once the event made by schedule() is filled in.
inline void scheduled(fabric_state& f, const wire_event& ev) {
  if (!f.wire_later.empty() && &ev == &f.wire_later.back())
    std::push_heap(f.wire_later.begin(), f.wire_later.end(), [](const wire_event& a, const wire_event& b) {
      return b.before(a);
    });
}

// A message onto the wire at `at`: `m` is swapped in (the event's old buffers come back
// to the caller for reuse), or copied when `keep` (it is sent again).
inline void put_on_wire(fabric_state& f, clock_ns at, message& m, bool keep) {
  wire_event& ev = schedule(f, at, false);
  if (keep)
    ev.m = m;
  else
    std::swap(ev.m, m);
  scheduled(f, ev);
}

// The QP `qpn`, through the sender's hint while no QP was destroyed since.
inline qp_obj* find_qp(fabric_state& f, std::uint32_t qpn, qp_obj* hint, std::uint64_t epoch) {
  if (hint && epoch == f.qp_epoch) return hint;
  auto it = f.qps.find(qpn);
  return it == f.qps.end() ? nullptr : it->second;
}

// The QP that sent a request, for its answer or its bytes: null once it is gone, though
// a new QP took its number (reuse_qp_numbers; the new one may even be at the same WQE
// and PSN).
inline qp_obj* find_sender(fabric_state& f, std::uint32_t qpn, qp_obj* hint, std::uint64_t epoch,
                           std::uint64_t serial) {
  qp_obj* q = find_qp(f, qpn, hint, epoch);
  return q && q->serial == serial ? q : nullptr;
}

inline void deliver(fabric_state& f, const message& m);
inline void on_response(fabric_state& f, const reply_to& to, const response& r);
inline void issue(fabric_state& f, qp_obj* q);

// Whether fault `ft` hits a message of `npkts` packets from QP `src`. A drop's
// probability is per packet, as on a lossy link: a message is lost when any of its
// packets is (1 - (1-p)^npkts). The other kinds are drawn once per message.
inline bool fault_hits(fabric_state& f, fault& ft, std::uint32_t src, std::uint32_t npkts) {
  if (ft.src_qp_num && ft.src_qp_num != src) return false;
  if (ft.count == 0 && ft.probability <= 0) return false;
  if (ft.probability >= 1.0) return true;
  const std::uint32_t draws = ft.kind == fault_kind::drop && npkts > 1 ? npkts : 1;
  for (std::uint32_t i = 0; i < draws; ++i)
    if (uniform_01(f.rng) < ft.probability) return true;
  return false;
}

// A message's arrival `at` pushed back by a delay fault. Each is a year at most
// (check_fault); all those that hit one message are held to a year past its latency too,
// so the clock never nears its end (stacked, a few hundred wrapped it). Off the path of
// messages no delay fault hits.
inline clock_ns delayed(const fabric_state& f, clock_ns at, std::chrono::nanoseconds delay) noexcept {
  constexpr auto year = static_cast<clock_ns>(std::chrono::nanoseconds(std::chrono::hours(24 * 365)).count());
  const clock_ns latest = f.now + static_cast<clock_ns>(f.cfg.latency.count()) + year;
  return std::min(at + static_cast<clock_ns>(delay.count()), latest);
}

// A UC or UD message whose bytes were to be read at its arrival (read_sender_bytes), and
// that a fault hits (lost, held back, duplicated, delayed): its WR was sent, and completes
// now (or behind the WRs ahead of it), before the fault's network decides when it
// arrives; a message that still goes takes its bytes now (one arriving after the
// completion gave the buffer back would read the program's next data).
inline void sent_at_post(qp_obj* q, message& m, bool goes) {
  m.read_at_delivery = false;
  m.check_sender = true;  // as a message read at arrival: none lands once its QP left RTS
  m.sender_left = q->times_left;
  send_wqe* w = wqe_at(q, m.wqe_seq);
  if (!w) return;  // (never: transmit's caller, issue(), holds it, its SGEs just checked)
  if (goes) gather_into(w->sges, m.payload);
  w->state = send_wqe::phase::done;
}

/// Puts a message on the wire, applying injected faults. `m` may be left with any
/// content (its buffer is reused by the next message).
inline void transmit(fabric_state& f, qp_obj* q, message& m) {
  f.packets += m.npkts;
  const bool completes_on_arrival = m.read_at_delivery && m.type != qp_type::rc;
  if (RDMAKIT_UNLIKELY(m.length > q->lost_above)) {  // its packets exceed a link's MTU
    if (completes_on_arrival) sent_at_post(q, m, false);
    return;
  }
  clock_ns at = f.now + static_cast<clock_ns>(f.cfg.latency.count());
  bool drop = false, dup = false, hold = false, late = false;
  for (auto it = f.faults.begin(); it != f.faults.end();) {
    if (!fault_hits(f, *it, q->qpn, m.npkts)) {
      ++it;
      continue;
    }
    switch (it->kind) {
      case fault_kind::drop: drop = true; break;
      case fault_kind::duplicate: dup = true; break;
      case fault_kind::reorder: hold = true; break;
      case fault_kind::delay:
        at = delayed(f, at, it->delay);
        late = true;
        break;
    }
    if (it->count && --it->count == 0)
      it = f.faults.erase(it);
    else
      ++it;
  }
  if (completes_on_arrival && (drop || dup || hold || late)) sent_at_post(q, m, !drop);
  if (drop) return;
  // A message that finds one held goes first, as the one it swaps with: held behind a
  // held one, with every message hit (count 0, probability 1), none would ever arrive.
  if (hold && q->held.empty()) {
    q->held.push_back(m);
    return;
  }
  put_on_wire(f, at, m, dup);
  if (dup) put_on_wire(f, at, m, false);
  // Messages held back by a reorder fault go right after this one.
  for (auto& h : q->held) put_on_wire(f, at, h, false);
  q->held.clear();
}

// The wire event of a response to m, addressed: the caller sets its `r` and calls scheduled.
inline wire_event& response_event(fabric_state& f, const message& m) {
  wire_event& ev = schedule(f, f.now + static_cast<clock_ns>(f.cfg.latency.count()), true);
  ev.to = reply_to{m.src_qpn, m.wqe_seq, m.psn, m.src_hint, m.epoch, m.src_serial};
  return ev;
}

inline void respond(fabric_state& f, const message& m, response r) {
  wire_event& ev = response_event(f, m);
  ev.r = std::move(r);
  scheduled(f, ev);
}

/// The ACK of a WRITE or a SEND, set in place: no response built and destroyed per
/// message (GCC does not always inline the destruction of its empty vector).
inline void acknowledge(fabric_state& f, const message& m) {
  wire_event& ev = response_event(f, m);
  ev.r.what = response::kind::ack;
  ev.r.status = wc_status::success;
  ev.r.rnr_timer = 0;
  ev.r.data.clear();
  scheduled(f, ev);
}

inline response nak(wc_status s) {
  response r;
  r.what = response::kind::nak;
  r.status = s;
  return r;
}

/// The responder's QP goes to ERR for what a request did; the IB spec's affiliated event
/// says why (rxe, kernel 6.1, raises none).
inline void responder_error(fabric_state& f, qp_obj* q, async_event_type type) {
  if (!f.as_rxe()) {
    async_event ev;
    ev.type = type;
    ev.qp_num = q->qpn;
    ev.object = q;
    raise_async(f, q->pd->ctx, ev);
  }
  to_error(f, q);
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
