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
  static constexpr std::string_view name = "signal_all";
  /// Longest run of WRs per signaled one (1: each WR signals itself).
  static constexpr std::uint32_t max_run = 1;
  /// Smallest send queue the policy works with.
  static constexpr std::uint32_t min_sq_depth = 1;
};

/// Selective signaling: every N-th send WR is signaled (and any WR posted with
/// `send_flags::signaled`, and the WR that takes the last free SQ slot).
template <std::uint32_t N>
struct signal_every {
  static_assert(N >= 1, "signal_every<N> needs N >= 1");
  static constexpr std::string_view name = "signal_every";
  static constexpr std::uint32_t max_run = N;
  static constexpr std::uint32_t min_sq_depth = N;
};

/// The caller chooses with `send_flags::signaled`; the ledger still signals the WR
/// that takes the last free SQ slot, so the queue cannot wedge.
struct signal_manual {
  static constexpr std::string_view name = "signal_manual";
  static constexpr std::uint32_t max_run = 0;  ///< 0: bounded only by the SQ depth
  static constexpr std::uint32_t min_sq_depth = 1;
};

/// A signaling policy: one of the three above, or a type with the same facts.
template <class S>
concept signaling = requires {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::max_run } -> std::convertible_to<std::uint32_t>;
  { S::min_sq_depth } -> std::convertible_to<std::uint32_t>;
};

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
      bool sig;
      if constexpr (S::max_run == 1)
        sig = true;
      else if constexpr (S::max_run == 0)
        sig = wanted || held + 1 >= depth;
      else
        sig = wanted || run + 1 >= S::max_run || held + 1 >= depth;
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
