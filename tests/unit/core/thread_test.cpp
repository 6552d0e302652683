// detail/thread.hpp: which thread is calling (this_thread_tag), as the mock's pacing
// tells one thread's calls from another's.
#include <rdmakit/detail/thread.hpp>

#include <doctest/doctest.h>

#include <thread>

TEST_CASE("this_thread_tag: the same on one thread, different on two live threads, never null") {
  const void* mine = rdmakit::detail::this_thread_tag();
  CHECK(mine != nullptr);
  CHECK(rdmakit::detail::this_thread_tag() == mine);
  const void* theirs = nullptr;
  const void* theirs_again = nullptr;
  std::thread t([&] {
    theirs = rdmakit::detail::this_thread_tag();
    theirs_again = rdmakit::detail::this_thread_tag();
  });
  t.join();
  CHECK(theirs != nullptr);
  CHECK(theirs == theirs_again);
  CHECK(theirs != mine);
}
