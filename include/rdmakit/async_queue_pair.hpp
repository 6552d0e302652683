#pragma once
/// `async_queue_pair`: a queue pair whose work requests coroutines await.
///
///   rdmakit::async_queue_pair aqp(cq, pd.create_qp<rdmakit::rc>(cq.queue(), caps));
///   auto rts = std::move(aqp).connect(peer);
///   rdmakit::wr_result r = co_await rts.write(src, dst);   // resumes with its completion
///
/// Each WR is posted when its awaitable is made (a receive is in place before the
/// message it is for can arrive; several WRs may be in flight before the first is
/// awaited), and signaled, whatever the signaling policy, so its own completion resumes it, and the send-queue credit rule of the policy layer holds: a
/// WR that finds no credit (or a full receive queue) waits for the queue pair's next
/// completion and is posted then, in order. A refused post resumes at once with the
/// refusal (wr_result::post()). A queue pair that goes to ERR flushes what it holds, so
/// every awaiting coroutine resumes with its flush status; one whose async_queue_pair
/// is destroyed resumes with wr_outcome::cancelled. `.within(timeout)` bounds a wait;
/// one that timed out leaves the WR going on, and awaiting the same awaitable again
/// waits for it again (a receive keeps its message so).
///
/// The typestate of queue_pair carries over: an INIT async_queue_pair awaits receives
/// only; connect()/activate() return the RTS one, with sends, writes, reads, atomics.
#include <rdmakit/async_completion_queue.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/in_place_await.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/task.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/queue_pair.hpp>
#include <rdmakit/wr_result.hpp>

#include <coroutine>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {

// The part of an awaiter its queue pair's state sees.
template <class B>
class wr_waiter {
 public:
  virtual void complete(const completion<B>& c) noexcept = 0;  // its WR completed
  virtual void retry() noexcept = 0;                           // credits may be back: post again
  virtual void cancel() noexcept = 0;                          // the queue pair goes away

 protected:
  ~wr_waiter() = default;
};

/// The queue pair of an async_queue_pair and its awaiters: which WR (by wr_id) each
/// waits for, and who waits for credits. wr_ids are slot tokens: index and generation,
/// so a completion that outlives its awaiter (timed out, destroyed) finds a free or
/// reused slot and is dropped.
template <class B, class T, class S>
class async_qp_core {
 public:
  using init_qp = queue_pair<B, T, S, qp_state::init>;
  using rts_qp = queue_pair<B, T, S, qp_state::rts>;

  template <class PS, class PR, qp_state State>
  async_qp_core(std::shared_ptr<async_cq_core<B, PS>> scq, std::shared_ptr<async_cq_core<B, PR>> rcq,
                queue_pair<B, T, S, State>&& qp)
      : loop_(scq->shared_loop()), scq_(scq), rcq_(rcq) {
    // Every check and the handler come before the queue pair is taken: on a throw it is
    // still the caller's, with its WRs (the refusal below says to poll them).
    scq->check_queue("async_queue_pair");
    rcq->check_queue("async_queue_pair");
    auto* link = policy_access::link(qp);
    if (!link) throw_empty_argument("queue_pair", "async_queue_pair");
    // Completions come to this object by wr_id, its own slot tokens: those of WRs posted
    // before would be dropped, or taken for an awaiter's whose token they happen to match.
    if (link->sq.held() != 0 || link->rq.held != 0)
      throw usage_error(detail::cat("async_queue_pair: QP ", detail::hex(link->qp_num), " has ", link->sq.held(),
                                    " send and ", link->rq.held,
                                    " receive work requests outstanding, posted on it directly: their completions "
                                    "would not reach you; make the async_queue_pair before posting (its "
                                    "awaitables post), or poll those completions first"));
    if (link->send_cq != policy_access::block(scq->queue()) || link->recv_cq != policy_access::block(rcq->queue()))
      throw usage_error(detail::cat("async_queue_pair: QP ", detail::hex(link->qp_num),
                                    " was not created on these completion queues: create it on the async completion "
                                    "queues' queue() (send CQ first, then receive CQ)"));
    if (&scq->loop() != &rcq->loop())
      throw usage_error("async_queue_pair: the send and receive completion queues belong to different event loops");
    // Called with a queue pair that is not empty (checked above; to_rts checks a replacement).
    auto watch = [](async_qp_core& self, auto& q) {
      detail::qp_link<B>& qlink = policy_access::live_link(q);
      self.qpn_ = qlink.qp_num;
      self.scq_->remember_qp(self.qpn_);
      self.rcq_->remember_qp(self.qpn_);
      // One handler per queue pair serves both CQs: dispatch calls the QP's handler.
      auto* recv_core = &static_cast<async_cq_core<B, PR>&>(*self.rcq_);
      static_cast<async_cq_core<B, PS>&>(*self.scq_).queue().on(q, [&self, recv_core](const completion<B>& c) {
        // On a shared receive queue its receives are the SRQ's, posted by the application: next()'s.
        if constexpr (shares_receives<T>)
          if (c.is_recv()) return recv_core->unawaited(c);
        (void)recv_core;
        self.on_completion_(c);
      });
      // on() refuses to replace that handler now, and its completions reach it whichever
      // call polls the CQ (poll() or wait() on queue() too).
      qlink.async_owned = true;
      qlink.send_cq->stop_caching(&qlink);
      qlink.recv_cq->stop_caching(&qlink);
    };
    watch_ = watch;
    watch(*this, qp);  // on() is the last step that may throw
    qp_.template emplace<queue_pair<B, T, S, State>>(std::move(qp));
  }
  async_qp_core(const async_qp_core&) = delete;
  async_qp_core& operator=(const async_qp_core&) = delete;

