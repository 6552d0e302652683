#pragma once
// What the coroutine layer's awaitables need from whatever runs them: queue work, wait
// on descriptors, run deadlines, report failures. rdmakit's own event_loop (epoll) and
// the asio adapter (an io_context) implement it; completion queues, queue pairs and
// device events are written once against it.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/work_queue.hpp>

#include <cstdint>
#include <concepts>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// A descriptor to wait on, and what to do when it is readable. `progress`, when set,
/// says the source has work to do without the descriptor (the mock's simulated time, a
/// batch left for the next turn): the scheduler then polls it instead of sleeping.
/// `delivering`, when set, says the source is handing a batch to user code, whoever
/// polled it: a blocking run() there could wait for what the batch's rest holds.
struct fd_watch {
  int fd = -1;
  void* ctx = nullptr;
  void (*on_ready)(void*) noexcept = nullptr;
  bool (*progress)(void*) noexcept = nullptr;
  bool (*delivering)(void*) noexcept = nullptr;
};

/// The drivers of the tasks an event_loop or asio_context started and that have not
/// finished, kept by its scheduler, which outlives it while work items run. Its owner may
/// be destroyed from inside one of those tasks: that task's frame must not go while it
/// runs, so the owner abandons its tasks, and they are destroyed at once when no work item
/// runs, else when the outermost run of work items ends, after the running one returned
/// (which runs no other item meanwhile).
class task_roots {
 public:
  task_roots() = default;
  task_roots(const task_roots&) = delete;
  task_roots& operator=(const task_roots&) = delete;

  void add(std::coroutine_handle<> h) { roots_.push_back(h); }
  /// Called by a driver's promise when its frame goes (finished or destroyed).
  void remove(std::coroutine_handle<> h) noexcept { std::erase(roots_, h); }
  std::size_t size() const noexcept { return roots_.size(); }
  bool empty() const noexcept { return roots_.empty(); }

  /// The owner goes: its tasks are destroyed now, or once the work item running returns.
  void abandon() noexcept {
    abandoned_ = true;
    if (running_ == 0) destroy_all_();
  }
  /// True once the owner went (its run() must not touch it again).
  bool abandoned() const noexcept { return abandoned_; }
  /// True while work items run (the owner's run, or the one a task destroyed it from).
  bool running() const noexcept { return running_ != 0; }
  /// Whose work items run on this thread now (the innermost run), or null. A task runs
  /// only in its own owner's runs: the awaitables refuse one of another owner, whose run
  /// would resume it where its own owner sees none of its work running.
  static const task_roots* running_here() noexcept { return here_; }

  /// Runs the items of `now` in order, until it is empty or the owner was abandoned.
  void run(work_list& now) noexcept {
    ++running_;
    const task_roots* const outer = std::exchange(here_, this);
    while (!abandoned_) {
      work_item* w = now.pop_front();
      if (!w) break;
      w->run();
    }
    here_ = outer;
    if (--running_ == 0 && abandoned_) destroy_all_();
  }

 private:
  // Each frame's promise removes its handle as it goes.
  void destroy_all_() noexcept {
    while (!roots_.empty()) roots_.back().destroy();
  }

  std::vector<std::coroutine_handle<>> roots_;
  unsigned running_ = 0;
  bool abandoned_ = false;
  static inline thread_local const task_roots* here_ = nullptr;
};

class scheduler;

/// A deadline: when it passes, the scheduler queues `item` (once). Disarmed by its owner
/// when what it guards happened first, and when destroyed.
class timer_node {
 public:
  using clock = std::chrono::steady_clock;
  timer_node() = default;
  timer_node(const timer_node&) = delete;
  timer_node& operator=(const timer_node&) = delete;
  ~timer_node() { disarm(); }

  inline void arm(scheduler& s, clock::time_point when, work_item& item);
  inline void disarm() noexcept;
  bool armed() const noexcept { return sched_ != nullptr; }
  clock::time_point when() const noexcept { return when_; }
  std::uint64_t id() const noexcept { return id_; }
  /// Called by the scheduler when the deadline passed: queue the item, forget the scheduler.
  work_item& fired() noexcept {
    sched_ = nullptr;
    return *item_;
  }

 private:
  scheduler* sched_ = nullptr;
  work_item* item_ = nullptr;
  clock::time_point when_{};
  std::uint64_t id_ = 0;
};

class scheduler {
 public:
  /// Queues `w` to run soon, on the scheduler's thread.
  virtual void post(work_item& w) noexcept = 0;
  /// Starts waiting on `w.fd` (throws when the descriptor is refused); `w` stays put until unwatch.
  virtual void watch(fd_watch& w) = 0;
  virtual void unwatch(fd_watch& w) noexcept = 0;
  /// Records a failure of something it drives (a task's, each one, even when tasks throw
  /// the same exception object); the scheduler's run rethrows it.
  virtual void fail(std::exception_ptr e) noexcept = 0;
  /// As fail(), for a source that reports its one failure at every turn: the same
  /// exception_ptr while it is pending is recorded once.
  virtual void fail_once(std::exception_ptr e) noexcept = 0;

  /// The tasks of its event_loop or asio_context (kept here: that may go while they run).
  task_roots roots;
  /// True once its event_loop or asio_context was destroyed and none of its work runs:
  /// nothing resumes a coroutine that waits here any more (its timeout neither).
  bool gone() const noexcept { return roots.abandoned() && !roots.running(); }

 protected:
  friend class timer_node;
  // Never destroyed through this base (its shared owners were made with the final class,
  // loop_core or asio_scheduler); virtual all the same, as a polymorphic base's: with a
  // friend, GCC's -Wnon-virtual-dtor takes a protected destructor for an accessible one.
  virtual ~scheduler() = default;
  /// Starts `t`'s deadline (t.when(), keyed by t.id()); calls t.fired() when it passes.
  virtual void start_timer(timer_node& t) = 0;
  virtual void stop_timer(timer_node& t) noexcept = 0;
  std::uint64_t next_timer_id() noexcept { return ++timer_ids_; }

 private:
  std::uint64_t timer_ids_ = 0;
};

inline void timer_node::arm(scheduler& s, clock::time_point when, work_item& item) {
  disarm();
  when_ = when;
  item_ = &item;
  id_ = s.next_timer_id();
  s.start_timer(*this);
  sched_ = &s;
}

inline void timer_node::disarm() noexcept {
  if (!sched_) return;
  sched_->stop_timer(*this);
  sched_ = nullptr;
}

/// What async_completion_queue, async_queue_pair and device_events can be made on: an
/// event_loop, or the asio adapter's asio_context.
template <class L>
concept has_scheduler = requires(const L& l) {
  { l.core() } -> std::convertible_to<std::shared_ptr<scheduler>>;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
