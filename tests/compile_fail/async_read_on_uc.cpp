#include <async_cases.hpp>

rdmakit::task<void> f() {
  auto& q = async_connected<uc>();
  (void)co_await q.write(async_region().local(), async_region().remote());
#ifndef RDMAKIT_CF_CONTROL
  (void)co_await q.read(async_region().local(), async_region().remote());
#endif
}
