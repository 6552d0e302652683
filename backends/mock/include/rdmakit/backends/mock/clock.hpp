#pragma once
// Simulated time: what is due, running it, pacing with threads (docs/ownership-and-threads.md),
// taking completions, and wall-clock waits.
#include <rdmakit/backends/mock/requester.hpp>
#include <rdmakit/backends/mock/responder.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/thread.hpp>

#include <mutex>

#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

/// Earliest pending simulated time, or 0 when nothing is pending.
inline clock_ns next_due(const fabric_state& f) {
  clock_ns t = 0;
  if (!f.wire_now.empty()) t = f.wire_now.front().when;
  if (!f.wire_later.empty() && (t == 0 || f.wire_later.front().when < t)) t = f.wire_later.front().when;
  for (auto* q : f.timed)
    if (q->deadline && (t == 0 || q->deadline < t)) t = q->deadline;
  return t;
}

inline bool pending(const fabric_state& f) {
  return !f.wire_now.empty() || !f.wire_later.empty() || !f.timed.empty();
}

inline void run_event(fabric_state& f, wire_event& ev) {
  if (ev.is_response)
    on_response(f, ev.to, ev.r);
  else if (ev.m.read_at_delivery ? read_sender_bytes(f, ev.m)  // (never for a message issue() delivers itself)
                                 : !ev.m.check_sender || sender_stayed(f, ev.m))
    deliver(f, ev.m);
}

// Runs the earliest wire event due by now; false when none is due. Nothing runs the
// wire re-entrantly (f.running).
inline bool run_next_event(fabric_state& f) {
  const bool now_due = !f.wire_now.empty() && f.wire_now.front().when <= f.now;
  const bool later_due = !f.wire_later.empty() && f.wire_later.front().when <= f.now;
  if (later_due && (!now_due || f.wire_later.front().before(f.wire_now.front()))) {
    auto later = [](const wire_event& a, const wire_event& b) { return b.before(a); };
    std::pop_heap(f.wire_later.begin(), f.wire_later.end(), later);
    f.current = std::move(f.wire_later.back());  // the heap may grow while it runs
    f.wire_later.pop_back();
    run_event(f, f.current);
    return true;
  }
  if (!now_due) return false;
  // Run in place: the slot stays intact while the run pushes more (slot_ring::push_back).
  wire_event& ev = f.wire_now.front();
  f.wire_now.pop_front();
  run_event(f, ev);
  f.wire_now.release_retired();
  return true;
}

// The QP whose deadline has passed that was made first, or null. (Not by address: a
// second run in one process allocates its QPs elsewhere, and took another order.)
inline qp_obj* due_timer(const fabric_state& f) {
  qp_obj* due = nullptr;
  for (auto* q : f.timed)
    if (q->deadline && q->deadline <= f.now && (!due || q->serial < due->serial)) due = q;
  return due;
}

/// Runs every wire event and timer that is due at the current simulated time.
inline void run_due(fabric_state& f) {
  if (f.running || !pending(f)) return;  // the usual end of a post: nothing on the wire
  f.running = true;
  for (;;) {
    if (run_next_event(f)) continue;
    qp_obj* due = f.timed.empty() ? nullptr : due_timer(f);
    if (!due) break;
    on_deadline(f, due);
  }
  f.running = false;
}

/// Moves the clock to `target`, running everything that falls due on the way at its own
/// time (fabric::advance, and a paced clock catching up with the wall clock).
inline void run_until(fabric_state& f, clock_ns target) {
  for (;;) {
    clock_ns t = next_due(f);
    if (t == 0 || t > target) break;
    f.now = std::max(f.now, t);
    run_due(f);
  }
  f.now = std::max(f.now, target);
  run_due(f);
}

// Simulated time and threads (fabric_config::clock). One thread alone may jump the clock
// to the next event: nobody can observe the difference, and runs stay deterministic. Once
// a second thread uses the fabric, a jump could burn a retry or RNR budget in
// microseconds while the other thread has not had the wall-clock time to act (a peer
// reaching RTR 50 ms late must still be reached, as on a NIC). So in clock_mode::automatic,
// while more than one thread has used the fabric in the last second, simulated time
// follows the wall clock ("paced"); clock_mode::wall paces from the fabric's construction,
// clock_mode::simulated never.
inline constexpr auto paced_window = std::chrono::seconds(1);

/// Starts following the wall clock from `wall`, at the current simulated time.
inline void start_pacing(fabric_state& f, std::chrono::steady_clock::time_point wall) {
  f.paced = true;
  f.wall_base = wall;
  f.sim_base = f.now;
}

