#pragma once
/// Signaling policies: `signal_all`, `signal_every<N>`, `signal_manual`.
///
/// Every policy shares one send-queue credit ledger (`detail::sq_credits`) built for
/// the strict slot rule of real HCAs: an unsignaled WR keeps its SQ slot until a later
/// signaled WR's completion is polled. The ledger refuses a post when no slot is free
/// (the queue pair returns `post_status::sq_full`, never the device's ENOMEM), and the
/// SQ can never fill with unsignaled WRs: `signal_all` and `signal_every<N>` never leave
/// N WRs in a row unsignaled in an SQ of at least N slots, and under any other policy
/// (`signal_manual`, your own) the ledger signals the WR that takes the last free slot.
/// Such a policy may therefore signal a WR you did not ask for; handlers see its completion.
#include <rdmakit/config.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE

/// Every send WR is signaled.
struct signal_all {
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "signal_all";
  /// Smallest send queue the policy works with.
  static constexpr std::uint32_t min_sq_depth = 1;
  /// Whether the next WR is signaled: `wanted` (send_flags::signaled) and the number of
  /// unsignaled WRs posted since the last signaled one.
  static constexpr bool signal(bool, std::uint32_t) noexcept { return true; }
  /// No WR is left unsignaled, so the ledger's last-slot rule can never apply.
  static constexpr bool bounded_run = true;
};

/// Selective signaling: every N-th send WR is signaled (and any WR posted with
/// `send_flags::signaled`).
template <std::uint32_t N>
struct signal_every {
  static_assert(N >= 1, "signal_every<N> needs N >= 1");
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "signal_every";
  /// Every interval-th WR is signaled (N).
  static constexpr std::uint32_t interval = N;
  /// The send queue must hold N WRs: a shorter one would fill before a signaled WR.
  static constexpr std::uint32_t min_sq_depth = N;
  /// Signals when asked to, or when this WR is the N-th of the unsignaled run.
  static constexpr bool signal(bool wanted, std::uint32_t run) noexcept { return wanted || run + 1 >= N; }
  /// At most N - 1 WRs in a row go unsignaled and the SQ holds at least N: a full SQ
  /// always holds a signaled WR, so the ledger's last-slot rule is never needed.
  static constexpr bool bounded_run = true;
};

/// The caller chooses with `send_flags::signaled`; the ledger still signals the WR
/// that takes the last free SQ slot, so the queue cannot wedge.
struct signal_manual {
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "signal_manual";
  /// Smallest send queue the policy works with.
  static constexpr std::uint32_t min_sq_depth = 1;
  /// Signals the WRs posted with send_flags::signaled (the ledger adds the last-slot rule).
  static constexpr bool signal(bool wanted, std::uint32_t) noexcept { return wanted; }
};

/// A signaling policy: one of the three above, or a type with the same facts and a
/// `signal` decision.
template <class S>
concept signaling = requires(bool wanted, std::uint32_t run) {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::min_sq_depth } -> std::convertible_to<std::uint32_t>;
  { S::signal(wanted, run) } noexcept -> std::same_as<bool>;
};

static_assert(signaling<signal_all> && signaling<signal_every<16>> && signaling<signal_manual>);

namespace detail {

/// Whether S promises (`static constexpr bool bounded_run = true`) never to leave
/// min_sq_depth WRs in a row unsignaled: then the last-slot rule is redundant and the
/// ledger leaves it out of the data path.
template <class S>
inline constexpr bool bounded_run = [] {
  if constexpr (requires { S::bounded_run; })
    return static_cast<bool>(S::bounded_run);
  else
    return false;
}();

/// Whether S signals every WR (signal_all, signal_every<1>): then each completion frees
/// exactly one slot and the ledger needs no record of runs.
template <class S>
inline constexpr bool signals_every_wr = [] {
  if constexpr (std::is_same_v<S, signal_all>)
    return true;
  else if constexpr (requires { S::interval; })
    return S::interval == 1;
  else
    return false;
}();

/// Whether the ledger can plan a list whose WRs asked for no signal without a test per
/// WR: the bounded_run policies, and signal_manual (only the last free slot).
template <class S>
inline constexpr bool plans_unasked = bounded_run<S> || std::is_same_v<S, signal_manual>;

/// Send-queue credits under the strict slot rule. Not thread-safe: the thread that
/// posts on a QP also polls its CQ (or synchronizes both).
class sq_credits {
 public:
  sq_credits() = default;
  /// The ledger of a queue pair with signaling policy S and `depth` SQ slots. Under a
  /// policy that signals every WR each completion frees one slot: no ring of runs.
  template <signaling S>
  static sq_credits for_policy(std::uint32_t depth) {
    return sq_credits(depth, signals_every_wr<S>);
  }

