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
#include <rdmakit/detail/owning_ptr.hpp>

#include <concepts>
#include <cstdint>
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

/// Selective signaling: every N-th send WR is signaled, by its position on the queue
/// pair (the N-th, the 2N-th, ...), and any WR posted with `send_flags::signaled`.
template <std::uint32_t N>
struct signal_every {
  static_assert(N >= 1, "signal_every<N> needs N >= 1");
  /// The policy's name, as benchmark reports print it.
  static constexpr std::string_view name = "signal_every";
  /// Every interval-th WR is signaled (N).
  static constexpr std::uint32_t interval = N;
  /// The send queue must hold N WRs: a shorter one would fill before a signaled WR.
  static constexpr std::uint32_t min_sq_depth = N;
  /// Signals when asked to, or when the WR's position (1 for the queue pair's first
  /// WR) is a multiple of N. By position rather than by the run since the last signal:
  /// for a power of two it is one bit test, and a run of WRs asked signaled does not
  /// move the policy's own signals (a reused post list finds them where they were).
  static constexpr bool signal_at(bool wanted, std::uint64_t position) noexcept {
    // Hinted: a WR in N is the policy's, asked signals are rare (GCC then keeps the
    // unsignaled post on the straight path, with no jump back).
    return RDMAKIT_UNLIKELY(wanted) || RDMAKIT_UNLIKELY(position % N == 0);
  }
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
/// decision: `signal(wanted, run)` from the unsignaled WRs since the last signaled one,
/// or `signal_at(wanted, position)` from the WR's position on the queue pair.
template <class S>
concept signaling = requires {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::min_sq_depth } -> std::convertible_to<std::uint32_t>;
} && (requires(bool wanted, std::uint32_t run) {
  { S::signal(wanted, run) } noexcept -> std::same_as<bool>;
} || requires(bool wanted, std::uint64_t position) {
  { S::signal_at(wanted, position) } noexcept -> std::same_as<bool>;
});

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

/// Whether S is signal_every<N>: the ledger's shortcuts by interval (where a list's
/// signals fall, the marks found by position) hold for its rule alone, not for another
/// policy that names an `interval` (its signal_at may put them elsewhere).
template <class S>
inline constexpr bool is_signal_every = false;
template <std::uint32_t N>
inline constexpr bool is_signal_every<signal_every<N>> = true;

/// Whether S signals every WR (signal_all, signal_every<1>): then each completion frees
/// exactly one slot and the ledger needs no record of runs.
template <class S>
inline constexpr bool signals_every_wr = [] {
  if constexpr (std::is_same_v<S, signal_all>)
    return true;
  else if constexpr (is_signal_every<S>)
    return S::interval == 1;
  else
    return false;
}();

/// Whether S decides from the unsignaled run (`signal(wanted, run)`) and may use it:
/// only then does the ledger keep the last signaled WR's position at hand (last_mark_);
/// for the others it is found in the ring when asked (unsignaled_run()). signal_manual's
/// decision ignores the run.
template <class S>
inline constexpr bool tracks_run =
    !signals_every_wr<S> && !std::is_same_v<S, signal_manual> && !requires { S::signal_at(false, 1); };

/// Whether a post branches on the signaling decision rather than computing the flags
/// from it: where signaled WRs are few (one in N under signal_every<N>; under
/// signal_manual the asked ones and the last free slot). Measured per policy on
/// bench/overhead: either form costs the other policies 1 to 3 instructions per post.
template <class S>
inline constexpr bool branch_on_signal =
    !signals_every_wr<S> && (is_signal_every<S> || std::is_same_v<S, signal_manual>);

/// Whether the ledger can plan a list whose WRs asked for no signal without a test per
/// WR: the bounded_run policies, and signal_manual (only the last free slot).
template <class S>
inline constexpr bool plans_unasked = bounded_run<S> || std::is_same_v<S, signal_manual>;

/// Whether where plan_unasked<S> puts the signals in a list is a function of a small
/// key (sq_credits::signal_key): signal_every<N>, by position, for the N the key can
/// name (below 65536; a send queue is never that deep). (signal_manual's is the list's
/// last WR or none, as a list is posted with credits for all of it: queue_pair::post
/// keys it apart, by whether that WR is signaled.)
template <class S>
inline constexpr bool keyed_signals = [] {
  if constexpr (is_signal_every<S>)
    return S::interval < 65536;
  else
    return false;
}();

