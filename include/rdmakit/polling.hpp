#pragma once
/// Polling policies: how `completion_queue::wait` waits for completions.
///  - `busy_poll<Batch>`: spin on poll_cq (lowest latency, one core busy).
///  - `event_driven<Batch, AckBatch>`: block on the completion channel. The only wait
///    is drain → arm → re-poll → block, so a completion that lands between the last
///    poll and the arm is found by the re-poll instead of being stranded; events are
///    acknowledged in batches of AckBatch and all of them before the CQ is destroyed.
///  - `adaptive<Spin, Batch, AckBatch>`: poll Spin times, then wait like event_driven.
///  - `solicited_only<P>`: P (event_driven or adaptive) woken only by solicited
///    completions (send_flags::solicited) and failed ones.
/// The wait algorithms work on any `Ops` with poll()/arm()/wait_event(timeout), so
/// they are tested on their own as well as through the completion queue.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/chrono.hpp>

#include <cerrno>
#include <concepts>
#include <cstdint>
#include <string_view>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
// Ops: int poll() (count or -errno), int arm() (errno), int wait_event(ms) (0: an event
// arrived, ETIMEDOUT/EAGAIN: none in time, else errno).
// Arm, re-poll, sleep until `deadline`; again after each event. The time left is
// rounded up to whole milliseconds (rounded down, a wait of 1 ms slept none and one of
// 5 ms 4), and a sleep that ends before the deadline sleeps again.
template <class Ops>
int event_wait_until(Ops& ops, std::chrono::steady_clock::time_point deadline) noexcept(noexcept(ops.poll())) {
  for (;;) {
    if (int e = ops.arm()) return -e;
    // Re-poll: catches a completion that landed between the last poll and the arm.
    if (int n = ops.poll(); n != 0) return n;
    const auto now = std::chrono::steady_clock::now();
    const auto left = now < deadline ? std::chrono::ceil<std::chrono::milliseconds>(deadline - now)
                                     : std::chrono::milliseconds{0};
    int e = ops.wait_event(left);
    if (e == ETIMEDOUT || e == EAGAIN) {
      // A last look; given up only once the deadline has passed.
      if (int n = ops.poll(); n != 0 || std::chrono::steady_clock::now() >= deadline) return n;
      continue;
    }
    if (e != 0) return -e;
    if (int n = ops.poll(); n != 0) return n;  // the event's completions (or a spurious one)
  }
}

template <class Ops>
int event_wait(Ops& ops, std::chrono::milliseconds timeout) noexcept(noexcept(ops.poll())) {
  // Drain: return whatever is there before sleeping (no clock read on this path).
  if (int n = ops.poll(); n != 0) return n;
  return event_wait_until(ops, detail::deadline_after(timeout));
}
}  // namespace detail

/// Spin on the CQ; `wait` returns as soon as a poll finds completions.
template <int Batch = 16>
struct busy_poll {
  static_assert(Batch >= 1, "busy_poll<Batch> needs Batch >= 1");
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "busy_poll";
  /// Completions one poll asks the CQ for (Batch).
  static constexpr int batch = Batch;
  /// No completion channel: busy_poll never sleeps.
  static constexpr bool needs_channel = false;
  /// CQ events acknowledged together; busy_poll gets none.
  static constexpr unsigned ack_batch = 1;
  /// wait() starts with a poll and returns what it finds (completion_queue inlines that step).
  static constexpr bool polls_first = true;

  /// Polls until completions arrive or `timeout` passes (checking the clock every 64 empty polls).
  /// Returns the count, 0 on a timeout, or -errno.
  template <class Ops>
  static int wait(Ops& ops, std::chrono::milliseconds timeout) noexcept(noexcept(ops.poll())) {
    if (int n = ops.poll(); RDMAKIT_LIKELY(n != 0)) return n;  // no clock read on the fast path
    const auto deadline = detail::deadline_after(timeout);
    for (unsigned i = 1;; ++i) {
      int n = ops.poll();
      if (n != 0) return n;
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return 0;
    }
  }
};

/// Sleep on the completion channel (drain → arm → re-poll → block; batched acks).
template <int Batch = 16, unsigned AckBatch = 16>
struct event_driven {
  static_assert(Batch >= 1 && AckBatch >= 1, "event_driven needs Batch >= 1 and AckBatch >= 1");
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "event_driven";
  /// Completions one poll asks the CQ for (Batch).
  static constexpr int batch = Batch;
  /// The CQ gets a completion channel to sleep on.
  static constexpr bool needs_channel = true;
  /// CQ events acknowledged with one call (AckBatch): acks take a lock in rdma-core.
  static constexpr unsigned ack_batch = AckBatch;
  /// wait() starts with a poll and returns what it finds (completion_queue inlines that step).
  static constexpr bool polls_first = true;

