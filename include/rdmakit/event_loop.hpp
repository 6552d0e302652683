#pragma once
/// `event_loop`: a minimal single-threaded executor for rdmakit's coroutines. It runs
/// spawned `task<>`s, resumes the ones whose completions, events or timers are ready,
/// and otherwise sleeps in epoll_wait on the descriptors registered with it (completion
/// channels, asynchronous event descriptors): no busy loop. Everything that waits on it
/// (async_completion_queue, async_queue_pair, device_events, sleep_for) is used from the
/// loop's thread only.
///
/// Lifetimes: destroying the loop destroys the coroutines it still runs (their awaiters
/// unhook themselves); objects registered with it keep its epoll state alive, so they
/// may be destroyed after it (awaiting them then, from another loop, is a usage_error:
/// nothing would resume the coroutine).
#include <rdmakit/config.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/await_checks.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/in_place_await.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/detail/thread.hpp>
#include <rdmakit/detail/work_queue.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/task.hpp>

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {

/// The loop's state, shared with what registers with it: the epoll scheduler.
class loop_core final : public scheduler {
 public:
  using clock = std::chrono::steady_clock;

  loop_core() : epfd_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (epfd_ < 0) throw verbs_error("epoll_create1", errno, "creating the event loop's epoll instance");
  }
  loop_core(const loop_core&) = delete;
  loop_core& operator=(const loop_core&) = delete;
  ~loop_core() {
    while (!timers_.empty()) timers_.begin()->second->disarm();
    ::close(epfd_);
  }

  /// Queues `w` to run on the loop's next turn.
  void post(work_item& w) noexcept override { ready_.push_back(w); }

  /// The thread inside run(), poll() or spawn() (null: none). A loop is its thread's: a
  /// second thread's call while one is inside raced on the task list and ready queue.
  std::atomic<const void*> user{nullptr};
  /// Whether a thread other than the caller is inside run(), poll() or spawn(). Best
  /// effort, as a CQ's waiter mark: a call just before that thread enters is not seen.
  bool used_elsewhere() const noexcept {
    const void* u = user.load(std::memory_order_acquire);
    return u != nullptr && u != this_thread_tag();
  }
  [[noreturn]] static void throw_used_elsewhere(const char* what) {
    throw usage_error(cat("an async completion queue or device_events ", what,
                          " an event_loop while another thread is inside its run(), poll() or spawn(): a loop and "
                          "what waits on it belong to one thread at a time; make and destroy them on the loop's "
                          "thread, or while no thread runs it"));
  }
  [[noreturn]] static void abort_used_elsewhere(const char* what) noexcept {
    std::fprintf(stderr,
                 "rdmakit: %s while another thread is inside run(), poll() or spawn() of that event_loop, which "
                 "reads what this changes; a loop and what waits on it belong to one thread at a time (a "
                 "destructor cannot throw: ending the program)\n",
                 what);
    std::abort();
  }

  /// Starts waiting on `w.fd`; throws verbs_error when epoll refuses it, and usage_error
  /// while another thread is inside run(), poll() or spawn() (which reads the watches).
  void watch(fd_watch& w) override {
    if (used_elsewhere()) throw_used_elsewhere("made on");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &w;
    watches_.reserve(watches_.size() + 1);  // first: out of memory, nothing is registered
    if (w.fd < 0 || ::epoll_ctl(epfd_, EPOLL_CTL_ADD, w.fd, &ev) != 0)
      throw verbs_error("epoll_ctl", w.fd < 0 ? EBADF : errno,
                        detail::cat("registering descriptor ", w.fd, " with the event loop"));
    watches_.push_back(&w);
  }
  /// Stops waiting on `w` (before `w` goes away). While another thread is inside run(),
  /// poll() or spawn(), ends the program, saying why (a destructor cannot throw).
  void unwatch(fd_watch& w) noexcept override {
    if (used_elsewhere()) abort_used_elsewhere("an async completion queue or device_events was destroyed");
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, w.fd, nullptr);
    std::erase(watches_, &w);
  }

  /// Records a failure of something the loop drives; run_ready() and wait() rethrow them,
  /// one a call, in the order they came. (Out of memory for a later one, the first is kept.)
  void fail(std::exception_ptr e) noexcept override {
    if (!error_) {
      error_ = std::move(e);
      return;
    }
    try {
      more_errors_.push_back(std::move(e));
    } catch (...) {
    }
  }

  /// As fail(), unless `e` is pending already (a source that reports one at every turn).
  void fail_once(std::exception_ptr e) noexcept override {
    if (e == error_) return;
    for (const auto& pending : more_errors_)
      if (pending == e) return;
    fail(std::move(e));
  }

  /// Puts `e`, rethrown already, back in front of the failures still to rethrow: the next
  /// run() or poll() rethrows it (run(t) whose t finished in the same turn returns t's
  /// value first). Out of memory, it is dropped.
  void fail_again(std::exception_ptr e) noexcept {
    if (error_) {
      try {
        // At the end, then to the front: GCC 12's -Wnull-dereference warns (falsely) in
        // vector::insert of an exception_ptr, in the user's translation unit.
        more_errors_.push_back(std::move(error_));
      } catch (...) {
        return;
      }
      std::rotate(more_errors_.begin(), more_errors_.end() - 1, more_errors_.end());
    }
    error_ = std::move(e);
  }

  /// Runs what was ready when called; work it queues waits for the next call, so the
  /// descriptors get a look in between. Rethrows what a task failed with.
  void run_ready() {
    rethrow_();
    work_list now;
    ready_.move_all_to(now);
    roots.run(now);
    rethrow_();
  }

  /// Waits for descriptors (not at all when work is ready, `block` is false, or a source
  /// has progress to make) and queues what they and the due timers wake. Throws what a
  /// source failed with, and usage_error when blocking would wait for nothing that can
  /// ever come (the caller blocks only while coroutines wait).
  void wait(bool block) {
    fire_due_timers_();
    bool progress = false;
    for (auto* w : watches_)
      if (w->progress && w->progress(w->ctx)) progress = true;
    int timeout_ms = 0;
    if (block && ready_.empty() && !progress) {
      if (!timers_.empty()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(timers_.begin()->first.first - clock::now());
        timeout_ms = left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
      } else if (watches_.empty()) {
        throw usage_error(
            "event_loop::run(): coroutines are waiting but nothing can wake them (no completion queue, "
            "device events or timer is registered with this loop): await completions through an "
            "async_completion_queue made on this loop");
      } else {
        timeout_ms = -1;
      }
    }
    epoll_event evs[16];
    const int n = ::epoll_wait(epfd_, evs, 16, timeout_ms);
    if (n < 0 && errno != EINTR) throw verbs_error("epoll_wait", errno, "waiting in the event loop");
    // A handler may destroy a source whose event or progress comes later in this turn
    // (a completion handler dropping another async CQ): each is looked up first.
    const dispatching in_handlers(*this);
    for (int i = 0; i < n; ++i) {
      auto* w = static_cast<fd_watch*>(evs[i].data.ptr);
      if (watching_(w)) w->on_ready(w->ctx);
    }
    if (progress) {
      const std::vector<fd_watch*> sources = watches_;  // a copy: a handler may (un)register a source
      for (auto* w : sources)
        if (watching_(w) && w->progress && w->progress(w->ctx)) w->on_ready(w->ctx);
    }
    fire_due_timers_();
    rethrow_();
  }

  /// Whether user code a source runs is on the stack: the loop's callbacks (a CQ's
  /// drain, which runs on() handlers), or a watched CQ's delivery of a batch to on()
  /// handlers from the application's own poll of it. Neither can finish before they return.
  bool in_handlers() const noexcept {
    if (handler_depth_ != 0) return true;
    for (const fd_watch* w : watches_)
      if (w->delivering && w->delivering(w->ctx)) return true;
    return false;
  }

 private:
  // Marks the callbacks' run (nested turns from a handler's poll() count on).
  class dispatching {
   public:
    explicit dispatching(loop_core& core) noexcept : core_(core) { ++core_.handler_depth_; }
    dispatching(const dispatching&) = delete;
    dispatching& operator=(const dispatching&) = delete;
    ~dispatching() { --core_.handler_depth_; }

   private:
    loop_core& core_;
  };

  using timer_key = std::pair<clock::time_point, std::uint64_t>;  // deadline, then arming order

  void start_timer(timer_node& t) override { timers_.emplace(timer_key{t.when(), t.id()}, &t); }
  void stop_timer(timer_node& t) noexcept override { timers_.erase(timer_key{t.when(), t.id()}); }

  bool watching_(const fd_watch* w) const noexcept {
    for (const fd_watch* x : watches_)
      if (x == w) return true;
    return false;
  }

  void fire_due_timers_() noexcept {
    const auto now = clock::now();
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      timer_node* t = timers_.begin()->second;
      timers_.erase(timers_.begin());
      ready_.push_back(t->fired());
    }
  }
  void rethrow_() {
    if (!error_) return;
    std::exception_ptr e = std::exchange(error_, {});
    if (!more_errors_.empty()) {  // the next one's turn
      error_ = std::move(more_errors_.front());
      more_errors_.erase(more_errors_.begin());
    }
    std::rethrow_exception(e);
  }

  int epfd_;
  work_list ready_;
  std::vector<fd_watch*> watches_;
  std::map<timer_key, timer_node*> timers_;
  std::exception_ptr error_;
  std::vector<std::exception_ptr> more_errors_;  // after error_, in order
  int handler_depth_ = 0;                        // dispatching scopes open (in_handlers())
};

}  // namespace detail

