#include <async_cases.hpp>

rdmakit::task<int> inner();

// The awaiter of a task, kept in a variable: other code could destroy it while the
// coroutine waits on it, which then waited for ever.
rdmakit::task<int> f() {
  int v = co_await inner();  // the temporary: fine
#ifndef RDMAKIT_CF_CONTROL
  auto aw = inner().operator co_await();
  v += co_await aw;
#endif
  co_return v;
}