  /// Every awaiter resumes with wr_outcome::cancelled; completions still to come for
  /// this queue pair number are dropped by its CQs.
  ~async_qp_core() {
    bool outstanding = false;
    for (auto& s : slots_) {
      if (!s.used) continue;
      outstanding = true;
      if (s.waiter) std::exchange(s.waiter, nullptr)->cancel();
    }
    for (auto* w : std::exchange(credit_waiters_, {})) w->cancel();
    if (outstanding) {
      try {
        scq_->forget_qp(qpn_, !shares_receives<T>);  // an SRQ's receives are next()'s
        rcq_->forget_qp(qpn_, !shares_receives<T>);
      } catch (...) {  // out of memory: a stray completion reaches next() instead
      }
    }
  }

  scheduler& loop() noexcept { return *loop_; }
  const std::shared_ptr<scheduler>& shared_loop() const noexcept { return loop_; }
  // The typestate keeps QP in the variant (to_rts emplaces the RTS one before a connected
  // object takes this core). std::get, not *get_if: GCC's -Wnull-dereference sees get_if's
  // null in the user's unit (a broken invariant would end the process, not read null).
  template <class QP>
  QP& get() noexcept {
    return std::get<QP>(qp_);
  }
  auto& any() noexcept { return qp_; }

  /// Connects (RC/UC) or activates (UD) the INIT queue pair held; on a throw it stays INIT.
  template <class Step>
  void to_rts(Step step) {
    auto& q = std::get<init_qp>(qp_);
    try {
      rts_qp r = step(q);
      qp_.template emplace<rts_qp>(std::move(r));
    } catch (...) {
      // A refusal at RTR->RTS with receives posted replaced the queue pair (queue_pair::
      // connect): the old one completes them, through the handler it keeps, and the new
      // one needs one. If no new one could be made, no completion comes: the awaiters
      // of the receives (only receives are posted in INIT) are told here.
      if (!q) {
        cancel_all_();
      } else if (const std::uint32_t old = qpn_; q.qp_num() != old) {
        watch_(*this, q);
        try {
          scq_->forget_qp(old, !shares_receives<T>);  // once the old QP goes, its late completions are nobody's
          rcq_->forget_qp(old, !shares_receives<T>);
        } catch (...) {  // out of memory: a stray completion reaches next() instead
        }
      }
      throw;
    }
  }

  /// A slot for `w`'s WR: its token is the wr_id to post with.
  std::uint64_t acquire(wr_waiter<B>* w, std::uint32_t& index) {
    if (free_.empty()) {
      free_.reserve(slots_.size() + 1);  // room for every slot: a release never allocates
      slots_.emplace_back();
      free_.push_back(static_cast<std::uint32_t>(slots_.size() - 1));
    }
    index = free_.back();
    free_.pop_back();
    slot& s = slots_[index];
    s.used = true;
    s.waiter = w;
    s.gen = (s.gen + 1) & 0x7fffffffu;  // bit 63 of a wr_id belongs to the policy layer
    return (std::uint64_t{s.gen} << 32) | index;
  }
  /// Gives back a slot whose WR was not posted.
  void release(std::uint32_t index) noexcept {
    slots_[index].used = false;
    slots_[index].waiter = nullptr;
    free_.push_back(index);
  }
  /// The awaiter goes away before its WR completed: the slot stays taken until then.
  void abandon(std::uint32_t index) noexcept { slots_[index].waiter = nullptr; }

