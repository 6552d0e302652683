#pragma once
/// `async_completion_queue`: a completion queue read by an event_loop. The loop waits
/// on its completion channel with epoll; when it is readable the CQ is drained (arm,
/// re-poll, the event_driven algorithm of polling.hpp) and every completion goes, after
/// its queue pair's credit accounting, to whoever awaits it: the coroutine that posted
/// the WR through an async_queue_pair, or else `co_await cq.next()`.
///
///   rdmakit::event_loop loop;
///   rdmakit::async_completion_queue cq(loop, dev.create_cq<rdmakit::event_driven<>>(256));
///   auto qp = pd.create_qp<rdmakit::rc>(cq.queue(), caps);   // then async_queue_pair
///
/// Needs a backend whose channels are file descriptors (fd_event_backend: ibverbs, the
/// mock) and a polling policy with a channel (event_driven, adaptive).
#include <rdmakit/backend.hpp>
#include <rdmakit/completion.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/detail/mailbox.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/task.hpp>
#include <rdmakit/polling.hpp>

#include <coroutine>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {

// Whether the backend has work that only a call into it moves on (the mock's simulated
// time): then the loop polls it instead of sleeping.
template <class B>
concept has_progress_pending = requires(typename B::channel ch) {
  { B::progress_pending(ch) } noexcept -> std::same_as<bool>;
};

/// What an async_queue_pair needs from the completion queues it is attached to,
/// whatever their polling policy.
class async_cq_base {
 public:
  virtual scheduler& loop() noexcept = 0;
  /// Completions of this queue pair number are dropped: an async_queue_pair went away
  /// with work requests outstanding, so nobody awaits them any more. Only those of no
  /// queue pair attached to the CQ, and only until a drain finds the CQ empty with no
  /// queue pair of that number attached: the one forgotten was destroyed before that
  /// poll, so none of its completions is left, and a queue pair that the device gives
  /// the number again (mlx5 reuses them) gets its own.
  /// `receives` false: only its sends (a queue pair on a shared receive queue, whose
  /// receive completions are the SRQ's, for next()).
  virtual void forget_qp(std::uint32_t qpn, bool receives) = 0;
  /// A new queue pair with this number awaits its own completions again.
  virtual void remember_qp(std::uint32_t qpn) noexcept = 0;

 protected:
  ~async_cq_base() = default;
};

/// The state an async_completion_queue shares with the queue pairs on it and with its
/// awaiters: it lives while any of them does, and keeps the loop's state alive.
template <class B, class P>
class async_cq_core final : public async_cq_base, public std::enable_shared_from_this<async_cq_core<B, P>> {
 public:
  async_cq_core(std::shared_ptr<scheduler> loop, completion_queue<B, P> cq)
      : loop_(std::move(loop)), cq_(std::move(cq)) {
    if (!cq_) throw_empty_argument("completion_queue", "async_completion_queue");
    watched_ = policy_access::shared_block(cq_);
    watch_.fd = B::channel_fd(cq_.native_channel());
    watch_.ctx = this;
    // Kept alive while it drains: a completion handler may drop its last owner. No owner
    // yet: the constructor's own drain runs a handler (of a CQ wrapped with completions
    // in it) that called loop.poll(), and that drain goes on when it returns.
    watch_.on_ready = [](void* self) noexcept {
      if (const auto keep = static_cast<async_cq_core*>(self)->weak_from_this().lock()) keep->drain_();
    };
    watch_.progress = [](void* self) noexcept { return static_cast<async_cq_core*>(self)->progress_(); };
    watch_.delivering = [](void* self) noexcept { return static_cast<async_cq_core*>(self)->watched_->delivering != 0; };
    loop_->watch(watch_);
    // Arms the CQ, so the first completion raises an event (nothing is polled yet: no
    // queue pair can be attached).
    drain_();
  }
  async_cq_core(const async_cq_core&) = delete;
  async_cq_core& operator=(const async_cq_core&) = delete;
  ~async_cq_core() { loop_->unwatch(watch_); }

  completion_queue<B, P>& queue() noexcept { return cq_; }
  /// Throws usage_error when the CQ handed out by queue() was replaced or moved out.
  void check_queue(const char* call) const {
    if (replaced_()) throw usage_error(cat(call, ": ", replaced_message));
  }
  scheduler& loop() noexcept override { return *loop_; }
  const std::shared_ptr<scheduler>& shared_loop() const noexcept { return loop_; }

  /// Completions no async_queue_pair awaits, for next().
  detail::mailbox<completion<B>>& mailbox() noexcept { return unawaited_; }