/// Whether the ledger finds S's own signals by their positions instead of recording
/// them: signal_every<N> for N a power of two above 1, whose signaled WRs are those at
/// positions N, 2N, ... plus any WR asked signaled. Only the asked ones at other
/// positions go in the ring, so a post list of N's multiples records nothing.
template <class S>
inline constexpr bool regular_marks = false;
template <std::uint32_t N>
inline constexpr bool regular_marks<signal_every<N>> = N > 1 && (N & (N - 1)) == 0;

/// Send-queue credits under the strict slot rule. Not thread-safe: the thread that
/// posts on a QP also polls its CQ (or synchronizes both).
///
/// The ledger counts positions, not slots: `posted_` WRs were ever posted, the first
/// `freed()` of them have given their slots back, and `limit_` is freed() + depth (or
/// freed() once closed: cap_ is 0), so one compare of posted_ with limit_ refuses a full
/// SQ, a closed ledger and an empty handle. A signaled WR records its position ("mark") in a
/// ring; its completion frees every slot up to that mark, so a batch of k completions
/// is one load of the k-th mark, whatever the runs between them. Under regular_marks<S>
/// the marks at multiples of N are not recorded: with none other pending, k completions
/// free up to the k-th multiple of N past freed(). The counters are 64 bits: they never
/// wrap.
class sq_credits {
 public:
  sq_credits() = default;
  /// The ledger of a queue pair with signaling policy S and `depth` SQ slots. Under a
  /// policy that signals every WR each completion frees one slot: no ring of marks.
  template <signaling S>
  static sq_credits for_policy(std::uint32_t depth) {
    if constexpr (regular_marks<S>)
      return sq_credits(depth, false, S::interval - 1);
    else
      return sq_credits(depth, signals_every_wr<S>, 0);
  }

  std::uint32_t depth() const noexcept { return depth_; }
  /// depth() while open, 0 once closed: one compare tells a list that may fit later.
  RDMAKIT_ALWAYS_INLINE std::uint32_t open_depth() const noexcept { return cap_; }
  /// Slots held by posted WRs that the device has not given back yet.
  std::uint32_t held() const noexcept { return static_cast<std::uint32_t>(posted_ - freed()); }
  /// Slots a post may take now: none once the ledger is closed.
  RDMAKIT_ALWAYS_INLINE std::uint32_t available() const noexcept {
    return posted_ < limit_ ? static_cast<std::uint32_t>(limit_ - posted_) : 0;
  }
  /// True when no WR may be posted: the SQ is full, or the ledger was closed.
  RDMAKIT_ALWAYS_INLINE bool blocked() const noexcept { return posted_ >= limit_; }
  /// Slots a post may take now, signed: 0 or less when blocked (full or closed).
  RDMAKIT_ALWAYS_INLINE std::int64_t free_slots() const noexcept { return static_cast<std::int64_t>(limit_ - posted_); }
  /// True when at least n WRs may be posted (n >= 1).
  RDMAKIT_ALWAYS_INLINE bool admits(std::uint32_t n) const noexcept { return posted_ + n <= limit_; }
  /// Refuses every post from now on (the QP went to ERR; reset() makes a new ledger).
  void close() noexcept {
    limit_ = freed();
    cap_ = 0;
  }
  /// Unsignaled WRs posted since the last signaled one.
  std::uint32_t unsignaled_run() const noexcept {
    return one_per_completion_ ? 0 : static_cast<std::uint32_t>(posted_ - last_mark());
  }
  /// pending_signaled() != 0, without its divisions (N is a power of two: a multiple
  /// of N past the slots freed is a signaled WR not polled yet). What a list refused for
  /// credits tests inline: a completion is due, so sq_full is the answer. S is the
  /// policy of for_policy<S>, which fixed the ledger's form: no test of it here.
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE bool completion_due() const noexcept {
    if constexpr (signals_every_wr<S>)
      return posted_ != freed();
    else if constexpr (regular_marks<S>)
      return tail_ != head_ || (posted_ & ~std::uint64_t{S::interval - 1}) > freed();
    else
      return tail_ != head_;
  }
  /// Signaled WRs whose completion has not been polled yet.
  std::uint32_t pending_signaled() const noexcept {
    if (one_per_completion_) return held();
    std::uint64_t pending = tail_ - head_;
    if (every_mask_) pending += posted_ / (every_mask_ + 1) - freed() / (every_mask_ + 1);  // multiples of N
    return static_cast<std::uint32_t>(pending);
  }

