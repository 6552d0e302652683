#pragma once
/// A completion queue: RAII over B::cq (and its completion channel when the polling
/// policy sleeps). It knows its granted capacity and the entries promised to the queue
/// pairs attached to it, so a QP that could overflow it is refused at creation. Every
/// completion polled goes through the accounting of the QP it belongs to (routed by
/// qp_num), which gives send-queue credits back; `dispatch()` then hands it to that QP's
/// handler. A handler may destroy queue pairs, their own handler and this CQ's state
/// (docs/polling.md), not the handle it runs from. An exception from a handler (given to
/// poll/wait, which are noexcept for a noexcept one, to on(), or dispatch's fallback)
/// leaves the call once the rest of the batch reached their handlers, every completion
/// accounted.
#include <rdmakit/backend.hpp>
#include <rdmakit/completion.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/qp_link.hpp>
#include <rdmakit/polling.hpp>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

/// What a wait found: completions (how many were delivered), nothing before the
/// timeout, or an error (an errno, EBADF for an empty handle). Converts to true only
/// when completions were delivered: `while (cq.wait(f)) {}` stops on a timeout too.
class wait_result {
 public:
  /// From what the backend returned: completions (> 0), a timeout (0) or -errno.
  constexpr explicit wait_result(int raw) noexcept : raw_(raw) {}
  /// Completions delivered (0 on a timeout or an error).
  constexpr int count() const noexcept { return raw_ > 0 ? raw_ : 0; }
  /// True when the deadline passed with nothing delivered.
  constexpr bool timed_out() const noexcept { return raw_ == 0; }
  /// True when waiting failed; error() has the errno.
  constexpr bool failed() const noexcept { return raw_ < 0; }
  /// The errno of a failed wait (0 otherwise).
  constexpr int error() const noexcept { return raw_ < 0 ? -raw_ : 0; }
  /// True when completions were delivered.
  constexpr explicit operator bool() const noexcept { return raw_ > 0; }
  friend constexpr bool operator==(wait_result, wait_result) noexcept = default;

 private:
  int raw_;
};

namespace detail {
// Lets the typed objects reach each other's shared blocks without public accessors.
struct policy_access {
  template <class CQ>
  static auto* block(CQ& cq) noexcept {
    return cq.blk_.get();
  }
  template <class CQ>
  static auto shared_block(CQ& cq) noexcept {
    return cq.blk_;
  }
  // dispatch(fallback) batch after batch until one gives a completion (its count) or
  // poll_cq finds the CQ empty (0): a batch of drain markers alone is not the end.
  template <class CQ, class F>
  static int dispatch_until_given(CQ& cq, F& fallback) {
    return CQ::given_or_empty_([&](int& polled) { return cq.dispatch_batch_(fallback, polled); });
  }
  template <class SRQ>
  static auto shared_block(const SRQ& srq) noexcept
    requires requires { srq.st_; }
  {
    return srq.st_;
  }
  template <class QP>
  static auto* link(QP& qp) noexcept {
    return qp.parts_.link.get();
  }
  // The link of a queue pair known not to be empty (no null for GCC's -Wnull-dereference).
  template <class QP>
  static auto& live_link(QP& qp) noexcept {
    return *qp.parts_.link;
  }
  // A verbs call that takes a send-queue slot as a post does (ibv_bind_mw: memory_window.hpp).
  template <class QP, class Call>
  static auto post_call(QP& qp, std::uint64_t wr_id, send_flags flags, Call&& call) noexcept {
    return qp.post_call_(wr_id, flags, static_cast<Call&&>(call));
  }
  // What a queue pair owns (qp_pool checks its peers' attributes before any transition).
  template <class QP>
  static const auto& parts(const QP& qp) noexcept {
    return qp.parts_;
  }
  // The queue pair's protection domain (null when empty).
  template <class QP>
  static const auto& pd_of(const QP& qp) noexcept {
    return qp.parts_.pd;
  }
  // The queue pair's serial (detail::qp_link::serial; 0 when empty).
  template <class QP>
  static std::uint64_t serial_of(const QP& qp) noexcept {
    return qp.parts_.link->serial;
  }
  // The queue pair's qp_native_hold, made on first use (bad_alloc), for a type 2 memory
  // window bound through it.
  template <class QP>
  static auto native_hold_of(QP& qp) {
    auto& h = qp.parts_.native_hold;
    if (!h) h = make_shared_owner<typename std::remove_cvref_t<decltype(*h)>>();
    return h;
  }
  // A protection domain's control block (throws usage_error when empty).
  template <class PD>
  static auto pd_ref(const PD& pd, const char* call) {
    return pd.ref(call);
  }
  // A device's control block (null when empty).
  template <class D>
  static auto device_ref(const D& d) noexcept {
    return d.st_;
  }
  // What a queue pair owns, to hand over to another state's type (connection manager).
  template <class QP>
  static auto& parts(QP& qp) noexcept {
    return qp.parts_;
  }
  // A queue pair of type QP over parts set up elsewhere (the connection manager's).
  template <class QP, class Parts>
  static QP adopt(Parts&& p) noexcept {
    return QP(static_cast<Parts&&>(p));
  }
};
}  // namespace detail

