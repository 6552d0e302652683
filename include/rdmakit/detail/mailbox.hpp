#pragma once
// Values that come from a source the scheduler watches (completions nobody else awaits,
// asynchronous events) and the coroutines that await them, in order: a value goes to
// the oldest waiter, or waits for one. `mailbox_awaiter` is `co_await source.next()`.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/await_checks.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/in_place_await.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/error.hpp>

#include <coroutine>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class T>
class mailbox {
 public:
  class waiter {
   public:
    virtual void deliver(const T& v) noexcept = 0;
    virtual void refuse() noexcept = 0;  // the mailbox closed: no value will come

   protected:
    ~waiter() = default;
  };

  /// Hands `v` to the oldest waiter, or keeps it; a failure to keep it goes to `s`.
  void put(const T& v, scheduler& s) noexcept {
    if (!waiters_.empty()) {
      waiter* w = waiters_.front();
      waiters_.pop_front();
      w->deliver(v);
      return;
    }
    try {
      kept_.push_back(v);
    } catch (...) {
      s.fail(std::current_exception());
    }
  }
  /// Puts back `v`, handed to a waiter that went away before it used it: first in line
  /// again. (Nothing is kept while a coroutine waits: put() hands values over.)
  void give_back(const T& v, scheduler& s) noexcept {
    if (!waiters_.empty()) return put(v, s);
    try {
      kept_.push_front(v);
    } catch (...) {
      s.fail(std::current_exception());
    }
  }
  /// The oldest value kept (none: nothing came that nobody took).
  std::optional<T> take() {
    if (kept_.empty()) return std::nullopt;
    std::optional<T> v(std::move(kept_.front()));
    kept_.pop_front();
    return v;
  }
  std::size_t kept() const noexcept { return kept_.size(); }
  /// No value comes any more: every waiter, and every later await once the values kept
  /// are taken, gets `why`.
  void close(std::exception_ptr why) noexcept {
    closed_ = std::move(why);
    for (waiter* w : std::exchange(waiters_, {})) w->refuse();
  }
  /// Why it was closed (null: open).
  const std::exception_ptr& closed() const noexcept { return closed_; }
  void add(waiter& w) { waiters_.push_back(&w); }
  void remove(waiter& w) noexcept { std::erase(waiters_, &w); }

 private:
  std::deque<T> kept_;
  std::deque<waiter*> waiters_;
  std::exception_ptr closed_;
};

/// Awaits the next value of `Source`'s mailbox (Source has mailbox() and loop()), or
/// std::nullopt once `timeout` passed. Keeps the source alive while it waits.
template <class T, class Source>
class mailbox_awaiter final : mailbox<T>::waiter {
 public:
  mailbox_awaiter(std::shared_ptr<Source> source, std::optional<std::chrono::steady_clock::duration> timeout) noexcept
      : source_(std::move(source)), timeout_(timeout) {}
  /// One that a coroutine awaits (waiting, or given its value and not yet resumed) or
  /// awaited stays with it: the new one is empty (awaiting it throws usage_error).
  mailbox_awaiter(mailbox_awaiter&& o) noexcept : timeout_(o.timeout_) {
    if (!o.busy_() && !o.awaited_) source_ = std::move(o.source_);
  }
  mailbox_awaiter& operator=(mailbox_awaiter&&) = delete;
  ~mailbox_awaiter() {
    // Given its value, destroyed before its coroutine resumed to take it: the value goes
    // to the next waiter or next(), not with this awaiter.
    if (RDMAKIT_UNLIKELY(resume_.linked()) && got_) source_->mailbox().give_back(*got_, source_->loop());
    if (in_place_) in_place_->orphan(source_->loop());
    if (waiting_) source_->mailbox().remove(*this);
  }

  /// `co_await n` (or `co_await std::move(n)`) awaits `n` where it is, with either
  /// compiler: destroyed by other code while the coroutine waits on it, `n` resumes the
  /// coroutine, whose co_await throws usage_error.
  in_place_awaiter<mailbox_awaiter> operator co_await() & noexcept { return in_place_awaiter<mailbox_awaiter>(*this); }
  in_place_awaiter<mailbox_awaiter> operator co_await() && noexcept { return in_place_awaiter<mailbox_awaiter>(*this); }
  static constexpr const char* co_await_text() noexcept { return "co_await next()"; }

  bool await_ready() {
    // Moved from (GCC's `co_await std::move(n)` moves it into the frame: no source to
    // read), or awaited already in place (clang's: it gave its value, and waiting again
    // would take the next one's, or never end).
    if (!source_ || awaited_)
      throw usage_error("co_await next(): this awaitable was moved from or awaited already (co_await std::move(n) "
                        "takes it): call next() again for the next value");
    // One coroutine at a time, until it resumed: a second one would take the first one's
    // value (take() below) and resumption.
    if (busy_())
      throw usage_error("co_await next(): this awaitable is awaited by another coroutine already: call next() "
                        "in each coroutine");
    got_ = source_->mailbox().take();
    if (!got_ && source_->mailbox().closed()) std::rethrow_exception(source_->mailbox().closed());
    return got_.has_value();
  }
  void await_suspend(std::coroutine_handle<> h) {
    check_awaited_on(source_->loop(), "co_await next()");
    timed_out_.bind([](void* self) noexcept { static_cast<mailbox_awaiter*>(self)->on_timeout_(); }, this);
    // Registered only once nothing more can throw: an exception resumes the coroutine at
    // once, and a registration left behind would resume it a second time.
    if (timeout_) timer_.arm(source_->loop(), deadline_after(*timeout_), timed_out_);
    try {
      source_->mailbox().add(*this);
    } catch (...) {
      timer_.disarm();
      throw;
    }
    waiting_ = true;
    resume_.bind(h);
  }
  /// The value, or std::nullopt when the timeout passed first. Once: awaited again, this
  /// awaitable is refused. Throws why the source closed while it waited.
  std::optional<T> await_resume() {
    awaited_ = true;
    if (RDMAKIT_UNLIKELY(refused_)) std::rethrow_exception(source_->mailbox().closed());
    return std::move(got_);
  }

 private:
  void deliver(const T& v) noexcept override {
    waiting_ = false;
    timer_.disarm();
    got_.emplace(v);
    source_->loop().post(resume_);
  }
  void refuse() noexcept override {
    waiting_ = false;
    refused_ = true;
    timer_.disarm();
    source_->loop().post(resume_);
  }
  bool busy_() const noexcept { return waiting_ || resume_.linked(); }
  void on_timeout_() noexcept {
    if (!waiting_) return;
    waiting_ = false;
    source_->mailbox().remove(*this);
    resume_.run();  // last: the coroutine may destroy this awaiter
  }

  friend class in_place_awaiter<mailbox_awaiter>;
  std::shared_ptr<Source> source_;
  std::optional<std::chrono::steady_clock::duration> timeout_;
  in_place_awaiter<mailbox_awaiter>* in_place_ = nullptr;  // the coroutine awaiting this in place
  std::optional<T> got_;
  bool waiting_ = false;
  bool awaited_ = false;  // resumed with its value: each next() gives one
  bool refused_ = false;  // the mailbox closed while it waited
  work_item resume_;
  work_item timed_out_;
  timer_node timer_;  // last: disarmed before the items it points to go away
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
