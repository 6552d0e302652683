#ifndef RDMAKIT_TESTS_COMPILE_FAIL_ASYNC_CASES_HPP  // a guard, not #pragma once: meson.build precompiles this header (GCC)
#define RDMAKIT_TESTS_COMPILE_FAIL_ASYNC_CASES_HPP
// The compile-fail cases of the coroutine layer: the archetype backend plus the two
// descriptors the event loop waits on (fd_event_backend), and declared-only objects.
#include <cases.hpp>

#include <rdmakit/async_queue_pair.hpp>
#include <rdmakit/event_loop.hpp>

struct fd_archetype : rdmakit::archetype_backend {
  static int channel_fd(channel) noexcept;
  static int async_fd(context) noexcept;
};
static_assert(rdmakit::fd_event_backend<fd_archetype>);

template <class T>
rdmakit::async_queue_pair<fd_archetype, T, rdmakit::signal_all, rdmakit::qp_state::init>& async_fresh();
template <class T>
rdmakit::async_queue_pair<fd_archetype, T, rdmakit::signal_all, rdmakit::qp_state::rts>& async_connected();
rdmakit::memory_region<fd_archetype, all_rights>& async_region();
rdmakit::event_loop& loop();
#endif