/// A completion queue polled with policy P (busy_poll, event_driven or adaptive).
template <verbs_backend B, polling P = busy_poll<>>
class completion_queue {
 public:
  /// The verbs backend the CQ was created on.
  using backend = B;
  /// How wait() gets completions: spinning, sleeping on the channel, or both.
  using polling_policy = P;

  /// An empty handle.
  completion_queue() = default;

  /// Creates a CQ of at least `entries` entries on an open device (kept open by the
  /// CQ). Prefer device::create_cq.
  completion_queue(detail::device_ref<B> dev, int entries, int comp_vector = 0) {
    if (entries <= 0)
      throw usage_error(
          detail::cat("create_cq(): a completion queue needs at least 1 entry (asked for ", entries, ")"));
    auto blk = detail::make_shared_owner<detail::cq_block<B>>();  // ~cq_block undoes what is made below
    blk->dev = std::move(dev);
    if constexpr (P::needs_channel) blk->channel = B::create_comp_channel(blk->dev->ctx);
    blk->cq = B::create_cq(blk->dev->ctx, entries, blk->channel, comp_vector);
    blk->capacity = B::cq_capacity(blk->cq);
    blk_ = std::move(blk);
  }

  /// Queue pairs attached to this CQ keep it alive: the handle may go first, but nothing
  /// polls the CQ then, and its queue pairs' posts are refused (`cq_gone`) from then on.
  completion_queue(completion_queue&&) noexcept = default;
  /// Releases this handle's share, then takes over `other`'s (attached queue pairs keep the old CQ alive).
  completion_queue& operator=(completion_queue&& other) noexcept {
    if (this != &other) {
      if (blk_) blk_->poller_goes();
      blk_ = std::move(other.blk_);
    }
    return *this;
  }
  completion_queue(const completion_queue&) = delete;
  completion_queue& operator=(const completion_queue&) = delete;
  ~completion_queue() {
    if (blk_) blk_->poller_goes();
  }

  /// False for an empty (default-constructed or moved-from) handle.
  explicit operator bool() const noexcept { return blk_ != nullptr; }
  /// Entries the device granted (at least what was asked; 0 when empty).
  int capacity() const noexcept { return blk_ ? blk_->capacity : 0; }
  /// Entries promised to attached queue pairs (the sum of their queue depths).
  std::uint64_t reserved() const noexcept { return blk_ ? blk_->reserved : 0; }
  /// Entries that queue pairs replaced by reset() may still complete into (their
  /// flushes), and the completions destroyed queue pairs may have left here unpolled
  /// (a device that does not clean them out, as rxe, returns them later), counted apart
  /// from reserved(). Each one polled gives its entry back, and a poll that finds the
  /// CQ empty gives back all the destroyed ones' (a poll that returns fewer than it asked
  /// for, those destroyed before it). A queue pair (or a reset) is refused unless it
  /// fits beside reserved() + flushing().
  std::uint64_t flushing() const noexcept { return blk_ ? blk_->flushing_held() : 0; }
  /// Queue pairs attached to this CQ (not counting those replaced by reset()).
  std::size_t attached() const noexcept { return blk_ ? blk_->live() : 0; }
  /// Completions polled for a qp_num with no handler (dispatch) or no live QP.
  std::uint64_t unrouted() const noexcept { return blk_ ? blk_->unrouted : 0; }
  /// CQ events received but not acknowledged yet (all are acked before destruction).
  unsigned unacked_events() const noexcept { return blk_ ? blk_->unacked : 0; }
  /// The backend's CQ (ibv_cq* on ibverbs), for calls rdmakit does not wrap.
  typename B::cq native() const noexcept { return blk_ ? blk_->cq : typename B::cq{}; }
  /// The completion channel the CQ notifies (null unless the polling policy sleeps).
  typename B::channel native_channel() const noexcept { return blk_ ? blk_->channel : typename B::channel{}; }