  /// The awaiter of slot `index` moved to `w`.
  void rebind(std::uint32_t index, wr_waiter<B>& w) noexcept { slots_[index].waiter = &w; }
  void replace_waiter(wr_waiter<B>& from, wr_waiter<B>& to) noexcept {
    std::replace(credit_waiters_.begin(), credit_waiters_.end(), &from, &to);
  }

  /// Queues `w` until credits come back. Only the first wait allocates (the awaitable's
  /// construction): a retry that waits again goes into room made here (wake_waiters_).
  void wait_credits(wr_waiter<B>& w) {
    retrying_.reserve(credit_waiters_.size() + 1);
    credit_waiters_.push_back(&w);
  }
  void stop_waiting(wr_waiter<B>& w) noexcept { std::erase(credit_waiters_, &w); }

 private:
  struct slot {
    wr_waiter<B>* waiter = nullptr;
    std::uint32_t gen = 0;
    bool used = false;
  };

  void on_completion_(const completion<B>& c) noexcept {
    const std::uint64_t token = c.wr_id();
    const auto index = static_cast<std::uint32_t>(token);
    if (index < slots_.size() && slots_[index].used && slots_[index].gen == static_cast<std::uint32_t>(token >> 32)) {
      wr_waiter<B>* w = slots_[index].waiter;
      slots_[index].used = false;
      slots_[index].waiter = nullptr;
      free_.push_back(index);  // capacity reserved by acquire: no allocation
      if (w) w->complete(c);
    }
    // The credits this completion gave back go to the WRs waiting for them now, in the
    // poll (the accounting ran before this handler): queued on the loop, the retries ran
    // after the coroutine this completion resumed, which posted the WRs it made next
    // with those credits, ahead of older ones (a stream of SENDs arrived out of order).
    if (!credit_waiters_.empty()) wake_waiters_();
  }

  // The queue pair is gone: every awaiter resumes cancelled, those of WRs waiting for
  // credits too (no completion will give them any).
  void cancel_all_() noexcept {
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      slot& s = slots_[i];
      if (!s.used) continue;
      s.used = false;
      free_.push_back(i);  // capacity reserved by acquire: no allocation
      if (s.waiter) std::exchange(s.waiter, nullptr)->cancel();
    }
    for (auto* w : std::exchange(credit_waiters_, {})) w->cancel();
  }

  // Retries in waiting order; one still without credits waits again, behind the rest,
  // in the list's room: retrying_ holds as many as credit_waiters_ (wait_credits), so
  // the swap leaves credit_waiters_ room for every one that waits again, and a retry
  // allocates nothing (it did, and failed its WR, whenever a completion gave back fewer
  // credits than the waiting WRs need).
  void wake_waiters_() noexcept {
    retrying_.swap(credit_waiters_);
    // By index: a retry that waits again reserves in retrying_ (a no-op then, as it holds
    // more than credit_waiters_ can reach meanwhile, but an iterator would not survive one).
    for (std::size_t i = 0; i < retrying_.size(); ++i) retrying_[i]->retry();
    retrying_.clear();
  }

  std::shared_ptr<scheduler> loop_;
  std::shared_ptr<async_cq_base> scq_;
  std::shared_ptr<async_cq_base> rcq_;
  std::vector<slot> slots_;
  std::vector<std::uint32_t> free_;
  std::vector<wr_waiter<B>*> credit_waiters_;
  std::vector<wr_waiter<B>*> retrying_;  // wake_waiters_'s, empty between its calls
  void (*watch_)(async_qp_core&, init_qp&) = nullptr;  // routes a (new) INIT queue pair's completions here
  std::uint32_t qpn_ = 0;
  std::variant<init_qp, rts_qp> qp_;  // last: destroyed first, while the rest still stands
};

// One WR, posted when made (Post(core, wr_id) posts it), awaited later: a receive is
// posted before the message it is for can arrive, and several WRs can be in flight
// before the first is awaited. Its queue pair points at it until it ends: a move (only
// before it is awaited) tells the queue pair the new address.
template <class B, class T, class S, class Post>
class wr_awaiter final : wr_waiter<B> {
  using core_type = async_qp_core<B, T, S>;

