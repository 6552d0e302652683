#pragma once
/// `task<T>`: the coroutine type of rdmakit's asynchronous layer. Lazy (it starts when
/// awaited or spawned on an event_loop), awaited once, and it owns its frame: destroying
/// a task that has not finished destroys the coroutine, and with it every awaiter
/// inside, each of which unhooks itself from the queue pair, completion queue or timer
/// it waits on. `co_await std::move(t)` moves the frame into the awaiting coroutine, so
/// it lives exactly as long as that await. An exception escaping the coroutine is
/// rethrown where it is awaited.
#include <rdmakit/config.hpp>
#include <rdmakit/error.hpp>

#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

template <class T = void>
class task;

namespace detail {

// What task's promises share: who to resume at the end, and the escaped exception.
class task_promise_base {
 public:
  std::suspend_always initial_suspend() noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) const noexcept {
      auto& p = h.promise();
      // Finished inside the await that started it: that await goes on from there.
      if (p.started_inline_) {
        p.started_inline_ = false;
        p.finished_inline_ = true;
        return std::noop_coroutine();
      }
      // Finished later (it waited): symmetric transfer to the awaiting coroutine.
      return p.continuation_ ? p.continuation_ : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error_ = std::current_exception(); }

  std::coroutine_handle<> continuation_;
  std::exception_ptr error_;
  // The awaiter runs the task inside its await_suspend and, when it finishes there, goes
  // on without suspending: a loop of awaits of tasks that finish at once would otherwise
  // nest a resumption per await, as GCC makes the symmetric transfer a real tail call
  // only when optimizing (at -O0, or under ASan, a million such awaits overflowed the stack).
  bool started_inline_ = false;
  bool finished_inline_ = false;

 protected:
  void rethrow_if_failed() const {
    if (error_) std::rethrow_exception(error_);
  }
};

template <class T>
class task_promise : public task_promise_base {
 public:
  task<T> get_return_object() noexcept;
  template <class U>
    requires std::is_convertible_v<U&&, T>
  void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    value_.emplace(std::forward<U>(v));
  }
  T take() {
    rethrow_if_failed();
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
};

template <>
class task_promise<void> : public task_promise_base {
 public:
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() const { rethrow_if_failed(); }
};

#define RDMAKIT_DETAIL_TASK_AWAITER_KEPT                                                           \
  "co_await on a task's awaiter kept in a variable: await the task itself (co_await std::move(t)); " \
  "an awaiter kept by hand can be destroyed by other code while a coroutine waits on it"

#define RDMAKIT_DETAIL_TASK_AWAITED_BY_NAME \
  "co_await on a task variable: a task is awaited once, by moving it in (co_await std::move(t))"

/// What `co_await std::move(t)` awaits: it owns the task's frame from then on.
template <class T>
class task_awaiter {
 public:
  using handle_type = std::coroutine_handle<task_promise<T>>;
  explicit task_awaiter(handle_type h) noexcept : h_(h) {}
  task_awaiter(task_awaiter&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  task_awaiter& operator=(task_awaiter&&) = delete;
  ~task_awaiter() {
    if (h_) h_.destroy();
  }
  bool await_ready() const noexcept { return !h_; }
  bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
    // Awaited already (this awaiter, awaited in place by a second coroutine): resuming
    // the task would resume it where it waits on something else. Refused in await_resume.
    auto& p = h_.promise();
    if (p.continuation_) return false;
    p.continuation_ = awaiting;
    p.started_inline_ = true;
    h_.resume();  // returns when the task first waits, or when it finished
    if (p.finished_inline_) return false;  // finished: go on, no resumption nested
    p.started_inline_ = false;  // it waits: its end resumes `awaiting`
    return true;
  }
  T await_resume() {
    if (!h_)
      throw usage_error("co_await task: this task is empty: moved from, default-constructed or already "
                        "awaited (a task is awaited once: await it in one coroutine and pass its result on)");
    if (!h_.done())
      throw usage_error("co_await task: this task is awaited by another coroutine already (a task is "
                        "awaited once: await it in one coroutine and pass its result on)");
    // The frame goes with its result: awaited again, this awaiter is empty.
    struct destroy_at_exit {
      handle_type h;
      ~destroy_at_exit() { h.destroy(); }
    } frame{std::exchange(h_, {})};
    return frame.h.promise().take();
  }

  // `co_await aw` on an awaiter kept by hand (`auto aw = std::move(t).operator co_await()`)
  // would await it where it is kept, and other code destroying it then left the awaiting
  // coroutine waiting for ever: only the temporary of `co_await std::move(t)` is awaited.
  template <class U = T>
  void operator co_await() & {
    static_assert(sizeof(U) == 0, RDMAKIT_DETAIL_TASK_AWAITER_KEPT);
  }
  template <class U = T>
  void operator co_await() && {
    static_assert(sizeof(U) == 0, RDMAKIT_DETAIL_TASK_AWAITER_KEPT);
  }

 private:
  handle_type h_;
};

}  // namespace detail

/// A lazily started coroutine that produces a T (or nothing). Move-only; `co_await`
/// it (once) from another coroutine, or hand it to event_loop::spawn / run.
template <class T>
class [[nodiscard]] task {
 public:
  /// The coroutine promise (C++ looks it up here).
  using promise_type = detail::task_promise<T>;
  /// The coroutine handle type.
  using handle_type = std::coroutine_handle<promise_type>;

  /// An empty task (nothing to await).
  task() noexcept = default;
  /// Takes over `o`'s coroutine; `o` becomes empty.
  task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  /// Destroys the coroutine held (if unfinished), then takes over `o`'s.
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      destroy_();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  /// Destroys the coroutine if it has not finished (its awaiters unhook themselves).
  ~task() { destroy_(); }

  /// False for an empty or moved-from task.
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }
  /// True once the coroutine has run to its end (returned or thrown).
  bool done() const noexcept { return h_ && h_.done(); }

  /// Starts the task and resumes the awaiting coroutine when it ends, with its value or
  /// its exception. The coroutine moves into the awaiting one (this task is left empty),
  /// so nothing but the awaiter can destroy it while it is awaited: `co_await` on the
  /// awaiter kept in a variable does not compile. An empty task (moved from,
  /// default-constructed or awaited before) throws usage_error when awaited.
  auto operator co_await() && noexcept { return detail::task_awaiter<T>(std::exchange(h_, {})); }
  /// `co_await t` on a task variable does not compile: it would leave `t` empty behind a
  /// name that still looks usable; the message says to write `co_await std::move(t)`.
  template <class U = T>
  void operator co_await() const& {
    static_assert(sizeof(U) == 0, RDMAKIT_DETAIL_TASK_AWAITED_BY_NAME);
  }

 private:
  friend class detail::task_promise<T>;
  explicit task(handle_type h) noexcept : h_(h) {}
  void destroy_() noexcept {
    if (h_) std::exchange(h_, {}).destroy();
  }

  handle_type h_;
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>(std::coroutine_handle<task_promise<T>>::from_promise(*this));
}
inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>(std::coroutine_handle<task_promise<void>>::from_promise(*this));
}
}  // namespace detail

RDMAKIT_END_NAMESPACE