  /// Polls one batch (up to P::batch) and calls f(completion<B>) for each, after the
  /// owning QP's credit accounting. Returns the count, or -errno if poll_cq failed
  /// (-EBADF on an empty handle). If f throws, the rest of the batch is still given to
  /// f, then the first exception leaves (the later ones are dropped).
  template <completion_handler<B> F>
  RDMAKIT_ALWAYS_INLINE int poll(F&& f) noexcept(nothrow<F>) {
    constexpr bool inert = std::is_same_v<std::remove_cvref_t<F>, ignore_completion>;
    return poll_impl_<inert, nothrow<F>>(
        [&f](detail::qp_link<B>*, const completion<B>& c) noexcept(nothrow<F>) { f(c); });
  }

  /// Polls one batch for the accounting only: the completions give their credits back
  /// and are not delivered. A failed one still puts its queue pair in error (in_error(),
  /// first_error(), posts refused with qp_error), so a loop that only needs its credits
  /// back, such as a bandwidth loop of WRITEs, need not look at each completion.
  RDMAKIT_ALWAYS_INLINE int poll() noexcept { return poll(ignore_completion{}); }

  /// Polls until the CQ is empty; returns the total count (or -errno).
  template <completion_handler<B> F>
  int drain(F&& f) noexcept(nothrow<F>) {
    int total = 0;
    for (;;) {
      // Ends on a batch poll_cq returned short: one that held completions f is not given
      // (a reset queue pair's drain marker, an async queue pair's) is not the end.
      int polled = 0;
      const int given = poll_batch_(f, polled);
      if (polled < 0) return polled;
      total += given;
      if (polled < P::batch) return total;
    }
  }

  /// Waits up to `timeout` for completions with the polling policy, then delivers one
  /// batch to f. (Every timeout here takes any duration: saturated, hours::max() is no
  /// limit; a finer unit rounded up to milliseconds.)
  template <completion_handler<B> F>
  RDMAKIT_ALWAYS_INLINE wait_result wait(F&& f,
                                         detail::ms_timeout timeout = detail::default_wait) noexcept(nothrow<F>) {
    if (RDMAKIT_UNLIKELY(!blk_)) return wait_result{-EBADF};
    // The policy's own first step, inlined: completions already there end the wait.
    if constexpr (detail::polls_first<P>)
      if (const int n = poll(f); RDMAKIT_LIKELY(n != 0)) return wait_result{n};
    return wait_slow_(f, timeout);
  }

  /// Waits as wait(f, timeout), for the accounting only, as poll() does.
  RDMAKIT_ALWAYS_INLINE wait_result wait(detail::ms_timeout timeout = detail::default_wait) noexcept {
    ignore_completion none;
    return wait(none, timeout);
  }

  /// Waits until at least `n` completions have been delivered to f, all within one
  /// `timeout`: the count delivered (it may pass n: a batch is delivered whole), a
  /// timed-out result when the deadline came first (f has seen the ones that did
  /// come), or the error of a failed wait (EINVAL for n below 1: nothing to wait for).
  /// A blocking call, not a data path: f is called through a pointer, so every handler
  /// shares one instantiation of the wait (per CQ type and noexcept-ness), which keeps
  /// each call site's compile cost down (issue 12). Loops that count instructions call
  /// wait() or poll(), which inline f.
  template <completion_handler<B> F>
  wait_result wait_for(int n, F&& f,
                       detail::ms_timeout timeout = detail::default_wait) noexcept(nothrow<F>) {
    if constexpr (std::is_function_v<std::remove_reference_t<F>>) {
      auto* const function = &f;  // (an object's address is erased, not a function's)
      return wait_for_(n, handler_ref<nothrow<F>>(function), timeout);
    } else {
      return wait_for_(n, handler_ref<nothrow<F>>(f), timeout);
    }
  }