class event_loop;

namespace detail {
// A spawned task's driver: owned by the loop until the task finishes (then its frame
// goes away by itself), destroyed with the loop otherwise.
class root_task {
 public:
  class promise_type {
   public:
    promise_type(event_loop& loop, task<void>&);
    ~promise_type();
    root_task get_return_object() noexcept { return {}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept;

   private:
    loop_core& core_;  // not the event_loop: a task may destroy it
    work_item start_;
  };
};

// Marks `core` used by the calling thread for a call's duration (nested calls on that
// thread pass); a call from another thread meanwhile is a usage_error, not a data race.
class loop_user {
 public:
  loop_user(loop_core& core, const char* call) : core_(core) {
    const void* me = this_thread_tag();
    const void* cur = nullptr;
    if (core_.user.compare_exchange_strong(cur, me, std::memory_order_acquire)) {
      first_ = true;
    } else if (cur != me) {
      throw usage_error(cat("event_loop::", call, " called while another thread is inside run(), poll() or spawn() of "
                            "the same loop: a loop and what waits on it belong to one thread at a time; give each "
                            "thread its own loop, and hand work to a loop's thread through your own queue"));
    }
  }
  loop_user(const loop_user&) = delete;
  loop_user& operator=(const loop_user&) = delete;
  ~loop_user() {
    if (first_) core_.user.store(nullptr, std::memory_order_release);
  }

