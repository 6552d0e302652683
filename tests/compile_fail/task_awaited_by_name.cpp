#include <async_cases.hpp>

rdmakit::task<int> inner();

// A task awaited by its name: the first error was GCC's "passing 'task<int>' as 'this'
// argument discards qualifiers", which never says to move it (audit 37).
rdmakit::task<int> f() {
  rdmakit::task<int> t = inner();
  int v = co_await std::move(t);  // moved in: fine
#ifndef RDMAKIT_CF_CONTROL
  rdmakit::task<int> u = inner();
  v += co_await u;
#endif
  co_return v;
}