 public:
  wr_awaiter(core_type& core, Post post) : core_(&core), post_(std::move(post)), loop_(core.shared_loop()) {
    timed_out_.bind([](void* self) noexcept { static_cast<wr_awaiter*>(self)->on_timeout_(); }, this);
    (void)try_post_();
  }
  /// Moves the wait before it is awaited (GCC 12 moves a co_await operand that is not a
  /// prvalue into the coroutine frame): the queue pair is told the new address.
  /// One a coroutine awaits stays with it (its resumption and timer are there): the new
  /// one is empty then, and awaiting it throws usage_error.
  wr_awaiter(wr_awaiter&& o) noexcept
      : core_(nullptr),
        post_(o.suspended_ ? Post(o.post_) : Post(std::move(o.post_))),  // (a suspended one may retry)
        loop_(o.loop_),
        timeout_(o.timeout_) {
    timed_out_.bind([](void* self) noexcept { static_cast<wr_awaiter*>(self)->on_timeout_(); }, this);
    if (o.suspended_) return;
    core_ = std::exchange(o.core_, nullptr);
    state_ = std::exchange(o.state_, state::done);
    slot_ = o.slot_;
    result_ = std::move(o.result_);
    if (core_ && state_ == state::posted) core_->rebind(slot_, *this);
    if (core_ && state_ == state::credits) core_->replace_waiter(o, *this);
  }
  wr_awaiter& operator=(wr_awaiter&&) = delete;
  /// Not awaited, timed out, or destroyed with its coroutine: the WR's completion, when
  /// it comes, is dropped (its credits still go back). A WR still waiting for credits was
  /// never on the device: it is withdrawn, never posted.
  ~wr_awaiter() {
    if (in_place_) in_place_->orphan(*loop_);
    if (!core_) return;
    if (state_ == state::posted) core_->abandon(slot_);
    if (state_ == state::credits) core_->stop_waiting(*this);
  }

  /// Bounds the wait (from when it is awaited): after `timeout` the result is
  /// wr_outcome::timed_out and the WR goes on. `co_await qp.write(src, dst).within(100ms)`
  /// bounds a temporary's wait: its completion, should it come later, is dropped (and a
  /// WR still waiting for credits is withdrawn with the temporary).
  /// Any duration type: one past the steady clock's range (milliseconds::max()) is no limit.
  template <class Rep, class Period>
  wr_awaiter within(std::chrono::duration<Rep, Period> timeout) && noexcept {
    timeout_ = detail::steady_duration(timeout);  // not an overflowing implicit conversion
    return std::move(*this);  // a prvalue: GCC 12 would copy an xvalue operand of co_await
  }
  /// Bounds the wait of one kept in a variable, awaited in place: `co_await w.within(1s)`.
  /// If it times out, awaiting `w` again (bounded or not) waits for the same WR: a
  /// receive that timed out still gets its message. The bound is for that one await.
  template <class Rep, class Period>
  wr_awaiter& within(std::chrono::duration<Rep, Period> timeout) & noexcept {
    timeout_ = detail::steady_duration(timeout);
    return *this;
  }
  /// True once the WR has its result and no coroutine took it yet.
  bool ready() const noexcept { return result_.has_value(); }

  /// `co_await w` (and `co_await w.within(d)`) awaits `w` itself, in place, with either
  /// compiler (GCC 12 would otherwise copy an lvalue operand): after a timeout `w` still
  /// holds the WR, to await again. Destroyed by other code while the coroutine waits on
  /// it, `w` resumes the coroutine, whose co_await throws usage_error.
  in_place_awaiter<wr_awaiter> operator co_await() & noexcept { return in_place_awaiter<wr_awaiter>(*this); }
  /// A temporary, or `co_await std::move(w)`: moved into the awaiter the coroutine keeps.
  wr_awaiter operator co_await() && noexcept { return std::move(*this); }