  /// Routes this QP's completions to `handler` (called by dispatch). One handler per
  /// queue pair: with separate send and receive CQs it takes the completions of both,
  /// whichever CQ dispatches them (`c.is_recv()` tells them apart). Replaces any previous
  /// handler set through this CQ; one set through the QP's other CQ is refused
  /// (usage_error: it would silently take over both). The QP must be attached to this CQ,
  /// and not held by an async_queue_pair (usage_error: its awaiters would never resume).
  /// A handler may replace itself or destroy its queue pair: it is freed once it returns.
  template <class QP, class F>
  void on(QP& qp, F handler) {
    if (!blk_) detail::throw_empty("completion_queue", "on");
    detail::refuse_if_waited_on(*blk_, "completion_queue::on()");
    auto* link = detail::policy_access::link(qp);
    if (!link) detail::throw_empty_argument("queue_pair", "completion_queue::on");
    if (link->send_cq != blk_.get() && link->recv_cq != blk_.get())
      throw usage_error(detail::cat("completion_queue::on(): QP ", detail::hex(link->qp_num), " is not attached to this CQ"));
    if (link->async_owned)
      throw usage_error(detail::cat(
          "completion_queue::on(): QP ", detail::hex(link->qp_num),
          " belongs to an async_queue_pair, whose own handler resumes the coroutines awaiting its work requests: "
          "another handler would leave them waiting for ever; co_await its WRs instead, or set handlers on a "
          "queue pair not wrapped in an async_queue_pair"));
    if (link->handler && link->handler_cq != blk_.get())
      throw usage_error(detail::cat(
          "completion_queue::on(): QP ", detail::hex(link->qp_num),
          " has a handler set through its other CQ, and one handler takes the completions of both its send and "
          "receive CQs (whichever dispatches them): this one would replace it for both. Set one handler and tell "
          "sends from receives by completion::is_recv(), or replace it through the CQ that set it"));
    F* made = new F(std::move(handler));  // first: out of memory, the old handler stays
    link->reset_handler();
    link->handler_cq = blk_.get();
    link->handler_ctx = made;
    link->handler = [](void* ctx, const completion<B>& c) { (*static_cast<F*>(ctx))(c); };
    link->handler_free = [](void* ctx) { delete static_cast<F*>(ctx); };
  }

  /// Polls one batch and hands each completion to its QP's handler; completions of
  /// QPs without a handler go to `fallback`. A handler or the fallback may throw: the
  /// batch's other completions still reach theirs (a queue pair's bug does not starve
  /// the others), then the first exception leaves dispatch (later ones are dropped).
  template <class F>
  int dispatch(F&& fallback) {
    int polled = 0;
    return dispatch_batch_(fallback, polled);
  }
  /// As dispatch(fallback), counting unhandled completions in unrouted().
  int dispatch() { return dispatch(count_unrouted{}); }
  /// Waits with the policy, then dispatches one batch; completions of QPs without a
  /// handler go to `fallback`.
  template <completion_handler<B> F>
  wait_result dispatch_wait(F&& fallback, detail::ms_timeout timeout) {
    if (RDMAKIT_UNLIKELY(!blk_)) return wait_result{-EBADF};
    const waiting_ w(blk_);
    if (RDMAKIT_UNLIKELY(w.refused)) return wait_result{-EBUSY};
    dispatch_ops<F> o{this, fallback};
    return wait_result{P::wait(o, timeout)};
  }
  /// As dispatch_wait(fallback, timeout), counting unhandled completions in unrouted().
  wait_result dispatch_wait(detail::ms_timeout timeout = detail::default_wait) {
    if (RDMAKIT_UNLIKELY(!blk_)) return wait_result{-EBADF};
    return dispatch_wait(count_unrouted{}, timeout);
  }

  /// Acknowledges the CQ events received so far (done automatically in batches).
  void ack_events() noexcept {
    if (blk_ && blk_->unacked) {
      B::ack_cq_events(blk_->cq, blk_->unacked);
      blk_->unacked = 0;
    }
  }

 private:
  friend struct detail::policy_access;

