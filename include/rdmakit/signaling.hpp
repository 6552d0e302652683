#pragma once
/// Signaling policies: `signal_all`, `signal_every<N>`, `signal_manual`.
///
/// Every policy shares one send-queue credit ledger (`detail::sq_credits`) built for
/// the strict slot rule of real HCAs: an unsignaled WR keeps its SQ slot until a later
/// signaled WR's completion is polled. The ledger refuses a post when no slot is free
/// (the queue pair returns `post_status::sq_full`, never the device's ENOMEM) and
/// signals the WR that takes the last free slot, so the SQ can never fill with
/// unsignaled WRs: when it is full, its newest WR is signaled and polling it frees all.
/// A policy may therefore signal a WR you did not ask for; handlers see its completion.
#include <rdmakit/config.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string_view>

RDMAKIT_BEGIN_NAMESPACE

/// Every send WR is signaled.
struct signal_all {
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "signal_all";
  /// Smallest send queue the policy works with.
  static constexpr std::uint32_t min_sq_depth = 1;
  /// Whether the next WR is signaled: `wanted` (send_flags::signaled) and the number of
  /// unsignaled WRs posted since the last signaled one. The ledger adds its own rule
  /// (the WR taking the last free slot is always signaled).
  static constexpr bool signal(bool, std::uint32_t) noexcept { return true; }
};

/// Selective signaling: every N-th send WR is signaled (and any WR posted with
/// `send_flags::signaled`, and the WR that takes the last free SQ slot).
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

/// Send-queue credits under the strict slot rule. Not thread-safe: the thread that
/// posts on a QP also polls its CQ (or synchronizes both).
class sq_credits {
 public:
  sq_credits() = default;
  explicit sq_credits(std::uint32_t depth) : depth_(depth), mask_(ring_size(depth) - 1) {
    ring_ = std::make_unique<std::uint32_t[]>(mask_ + 1);
  }

  std::uint32_t depth() const noexcept { return depth_; }
  /// Slots held by posted WRs that the device has not given back yet.
  std::uint32_t held() const noexcept { return held_; }
  std::uint32_t available() const noexcept { return depth_ - held_; }
  /// Unsignaled WRs posted since the last signaled one.
  std::uint32_t unsignaled_run() const noexcept { return run_; }
  /// Signaled WRs whose completion has not been polled yet.
  std::uint32_t pending_signaled() const noexcept { return pending_; }

  /// A copy of the counters to plan a list of WRs before posting it.
  struct plan {
    std::uint32_t held;
    std::uint32_t run;
    std::uint32_t depth;
    template <signaling S>
    RDMAKIT_ALWAYS_INLINE bool next(bool wanted) noexcept {
      const bool sig = S::signal(wanted, run) || held + 1 >= depth;
      ++held;
      run = sig ? 0 : run + 1;
      return sig;
    }
  };
  plan start() const noexcept { return {held_, run_, depth_}; }

  /// Whether the next WR must be signaled under policy S (`wanted`: the caller asked).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE bool must_signal(bool wanted) const noexcept {
    auto p = start();
    return p.template next<S>(wanted);
  }

  /// Records one posted WR.
  RDMAKIT_ALWAYS_INLINE void commit(bool signaled) noexcept {
    ++held_;
    if (signaled) {
      ring_[tail_++ & mask_] = run_ + 1;
      ++pending_;
      run_ = 0;
    } else {
      ++run_;
    }
  }

  /// A successful send completion was polled: it is the oldest signaled WR (send
  /// completions arrive in SQ order), and it frees its slot and those of the
  /// unsignaled WRs before it.
  RDMAKIT_ALWAYS_INLINE void on_signaled_completion() noexcept {
    if (RDMAKIT_UNLIKELY(pending_ == 0)) return;
    held_ -= ring_[head_++ & mask_];
    --pending_;
  }

  /// Forgets every outstanding WR (the QP was reset or destroyed).
  void clear() noexcept { held_ = run_ = pending_ = head_ = tail_ = 0; }

 private:
  // A power of two at least `depth` (pending signaled WRs never exceed the depth).
  static std::uint32_t ring_size(std::uint32_t depth) noexcept {
    std::uint32_t n = 1;
    while (n < depth) n <<= 1;
    return n;
  }

  std::uint32_t depth_ = 0;
  std::uint32_t mask_ = 0;
  std::uint32_t held_ = 0;
  std::uint32_t run_ = 0;
  std::uint32_t pending_ = 0;
  std::uint32_t head_ = 0;
  std::uint32_t tail_ = 0;
  std::unique_ptr<std::uint32_t[]> ring_;  // slots freed by each pending signaled WR, oldest first
  // head_/tail_ run freely; the ring index is their low bits.
};

}  // namespace detail

RDMAKIT_END_NAMESPACE
