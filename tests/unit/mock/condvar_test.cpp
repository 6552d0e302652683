// The fabric's condition variable (mock/condvar.hpp): a steady-clock deadline ends a
// wait with false, a notification before it with true, as std::condition_variable's
// cv_status::timeout and no_timeout.
#include <rdmakit/backends/mock/condvar.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <thread>

namespace md = rdmakit::mock::detail;

TEST_CASE("mock condvar: wait_until returns false once the deadline has passed") {
  std::mutex mu;
  md::condvar cv;
  std::unique_lock lk(mu);
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::milliseconds(30);
  while (cv.wait_until(lk, until)) {
  }  // a spurious wake-up before the deadline returns true
  CHECK(std::chrono::steady_clock::now() >= until);
  CHECK_FALSE(cv.wait_until(lk, start));  // already past
}

TEST_CASE("mock condvar: notify_all wakes wait and wait_until before the deadline") {
  std::mutex mu;
  md::condvar cv;
  bool ready = false;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard g(mu);
    ready = true;
    cv.notify_all();
  });
  {
    std::unique_lock lk(mu);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready) REQUIRE(cv.wait_until(lk, until));
  }
  ready = false;
  std::thread t2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard g(mu);
    ready = true;
    cv.notify_all();
  });
  {
    std::unique_lock lk(mu);
    while (!ready) cv.wait(lk);
  }
  t.join();
  t2.join();
  CHECK(ready);
}
