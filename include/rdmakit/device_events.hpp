#pragma once
/// `device_events`: a device's asynchronous events (a QP that hit a fatal error, a
/// port that went down, a CQ that overflowed) awaited on an event_loop, which waits on
/// the device's async-event descriptor with epoll.
///
///   rdmakit::device_events events(loop, dev);
///   std::optional<rdmakit::async_event> ev = co_await events.next(1s);
#include <rdmakit/backend.hpp>
#include <rdmakit/device.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/task.hpp>
#include <rdmakit/types.hpp>

#include <chrono>
#include <coroutine>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {

// What waits in device_events::next().
class event_waiter {
 public:
  virtual void deliver(const async_event& ev) noexcept = 0;

 protected:
  ~event_waiter() = default;
};

template <class B>
class device_events_core {
 public:
  device_events_core(std::shared_ptr<scheduler> loop, const device<B>& dev) : loop_(std::move(loop)), dev_(dev.st_) {
    if (!dev_) throw_empty("device", "(device_events)");
    watch_.fd = B::async_fd(dev_->ctx);
    watch_.ctx = this;
    watch_.on_ready = [](void* self) noexcept { static_cast<device_events_core*>(self)->take_(); };
    loop_->watch(watch_);
  }
  device_events_core(const device_events_core&) = delete;
  device_events_core& operator=(const device_events_core&) = delete;
  ~device_events_core() { loop_->unwatch(watch_); }

  scheduler& loop() noexcept { return *loop_; }
  void add_waiter(event_waiter& w) { waiters_.push_back(&w); }
  void remove_waiter(event_waiter& w) noexcept { std::erase(waiters_, &w); }
  std::optional<async_event> take_pending() {
    if (pending_.empty()) return std::nullopt;
    const async_event ev = pending_.front();
    pending_.pop_front();
    return ev;
  }

 private:
  void take_() noexcept {
    for (;;) {
      async_event ev;
      const int e = B::get_async_event(dev_->ctx, std::chrono::milliseconds{0}, ev);
      if (e == ETIMEDOUT || e == EAGAIN) return;
      if (e != 0) {
        loop_->fail(std::make_exception_ptr(
            verbs_error("ibv_get_async_event", e, "reading asynchronous events for the event loop")));
        return;
      }
      if (!waiters_.empty()) {
        event_waiter* w = waiters_.front();
        waiters_.pop_front();
        w->deliver(ev);
        continue;
      }
      try {
        pending_.push_back(ev);
      } catch (...) {
        loop_->fail(std::current_exception());
        return;
      }
    }
  }

  std::shared_ptr<scheduler> loop_;
  device_ref<B> dev_;
  fd_watch watch_;
  std::deque<async_event> pending_;
  std::deque<event_waiter*> waiters_;
};

}  // namespace detail

/// The asynchronous events of one device, awaited on an event_loop. It keeps the device
/// open; events that come while nobody awaits them are kept, oldest first.
template <fd_event_backend B>
class device_events {
 public:
  /// Waits on `dev`'s asynchronous events on `loop` (an event_loop or asio_context).
  template <detail::has_scheduler Loop>
  device_events(Loop& loop, const device<B>& dev)
      : core_(std::make_shared<detail::device_events_core<B>>(loop.core(), dev)) {}

  /// `co_await events.next()`: the next asynchronous event.
  auto next() const noexcept { return awaiter(core_, std::nullopt); }
  /// As next(), giving up after `timeout`: std::nullopt then.
  auto next(std::chrono::steady_clock::duration timeout) const noexcept { return awaiter(core_, timeout); }

 private:
  class awaiter final : detail::event_waiter {
   public:
    awaiter(std::shared_ptr<detail::device_events_core<B>> core,
            std::optional<std::chrono::steady_clock::duration> timeout) noexcept
        : core_(std::move(core)), timeout_(timeout) {}
    awaiter(awaiter&& o) noexcept : core_(std::move(o.core_)), timeout_(o.timeout_) {}
    ~awaiter() {
      if (waiting_) core_->remove_waiter(*this);
    }

    bool await_ready() {
      got_ = core_->take_pending();
      return got_.has_value();
    }
    void await_suspend(std::coroutine_handle<> h) {
      resume_.bind(h);
      timed_out_.bind([](void* self) noexcept { static_cast<awaiter*>(self)->on_timeout_(); }, this);
      core_->add_waiter(*this);
      waiting_ = true;
      if (timeout_) timer_.arm(core_->loop(), std::chrono::steady_clock::now() + *timeout_, timed_out_);
    }
    /// The event, or std::nullopt when the timeout passed first.
    std::optional<async_event> await_resume() noexcept { return got_; }

   private:
    void deliver(const async_event& ev) noexcept override {
      waiting_ = false;
      timer_.disarm();
      got_ = ev;
      core_->loop().post(resume_);
    }
    void on_timeout_() noexcept {
      if (!waiting_) return;
      waiting_ = false;
      core_->remove_waiter(*this);
      resume_.run();  // last: the coroutine may destroy this awaiter
    }

    std::shared_ptr<detail::device_events_core<B>> core_;
    std::optional<std::chrono::steady_clock::duration> timeout_;
    std::optional<async_event> got_;
    bool waiting_ = false;
    detail::work_item resume_;
    detail::work_item timed_out_;
    detail::timer_node timer_;
  };

  std::shared_ptr<detail::device_events_core<B>> core_;
};

RDMAKIT_END_NAMESPACE
