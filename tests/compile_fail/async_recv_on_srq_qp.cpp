#include <async_cases.hpp>

// recv() on an async queue pair of a shared receive queue: the first error was a
// std::visit chain from inside the coroutine layer (audit 37).
rdmakit::task<void> f() {
  auto& q = async_connected<on_srq<rc>>();
  (void)co_await q.send(async_region().local());
#ifndef RDMAKIT_CF_CONTROL
  (void)co_await q.recv(async_region().local());
#endif
}