 private:
  loop_core& core_;
  bool first_ = false;
};
}  // namespace detail

/// Runs coroutines on the calling thread; see the top of this header.
class event_loop {
 public:
  event_loop() : core_(std::make_shared<detail::loop_core>()) {}
  event_loop(const event_loop&) = delete;
  event_loop& operator=(const event_loop&) = delete;
  /// Destroys the tasks that have not finished (their awaiters unhook themselves). From
  /// inside one of them, that task runs on until it waits or finishes, then they all go
  /// and run() throws usage_error.
  ~event_loop() {
    if (core_->used_elsewhere()) detail::loop_core::abort_used_elsewhere("an event_loop was destroyed");
    core_->roots.abandon();
  }

  /// Starts `t` on the loop's next turn. The loop owns it until it finishes; an
  /// exception escaping it is rethrown by run().
  void spawn(task<void> t) {
    if (!t) detail::throw_empty_argument("task", "event_loop::spawn");
    detail::loop_user in_use(*core_, "spawn()");
    (void)drive_(*this, std::move(t));
  }

  /// Runs until every spawned task has finished. Rethrows the first exception that
  /// escaped a task (the others keep their state: run() may be called again, and
  /// rethrows the next task's exception, if another one failed meanwhile). From one of
  /// the loop's tasks, or from an on() handler of an async completion queue's queue()
  /// (run by the loop's drain or by a poll of your own), run() and run(t) throw
  /// usage_error, and run(t) has not started t: neither caller could go on until they
  /// returned.
  void run() {
    run_until_([core = core_.get()] { return core->roots.empty(); });
  }