  /// A copy of the counters to plan a list of WRs before posting it; apply() commits
  /// it. Signaled WRs' marks go in the ring past its tail, which only apply() moves:
  /// the ring holds `depth` entries and a plan never takes more slots than are free.
  struct plan {
    std::uint64_t posted;
    std::uint64_t last_mark;  // kept under tracks_run<S> only (see last_mark_)
    std::uint64_t limit;
    std::uint64_t tail;
    std::uint64_t mask;
    std::uint64_t* ring;
    template <signaling S>
    RDMAKIT_ALWAYS_INLINE bool next(bool wanted) noexcept {
      if constexpr (signals_every_wr<S>) {
        ++posted;
        return true;
      } else {
        const bool sig = decide<S>(wanted, posted, last_mark, limit);
        record<S>(sig, wanted);
        return sig;
      }
    }
    // One more WR, signaled or not (a policy that does not signal every WR); `asked`:
    // the caller asked for the signal (only such a WR can have an irregular mark).
    template <signaling S>
    RDMAKIT_ALWAYS_INLINE void record(bool sig, bool asked) noexcept {
      ++posted;
      if (sig && !is_regular_mark<S>(posted, asked)) push(posted);
    }
    // A signaled WR at position `mark` (its completion frees the slots up to it).
    RDMAKIT_ALWAYS_INLINE void push(std::uint64_t mark) noexcept {
      ring[tail++ & mask] = mark;
      last_mark = mark;
    }
  };
  plan start() const noexcept { return {posted_, last_mark_, limit_, tail_, mask_, ring_.get()}; }

  /// Plans n WRs none of which asked to be signaled (see plans_unasked<S>):
  /// on_signaled(i) for each WR i that is signaled, without a test per WR.
  template <signaling S, class F>
  RDMAKIT_ALWAYS_INLINE static void plan_unasked(plan& p, std::uint32_t n, F&& on_signaled) noexcept {
    static_assert(plans_unasked<S>);
    if constexpr (std::is_same_v<S, signal_manual>) {
      const std::uint64_t i = p.limit - 1 - p.posted;  // the WR taking the last free slot
      if (i < n) {
        on_signaled(static_cast<std::uint32_t>(i));
        p.push(p.posted + i + 1);
      }
      p.posted += n;
    } else if constexpr (signals_every_wr<S>) {
      for (std::uint32_t i = 0; i < n; ++i) on_signaled(i);
      p.posted += n;
    } else if constexpr (is_signal_every<S>) {
      constexpr std::uint64_t N = S::interval;
      // The WRs at positions that are multiples of N (signal_every's signal_at), found
      // by their marks: the first multiple of N past posted, up to posted + n.
      const std::uint64_t first = p.posted, end = first + n;
      for (std::uint64_t m = first - first % N + N; m <= end; m += N) {
        on_signaled(static_cast<std::uint32_t>(m - first - 1));
        if constexpr (!regular_marks<S>) p.push(m);
      }
      p.posted = end;
    } else {
      for (std::uint32_t i = 0; i < n; ++i)
        if (p.template next<S>(false)) on_signaled(i);
    }
  }

  /// Which WRs of a list of n that asked for no signal plan_unasked<S> signals, as a
  /// number: two lists of n with the same key are signaled at the same indices. n is a
  /// multiple of 8 (send_batch passes its end in bytes). The key names N as well as the
  /// position r modulo N, so a list posted under signal_every<4> and then <2> is not
  /// taken for the same: for N = 2^k, 2 <= N <= 128, r is the key's top k bits and k its
  /// low 3 (a shift and two ors); for other N, N(N - 1)/2 + r (unique to the pair, below
  /// 2^31) is its high half and its low 3 bits are 0.
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE static std::uint64_t signal_key(std::uint64_t posted, std::uint64_t n) noexcept {
    static_assert(keyed_signals<S>);
    constexpr std::uint64_t N = S::interval;
    constexpr unsigned k = [] {
      unsigned b = 0;
      while ((std::uint64_t{1} << b) < N) ++b;
      return (std::uint64_t{1} << b) == N && b >= 1 && b <= 7 ? b : 0;
    }();
    if constexpr (k != 0) {
      return posted << (64 - k) | n | k;
    } else {
      constexpr std::uint64_t base = N * (N - 1) / 2;  // below 2^31 (keyed_signals)
      return (base + posted % N) << 32 | n;
    }
  }
  /// The key of a list of n posted next.
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE std::uint64_t signal_key(std::uint64_t n) const noexcept {
    return signal_key<S>(posted_, n);
  }

