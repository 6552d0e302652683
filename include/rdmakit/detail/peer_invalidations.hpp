#pragma once
// The bound type 2 memory windows of one device context, by rkey, and whether a peer's
// SEND_WITH_INV naming one was polled there. A LOCAL_INV of a type 2 window a peer has
// invalidated panics rxe's kernel (docs/semantics.md §13), and the peer's SEND may arrive
// on any queue pair of the device, not only the one the window is bound through: every
// poll of the device's CQs notes such receives here (completion_queue::deliver_), and
// memory_window::invalidate asks here before it posts. Windows and CQs may be on
// different threads: a spin_lock, as pd_state's; `watched_` is
// read without it, so a device with no bound window costs a poll one load.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/spin_lock.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

class peer_invalidations {
 public:
  /// Whether some type 2 window is bound (or being bound): polls note invalidations then.
  RDMAKIT_ALWAYS_INLINE bool watched() const noexcept { return __atomic_load_n(&watched_, __ATOMIC_ACQUIRE) != 0; }

  /// A bind to `rkey` is about to be posted: its entry, not yet live. Throws bad_alloc
  /// before anything is posted.
  void binding(std::uint32_t rkey) {
    lock_.lock();
    try {
      entries_.push_back({rkey, false});
    } catch (...) {
      lock_.unlock();
      throw;
    }
    publish_();
    lock_.unlock();
  }
  /// The window's bind to `rkey` was posted: its previous binding's entry (`old`, 0 for
  /// none) goes, and a peer's invalidation noted for `rkey` before (a stale one: the
  /// key byte came round) is forgotten.
  void bound(std::uint32_t old, std::uint32_t rkey) noexcept {
    lock_.lock();
    if (old != 0 && old != rkey) erase_(old);
    for (entry& e : entries_)
      if (e.rkey == rkey) e.invalidated = false;
    lock_.unlock();
  }
  /// The window bound to `rkey` is no longer (invalidated, its bind refused, or freed).
  void forget(std::uint32_t rkey) noexcept {
    lock_.lock();
    erase_(rkey);
    lock_.unlock();
  }
  /// A successful receive of a SEND_WITH_INV naming `rkey` was polled (or of a SEND
  /// whose rkey field holds it: only a bound window's entry is marked).
  void note(std::uint32_t rkey) noexcept {
    if (rkey == 0) return;  // a plain SEND's, on the devices that clear the field
    lock_.lock();
    for (entry& e : entries_)
      if (e.rkey == rkey) e.invalidated = true;
    lock_.unlock();
  }
  /// Whether a peer's SEND_WITH_INV naming `rkey` was polled since its bind: its entry
  /// goes then (the window is unbound).
  bool take_invalidated(std::uint32_t rkey) noexcept {
    lock_.lock();
    bool found = false;
    for (const entry& e : entries_) found = found || (e.rkey == rkey && e.invalidated);
    if (found) erase_(rkey);
    lock_.unlock();
    return found;
  }

 private:
  struct entry {
    std::uint32_t rkey;
    bool invalidated;
  };
  void erase_(std::uint32_t rkey) noexcept {
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].rkey == rkey) {
        entries_[i] = entries_.back();
        entries_.pop_back();
        break;
      }
    publish_();
  }
  void publish_() noexcept { __atomic_store_n(&watched_, entries_.empty() ? 0u : 1u, __ATOMIC_RELEASE); }

  std::vector<entry> entries_;
  unsigned watched_ = 0;  // !entries_.empty(), read without the lock
  spin_lock lock_;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