  /// Spawns `t` and runs until it has finished (other tasks run meanwhile and may still
  /// be unfinished); returns its value or rethrows its exception. When another task's
  /// exception ends it first (rethrown here), `t` goes on as a spawned task; one that
  /// comes in the turn `t` finished in is rethrown by the next run() or poll() instead.
  template <class T>
  T run(task<T> t) {
    // Refused before t is spawned: it would run later, on the caller's objects, gone by then.
    const auto core = core_;  // a task may destroy this loop
    detail::loop_user in_use(*core, "run()");
    refuse_run_(*core);
    // Shared with t's driver, not a local: when another task's exception ends this call,
    // t runs on (as spawned) and delivers its result here, unread.
    if constexpr (std::is_void_v<T>) {
      auto finished = std::make_shared<bool>(false);
      spawn(finish_(std::move(t), finished));
      run_for_(*core, [&] { return *finished; });
    } else {
      auto out = std::make_shared<std::optional<T>>();
      spawn(capture_(std::move(t), out));
      run_for_(*core, [&] { return out->has_value(); });
      return std::move(**out);
    }
  }

  /// Runs one turn without sleeping: what is ready, what descriptors have (for loops
  /// that interleave the loop with their own polling).
  void poll() {
    const auto core = core_;  // a task may destroy this loop
    detail::loop_user in_use(*core, "poll()");
    refuse_reentry_(*core, "poll()");
    core->run_ready();
    if (core->roots.abandoned()) throw_abandoned_();
    core->wait(false);
  }

  /// Spawned tasks that have not finished.
  std::size_t tasks() const noexcept { return core_->roots.size(); }

  /// `co_await loop.sleep_for(d)`: resumes after `d` (on a later turn of this loop). Any
  /// duration type: one past the steady clock's range (seconds::max()) sleeps for ever.
  /// Awaited by one coroutine at a time, and not after the loop is destroyed (usage_error).
  template <class Rep, class Period>
  auto sleep_for(std::chrono::duration<Rep, Period> period) noexcept {
    const auto d = detail::steady_duration(period);  // not an overflowing implicit conversion
    class awaiter {
     public:
      awaiter(std::shared_ptr<detail::loop_core> core, std::chrono::steady_clock::duration d) noexcept
          : core_(std::move(core)), d_(d) {}
      ~awaiter() {
        if (in_place_) in_place_->orphan(*core_);
      }
      // Awaited where it is, with either compiler: destroyed by other code while the
      // coroutine sleeps on it, it resumes the coroutine, whose co_await throws usage_error.
      detail::in_place_awaiter<awaiter> operator co_await() & noexcept { return detail::in_place_awaiter<awaiter>(*this); }
      detail::in_place_awaiter<awaiter> operator co_await() && noexcept { return detail::in_place_awaiter<awaiter>(*this); }
      static constexpr const char* co_await_text() noexcept { return "co_await sleep_for()"; }
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) {
        // Sleeping, or woken and not yet resumed: a second coroutine would take the resumption.
        if (timer_.armed() || resume_.linked())
          throw usage_error("co_await sleep_for(): this sleep is awaited by another coroutine already: call "
                            "sleep_for() in each coroutine");
        if (RDMAKIT_UNLIKELY(core_->gone()))
          throw usage_error("co_await sleep_for(): the event_loop this was made on was destroyed, so nothing would "
                            "end the sleep: call sleep_for() on the loop that runs this coroutine");
        detail::refuse_other_loop(*core_, "co_await sleep_for()");
        timer_.arm(*core_, detail::deadline_after(d_), resume_);  // first: a throw leaves nothing to resume
        resume_.bind(h);
      }
      void await_resume() const noexcept {}

     private:
      friend class detail::in_place_awaiter<awaiter>;
      std::shared_ptr<detail::loop_core> core_;  // shared: the awaiter may outlive its loop
      std::chrono::steady_clock::duration d_;
      detail::in_place_awaiter<awaiter>* in_place_ = nullptr;  // the coroutine awaiting this in place
      detail::work_item resume_;
      detail::timer_node timer_;  // after resume_: disarmed before resume_ goes away
    };
    return awaiter(core_, d);
  }

