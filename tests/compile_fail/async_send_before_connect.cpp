#include <async_cases.hpp>

rdmakit::task<void> f() {
  auto& q = async_fresh<rc>();
  (void)co_await q.recv(async_region().local());
#ifndef RDMAKIT_CF_CONTROL
  (void)co_await q.send(async_region().local());
#endif
}