  void forget_qp(std::uint32_t qpn, bool receives) override {
    auto [it, fresh] = forgotten_.try_emplace(qpn, receives);
    if (!fresh) it->second = it->second || receives;
  }
  /// Completions no async_queue_pair awaits: next()'s (or dropped, when forgotten).
  void unawaited(const completion<B>& c) noexcept {
    if (RDMAKIT_UNLIKELY(!forgotten_.empty()) && is_forgotten_(c)) return;
    unawaited_.put(c, *loop_);
  }
  void remember_qp(std::uint32_t qpn) noexcept override {
    // Made by a handler while a batch is delivered: the rest of that batch is still the
    // forgotten queue pair's (is_forgotten_); let go once it ends (batch_scope).
    if (delivering_ == 0) forgotten_.erase(qpn);
  }

 private:
  // Drains the CQ and leaves it armed and empty, so the next completion wakes epoll. A
  // long stream of completions is taken a few batches per turn (`again_`).
  void drain_() noexcept {
    auto fallback = [this](const completion<B>& c) { unawaited(c); };
    for (int round = 0; round < 8; ++round) {
      wait_result r{0};
      try {
        const batch_scope batch(*this);
        r = cq_.dispatch_wait(fallback, std::chrono::milliseconds{0});
      } catch (...) {
        return handler_threw_();
      }
      if (r.failed()) {
        again_ = false;
        if (replaced_()) {  // moved out of queue(): its channel (kept) still raised this event
          report_replaced_();
          return;
        }
        loop_->fail(std::make_exception_ptr(
            verbs_error("ibv_poll_cq", r.error(), "draining a completion queue for the event loop")));
        return;
      }
      // Empty, or a handler dropped the last owner (the batch it was in is delivered).
      if (r.count() == 0 || this->weak_from_this().use_count() == 1) {
        again_ = false;
        if (r.count() == 0 && !forgotten_.empty()) forget_destroyed_(fallback);
        return;
      }
    }
    again_ = true;
  }

  // A completion of a queue pair forgotten (forget_qp): its number is in the map (with its
  // receives, unless only its sends were: an SRQ's receives are next()'s) and no
  // queue pair attached here had it when its batch was polled (one that does is a new
  // queue pair the device gave the number to, used directly: dispatch hands the fallback
  // those without a handler; one made by a handler during the batch is not: the batch's
  // completions of that number are the forgotten one's). Off the data path: only while
  // some number is forgotten.
  bool is_forgotten_(const completion<B>& c) const noexcept {
    const auto it = forgotten_.find(c.qp_num());
    if (it == forgotten_.end() || !(it->second || !c.is_recv())) return false;
    const std::uint64_t attached = watched_->serial_of(c.qp_num());
    return attached == 0 || (delivering_ != 0 && attached > polled_after_);
  }

  // Marks the delivery of one polled batch (a handler's loop.poll() may deliver another
  // inside it): the queue pairs made after polled_after_ were not there when it was
  // polled. Once the outermost ends, numbers a queue pair has again are let go.
  struct batch_scope {
    explicit batch_scope(async_cq_core& c) noexcept : core(c), outer(c.polled_after_) {
      ++c.delivering_;
      c.polled_after_ = last_qp_serial();
    }
    ~batch_scope() {
      core.polled_after_ = outer;
      if (--core.delivering_ == 0 && !core.forgotten_.empty())
        std::erase_if(core.forgotten_, [this](const auto& f) { return core.watched_->has_qp(f.first); });
    }
    batch_scope(const batch_scope&) = delete;
    batch_scope& operator=(const batch_scope&) = delete;
    async_cq_core& core;
    std::uint64_t outer;
  };

  // The drain found the CQ empty: the numbers of queue pairs destroyed before that are
  // let go (none of their completions can be left, or come). A poll of its own says the
  // CQ is empty whatever the polling policy's wait does; what it finds is delivered (the
  // CQ is armed: a completion that came after the arm raises an event for the next drain).
  template <class F>
  void forget_destroyed_(F& fallback) noexcept {
    try {
      const batch_scope batch(*this);
      if (policy_access::dispatch_until_given(cq_, fallback) != 0) return;
    } catch (...) {
      return handler_threw_();
    }
    std::erase_if(forgotten_, [this](const auto& f) { return !watched_->has_qp(f.first); });
  }

  // The on() handler of a queue pair used directly threw (its batch was delivered whole):
  // the loop's run rethrows it, and the next turn drains on.
  void handler_threw_() noexcept {
    again_ = true;
    loop_->fail(std::current_exception());
  }