  static constexpr const char* co_await_text() noexcept { return "co_await on a work request"; }
  // A result a suspended coroutine waits to be resumed with is that coroutine's.
  bool await_ready() const noexcept { return result_.has_value() && !suspended_; }
  void await_suspend(std::coroutine_handle<> h) {
    // Moved from (no result, no WR: nothing would resume it), or awaited by another
    // coroutine already (which would lose its resumption).
    if (state_ == state::done || suspended_)
      throw usage_error("co_await on a work request: this awaitable was moved from or awaited already (a WR is "
                        "awaited once, by one coroutine: co_await std::move(w), .within() and auto w2 = "
                        "std::move(w) move it: await the one it moved to)");
    detail::check_awaited_on(*loop_, "co_await on a work request");
    // The timer first: if arming it throws, the coroutine resumes with the exception, and
    // suspended_ would have the WR's completion resume it a second time.
    if (timeout_) timer_.arm(*loop_, detail::deadline_after(*timeout_), timed_out_);
    resume_.bind(h);
    suspended_ = true;
  }
  /// The result, taken: awaited again, this awaitable is refused (a WR is awaited once),
  /// unless the result was timed_out: then it waits for the WR again.
  wr_result<B> await_resume() noexcept {
    timeout_.reset();  // within()'s bound is this await's: the next one is unbounded unless given one
    wr_result<B> r = std::move(*result_);
    result_.reset();
    return r;
  }

 private:
  enum class state : std::uint8_t { credits, posted, done };

  // Posts the WR; false when it is finished already (refused).
  bool try_post_() {
    const std::uint64_t wr_id = core_->acquire(this, slot_);
    const post_result r = post_(*core_, wr_id);
    if (r.ok()) {
      state_ = state::posted;
      return true;
    }
    core_->release(slot_);
    if (r.status == post_status::sq_full || r.status == post_status::rq_full) {
      state_ = state::credits;
      core_->wait_credits(*this);
      return true;
    }
    finish_(wr_result<B>(r));
    return false;
  }
  void finish_(wr_result<B> r) noexcept {
    state_ = state::done;
    timer_.disarm();
    result_.emplace(std::move(r));
    if (suspended_) loop_->post(resume_);
  }

  void complete(const completion<B>& c) noexcept override { finish_(wr_result<B>(c)); }
  void retry() noexcept override {
    try {
      (void)try_post_();
    } catch (...) {  // no memory for a slot: fail this WR, not the loop
      finish_(wr_result<B>(post_result{post_status::backend_error, ENOMEM, 0}));
    }
  }
  void cancel() noexcept override {
    core_ = nullptr;
    finish_(wr_result<B>(wr_outcome::cancelled));
  }
  void on_timeout_() noexcept {
    // The completion came in the same turn of the loop: it queued the resumption already.
    if (state_ == state::done) return;
    // The WR goes on (posted, or waiting for credits), still bound to this awaiter: awaited
    // again, it waits for it again; destroyed, it drops it (the destructor unhooks it).
    suspended_ = false;
    result_.emplace(wr_outcome::timed_out);
    resume_.run();  // last: the coroutine may destroy this awaiter
  }

  friend class in_place_awaiter<wr_awaiter>;
  core_type* core_;
  Post post_;
  std::shared_ptr<scheduler> loop_;
  in_place_awaiter<wr_awaiter>* in_place_ = nullptr;  // the coroutine awaiting this in place
  std::optional<std::chrono::steady_clock::duration> timeout_;
  state state_ = state::done;
  bool suspended_ = false;
  std::uint32_t slot_ = 0;
  std::optional<wr_result<B>> result_;
  work_item resume_;
  work_item timed_out_;
  timer_node timer_;  // last: disarmed before the items it points to go away
};

}  // namespace detail

/// A queue pair of transport T and signaling policy S whose work requests coroutines
/// await, in state State (init or rts) as queue_pair is.
template <fd_event_backend B, transport T, signaling S = signal_all, qp_state State = qp_state::init>
class async_queue_pair {
  using core_type = detail::async_qp_core<B, T, S>;

 public:
  /// The verbs backend.
  using backend = B;
  /// The queue pair it holds.
  using queue_pair_type = queue_pair<B, T, S, State>;
  /// The state in the type, as queue_pair's: init (receives only) or rts.
  static constexpr qp_state state = State;

  /// Takes over `qp`, created on `cq.queue()` (both its send and receive CQ). A refusal
  /// (usage_error) leaves `qp` as it was.
  template <class P>
  async_queue_pair(async_completion_queue<B, P>& cq, queue_pair_type&& qp)
      : core_(std::make_unique<core_type>(cq.core(), cq.core(), std::move(qp))) {}
  /// Takes over `qp`, created on `send_cq.queue()` and `recv_cq.queue()`; likewise.
  template <class PS, class PR>
  async_queue_pair(async_completion_queue<B, PS>& send_cq, async_completion_queue<B, PR>& recv_cq,
                   queue_pair_type&& qp)
      : core_(std::make_unique<core_type>(send_cq.core(), recv_cq.core(), std::move(qp))) {}

