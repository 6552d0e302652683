#pragma once
/// `device_events`: a device's asynchronous events (a QP that hit a fatal error, a
/// port that went down, a CQ that overflowed) awaited on an event_loop, which waits on
/// the device's async-event descriptor with epoll.
///
///   rdmakit::device_events events(loop, dev);
///   std::optional<rdmakit::async_event> ev = co_await events.next(1s);
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/device.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/detail/mailbox.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/task.hpp>
#include <rdmakit/types.hpp>

#include <coroutine>
#include <memory>
#include <optional>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {

template <class B>
class device_events_core {
 public:
  device_events_core(std::shared_ptr<scheduler> loop, const device<B>& dev) : loop_(std::move(loop)), dev_(dev.st_) {
    if (!dev_) throw_empty_argument("device", "device_events");
    // One reader of a device's events: two would each take some of them (on one loop,
    // epoll refuses the descriptor twice).
    if (const unsigned readers = dev_->watch_events(); readers & device_state<B>::events_by_loop)
      throw usage_error(cat("device_events: the asynchronous events of ", dev_->name,
                            " are already awaited by another device_events (on this loop or another): each event "
                            "goes to one reader, so share that one, or destroy it first"));
    else if (readers != 0)
      throw usage_error(cat("device_events: device::next_event() is waiting for the asynchronous events of ",
                            dev_->name, " (on another thread): each event goes to one reader, so make the "
                            "device_events once that call has returned, and call next_event() no more"));
    watch_.fd = B::async_fd(dev_->ctx);
    watch_.ctx = this;
    watch_.on_ready = [](void* self) noexcept { static_cast<device_events_core*>(self)->take_(); };
    try {
      loop_->watch(watch_);
    } catch (...) {
      dev_->unwatch_events();
      throw;
    }
  }
  device_events_core(const device_events_core&) = delete;
  device_events_core& operator=(const device_events_core&) = delete;
  ~device_events_core() {
    loop_->unwatch(watch_);
    dev_->unwatch_events();
  }

  scheduler& loop() noexcept { return *loop_; }
  detail::mailbox<async_event>& mailbox() noexcept { return events_; }

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
      events_.put(ev, *loop_);
    }
  }

  std::shared_ptr<scheduler> loop_;
  device_ref<B> dev_;
  fd_watch watch_;
  detail::mailbox<async_event> events_;
};

}  // namespace detail

/// The asynchronous events of one device, awaited on an event_loop. It keeps the device
/// open; events that come while nobody awaits them are kept, oldest first. One at a
/// time per device object: a second one, or device::next_event() while it exists,
/// throws usage_error (each event goes to one reader), and so does making one while a
/// next_event() call waits on another thread.
template <fd_event_backend B>
class device_events {
 public:
  /// Waits on `dev`'s asynchronous events on `loop` (an event_loop or asio_context).
  template <detail::has_scheduler Loop>
  device_events(Loop& loop, const device<B>& dev)
      : core_(std::make_shared<detail::device_events_core<B>>(loop.core(), dev)) {}

  /// `co_await events.next()`: the next asynchronous event.
  /// Throws usage_error on a moved-from object.
  auto next() const { return awaiter(core_ref_("next"), std::nullopt); }
  /// As next(), giving up after `timeout`: std::nullopt then.
  /// Any duration type: one past the steady clock's range (hours::max()) is no limit.
  template <class Rep, class Period>
  auto next(std::chrono::duration<Rep, Period> timeout) const {
    return awaiter(core_ref_("next"), detail::steady_duration(timeout));
  }

 private:
  using awaiter = detail::mailbox_awaiter<async_event, detail::device_events_core<B>>;

  const std::shared_ptr<detail::device_events_core<B>>& core_ref_(const char* call) const {
    if (!core_) detail::throw_empty("device_events", call);
    return core_;
  }

  std::shared_ptr<detail::device_events_core<B>> core_;
};

RDMAKIT_END_NAMESPACE