  /// The scheduler that completion queues and event sources register with.
  std::shared_ptr<detail::scheduler> core() const noexcept { return core_; }

 private:
  friend class detail::root_task::promise_type;

  // `done` reads nothing of this loop: a task may destroy it. Then run(t) returns what t
  // made, if it finished; anything else throws.
  template <class Done>
  void run_until_(Done done, bool awaits_one_task = false) {
    const auto core = core_;
    detail::loop_user in_use(*core, "run()");
    refuse_run_(*core);
    for (;;) {
      core->run_ready();
      if (RDMAKIT_UNLIKELY(core->roots.abandoned())) {
        if (awaits_one_task && done()) return;
        throw_abandoned_();
      }
      if (done()) return;
      core->wait(true);
    }
  }
  // run(t)'s turns until `done` (t finished). Another task's exception ends them, unless t
  // finished in the same turn: then t's result is returned and the exception kept for the
  // next run() or poll() (t's effects, at a peer too, happened: a caller told it failed
  // would repeat them).
  template <class Done>
  void run_for_(detail::loop_core& core, Done done) {
    try {
      run_until_(done, true);
    } catch (...) {
      if (!done()) throw;
      core.fail_again(std::current_exception());
    }
  }
  // Where run() could never return: from a task, or from a completion handler.
  static void refuse_run_(const detail::loop_core& core) {
    refuse_reentry_(core, "run()");
    if (RDMAKIT_UNLIKELY(core.in_handlers()))
      throw usage_error(
          "event_loop::run() called from a completion handler (one set with on() on an async completion queue's "
          "queue()), run by the loop or by a poll of that queue: the poll's delivery of its batch cannot finish "
          "until the handler returns, and the completions run() would wait for may be in it; call poll() there "
          "(it does not block), or spawn() a task that co_awaits what you need");
  }
  // The calling task cannot go on until the call returns, and run() would wait for it too.
  static void refuse_reentry_(const detail::loop_core& core, const char* call) {
    if (RDMAKIT_UNLIKELY(core.roots.running()))
      throw usage_error(detail::cat("event_loop::", call, " called from inside one of its own tasks, which cannot go on "
                                    "until it returns: co_await what the task waits for instead (a task, a "
                                    "completion, sleep_for)"));
  }
  [[noreturn]] static void throw_abandoned_() {
    throw usage_error(
        "event_loop: destroyed by one of its own tasks while it ran (or by a completion handler it ran): that "
        "code ran on until it waited or returned, then every unfinished task was destroyed; destroy the loop "
        "after run() returns");
  }

  static detail::root_task drive_(event_loop&, task<void> t) { co_await std::move(t); }
  template <class T>
  static task<void> capture_(task<T> t, std::shared_ptr<std::optional<T>> out) {
    out->emplace(co_await std::move(t));
  }
  static task<void> finish_(task<void> t, std::shared_ptr<bool> finished) {
    co_await std::move(t);
    *finished = true;
  }

  std::shared_ptr<detail::loop_core> core_;
};

namespace detail {
inline root_task::promise_type::promise_type(event_loop& loop, task<void>&) : core_(*loop.core_) {
  auto h = std::coroutine_handle<promise_type>::from_promise(*this);
  start_.bind(h);
  core_.roots.add(h);
  core_.post(start_);
}
inline root_task::promise_type::~promise_type() {
  core_.roots.remove(std::coroutine_handle<promise_type>::from_promise(*this));
}
inline void root_task::promise_type::unhandled_exception() noexcept { core_.fail(std::current_exception()); }
}  // namespace detail

RDMAKIT_END_NAMESPACE