  struct ignore_completion {
    void operator()(const completion<B>&) const noexcept {}
  };
  // dispatch()'s fallback: the completion is counted in unrouted() (by dispatch itself).
  struct count_unrouted {
    void operator()(const completion<B>&) const noexcept {}
  };
  // Whether handler F cannot throw: poll, wait and the calls under them are noexcept then.
  template <class F>
  static constexpr bool nothrow = std::is_nothrow_invocable_v<F&, const completion<B>&>;

  // wait_for's handler, erased: a pointer to it and a function calling it.
  template <bool NoThrow>
  class handler_ref {
   public:
    template <class F>  // an object (F may be const or volatile: its pointer is cast back to F*)
    explicit handler_ref(F& f) noexcept
        : f_(const_cast<void*>(static_cast<const volatile void*>(__builtin_addressof(f)))),
          call_([](void* handler, const completion<B>& c) noexcept(NoThrow) { (*static_cast<F*>(handler))(c); }) {}
    void operator()(const completion<B>& c) const noexcept(NoThrow) { call_(f_, c); }

   private:
    void* f_;
    void (*call_)(void*, const completion<B>&) noexcept(NoThrow);
  };
  template <bool NoThrow>
  RDMAKIT_NOINLINE wait_result wait_for_(int n, handler_ref<NoThrow> f, detail::ms_timeout timeout) noexcept(NoThrow) {
    if (RDMAKIT_UNLIKELY(n < 1)) return wait_result{-EINVAL};
    using clock = std::chrono::steady_clock;
    const auto deadline = detail::deadline_after(timeout);
    int total = 0;
    for (bool first = true; total < n; first = false) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
      if (left.count() <= 0) {
        if (!first) return wait_result{0};
        left = std::chrono::milliseconds{0};  // a past deadline looks once, as wait() does
      }
      // The policy's wait alone (wait() without its inlined first poll, which a policy
      // that polls first makes again there): one instantiation of the poll, not two.
      if (RDMAKIT_UNLIKELY(!blk_)) return wait_result{-EBADF};  // (f may have moved the handle)
      const wait_result r = wait_slow_(f, left);
      if (r.failed()) return r;
      total += r.count();
    }
    return wait_result{total};
  }

  // One batch for f: the completions given to f (or -errno), and in `polled` what
  // poll_cq returned, which counts those f is not given (drain markers, an async queue
  // pair's).
  template <class F>
  int poll_batch_(F& f, int& polled) noexcept(nothrow<F>) {
    constexpr bool inert = std::is_same_v<std::remove_cvref_t<F>, ignore_completion>;
    int given = 0;
    polled = poll_impl_<inert, nothrow<F>, true, true>(
        [&](detail::qp_link<B>*, const completion<B>& c) noexcept(nothrow<F>) { ++given, f(c); });
    return polled < 0 ? polled : given;
  }
  template <class F>
  int dispatch_batch_(F& fallback, int& polled) {
    // The CQ's state outlives the batch (cq_delivery) even when a handler moves this
    // handle away or reassigns it: count there, not through blk_.
    detail::cq_block<B>* const b = blk_.get();
    std::exception_ptr first;
    int given = 0;
    polled = poll_impl_<false, true, false, true>([&](detail::qp_link<B>* l, const completion<B>& c) noexcept {
      ++given;
      try {
        if (l && l->handler)
          call_handler_(*l, c);
        else if constexpr (std::is_same_v<std::remove_cvref_t<F>, count_unrouted>)
          b->unrouted += l != nullptr;  // one with no queue pair is counted already (deliver_)
        else
          fallback(c);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    });
    if (RDMAKIT_UNLIKELY(first != nullptr)) std::rethrow_exception(first);
    return polled < 0 ? polled : given;
  }
  // A polling policy's poll: 0 only when poll_cq found the CQ empty. A batch that gave
  // nothing (drain markers only) is polled past, or the policy would take it for an
  // empty CQ and sleep with completions behind it.
  template <class Batch>
  static int given_or_empty_(Batch&& batch) noexcept(noexcept(batch(std::declval<int&>()))) {
    for (;;) {
      int polled = 0;
      const int given = batch(polled);
      if (given != 0 || polled <= 0) return given;
    }
  }

  // The policy's wait, past the inlined first poll: the ops it is handed are made here,
  // so the inlined path stores none of them.
  template <class F>
  RDMAKIT_NOINLINE wait_result wait_slow_(F& f, std::chrono::milliseconds timeout) noexcept(nothrow<F>) {
    const waiting_ w(blk_);
    if (RDMAKIT_UNLIKELY(w.refused)) return wait_result{-EBUSY};
    ops<F> o{this, f};
    return wait_result{P::wait(o, timeout)};
  }

  // Marks the block as waited on by this thread (cq_block::waiter) for a wait's slow
  // part, keeping it alive to the end (a handler may drop this handle meanwhile). A
  // wait nested in one of this thread's handlers leaves the mark to the outer one;
  // another thread's mark refuses the wait.
  struct waiting_ {
    detail::shared_owner<detail::cq_block<B>> blk;
    bool refused = false;
    bool nested = false;
    explicit waiting_(const detail::shared_owner<detail::cq_block<B>>& b) noexcept : blk(b) {
      const void* const me = detail::this_thread_tag();
      const void* seen = nullptr;
      if (!__atomic_compare_exchange_n(&blk->waiter, &seen, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        (seen == me ? nested : refused) = true;
    }
    waiting_(const waiting_&) = delete;
    waiting_& operator=(const waiting_&) = delete;
    ~waiting_() {
      if (!refused && !nested) __atomic_store_n(&blk->waiter, nullptr, __ATOMIC_RELEASE);
    }
  };

  // `Inert`: g calls no user code (poll() and wait() without a handler). A user's
  // handler may destroy queue pairs, their handlers and this CQ's state (its handle
  // moved from or reassigned): each completion is then routed after the call before
  // it, and the block outlives the delivery (cq_delivery).
  // `Divert` (all but dispatch, whose g hands every completion to its QP's handler): an
  // async_queue_pair's completions go to the async layer, not to g, nor in the count.
  // `Polled`: returns the count poll_cq returned, not the count given to g.
  template <bool Inert, bool NoThrow, bool Divert = true, bool Polled = false, class G>
  RDMAKIT_ALWAYS_INLINE int poll_impl_(G&& g) noexcept(NoThrow) {
    if (RDMAKIT_UNLIKELY(!blk_)) return -EBADF;
    typename B::wc wcs[P::batch];
    auto& b = *blk_;
    const int n = B::poll_cq(b.cq, P::batch, wcs);
    if (RDMAKIT_UNLIKELY(n < b.poll_floor)) {  // n <= 0, or any n while watched
      if (n <= 0) {
        if (n == 0 && b.watched()) b.forget_departed();  // empty: none is left
        return n;
      }
      if (n < P::batch) ++b.drains;  // drained: see cq_block::departed
    }
    if (const int recvs = b.receives_if_all_of_last(wcs, n); RDMAKIT_LIKELY(recvs >= 0)) {
      detail::qp_link<B>* l = b.last;
      l->on_polled_batch(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(recvs));
      if constexpr (Inert) {
        for (int i = 0; i < n; ++i) g(l, completion<B>(wcs[i], l->recv_offset));
      } else {
        detail::cq_delivery<B> in_use(b);
        // `last` is a live link or null (a destroyed queue pair's is cleared), told by
        // its serial: a link made by a handler may be where `l` was freed.
        const std::uint64_t serial = l->serial, made_by = detail::last_qp_serial();
        detail::batch_in_delivery<B> batch(b, serial);  // a reset() meanwhile keeps `l` for the rest
        each_of_batch_<NoThrow, P::batch>(n, [&](int i) RDMAKIT_INLINE_LAMBDA {
          if (RDMAKIT_LIKELY(b.last_serial == serial))
            g(l, completion<B>(wcs[i], l->recv_offset));
          else
            (void)deliver_<false, Divert, true>(b, wcs[i], g, made_by);  // (the batch is `l`'s: none is async)
        });
      }
      return n;
    }
    const int given = poll_routed_<Inert, NoThrow, Divert>(wcs, n, g);
    return Polled ? n : given;
  }

  // A batch with a failure, a receive or more than one QP: each completion routed and
  // accounted on its own. Out of line, so the inlined poll stays small. Returns the
  // completions given to g (under Divert, not those the async layer took).
  template <bool Inert, bool NoThrow, bool Divert, class G>
  RDMAKIT_OUT_OF_LINE int poll_routed_(const typename B::wc* wcs, int n, G& g) noexcept(NoThrow) {
    auto& b = *blk_;
    int given = 0;
    if constexpr (Inert) {
      for (int i = 0; i < n; ++i) given += deliver_<true, Divert>(b, wcs[i], g);
    } else {
      detail::cq_delivery<B> in_use(b);
      const std::uint64_t made_by = detail::last_qp_serial();  // queue pairs made later own none of these
      int i = 0;
      detail::batch_frame<B> frame{wcs, &i, n, nullptr};
      detail::batch_frame_scope<B> held(b, frame);
      each_of_batch_<NoThrow, P::batch>(n, [&](int k) RDMAKIT_INLINE_LAMBDA {
        given += deliver_<true, Divert, true>(b, wcs[i = k], g, made_by);  // (i: the frame's index)
      });
    }
    return given;  // (only the async layer's and drain markers are not given to g)
  }

  // step(i) for each i of a batch of n. A handler that may throw does not stop the batch:
  // the completions polled with the one whose handler threw were consumed from the CQ,
  // so they still reach it (as dispatch's reach theirs), then the first exception
  // leaves (later ones are dropped). All inline, `step` too (RDMAKIT_INLINE_LAMBDA: GCC
  // would call it from the loop, once the copy in the catch doubled its uses; passed out
  // of line, what it refers to would live in memory).
  // (n is at most Batch: a batch of one has no rest, and GCC would warn of its reads.)
  template <bool NoThrow, int Batch, class Step>
  static RDMAKIT_ALWAYS_INLINE void each_of_batch_(int n, Step&& step) noexcept(NoThrow) {
    int i = 0;
    if constexpr (NoThrow || Batch == 1) {
      for (; i < n; ++i) step(i);
    } else {
      try {
        for (; i < n; ++i) step(i);
      } catch (...) {
        const std::exception_ptr first = std::current_exception();
        for (++i; i < n; ++i) {
          try {
            step(i);
          } catch (...) {  // dropped: the first one leaves
          }
        }
        std::rethrow_exception(first);
      }
    }
  }

  // One completion to g, through the queue pair its qp_num names now (after the call
  // before it, which may have destroyed that queue pair), `Account`ed there. 1 when g
  // got it, 0 when the async layer did (Divert).
  // `Checked` (user code ran since the batch was polled): a queue pair made since, with
  // a serial above `made_by`, is never this completion's, whatever number it took (a
  // destroyed one's, reused at once as mlx5 does): the completion is a departed one's.
  template <bool Account, bool Divert, bool Checked = false, class G>
  static RDMAKIT_ALWAYS_INLINE int deliver_(detail::cq_block<B>& b, const typename B::wc& w, G& g,
                                           [[maybe_unused]] std::uint64_t made_by = 0)
      noexcept(noexcept(g(nullptr, std::declval<const completion<B>&>()))) {
    auto polled_before = [&](const detail::qp_link<B>* l) {
      if constexpr (Checked)
        return l->serial <= made_by;
      else
        return true;
    };
    // The QP of the previous completion needs no null test: find()'s cache, unrolled.
    auto routed = [&](detail::qp_link<B>* l) {
      if constexpr (Account) l->account(w);
      // An async_queue_pair's goes to the async layer, whoever polled (never `last`: its
      // completions all come this way, qp_link.hpp's stop_caching). Its handler is noexcept.
      if constexpr (Divert) {
        if (RDMAKIT_UNLIKELY(l->async_owned) && l->handler) {
          call_handler_(*l, completion<B>(w, l->recv_offset));
          return 0;
        }
      }
      g(l, completion<B>(w, l->recv_offset));
      return 1;
    };
    b.note_invalidation(w);
    // The queue pair, found once, so that `routed` (and g with it) has one call site:
    // with three, GCC kept it out of line, a call per completion on a shared CQ.
    const std::uint32_t qpn = B::get_qp_num(w);
    detail::qp_link<B>* l = b.last;
    if (RDMAKIT_UNLIKELY(qpn != b.last_qpn) || !polled_before(l)) {
      l = b.route(qpn);
      if (RDMAKIT_UNLIKELY(l == nullptr) || !polled_before(l)) {
        if (RDMAKIT_UNLIKELY(!b.retired_links.empty()) && (l = b.find_retired(qpn)) != nullptr &&
            polled_before(l)) {
          // A QP replaced by reset(): its entry in this CQ is free again (unless its batch
          // counted it before the reset). Its drain marker is the layer's, not delivered.
          if (RDMAKIT_UNLIKELY(B::get_wr_id(w) == detail::drain_wr_id)) {
            if constexpr (Account) b.drained(*l);
            return 0;
          }
          if constexpr (Account) b.retired_polled(*l, (B::get_wr_id(w) & detail::recv_wr_bit) != 0);
        } else {
          std::uint32_t offset = 0;
          if (RDMAKIT_UNLIKELY(!b.departed.empty())) {  // a destroyed QP's
            const auto hit = b.departed_polled(qpn, (B::get_wr_id(w) & detail::recv_wr_bit) != 0, !Account);
            if (hit.dropped) return 0;  // an async_queue_pair's (docs/coroutines.md)
            offset = hit.recv_offset;
          }
          if (RDMAKIT_UNLIKELY(B::get_wr_id(w) == detail::drain_wr_id)) return 0;  // (its retired QP's, destroyed since)
          ++b.unrouted;
          g(nullptr, completion<B>(w, offset));
          return 1;
        }
      }
    }
    return routed(l);
  }

  // dispatch's call of a queue pair's handler, which may drop it (replace it, destroy
  // its queue pair) while it runs: reset_handler then leaves the freeing to this call,
  // or to the one further out if the handler dispatched again and is running there too;
  // also when the handler throws.
  static void call_handler_(detail::qp_link<B>& l, const completion<B>& c) {
    struct running {
      detail::qp_link<B>& l;
      void* const ctx = l.handler_ctx;
      void (*const free)(void*) = l.handler_free;
      bool dropped = false;
      bool* const outer = std::exchange(l.handler_dropped, &dropped);
      ~running() {
        if (!dropped)
          l.handler_dropped = outer;  // (the link lives: destroying it drops the handler)
        else if (outer)
          *outer = true;
        else
          free(ctx);
      }
    } r{l};
    l.handler(r.ctx, c);
  }

  // arm_ and wait_event_ answer EBADF on an empty handle, as the poll does: a policy's
  // wait may go on after its handler moved the handle away.
  int arm_() noexcept {
    if constexpr (P::needs_channel) {
      if (RDMAKIT_UNLIKELY(!blk_)) return EBADF;
      if (blk_->armed) return 0;
      int e = B::req_notify_cq(blk_->cq, detail::arms_solicited<P>);
      if (e == 0) blk_->armed = true;
      return e;
    } else {
      return 0;
    }
  }

  int wait_event_(std::chrono::milliseconds timeout) noexcept {
    if constexpr (P::needs_channel) {
      if (RDMAKIT_UNLIKELY(!blk_)) return EBADF;
      typename B::cq got{};
      int e = B::get_cq_event(blk_->channel, timeout, got);
      if (e != 0) return e;
      // One channel per CQ, so the event is ours. Acks are batched.
      blk_->armed = false;
      if (++blk_->unacked >= P::ack_batch) ack_events();
      return 0;
    } else {
      (void)timeout;
      return EAGAIN;
    }
  }

  template <class F>
  struct ops {
    completion_queue* cq;
    F& f;
    int poll() noexcept(nothrow<F>) {
      return given_or_empty_([this](int& polled) noexcept(nothrow<F>) { return cq->poll_batch_(f, polled); });
    }
    int arm() noexcept { return cq->arm_(); }
    int wait_event(std::chrono::milliseconds t) noexcept { return cq->wait_event_(t); }
  };
  template <class F>
  struct dispatch_ops {
    completion_queue* cq;
    F& f;
    int poll() {
      return given_or_empty_([this](int& polled) { return cq->dispatch_batch_(f, polled); });
    }
    int arm() noexcept { return cq->arm_(); }
    int wait_event(std::chrono::milliseconds t) noexcept { return cq->wait_event_(t); }
  };

  detail::shared_owner<detail::cq_block<B>> blk_;
};


RDMAKIT_END_NAMESPACE
