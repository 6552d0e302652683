#pragma once
/// The adapter for standalone asio (Debian libasio-dev; this header alone needs it):
/// rdmakit's coroutines run on an application's own `asio::io_context`, next to its
/// sockets and timers, with no thread or loop of their own. asio's reactor waits on the
/// completion channels (asio::posix::stream_descriptor::async_wait); completions resume
/// the coroutines that posted the work requests, through the io_context.
///
///   asio::io_context io;
///   rdmakit::asio_context rdma(io);
///   rdmakit::async_completion_queue cq(rdma, dev.create_cq<rdmakit::event_driven<>>(256));
///   ... async_queue_pair on cq, as with event_loop ...
///   asio::co_spawn(io, [&]() -> asio::awaitable<void> {
///     rdmakit::wr_result r = co_await rdmakit::asio_spawn(rdma, write_task(qp), asio::use_awaitable);
///   }, asio::detached);
///   io.run();
///
/// asio_spawn(ctx, task, token) starts an rdmakit::task on the io_context and completes
/// `token` (any asio completion token: use_awaitable, detached, a callback) with
/// (std::exception_ptr, T), so asio coroutines await RDMA work through rdmakit tasks.
/// A failure of the RDMA side itself (a completion queue that cannot be polled) is
/// thrown out of io_context::run(). The io_context is run by one thread: the first that
/// runs one of this context's handlers owns it; a handler another thread picks up goes
/// back to the io_context for the owner, and that thread's run() ends with usage_error
/// (docs/coroutines.md, Threads). Use the asio_context from the owner's thread.
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/task.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/associated_executor.hpp>
#include <asio/bind_allocator.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <poll.h>

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {

// The scheduler on an io_context. Work items run from one handler posted per batch;
// descriptors are waited on with stream_descriptor::async_wait (released, not closed,
// when unwatched: they belong to the verbs objects); deadlines are steady_timers.
class asio_scheduler final : public scheduler, public std::enable_shared_from_this<asio_scheduler> {
 public:
  explicit asio_scheduler(::asio::io_context& io) : io_(&io), exec_(io.get_executor()) {}
  asio_scheduler(const asio_scheduler&) = delete;
  asio_scheduler& operator=(const asio_scheduler&) = delete;
  ~asio_scheduler() {
    for (auto& [w, entry] : watches_) entry->sd.release();
  }

  ::asio::io_context& io() noexcept { return *io_; }

  /// Refuses a call that changes this scheduler (a task started, a descriptor watched)
  /// from another thread than the one that runs its handlers, once one does: it would
  /// race with them.
  void check_thread(const char* call) const {
    const auto owner = owner_.load(std::memory_order_acquire);
    if (owner != std::thread::id{} && owner != std::this_thread::get_id())
      throw usage_error(cat(call, ": called on a second thread: the asio_context belongs to the thread that runs "
                              "its io_context; post the call there (asio::post(io, ...)), or give this thread its "
                              "own io_context and asio_context"));
  }

  /// Marks the scheduler changed by this thread for a call's scope (asio_spawn, a
  /// descriptor watched), nested ones passing. Before any thread owns it, two threads
  /// could both pass check_thread: the second one inside is refused, and a handler's body
  /// waits for the call to end (owned_).
  class call_scope {
   public:
    call_scope(const asio_scheduler& s, const char* call) : user_(s.user_) {
      const auto me = std::this_thread::get_id();
      std::thread::id cur{};
      if (user_.compare_exchange_strong(cur, me, std::memory_order_acquire))
        first_ = true;
      else if (cur != me)
        throw usage_error(cat(call, ": called on a second thread while another thread uses the asio_context: it "
                                "belongs to one thread at a time; post the call to the thread that runs its "
                                "io_context (asio::post(io, ...)), or give this thread its own io_context and "
                                "asio_context"));
    }
    call_scope(const call_scope&) = delete;
    call_scope& operator=(const call_scope&) = delete;
    ~call_scope() {
      if (first_) user_.store(std::thread::id{}, std::memory_order_release);
    }
    /// Leaves the scope open past this object: released() ends it (asio_spawn's, once
    /// its coroutine is suspended). False when an outer call's scope holds it.
    bool keep() noexcept { return std::exchange(first_, false); }
    /// Ends a scope keep() left open.
    static void released(const asio_scheduler& s) noexcept {
      s.user_.store(std::thread::id{}, std::memory_order_release);
    }

   private:
    std::atomic<std::thread::id>& user_;
    bool first_ = false;
  };

  /// Its asio_context goes: the descriptors and timers made on the io_context are let go
  /// (now, or when the run of work items a task destroyed the context from ends), so the
  /// async objects that keep this scheduler may outlive the io_context. Nothing runs here
  /// any more: posts and failures are dropped, deadlines never fire.
  void detach_io() noexcept {
    if (roots.running())
      detach_pending_ = true;
    else
      detach_now_();
  }

  void post(work_item& w) noexcept override {
    if (!io_) return;  // detached: its tasks are gone, nothing would run it
    ready_.push_back(w);
    schedule_drain_();
  }

  void watch(fd_watch& w) override {
    check_thread("asio_context (an async object made on it)");
    const call_scope in_use(*this, "asio_context (an async object made on it)");
    if (!io_)
      throw usage_error("asio_context: the context this scheduler belonged to was destroyed: make async objects on a "
                        "live asio_context");
    // All or nothing: the map's room before the descriptor is asio's (a stream_descriptor
    // destroyed while it holds one closes it, and it is its owner's to close), and the
    // entry gone again if the wait cannot be armed (a watch left behind would outlive
    // `w`, which the caller destroys on the throw).
    auto entry = std::make_unique<watched>(*io_, w);
    watched& e = *entry;
    const auto it = watches_.emplace(&w, std::move(entry)).first;
    std::error_code ec;
    e.sd.assign(w.fd, ec);
    if (ec) {
      watches_.erase(it);
      throw verbs_error("asio::posix::stream_descriptor::assign", ec.value(),
                        detail::cat("registering descriptor ", w.fd, " with the io_context"));
    }
    try {
      if (tasks_ > 0) arm_(e);
    } catch (...) {
      let_go_(e);
      watches_.erase(it);
      throw;
    }
    kick_progress_();
  }
  void unwatch(fd_watch& w) noexcept override {
    auto it = watches_.find(&w);
    if (it == watches_.end()) return;
    let_go_(*it->second);
    watches_.erase(it);
  }

  // (One on its way out of run() already, in the slot, is not posted again.)
  void fail_once(std::exception_ptr e) noexcept override {
    if (fail_posted_ && e == posted_failure_) return;
    fail(std::move(e));
  }
  void fail(std::exception_ptr e) noexcept override {
    if (!io_) return;  // detached: no io_context::run() of this context's is left to throw it
    // Thrown out of io_context::run(), where the application handles asio's failures.
    // The failure is often a failed allocation (a completion handler that could not be
    // posted): the first one pending goes in a slot made beforehand, so reporting it
    // allocates nothing.
    if (!fail_posted_) {
      fail_posted_ = true;
      posted_failure_ = e;
      post_in_(fail_slot_, [weak = weak_from_this(), e] {
        auto self = weak.lock();
        if (!self) std::rethrow_exception(e);
        self->owned_([s = self.get(), e] {
          s->fail_posted_ = false;
          s->posted_failure_ = nullptr;
          std::rethrow_exception(e);
        });
      });
      return;
    }
    try {
      ::asio::post(*io_, [e] { std::rethrow_exception(e); });
    } catch (...) {
      // Out of memory with a failure already on its way out of run(): that one is reported.
    }
  }

 private:
  struct watched {
    watched(::asio::io_context& io, fd_watch& w) : sd(io), watch(&w) {}
    ::asio::posix::stream_descriptor sd;
    fd_watch* watch;
    bool armed = false;
    std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  };

  void start_timer(timer_node& t) override {
    if (!io_) return;  // detached: a task of the destroyed context runs on, to be destroyed
    auto timer = std::make_shared<::asio::steady_timer>(*io_, t.when());
    timers_.emplace(t.id(), std::make_pair(&t, timer));
    timer->async_wait([weak = weak_from_this(), id = t.id()](const std::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->owned_([s = self.get(), id] {
        auto it = s->timers_.find(id);
        if (it == s->timers_.end()) return;
        timer_node* node = it->second.first;
        s->timers_.erase(it);
        s->post(node->fired());
      });
    });
  }
  void stop_timer(timer_node& t) noexcept override {
    auto it = timers_.find(t.id());
    if (it == timers_.end()) return;
    it->second.second->cancel();
    timers_.erase(it);
  }

  // The memory of a handler that is posted once at a time (drain_posted_, fail_posted_,
  // progress_posted_), made with the scheduler: post() and the progress kick are noexcept,
  // and asio allocating the handler there could only end the program when that failed.
  // The handler owns its slot: asio frees a handler's memory while the handler (moved out
  // of it) still lives, also when the io_context destroys it after the scheduler went.
  struct handler_slot {
    alignas(std::max_align_t) unsigned char bytes[512];
  };
  template <class T>
  struct slot_allocator {
    using value_type = T;
    handler_slot* slot;
    explicit slot_allocator(handler_slot* s) noexcept : slot(s) {}
    template <class U>
    slot_allocator(const slot_allocator<U>& o) noexcept : slot(o.slot) {}
    T* allocate(std::size_t n) noexcept {
      static_assert(sizeof(T) <= sizeof(handler_slot) && alignof(T) <= alignof(handler_slot),
                    "asio's operation for this handler does not fit its slot: make the slot bigger");
      (void)n;  // asio allocates one operation
      return reinterpret_cast<T*>(slot->bytes);
    }
    void deallocate(T*, std::size_t) noexcept {}
    template <class U>
    bool operator==(const slot_allocator<U>& o) const noexcept { return slot == o.slot; }
  };
  // Posts `f` in `slot`'s memory (the caller's flag says that slot is free): allocates nothing.
  template <class F>
  void post_in_(const std::shared_ptr<handler_slot>& slot, F f) noexcept {
    ::asio::post(*io_, ::asio::bind_allocator(slot_allocator<void>(slot.get()),
                                             [keep = slot, f = std::move(f)]() mutable { f(); }));
  }

  // Runs `f`, a handler's body, on the thread that owns this scheduler: the first one
  // that runs one of its handlers (docs/coroutines.md, Threads). Two threads inside would
  // resume tasks and change this state at once. Picked up by another thread (an
  // io_context run by two), the body goes back to the io_context for the owner, and that
  // thread's run() ends with usage_error.
  //
  // A body that would run inside another one (the io_context run from an on() handler or
  // from a task, or from a handler the application's own poll of a CQ runs) goes back
  // too, and that run ends with usage_error: the outer code cannot go on until the run
  // returns, and the run would wait for it (as event_loop refuses run() there).
  template <class F>
  void owned_(F f) {
    const auto me = std::this_thread::get_id();
    std::thread::id owner{};
    if (owner_.compare_exchange_strong(owner, me, std::memory_order_acq_rel) || owner == me) {
      if (RDMAKIT_UNLIKELY(depth_ != 0 || delivering_())) {
        give_back_(std::move(f));
        throw usage_error("asio_context: its io_context was run (run(), poll(), run_one()...) from inside one of its "
                          "tasks or completion handlers (on() on an async completion queue's queue()), which cannot "
                          "go on until that run returns, while the run may wait for them: co_await what the task "
                          "waits for, or return from the handler");
      }
      // A call another thread began before this one owned the scheduler ends first.
      for (std::thread::id cur{}; !user_.compare_exchange_weak(cur, me, std::memory_order_acquire); cur = {}) {
      }
      ++depth_;
      struct leave {
        asio_scheduler& s;
        ~leave() {
          --s.depth_;
          s.user_.store(std::thread::id{}, std::memory_order_release);
        }
      } on_exit{*this};
      f();
      return;
    }
    give_back_(std::move(f));
    throw usage_error("asio_context: its io_context is run by a second thread: the first thread that ran one of its "
                      "handlers runs them all (this one went back to the io_context for it). Run the io_context on "
                      "one thread, or give each thread its own io_context and asio_context");
  }
  template <class F>
  void give_back_(F f) {
    ::asio::post(exec_, [weak = weak_from_this(), f = std::move(f)]() mutable {
      if (auto self = weak.lock()) self->owned_(std::move(f));
    });
  }
  // Whether a watched CQ is delivering a batch to user code (its own poll, not the loop's).
  bool delivering_() const noexcept {
    for (const auto& [w, e] : watches_)
      if (w->delivering && w->delivering(w->ctx)) return true;
    return false;
  }

  void schedule_drain_() noexcept {
    if (drain_posted_) return;
    drain_posted_ = true;
    post_in_(drain_slot_, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->owned_([s = self.get()] { s->drain_(); });
    });
  }
  void drain_() {
    drain_posted_ = false;
    work_list now;
    ready_.move_all_to(now);
    roots.run(now);
    if (detach_pending_)
      detach_now_();
    else
      kick_progress_();
  }

  // Stops waiting on a descriptor and gives it back: it belongs to the verbs object, not
  // to asio; a wait handler still queued finds it gone (`alive`).
  static void let_go_(watched& e) noexcept {
    std::error_code ignored;
    e.sd.cancel(ignored);
    e.sd.release();
    *e.alive = false;
  }

  void detach_now_() noexcept {
    detach_pending_ = false;
    for (auto& [w, e] : watches_) let_go_(*e);
    watches_.clear();  // unwatch() of these finds nothing now
    for (auto& [id, t] : timers_) t.second->cancel();
    timers_.clear();
    io_ = nullptr;
  }

  // Waits are pending only while tasks started by asio_spawn run: then io_context::run()
  // goes on while they wait for completions and returns when they are done, though the
  // completion queues stay watched for their whole life. asio's reactor is edge-triggered:
  // readiness that comes while no wait is pending is not reported again, so the source
  // is drained whenever a wait starts on a descriptor that is readable already.
  void arm_(watched& e) {
    e.sd.async_wait(::asio::posix::stream_descriptor::wait_read,
                    [this, weak = weak_from_this(), alive = e.alive, &e](const std::error_code& ec) {
                      auto self = weak.lock();
                      if (ec || !self || !*alive) return;  // cancelled: armed was cleared then
                      owned_([this, alive, &e] {
                        if (!*alive) return;  // let go while the body waited for the owner
                        e.armed = false;
                        e.watch->on_ready(e.watch->ctx);
                        if (*alive && tasks_ > 0) arm_(e);
                        kick_progress_();
                      });
                    });
    e.armed = true;  // only once the wait is pending: async_wait may throw (its handler's memory)
    pollfd p{e.watch->fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0)
      ::asio::post(*io_, [weak = weak_from_this(), alive = e.alive, w = e.watch] {
        auto self = weak.lock();
        if (self && *alive)
          self->owned_([alive, w] {
            if (*alive) w->on_ready(w->ctx);
          });
      });
  }

 public:
  /// A task started: descriptors are waited on while any runs. When arming a wait throws,
  /// the waits armed so far are cancelled and no task is counted: else they would keep
  /// io_context::run() from returning, with no task left to end them.
  void task_started() {
    if (tasks_ > 0) {
      ++tasks_;
      return;
    }
    try {
      for (auto& [w, e] : watches_)
        if (!e->armed) arm_(*e);
    } catch (...) {
      stop_waits_();
      throw;
    }
    tasks_ = 1;
  }
  /// A task ended: with none left, the waits stop, so io_context::run() can return.
  void task_finished() noexcept {
    if (--tasks_ > 0) return;
    stop_waits_();
  }

 private:
  void stop_waits_() noexcept {
    for (auto& [w, e] : watches_) {
      std::error_code ignored;
      e->sd.cancel(ignored);
      e->armed = false;
    }
  }

  // Sources with work that no descriptor announces (the mock's simulated time) are
  // called again from a posted handler until they have none, while a task runs (as the
  // waits are armed): work nobody awaits, the mock retrying a SEND for ever, would keep
  // io_context::run() from returning after the last task.
  void kick_progress_() noexcept {
    if (progress_posted_ || !io_ || tasks_ == 0) return;
    for (auto& [src, entry] : watches_) {
      if (!src->progress || !src->progress(src->ctx)) continue;
      progress_posted_ = true;
      post_in_(progress_slot_, [weak = weak_from_this()] {
        auto self = weak.lock();
        if (!self) return;
        self->owned_([s = self.get()] {
          s->progress_posted_ = false;
          std::vector<fd_watch*> busy;
          for (auto& [w, e] : s->watches_)
            if (w->progress && w->progress(w->ctx)) busy.push_back(w);
          for (auto* w : busy)
            if (s->watches_.count(w)) w->on_ready(w->ctx);
          s->kick_progress_();
        });
      });
      return;
    }
  }

  ::asio::io_context* io_;  // null once detached (detach_io)
  ::asio::io_context::executor_type exec_;  // for a handler another thread gave back (owned_)
  std::atomic<std::thread::id> owner_{};   // the thread that runs the handlers, once one has
  // The thread inside a call that changes this scheduler or a handler's body (call_scope,
  // owned_): mutual exclusion before an owner is known.
  mutable std::atomic<std::thread::id> user_{};
  int depth_ = 0;  // handler bodies running (owned_): one inside another is refused
  work_list ready_;
  bool detach_pending_ = false;
  bool drain_posted_ = false;
  bool progress_posted_ = false;
  bool fail_posted_ = false;
  std::exception_ptr posted_failure_;  // the failure fail_posted_ says is on its way
  std::shared_ptr<handler_slot> drain_slot_ = std::make_shared<handler_slot>();
  std::shared_ptr<handler_slot> progress_slot_ = std::make_shared<handler_slot>();
  std::shared_ptr<handler_slot> fail_slot_ = std::make_shared<handler_slot>();
  int tasks_ = 0;
  std::map<fd_watch*, std::unique_ptr<watched>> watches_;
  std::map<std::uint64_t, std::pair<timer_node*, std::shared_ptr<::asio::steady_timer>>> timers_;
};

