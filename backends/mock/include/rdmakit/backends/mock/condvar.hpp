#pragma once
// The fabric's condition variable: std::condition_variable's wait, wait_until on the
// steady clock and notify_all, on a pthread condition on CLOCK_MONOTONIC (the steady
// clock's, as libstdc++'s steady waits use). <condition_variable> would bring
// <stop_token> and condition_variable_any into every translation unit that includes the
// mock (9 MB of GCC's allocations with <thread>, issue 12).
#include <rdmakit/config.hpp>
#include <rdmakit/detail/chrono.hpp>

#include <pthread.h>
#include <time.h>

#include <mutex>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

class condvar {
 public:
  condvar() noexcept {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&c_, &a);
    pthread_condattr_destroy(&a);
  }
  ~condvar() { pthread_cond_destroy(&c_); }
  condvar(const condvar&) = delete;
  condvar& operator=(const condvar&) = delete;

  void notify_all() noexcept { pthread_cond_broadcast(&c_); }
  void wait(std::unique_lock<std::mutex>& lk) noexcept { pthread_cond_wait(&c_, lk.mutex()->native_handle()); }
  /// Waits for a notification until `until`; false when it has passed (as
  /// std::cv_status::timeout: judged by the clock after waking).
  bool wait_until(std::unique_lock<std::mutex>& lk, std::chrono::steady_clock::time_point until) noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch());
    timespec ts{};
    if (ns.count() > 0) {
      // Counted in the fields' own types (time_t and long: 32 bits on some ABIs).
      const auto sec = std::chrono::duration_cast<std::chrono::duration<time_t>>(ns);
      ts.tv_sec = sec.count();
      ts.tv_nsec = std::chrono::duration_cast<std::chrono::duration<long, std::nano>>(ns - sec).count();
    }
    pthread_cond_timedwait(&c_, lk.mutex()->native_handle(), &ts);
    return std::chrono::steady_clock::now() < until;
  }

 private:
  pthread_cond_t c_;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
