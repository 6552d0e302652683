#include <async_cases.hpp>

void f() {
  rdmakit::async_completion_queue<fd_archetype, rdmakit::event_driven<>> fine(
      loop(), rdmakit::completion_queue<fd_archetype, rdmakit::event_driven<>>{});
#ifndef RDMAKIT_CF_CONTROL
  rdmakit::async_completion_queue<fd_archetype, rdmakit::busy_poll<>> spinning(
      loop(), rdmakit::completion_queue<fd_archetype, rdmakit::busy_poll<>>{});
#endif
}
