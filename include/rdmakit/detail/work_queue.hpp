#pragma once
// Intrusive lists for the asynchronous layer. Awaiters live in coroutine frames and
// link themselves into the queue they wait in (a ready queue, a queue pair's wait for
// send credits, a completion queue's waiters); a frame destroyed while waiting unlinks
// its awaiter in the awaiter's destructor, so no list ever points into freed memory.
#include <rdmakit/config.hpp>

#include <coroutine>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// A unit of work a queue holds: `run(ctx)` is called once when it is taken off the
/// loop's ready queue. Bound where its owner has its final address (an awaiter: in
/// await_suspend). Unlinks itself when destroyed.
class work_item {
 public:
  using run_fn = void (*)(void* ctx) noexcept;
  work_item() noexcept = default;
  work_item(const work_item&) = delete;
  work_item& operator=(const work_item&) = delete;
  ~work_item() { unlink(); }

  void bind(run_fn fn, void* ctx) noexcept {
    run_ = fn;
    ctx_ = ctx;
  }
  /// Bound to resume `h`.
  void bind(std::coroutine_handle<> h) noexcept {
    bind([](void* a) noexcept { std::coroutine_handle<>::from_address(a).resume(); }, h.address());
  }

  bool linked() const noexcept { return prev_ != nullptr; }
  void unlink() noexcept {
    if (!prev_) return;
    prev_->next_ = next_;
    next_->prev_ = prev_;
    prev_ = next_ = nullptr;
  }
  void run() noexcept { run_(ctx_); }

 private:
  friend class work_list;
  run_fn run_ = nullptr;
  void* ctx_ = nullptr;
  work_item* prev_ = nullptr;
  work_item* next_ = nullptr;
};

/// A FIFO of work items (circular, with a sentinel: no allocation).
class work_list {
 public:
  work_list() noexcept { head_.prev_ = head_.next_ = &head_; }
  work_list(const work_list&) = delete;
  work_list& operator=(const work_list&) = delete;
  /// Unlinks whatever is still queued (the items outlive the list).
  ~work_list() {
    while (!empty()) pop_front();
  }

  bool empty() const noexcept { return head_.next_ == &head_; }
  /// Appends `w`, first unlinking it from any list it is in.
  void push_back(work_item& w) noexcept {
    w.unlink();
    w.prev_ = head_.prev_;
    w.next_ = &head_;
    head_.prev_->next_ = &w;
    head_.prev_ = &w;
  }
  /// Takes the first item off the list (null when empty).
  work_item* pop_front() noexcept {
    if (empty()) return nullptr;
    work_item* w = head_.next_;
    w->unlink();
    return w;
  }
  /// Moves every item of this list to the end of `to`, in order.
  void move_all_to(work_list& to) noexcept {
    while (work_item* w = pop_front()) to.push_back(*w);
  }

 private:
  work_item head_;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