// What asio_spawn completes its token with.
template <class T>
struct spawn_signature {
  using type = void(std::exception_ptr, T);
};
template <>
struct spawn_signature<void> {
  using type = void(std::exception_ptr);
};

// Drives one task started by asio_spawn: owned by the context until it finishes.
class asio_root {
 public:
  class promise_type {
   public:
    template <class Ctx, class... Args>
    promise_type(Ctx& ctx, Args&...) : sched_(*ctx.sched_) {
      sched_.check_thread("asio_spawn");
      // Open until the coroutine is suspended (initial_suspend): the start posted below
      // may run on the io thread at once, whose handler waits for the scope (owned_).
      asio_scheduler::call_scope in_use(sched_, "asio_spawn");
      auto h = std::coroutine_handle<promise_type>::from_promise(*this);
      start_.bind(h);
      // When this constructor throws, the frame is freed: nothing may keep its handle (the
      // context's destructor would destroy it again) or count it (its waits would keep
      // io_context::run() from returning). task_started() undoes itself when it throws.
      sched_.task_started();
      try {
        sched_.roots.add(h);
      } catch (...) {
        sched_.task_finished();
        throw;
      }
      sched_.post(start_);
      releases_scope_ = in_use.keep();
    }
    ~promise_type() {
      sched_.roots.remove(std::coroutine_handle<promise_type>::from_promise(*this));
      sched_.task_finished();
    }
    asio_root get_return_object() noexcept { return {}; }
    // Suspends, then ends asio_spawn's scope: the io thread resumes the frame only then,
    // and nothing here touches it after (the task may have run and freed it).
    struct started {
      promise_type& p;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<>) const noexcept {
        const asio_scheduler& s = p.sched_;
        if (p.releases_scope_) asio_scheduler::call_scope::released(s);
      }
      void await_resume() const noexcept {}
    };
    started initial_suspend() noexcept { return {*this}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { sched_.fail(std::current_exception()); }

   private:
    asio_scheduler& sched_;  // not the asio_context: a task may destroy it
    work_item start_;
    bool releases_scope_ = false;  // the constructor's call_scope is ours to end (started)
  };
};

}  // namespace detail

