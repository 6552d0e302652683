#include <async_cases.hpp>

rdmakit::task<int> inner();

// A task's coroutine resumed by hand (task::handle() was public, used by nothing) ran
// outside any event_loop, and destroying the task left the in-place awaitable it waited
// on to resume the freed frame when its completion came. The coroutine is reachable
// only through co_await and event_loop::spawn.
void f() {
  auto t = inner();
#ifndef RDMAKIT_CF_CONTROL
  t.handle().resume();
#endif
}
