#pragma once
// Awaiting an awaitable where it lives (`co_await w` on one kept in a variable), so that
// destroying it while a coroutine waits on it cannot leave that coroutine waiting for
// ever: the coroutine waits through an in_place_awaiter in its own frame, which the
// awaitable points back at while it waits; an awaitable destroyed then resumes the
// coroutine through it, and the co_await throws usage_error.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/detail/work_queue.hpp>
#include <rdmakit/error.hpp>

#include <coroutine>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// The awaiter of `co_await a` for an awaitable `A` awaited in place. A keeps an
/// `in_place_awaiter<A>* in_place_` (null while no coroutine waits on it in place),
/// names its co_await in `A::co_await_text()` ("co_await next()"), and calls
/// `in_place_->orphan(loop)` in its destructor when in_place_ is set.
template <class A>
class in_place_awaiter {
 public:
  explicit in_place_awaiter(A& a) noexcept : a_(&a) {}
  in_place_awaiter(const in_place_awaiter&) = delete;  // made where it is awaited (a prvalue)
  in_place_awaiter& operator=(const in_place_awaiter&) = delete;
  // Lives to the end of the co_await's statement, when the awaitable may be gone: it
  // touches the awaitable only while registered with it (waiting_on_).
  ~in_place_awaiter() {
    if (waiting_on_) waiting_on_->in_place_ = nullptr;  // the coroutine's frame went first
  }

  decltype(auto) await_ready() { return a_->await_ready(); }
  void await_suspend(std::coroutine_handle<> h) {
    a_->await_suspend(h);
    orphan_resume_.bind(h);
    a_->in_place_ = this;  // only once suspended: a refusal above leaves nothing to undo
    waiting_on_ = a_;
  }
  decltype(auto) await_resume() {
    if (!a_)  // orphan() let go of it: only await_resume does otherwise
      throw usage_error(cat(A::co_await_text(), ": the awaitable this coroutine awaited in place was destroyed while "
                                              "it waited, by other code (another coroutine, a handler): keep it "
                                              "alive until the co_await that awaits it returns"));
    if (waiting_on_) std::exchange(waiting_on_, nullptr)->in_place_ = nullptr;
    return std::exchange(a_, nullptr)->await_resume();
  }

  /// The awaitable is being destroyed while the coroutine waits on it: the coroutine is
  /// resumed on `loop`, and its co_await throws.
  void orphan(scheduler& loop) noexcept {
    a_ = waiting_on_ = nullptr;
    loop.post(orphan_resume_);
  }

 private:
  A* a_;                     // the awaitable, until await_resume (or orphan)
  A* waiting_on_ = nullptr;  // the awaitable while it points back here (suspended)
  work_item orphan_resume_;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