  /// Takes over `other`'s queue pair; awaiters keep waiting on it.
  async_queue_pair(async_queue_pair&&) noexcept = default;
  /// Destroys the queue pair held (its awaiters resume cancelled), then takes over `other`'s.
  async_queue_pair& operator=(async_queue_pair&&) noexcept = default;
  /// Coroutines still awaiting its WRs resume with wr_outcome::cancelled.
  ~async_queue_pair() = default;

  /// False once moved from, or when it holds no queue pair (a connect refused at RTS
  /// whose replacement could not be made).
  explicit operator bool() const noexcept {
    return core_ != nullptr && std::visit([](const auto& qp) { return static_cast<bool>(qp); }, core_->any());
  }
  /// The queue pair (read-only: posting goes through the awaitables).
  const queue_pair_type& qp() const { return core_ref_("qp").template get<queue_pair_type>(); }
  /// What the peer needs to connect to this QP.
  endpoint local_endpoint() const { return qp().local_endpoint(); }
  /// The queue pair's number.
  std::uint32_t qp_num() const { return qp().qp_num(); }

  /// INIT→RTS against `peer` (RC/UC), as queue_pair::connect; on a throw this object
  /// is still a valid INIT async_queue_pair.
  async_queue_pair<B, T, S, qp_state::rts> connect(const endpoint& peer, const connect_options& o = {}) && {
    static_assert(State == qp_state::init, "connect(): this queue pair is already connected");
    core_ref_("connect").to_rts([&](auto& qp) { return std::move(qp).connect(peer, o); });
    return async_queue_pair<B, T, S, qp_state::rts>(std::move(core_));
  }
  /// INIT→RTS of a UD queue pair, as queue_pair::activate.
  async_queue_pair<B, T, S, qp_state::rts> activate() && {
    static_assert(State == qp_state::init, "activate(): this queue pair is already active");
    core_ref_("activate").to_rts([](auto& qp) { return std::move(qp).activate(); });
    return async_queue_pair<B, T, S, qp_state::rts>(std::move(core_));
  }

  /// `co_await aqp.recv(buf)`: posts a receive into `buf` and resumes with its completion.
  /// (A queue pair on a shared receive queue has none of its own: see the message below.)
  auto recv(const local_buffer& buf) {
    static_assert(!detail::shares_receives<T>,
                  "this queue pair takes its receives from a shared receive queue: post them with "
                  "srq.post_recv(buf, wr_id), and co_await their completions from the async completion queue's "
                  "next() (docs/coroutines.md)");
    if constexpr (!detail::shares_receives<T>)
      return awaiter_("recv", [buf](core_type& c, std::uint64_t id) {
        return std::visit([&](auto& qp) { return qp.post_recv(buf, id); }, c.any());
      });
  }

