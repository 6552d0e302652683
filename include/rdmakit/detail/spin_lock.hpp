#pragma once
// The lock of the short, setup-side critical sections of records several threads share
// (a registry, a count, a QP handle): a spin lock, as the core includes no <mutex>.
#include <rdmakit/config.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

class spin_lock {
 public:
  void lock() const noexcept {
    while (__atomic_test_and_set(&locked_, __ATOMIC_ACQUIRE)) {
    }
  }
  void unlock() const noexcept { __atomic_clear(&locked_, __ATOMIC_RELEASE); }

  /// Holds `l` for its scope.
  class hold {
   public:
    explicit hold(const spin_lock& l) noexcept : l_(l) { l_.lock(); }
    hold(const hold&) = delete;
    hold& operator=(const hold&) = delete;
    ~hold() { l_.unlock(); }

   private:
    const spin_lock& l_;
  };

 private:
  mutable bool locked_ = false;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