  /// Records n WRs that asked for no signal under regular_marks<S>: their signals are at
  /// multiples of N, found by position, so nothing but the count is kept (plan_unasked
  /// and apply, without the plan).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE void commit_unasked(std::uint32_t n) noexcept {
    static_assert(regular_marks<S>);
    posted_ += n;
  }

  /// True when n WRs posted now take the last free slot (the ledger admits them).
  RDMAKIT_ALWAYS_INLINE bool fills(std::uint32_t n) const noexcept { return posted_ + n == limit_; }

  /// Records n WRs that asked for no signal under signal_manual, posted with credits for
  /// all of them: the last free slot is then in the list only as its last WR, so that WR
  /// alone may be signaled (`last_signaled`: fills(n) before the post).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE void commit_unasked_list(std::uint32_t n, bool last_signaled) noexcept {
    static_assert(std::is_same_v<S, signal_manual>);
    posted_ += n;
    if (last_signaled) ring_[tail_++ & mask_] = posted_;
  }

  /// Records the WRs a plan (from start(), with the same S) decided.
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE void apply(const plan& p) noexcept {
    posted_ = p.posted;
    if constexpr (!signals_every_wr<S>) tail_ = p.tail;
    if constexpr (tracks_run<S>) last_mark_ = p.last_mark;
  }

  /// Whether the next WR must be signaled under policy S (`wanted`: the caller asked).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE bool must_signal(bool wanted) const noexcept {
    if constexpr (signals_every_wr<S>)
      return true;
    else
      return decide<S>(wanted, posted_, last_mark_, limit_);
  }

  /// Records one posted WR, signaled or not, under policy S. `asked`: the caller asked
  /// for the signal (false: the policy chose it, so under regular_marks<S> it is at a
  /// multiple of N and needs no test).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE void commit(bool signaled, bool asked = true) noexcept {
    ++posted_;  // for signals_every_wr<S>, for_policy<S> made the ledger one-per-completion
    if constexpr (regular_marks<S>) {
      // Out of line: inlined, GCC computes the position test of the decision before it
      // (2 more instructions on every post, bench/README).
      if (signaled && asked) push_asked_();
    } else if constexpr (!signals_every_wr<S>) {
      if (signaled) {
        ring_[tail_++ & mask_] = posted_;
        if constexpr (tracks_run<S>) last_mark_ = posted_;
      }
    }
  }

  /// Takes back the WR commit<S>(signaled) recorded last: the device refused it. The
  /// post path records a WR before the device call (counters loaded before it stay in
  /// registers; read after it, they would be loaded again) and undoes it on refusal.
  template <signaling S>
  RDMAKIT_NOINLINE void uncommit() noexcept {
    if constexpr (!signals_every_wr<S>) {
      if (tail_ != head_ && ring_[(tail_ - 1) & mask_] == posted_) {  // its mark is the ring's newest
        --tail_;
        if constexpr (tracks_run<S>) last_mark_ = last_mark();  // (never regular_marks<S>)
      }
    }
    --posted_;
  }

  /// k successful send completions were polled at once: the k oldest signaled WRs
  /// (send completions arrive in SQ order), freeing the slots up to the k-th one's
  /// mark. Completions beyond those pending (spurious) change nothing.
  RDMAKIT_ALWAYS_INLINE void on_signaled_completions(std::uint32_t k) noexcept {
    if (one_per_completion_) {
      const std::uint64_t limit = limit_ + k, most = posted_ + cap_;  // most: every WR freed
      limit_ = limit < most ? limit : most;
    } else if (every_mask_ == 0) {
      const std::uint64_t pending = tail_ - head_;
      if (RDMAKIT_UNLIKELY(k > pending)) k = static_cast<std::uint32_t>(pending);
      if (RDMAKIT_UNLIKELY(k == 0)) return;
      head_ += k;
      limit_ = ring_[(head_ - 1) & mask_] + cap_;
    } else if (RDMAKIT_LIKELY(tail_ == head_)) {
      // Only multiples of N pending: the k-th one past freed(), at most the last posted.
      const std::uint64_t freed = limit_ - cap_, last = posted_ & ~every_mask_;
      std::uint64_t mark = (freed & ~every_mask_) + std::uint64_t{k} * (every_mask_ + 1);
      if (RDMAKIT_UNLIKELY(mark > last)) mark = last;
      if (RDMAKIT_UNLIKELY(mark <= freed)) return;  // none pending: spurious
      limit_ = mark + cap_;
    } else {
      complete_merged_(k);
    }
  }

  /// A successful send completion was polled: the oldest signaled WR's.
  RDMAKIT_ALWAYS_INLINE void on_signaled_completion() noexcept { on_signaled_completions(1); }

 private:
  // The policy's decision, and the last-slot rule where the policy needs it: the WR
  // being decided is the one at position posted + 1, the last free slot when that is
  // the limit (never reached closed: a closed ledger admits nothing).
  template <signaling S>
  RDMAKIT_ALWAYS_INLINE static bool decide(bool wanted, std::uint64_t posted, std::uint64_t last_mark,
                                           std::uint64_t limit) noexcept {
    bool sig;
    if constexpr (requires { S::signal_at(wanted, posted + 1); })
      sig = S::signal_at(wanted, posted + 1);
    else
      sig = S::signal(wanted, static_cast<std::uint32_t>(posted - last_mark));
    if constexpr (bounded_run<S>)
      return sig;
    else
      return sig || RDMAKIT_UNLIKELY(posted + 1 >= limit);  // the last free slot: one post in the SQ depth
  }

  sq_credits(std::uint32_t depth, bool one_per_completion, std::uint64_t every_mask)
      : limit_(depth), depth_(depth), cap_(depth), mask_(ring_size(depth) - 1), every_mask_(every_mask),
        one_per_completion_(one_per_completion) {
    if (!one_per_completion) ring_ = make_unique_owner<std::uint64_t[]>(mask_ + 1);
  }

  // Whether a signaled WR at `position` needs no mark in the ring (regular_marks<S>):
  // a signal the policy chose (not asked) is at a multiple of N.
  template <signaling S>
  static RDMAKIT_ALWAYS_INLINE bool is_regular_mark(std::uint64_t position, bool asked) noexcept {
    if constexpr (regular_marks<S>)
      return !asked || position % S::interval == 0;
    else
      return false;
  }

  // A WR asked signaled under regular_marks<S>: its mark goes in the ring unless it is
  // at a multiple of N, where it is found anyway.
  RDMAKIT_NOINLINE void push_asked_() noexcept {
    if (posted_ & every_mask_) ring_[tail_++ & mask_] = posted_;
  }

  // k completions with marks of asked WRs pending among the multiples of N: taken one by
  // one, oldest first (send completions arrive in SQ order). Out of line: only a run
  // that asks for signals at other positions comes here.
  RDMAKIT_NOINLINE void complete_merged_(std::uint32_t k) noexcept {
    std::uint64_t freed = limit_ - cap_;
    const std::uint64_t last = posted_ & ~every_mask_;
    for (; k != 0; --k) {
      const std::uint64_t regular = (freed | every_mask_) + 1;  // the next multiple of N
      if (tail_ != head_ && ring_[head_ & mask_] < regular)
        freed = ring_[head_++ & mask_];
      else if (regular <= last)
        freed = regular;
      else
        break;  // spurious: none pending
    }
    limit_ = freed + cap_;
  }

  // A power of two at least `depth` (pending signaled WRs never exceed the depth).
  static std::uint64_t ring_size(std::uint32_t depth) noexcept {
    std::uint64_t n = 1;
    while (n < depth) n <<= 1;
    return n;
  }

  // WRs whose slots came back: the position up to which completions freed them.
  std::uint64_t freed() const noexcept { return limit_ - cap_; }
  // The last signaled WR's position (0: none yet): the newest pending mark (in the ring,
  // or under regular_marks the last multiple of N posted), or, with none pending, the last
  // one completed (freed()). Not for one_per_completion_ ledgers.
  std::uint64_t last_mark() const noexcept {
    std::uint64_t m = tail_ != head_ ? ring_[(tail_ - 1) & mask_] : 0;
    if (every_mask_ && (posted_ & ~every_mask_) > m) m = posted_ & ~every_mask_;  // the last multiple of N
    const std::uint64_t f = freed();
    return m > f ? m : f;
  }

  std::uint64_t posted_ = 0;     // WRs ever recorded
  std::uint64_t limit_ = 0;      // freed() + cap_: posted_ may not reach it
  // last_mark(), kept at hand under tracks_run<S> (a decision from the run reads it on
  // every post); stale under the other policies, which never read it.
  std::uint64_t last_mark_ = 0;
  std::uint64_t head_ = 0;       // ring: completed marks
  std::uint64_t tail_ = 0;       // ring: recorded marks
  std::uint32_t depth_ = 0;
  std::uint32_t cap_ = 0;  // depth_, or 0 once closed
  std::uint64_t mask_ = 0;
  std::uint64_t every_mask_ = 0;  // regular_marks<S>: N - 1 (0: every mark is in the ring)
  bool one_per_completion_ = false;
  unique_owner<std::uint64_t[]> ring_;  // marks of the pending signaled WRs, oldest first
  // head_/tail_ run freely; the ring index is their low bits.
};

}  // namespace detail

RDMAKIT_END_NAMESPACE