  /// `co_await aqp.post(op::write{src, dst})`: posts any operation of operations.hpp
  /// signaled and resumes with its completion. With send_flags::inline_data the bytes
  /// are copied when the awaitable is made, so the buffer may be reused at once, as
  /// verbs lets it after an inline post (other buffers stay in use until the WR
  /// completes: it may wait for credits and be posted later).
  template <operation Op>
  auto post(const Op& o, send_flags flags = send_flags::none) {
    static_assert(State == qp_state::rts, RDMAKIT_DETAIL_NEEDS_RTS);
    Op::rule::template check<T>();
    if constexpr (detail::may_inline(Op::code) || detail::gathers<Op>) {
      // A WR that waits for credits is posted later, when the caller's buffers may have
      // changed: inline data is read at the post, and verbs lets its buffer be reused
      // then, so the awaitable keeps a copy of the bytes, taken now (up to
      // max_inline_data: a larger one is refused anyway); a gather's list may be gone,
      // so it keeps a copy of the list.
      std::vector<std::byte> bytes;
      bool copied = false;
      if constexpr (detail::may_inline(Op::code))
        copied = has_any(flags, send_flags::inline_data) && copy_inline_(o, bytes);
      std::vector<local_buffer> sges;
      if constexpr (detail::gathers<Op>)
        if (!copied) sges.assign(o.local.begin(), o.local.end());
      return awaiter_("post", [o, flags, copied, bytes = std::move(bytes), sges = std::move(sges)](
                                  core_type& c, std::uint64_t id) {
        Op own = o;
        const auto size = static_cast<std::uint32_t>(bytes.size());
        const local_buffer copy{reinterpret_cast<std::uintptr_t>(bytes.data()), size, 0};
        if constexpr (detail::gathers<Op>)
          own.local = copied ? std::span<const local_buffer>(&copy, 1) : std::span<const local_buffer>(sges);
        else if (copied)
          own.local = copy;
        return c.template get<queue_pair_type>().post(own, id, flags | send_flags::signaled);
      });
    } else {
      return awaiter_("post", [o, flags](core_type& c, std::uint64_t id) {
        return c.template get<queue_pair_type>().post(o, id, flags | send_flags::signaled);
      });
    }
  }
  /// SEND `buf` to the connected peer.
  auto send(const local_buffer& buf, send_flags flags = send_flags::none) { return post(op::send<>{buf}, flags); }
  /// SEND with immediate data (host order).
  auto send_imm(const local_buffer& buf, std::uint32_t imm, send_flags flags = send_flags::none) {
    return post(op::send_imm<>{buf, imm}, flags);
  }
  /// UD: SEND `buf` to `to`.
  auto send(const ud_address<B>& to, const local_buffer& buf, send_flags flags = send_flags::none) {
    return post(op::ud_send<B>{buf, to}, flags);
  }
  /// RDMA WRITE `src` to `dst`.
  template <access A>
  auto write(const local_buffer& src, const remote_region<A>& dst, send_flags flags = send_flags::none) {
    return post(op::write<A>{src, dst}, flags);
  }
  /// RDMA WRITE with immediate data (consumes a receive at the peer).
  template <access A>
  auto write_imm(const local_buffer& src, const remote_region<A>& dst, std::uint32_t imm,
                 send_flags flags = send_flags::none) {
    return post(op::write_imm<A>{src, dst, imm}, flags);
  }
  /// RDMA READ from `src` into `dst`.
  template <access A>
  auto read(const local_buffer& dst, const remote_region<A>& src, send_flags flags = send_flags::none) {
    return post(op::read<A>{dst, src}, flags);
  }
  /// Atomic fetch-and-add of `add` on the 8 bytes at `remote`; the old value lands in `result`.
  template <access A>
  auto fetch_add(const local_buffer& result, const remote_region<A>& remote, std::uint64_t add) {
    return post(op::fetch_add<A>{result, remote, add});
  }
  /// Atomic compare-and-swap on the 8 bytes at `remote`; the old value lands in `result`.
  template <access A>
  auto compare_swap(const local_buffer& result, const remote_region<A>& remote, std::uint64_t compare,
                    std::uint64_t swap) {
    return post(op::compare_swap<A>{result, remote, compare, swap});
  }

 private:
  template <fd_event_backend, transport, signaling, qp_state>
  friend class async_queue_pair;
  explicit async_queue_pair(std::unique_ptr<core_type> core) noexcept : core_(std::move(core)) {}

  core_type& core_ref_(const char* call) const {
    if (!core_) detail::throw_empty("async_queue_pair", call);
    return *core_;
  }
  // The bytes of an inline WR's buffers into `out`; false (nothing copied) when they are
  // more than the queue pair takes inline.
  template <class Op>
  bool copy_inline_(const Op& o, std::vector<std::byte>& out) const {
    std::span<const local_buffer> bufs;
    if constexpr (detail::gathers<Op>)
      bufs = o.local;
    else
      bufs = std::span<const local_buffer>(&o.local, 1);
    std::size_t total = 0;
    for (const local_buffer& b : bufs) total += b.length;
    if (total > qp().caps().max_inline_data) return false;
    out.reserve(total);
    for (const local_buffer& b : bufs) {
      const auto* p = reinterpret_cast<const std::byte*>(static_cast<std::uintptr_t>(b.addr));
      out.insert(out.end(), p, p + b.length);
    }
    return true;
  }
  template <class Post>
  detail::wr_awaiter<B, T, S, Post> awaiter_(const char* call, Post post) {
    return {core_ref_(call), std::move(post)};
  }

  std::unique_ptr<core_type> core_;
};

RDMAKIT_END_NAMESPACE
