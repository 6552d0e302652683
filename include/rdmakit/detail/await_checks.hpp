#pragma once
// What every rdmakit awaitable refuses before its coroutine suspends: a wait nothing
// would resume right (its loop destroyed, or the awaiting task another loop's).
#include <rdmakit/config.hpp>
#include <rdmakit/detail/scheduler.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/error.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// A coroutine about to wait on a source whose event_loop or asio_context was destroyed
/// (scheduler::gone()): nothing would resume it.
[[noreturn]] inline void throw_scheduler_gone(const char* what) {
  throw usage_error(cat(what, ": the event_loop or asio_context this was made on was destroyed, so nothing would "
                              "resume this coroutine (nor end its timeout): make the async completion queue "
                              "and the async objects on it anew on the loop that runs it"));
}
/// Refuses a co_await by a task of another loop than `loop` (what the awaited object was
/// made on): `loop` would resume it in its own turn (and not at all while the task's loop
/// runs), where the task's loop sees none of its work running and could free its frame.
inline void refuse_other_loop(const scheduler& loop, const char* what) {
  const task_roots* here = task_roots::running_here();
  if (RDMAKIT_UNLIKELY(here != nullptr && here != &loop.roots))
    throw usage_error(cat(what, ": awaited by a task of another event_loop or asio_context than the one this was "
                                "made on, which resumes only its own tasks: make the async objects on the loop "
                                "that runs the task"));
}
/// Refuses a co_await that nothing would resume right: `loop` gone, or another loop's task.
inline void check_awaited_on(const scheduler& loop, const char* what) {
  if (RDMAKIT_UNLIKELY(loop.gone())) throw_scheduler_gone(what);
  refuse_other_loop(loop, what);
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