  bool progress_() noexcept {
    // Asked on every turn of the loop: a CQ replaced through queue() is reported there,
    // at every run's first turn until this core goes (true: that turn ends without
    // sleeping, so the loop throws it). Reported once, later runs waited on a CQ nobody
    // drained any more, and the one it was made with kept its descriptor readable: a spin.
    if (RDMAKIT_UNLIKELY(replaced_())) return report_replaced_(), true;
    if (again_) return true;
    // A drain leaves the CQ armed: unarmed, the application's own wait() on queue() took
    // its event, and no later completion would raise one until a drain arms it again.
    if constexpr (P::needs_channel)
      if (!watched_->armed) return true;
    if constexpr (has_progress_pending<B>)
      return B::progress_pending(const_cast<completion_queue<B, P>&>(cq_).native_channel());
    return false;
  }

  static constexpr const char* replaced_message =
      "the completion queue of this async_completion_queue was replaced or moved out through queue(); the loop "
      "waits on the one it was made with: make a new async_completion_queue for another CQ";
  bool replaced_() const noexcept { return policy_access::block(cq_) != watched_.get(); }
  // One exception, made once: a loop records a failure still pending once (scheduler::fail_once).
  void report_replaced_() noexcept {
    if (!replaced_error_) {
      try {
        replaced_error_ = std::make_exception_ptr(usage_error(cat("async_completion_queue: ", replaced_message)));
      } catch (...) {
        replaced_error_ = std::current_exception();
      }
      unawaited_.close(replaced_error_);  // next() waits on nothing that can come: refused
    }
    loop_->fail_once(replaced_error_);
  }

  std::shared_ptr<scheduler> loop_;
  // The CQ the loop waits on, kept: should its handle be moved out of queue() and
  // destroyed, the channel and its descriptor stay until this is unwatched (a closed
  // descriptor's number, reused by another CQ's channel, would be unregistered here).
  shared_owner<cq_block<B>> watched_;
  completion_queue<B, P> cq_;
  fd_watch watch_;
  std::exception_ptr replaced_error_;
  bool again_ = false;
  detail::mailbox<completion<B>> unawaited_;
  std::map<std::uint32_t, bool> forgotten_;  // number, receives forgotten too
  int delivering_ = 0;              // batches being delivered (nested: a handler's loop.poll())
  std::uint64_t polled_after_ = 0;  // last_qp_serial() when the innermost one was polled
};

}  // namespace detail

/// A completion queue whose completions coroutines await on an event_loop.
template <fd_event_backend B, polling P = event_driven<>>
class async_completion_queue {
  static_assert(P::needs_channel,
                "async_completion_queue needs a completion channel to wait on: use event_driven<> or adaptive<> "
                "as the completion queue's polling policy, not busy_poll");

 public:
  /// The verbs backend.
  using backend = B;
  /// The completion queue's polling policy (one with a completion channel).
  using polling_policy = P;

  /// Takes over `cq` (made on a device of backend B with a channel) and starts waiting
  /// for its completions on `loop`. Throws usage_error for an empty CQ, verbs_error when
  /// epoll refuses the channel.
  template <detail::has_scheduler Loop>
  async_completion_queue(Loop& loop, completion_queue<B, P> cq)
      : core_(std::make_shared<detail::async_cq_core<B, P>>(loop.core(), std::move(cq))) {}

  /// The completion queue: create queue pairs on it (pd.create_qp<T>(acq.queue(), caps)).
  /// (Each accessor throws usage_error on a moved-from object.)
  completion_queue<B, P>& queue() const { return core_ref_("queue")->queue(); }
  /// Completions polled that nobody has awaited yet.
  std::size_t pending() const { return core_ref_("pending")->mailbox().kept(); }

  /// `co_await cq.next()`: the next completion that no async_queue_pair awaits (those
  /// of queue pairs used directly, receives posted with post_recv), in polling order.
  auto next() const { return next_awaiter(core_ref_("next"), std::nullopt); }
  /// As next(), giving up after `timeout`: std::nullopt then.
  /// Any duration type: one past the steady clock's range (hours::max()) is no limit.
  template <class Rep, class Period>
  auto next(std::chrono::duration<Rep, Period> timeout) const {
    return next_awaiter(core_ref_("next"), detail::steady_duration(timeout));
  }

  /// The shared state async_queue_pair attaches to.
  const std::shared_ptr<detail::async_cq_core<B, P>>& core() const { return core_ref_("core"); }

 private:
  using next_awaiter = detail::mailbox_awaiter<completion<B>, detail::async_cq_core<B, P>>;

  const std::shared_ptr<detail::async_cq_core<B, P>>& core_ref_(const char* call) const {
    if (!core_) detail::throw_empty("async_completion_queue", call);
    return core_;
  }

  std::shared_ptr<detail::async_cq_core<B, P>> core_;
};

RDMAKIT_END_NAMESPACE