  std::uint32_t depth() const noexcept { return depth_; }
  /// Slots held by posted WRs that the device has not given back yet.
  std::uint32_t held() const noexcept { return held_; }
  std::uint32_t available() const noexcept { return depth_ - held_; }
  /// True when no WR may be posted: the SQ is full, or the ledger was closed.
  RDMAKIT_ALWAYS_INLINE bool blocked() const noexcept { return held_ >= cap_; }
  /// True when at least n WRs may be posted (n >= 1).
  RDMAKIT_ALWAYS_INLINE bool admits(std::uint32_t n) const noexcept { return held_ + n <= cap_; }
  /// Refuses every post from now on (the QP went to ERR; reset() makes a new ledger).
  void close() noexcept { cap_ = 0; }
  /// Unsignaled WRs posted since the last signaled one.
  std::uint32_t unsignaled_run() const noexcept { return run_; }
  /// Signaled WRs whose completion has not been polled yet.
  std::uint32_t pending_signaled() const noexcept { return one_per_completion_ ? held_ : pending_; }

  /// A copy of the counters to plan a list of WRs before posting it; apply() commits
  /// it. Signaled WRs are recorded in the ring past its tail, which only apply() moves:
  /// the ring holds `depth` entries and a plan never takes more slots than are free.
  struct plan {
    std::uint32_t held;
    std::uint32_t run;
    std::uint32_t depth;
    std::uint32_t tail;
    std::uint32_t pending;
    std::uint32_t mask;
    std::uint32_t* ring;
    template <signaling S>
    RDMAKIT_ALWAYS_INLINE bool next(bool wanted) noexcept {
      if constexpr (signals_every_wr<S>) {
        ++held;
        return true;
      } else {
        const bool sig = decide<S>(wanted, run, held + 1, depth);
        record(sig);
        return sig;
      }
    }
    // One more WR, signaled or not (a policy that does not signal every WR).
    RDMAKIT_ALWAYS_INLINE void record(bool sig) noexcept {
      ++held;
      if (sig) {
        push(run + 1);
        run = 0;
      } else {
        ++run;
      }
    }
    // A signaled WR whose completion will free `slots` slots.
    RDMAKIT_ALWAYS_INLINE void push(std::uint32_t slots) noexcept {
      ring[tail++ & mask] = slots;
      ++pending;
    }
  };
  plan start() const noexcept { return {held_, run_, depth_, tail_, pending_, mask_, ring_.get()}; }

  /// Plans n WRs none of which asked to be signaled (see plans_unasked<S>):
  /// on_signaled(i) for each WR i that is signaled, without a test per WR.
  template <signaling S, class F>
  RDMAKIT_ALWAYS_INLINE static void plan_unasked(plan& p, std::uint32_t n, F&& on_signaled) noexcept {
    static_assert(plans_unasked<S>);
    if constexpr (std::is_same_v<S, signal_manual>) {
      const std::uint32_t i = p.depth - 1 - p.held;  // the WR taking the last free slot
      if (i < n) {
        on_signaled(i);
        p.push(p.run + i + 1);
        p.run = n - 1 - i;
      } else {
        p.run += n;
      }
      p.held += n;
    } else if constexpr (signals_every_wr<S>) {
      for (std::uint32_t i = 0; i < n; ++i) on_signaled(i);
      p.held += n;
    } else if constexpr (requires { S::interval; }) {
      constexpr std::uint32_t N = S::interval;
      std::uint32_t i = N - 1 - p.run;  // the run is below N: the first signaled WR
      for (; i < n; i += N) {
        on_signaled(i);
        p.push(N);  // it and the N - 1 unsignaled WRs before it
      }
      p.run = N - 1 - (i - n);  // WRs since the last signaled one
      p.held += n;
    } else {
      for (std::uint32_t i = 0; i < n; ++i)
        if (p.template next<S>(false)) on_signaled(i);
    }
  }