/// Paced: the latest simulated time the wall clock allows at `wall`; or no limit once no
/// other thread has used the fabric for paced_window (automatic: one thread again).
inline clock_ns allowed_at(fabric_state& f, std::chrono::steady_clock::time_point wall) {
  if (f.cfg.clock == clock_mode::automatic && wall - f.last_switch > paced_window) {
    f.paced = false;
    return ~clock_ns{0};
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(wall - f.wall_base).count();
  return f.sim_base + static_cast<clock_ns>(std::max<std::int64_t>(elapsed, 0));
}

/// The latest simulated time the wall clock allows (paced), or no limit.
inline clock_ns allowed_now(fabric_state& f) {
  if (!f.paced) return ~clock_ns{0};
  return allowed_at(f, std::chrono::steady_clock::now());
}

/// Paced: brings the clock up to the wall clock (`wall`) before a call does anything, so
/// what the call schedules (a retry or RNR timer, a message's arrival) counts from the
/// present. Without it the clock stayed at the last event run: the wall time that passed
/// with nothing pending (setup, a thread busy elsewhere) was there for the next poll to
/// spend at once, a whole RNR budget after 4 ms of it. Out of line: touch() stays small
/// on the data path. Not while the wire runs (f.running): its events run in order there.
RDMAKIT_NOINLINE inline void catch_up(fabric_state& f, std::chrono::steady_clock::time_point wall) {
  if (f.running) return;
  const clock_ns limit = allowed_at(f, wall);
  if (f.paced && limit > f.now) run_until(f, limit);
}

/// Notes the calling thread; called under the lock by the verbs that open a device, create
/// an object, modify a QP, post, poll, arm or wait, and by fabric::inject, clear_faults,
/// set_port_up and remove_device (a thread counts from its first such call).
/// While the clock jumps and the thread that called last calls again, one comparison: the
/// data path reads no wall clock then. Past it: the wall clock is read, a change of thread
/// noted (automatic: the clock follows the wall clock from there) and, paced, the clock
/// caught up. Always inlined, with catch_up out of line: as a call, or with the slow part
/// out of line, the post path took 2 to 10 more instructions (bench/run_mock_rate.sh).
RDMAKIT_ALWAYS_INLINE void touch(fabric_state& f) {
  const void* id = rdmakit::detail::this_thread_tag();
  if (id == f.jumping_thread) return;
  const auto wall = std::chrono::steady_clock::now();
  if (f.last_thread != nullptr && f.last_thread != id) {
    if (!f.paced && f.cfg.clock == clock_mode::automatic) start_pacing(f, wall);
    f.last_switch = wall;
  }
  f.last_thread = id;
  if (f.paced) catch_up(f, wall);
  f.jumping_thread = f.paced ? nullptr : id;  // paced: every call comes here
}

/// Idle: moves simulated time to the next event and runs it; false when nothing is
/// pending or (paced) the wall clock has not reached it yet.
inline bool jump(fabric_state& f) {
  if (!pending(f)) return false;
  const clock_ns limit = allowed_now(f);
  clock_ns t = next_due(f);
  if (t > limit) {
    if (limit > f.now) {
      f.now = limit;
      run_due(f);
    }
    return false;
  }
  if (t > f.now) f.now = t;
  run_due(f);
  return true;
}

inline int take(fabric_state& f, cq_obj* cq, int n, backends::mock::wc* out) {
  int got = 0;
  while (got < n && !cq->entries.empty()) {
    const cq_entry& e = cq->entries.front();
    out[got++] = e.wc;
    if (e.release_upto) {
      auto it = f.qps.find(e.wc.qp_num);
      if (it != f.qps.end()) release_slots(f, it->second, e.release_upto);
    }
    cq->entries.pop_front();
  }
  cq->taken += static_cast<std::uint64_t>(got);
  return got;
}

/// When a wait of `timeout` ends; negative or huge timeouts wait forever (as on ibverbs).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  constexpr auto forever = std::chrono::hours(24 * 365);
  if (timeout.count() < 0 || timeout > forever) return clock::time_point::max();
  return clock::now() + timeout;
}

/// Waits for a notification; false when the deadline passed first.
inline bool wait_until(fabric_state& f, std::unique_lock<std::mutex>& lk, std::chrono::steady_clock::time_point until) {
  if (until == std::chrono::steady_clock::time_point::max()) {
    f.cv.wait(lk);
    return true;
  }
  // A deadline already passed (a zero timeout) is not waited for: a timed wait on it
  // still costs a system call and the kernel's timer slack, 50 us or more.
  if (std::chrono::steady_clock::now() >= until) return false;
  return f.cv.wait_until(lk, until);
}

/// Waits under `lk` until `ready()` or the wall-clock deadline `until` (false then). A
/// waiter that polls nothing moves simulated time itself, event by event, as a poll
/// finding nothing does, so the timers and the wire its event waits for run.
template <class Ready>
bool wait_for_event(fabric_state& f, std::unique_lock<std::mutex>& lk, std::chrono::steady_clock::time_point until,
                    Ready ready) {
  touch(f);
  for (unsigned jumps = 0;;) {
    run_due(f);
    if (ready()) return true;
    if (jump(f)) {  // simulated time passes while we wait
      // A timer source can be endless (rnr_retry = 7 toward a peer that never posts a
      // receive): the wall-clock timeout still holds, and other threads get the lock.
      if (std::chrono::steady_clock::now() >= until) return ready();
      if (++jumps % 16 == 0) {  // a short sleep, not a yield: std::mutex is not fair
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        lk.lock();
      }
      continue;
    }
    if (write_due_flushes(f)) continue;  // the device writes them while we would sleep
    auto slice = until;
    if (f.paced && pending(f))  // the next event falls due on the wall clock
      slice = std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
    ++f.sleepers;
    const bool notified = wait_until(f, lk, slice);
    --f.sleepers;
    if (!notified && slice == until && !ready()) return false;
  }
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