  /// Drains the CQ, then arms it and sleeps on the channel until completions or `timeout`.
  /// Returns the count, 0 on a timeout, or -errno.
  template <class Ops>
  static int wait(Ops& ops, std::chrono::milliseconds timeout) noexcept(noexcept(ops.poll())) {
    return detail::event_wait(ops, timeout);
  }
};

/// Poll up to Spin times, then sleep on the channel like event_driven.
template <unsigned Spin = 1024, int Batch = 16, unsigned AckBatch = 16>
struct adaptive {
  static_assert(Batch >= 1 && AckBatch >= 1, "adaptive needs Batch >= 1 and AckBatch >= 1");
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "adaptive";
  /// Empty polls before sleeping (Spin).
  static constexpr unsigned spin = Spin;
  /// Completions one poll asks the CQ for (Batch).
  static constexpr int batch = Batch;
  /// The CQ gets a completion channel to sleep on once spinning found nothing.
  static constexpr bool needs_channel = true;
  /// CQ events acknowledged with one call (AckBatch).
  static constexpr unsigned ack_batch = AckBatch;
  /// wait() starts with a poll and returns what it finds (completion_queue inlines that step).
  static constexpr bool polls_first = true;

  /// Polls up to Spin times, then waits as event_driven does, within `timeout` (the
  /// clock read every 64 empty polls, as busy_poll does: a long spin is cut short too).
  /// Returns the count, 0 on a timeout, or -errno.
  template <class Ops>
  static int wait(Ops& ops, std::chrono::milliseconds timeout) noexcept(noexcept(ops.poll())) {
    if (int n = ops.poll(); n != 0) return n;  // no clock read on the fast path
    const auto deadline = detail::deadline_after(timeout);
    for (unsigned i = 1; i < Spin; ++i) {
      if (int n = ops.poll(); n != 0) return n;
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return 0;
    }
    return detail::event_wait_until(ops, deadline);
  }
};

/// A sleeping policy P (event_driven, adaptive, or your own with a channel) whose waits
/// wake only for a solicited completion (a SEND or SEND with immediate posted with
/// send_flags::solicited, as `ib_send_lat -e` posts them) or a failed one: the CQ is
/// armed solicited-only (`ibv_req_notify_cq(cq, 1)`). Other completions stay in the CQ
/// until such a one wakes the thread, a poll before the sleep finds them, or the
/// timeout's last poll does. A server that should wake for requests and not for the
/// completions of its own sends uses it. (rxe 6.1 wakes for no failed send, nor for a
/// failed receive of an unsolicited SEND: there only the timeout ends that sleep.)
template <class P>
struct solicited_only : P {
  static_assert(P::needs_channel, "solicited_only<P>: P must sleep on a completion channel (event_driven or "
                                  "adaptive); busy_poll never sleeps, so it has nothing to arm");
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "solicited_only";
  /// The CQ is armed for solicited completions only.
  static constexpr bool solicited = true;
};

namespace detail {
/// Whether P arms its CQ for solicited completions only (`static constexpr bool
/// solicited = true`, as solicited_only<P> has).
template <class P>
inline constexpr bool arms_solicited = [] {
  if constexpr (requires { P::solicited; })
    return static_cast<bool>(P::solicited);
  else
    return false;
}();

/// What completion_queue hands a polling policy's wait: poll() (count or -errno), arm()
/// (errno), wait_event(timeout) (0, ETIMEDOUT/EAGAIN, or errno).
struct wait_ops_archetype {
  int poll() noexcept;
  int arm() noexcept;
  int wait_event(std::chrono::milliseconds) noexcept;
};
}  // namespace detail

/// A polling policy: one of the three above, or a type with the same facts and a
/// `wait` that completion_queue can call.
template <class P>
concept polling = requires(detail::wait_ops_archetype& ops, std::chrono::milliseconds timeout) {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::batch } -> std::convertible_to<int>;
  { P::needs_channel } -> std::convertible_to<bool>;
  { P::ack_batch } -> std::convertible_to<unsigned>;
  { P::wait(ops, timeout) } noexcept -> std::same_as<int>;
  requires P::batch >= 1 && P::ack_batch >= 1;
};

namespace detail {
/// Whether P's wait() begins with one poll and returns at once when it finds
/// completions (`static constexpr bool polls_first = true`): then completion_queue::wait
/// inlines that poll and calls P::wait only when the CQ was empty.
template <class P>
inline constexpr bool polls_first = [] {
  if constexpr (requires { P::polls_first; })
    return static_cast<bool>(P::polls_first);
  else
    return false;
}();
}  // namespace detail

static_assert(polling<busy_poll<>>);
static_assert(polling<event_driven<>>);
static_assert(polling<adaptive<>>);
static_assert(polling<solicited_only<event_driven<>>>);

RDMAKIT_END_NAMESPACE