  /// Records the WRs a plan (from start(), with the same S) decided.
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE void apply(const plan& p) noexcept {
    held_ = p.held;
    if constexpr (!signals_every_wr<S>) {
      run_ = p.run;
      tail_ = p.tail;
      pending_ = p.pending;
    }
  }

  /// Whether the next WR must be signaled under policy S (`wanted`: the caller asked).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE bool must_signal(bool wanted) const noexcept {
    if constexpr (signals_every_wr<S>)
      return true;
    else
      return decide<S>(wanted, run_, held_ + 1, depth_);
  }

  /// Records one posted WR, signaled or not, under policy S.
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE void commit(bool signaled) noexcept {
    ++held_;  // for signals_every_wr<S>, for_policy<S> made the ledger one-per-completion
    if constexpr (!signals_every_wr<S>) {
      // The plan's record() on the ledger's own fields: built through a plan, this path
      // cost 7 more instructions per post (four stores back instead of two).
      if (signaled) {
        ring_[tail_++ & mask_] = run_ + 1;
        ++pending_;
        run_ = 0;
      } else {
        ++run_;
      }
    }
  }

  /// Takes back the WR commit<S>(signaled) recorded last: the device refused it. The
  /// post path records a WR before the device call (counters loaded before it stay in
  /// registers; read after it, they would be loaded again) and undoes it on refusal.
  template <signaling S>
  RDMAKIT_NOINLINE void uncommit() noexcept {
    --held_;
    if constexpr (!signals_every_wr<S>) {
      if (run_ == 0) {  // commit() zeroes the run after a signaled WR only
        --pending_;
        run_ = ring_[--tail_ & mask_] - 1;
      } else {
        --run_;
      }
    }
  }

  /// k successful send completions were polled at once (see on_signaled_completion).
  RDMAKIT_ALWAYS_INLINE void on_signaled_completions(std::uint32_t k) noexcept {
    if (one_per_completion_) {
      held_ -= k < held_ ? k : held_;  // spurious completions change nothing
      return;
    }
    for (; k != 0; --k) on_signaled_completion();
  }

  /// A successful send completion was polled: it is the oldest signaled WR (send
  /// completions arrive in SQ order), and it frees its slot and those of the
  /// unsignaled WRs before it.
  RDMAKIT_ALWAYS_INLINE void on_signaled_completion() noexcept {
    if (one_per_completion_) {
      held_ -= held_ != 0;  // a spurious completion changes nothing
      return;
    }
    if (RDMAKIT_UNLIKELY(pending_ == 0)) return;
    held_ -= ring_[head_++ & mask_];
    --pending_;
  }


 private:
  // The policy's decision, and the last-slot rule where the policy needs it (`held`
  // counts the WR being decided).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE static bool decide(bool wanted, std::uint32_t run, std::uint32_t held,
                                           std::uint32_t depth) noexcept {
    if constexpr (bounded_run<S>)
      return S::signal(wanted, run);
    else
      return S::signal(wanted, run) || held >= depth;
  }

  sq_credits(std::uint32_t depth, bool one_per_completion)
      : depth_(depth), cap_(depth), mask_(ring_size(depth) - 1), one_per_completion_(one_per_completion) {
    if (!one_per_completion) ring_ = std::make_unique<std::uint32_t[]>(mask_ + 1);
  }

  // A power of two at least `depth` (pending signaled WRs never exceed the depth).
  static std::uint32_t ring_size(std::uint32_t depth) noexcept {
    std::uint32_t n = 1;
    while (n < depth) n <<= 1;
    return n;
  }

  std::uint32_t depth_ = 0;
  std::uint32_t cap_ = 0;  // depth_, or 0 once closed: one compare refuses both
  std::uint32_t mask_ = 0;
  std::uint32_t held_ = 0;
  std::uint32_t run_ = 0;
  std::uint32_t pending_ = 0;
  std::uint32_t head_ = 0;
  std::uint32_t tail_ = 0;
  bool one_per_completion_ = false;
  std::unique_ptr<std::uint32_t[]> ring_;  // slots freed by each pending signaled WR, oldest first
  // head_/tail_ run freely; the ring index is their low bits.
};

}  // namespace detail

RDMAKIT_END_NAMESPACE