/// rdmakit's scheduler on an asio::io_context: make async completion queues, queue
/// pairs and device events on it as on an event_loop. Destroying it destroys the tasks
/// asio_spawn started that have not finished (their completion handlers are not called);
/// from inside one of them, that task runs on until it waits or finishes first.
class asio_context {
 public:
  /// Runs rdmakit's coroutines on `io`, which must outlive this context (as any asio I/O
  /// object); the async objects made on it may outlive both.
  explicit asio_context(::asio::io_context& io) : sched_(std::make_shared<detail::asio_scheduler>(io)) {}
  asio_context(const asio_context&) = delete;
  asio_context& operator=(const asio_context&) = delete;
  ~asio_context() {
    sched_->roots.abandon();
    sched_->detach_io();
  }

  /// The io_context it runs on.
  ::asio::io_context& io() const noexcept { return sched_->io(); }
  /// Tasks started with asio_spawn that have not finished.
  std::size_t tasks() const noexcept { return sched_->roots.size(); }
  /// The scheduler async objects register with.
  std::shared_ptr<detail::scheduler> core() const noexcept { return sched_; }

 private:
  friend class detail::asio_root::promise_type;
  template <class T, class Token>
  friend auto asio_spawn(asio_context&, task<T>, Token&&);

  template <class T, class Handler>
  static detail::asio_root drive_(asio_context& ctx, task<T> t, Handler handler) {
    ::asio::io_context& io = ctx.io();  // read before t runs: t may destroy ctx
    std::exception_ptr error;
    std::optional<std::conditional_t<std::is_void_v<T>, char, T>> value;
    try {
      if constexpr (std::is_void_v<T>) {
        co_await std::move(t);
        value.emplace();
      } else {
        value.emplace(co_await std::move(t));
      }
    } catch (...) {
      error = std::current_exception();
    }
    // The handler's own executor (use_awaitable: its coroutine's), else the io_context.
    auto ex = ::asio::get_associated_executor(handler, io.get_executor());
    if constexpr (std::is_void_v<T>) {
      ::asio::post(ex, [h = std::move(handler), error]() mutable { std::move(h)(error); });
    } else {
      ::asio::post(ex, [h = std::move(handler), error, v = value ? std::move(*value) : T{}]() mutable {
        std::move(h)(error, std::move(v));
      });
    }
  }

  std::shared_ptr<detail::asio_scheduler> sched_;
};

/// Starts `t` on `ctx`'s io_context and completes `token` with (std::exception_ptr, T)
/// (void tasks: (std::exception_ptr)). Non-void T must be default-constructible (the
/// value passed alongside an exception).
template <class T, class Token>
auto asio_spawn(asio_context& ctx, task<T> t, Token&& token) {
  if (!t) detail::throw_empty_argument("task", "asio_spawn");
  return ::asio::async_initiate<Token, typename detail::spawn_signature<T>::type>(
      [&ctx](auto handler, task<T> spawned) {
        (void)asio_context::drive_<T>(ctx, std::move(spawned), std::move(handler));
      },
      token, std::move(t));
}

RDMAKIT_END_NAMESPACE
