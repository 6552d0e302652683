#pragma once
// The bound type 2 memory windows of one device, by rkey, and whether a peer's
// SEND_WITH_INV naming one was polled there. A LOCAL_INV of a type 2 window a peer has
// invalidated panics rxe's kernel (docs/semantics.md §13), and the peer's SEND may arrive
// on any queue pair of the device, not only the one the window is bound through, nor only
// one made from the same context (device object): rxe looks its rkey up in the whole
// device. Every poll of the device's CQs notes such receives here
// (completion_queue::deliver_), and memory_window::invalidate asks here before it posts.
// One record per device, shared by the device objects open on it (device_windows, below;
// a backend names the device behind a context with device_identity). Windows and CQs
// may be on different threads: a spin_lock, as pd_state's; each context's `watched`
// flag is read without it, so a device with no bound window costs a poll one load.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/owning_ptr.hpp>
#include <rdmakit/detail/spin_lock.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

// (Templates on the backend, though nothing here depends on it: a translation unit that
// opens no device of B instantiates none of it, issue 12's compile cost.)
template <class B>
class peer_invalidations {
 public:
  /// The record of the device `identity` names (device_identity), shared with the device
  /// objects open on it; a new one when none is (or `identity` is null: a backend that
  /// cannot tell, one record per context). Throws bad_alloc.
  static shared_owner<peer_invalidations> of_device(const void* identity) {
    spin_lock::hold h(registry_lock_);
    if (identity)
      for (peer_invalidations* r = registry_head_; r; r = r->next_)
        if (r->identity_ == identity)
          if (auto live = r->self_.share()) return live;  // empty: its last owner went, it is going
    auto made = make_shared_owner<peer_invalidations>();
    if (identity) {
      made->identity_ = identity;
      made->self_ = shared_watch<peer_invalidations>(made);
      made->next_ = registry_head_;
      if (registry_head_) registry_head_->prev_ = made.get();
      registry_head_ = made.get();
    }
    return made;
  }
  peer_invalidations() = default;
  peer_invalidations(const peer_invalidations&) = delete;
  peer_invalidations& operator=(const peer_invalidations&) = delete;
  ~peer_invalidations() {
    if (!identity_) return;
    spin_lock::hold h(registry_lock_);
    if (prev_)
      prev_->next_ = next_;
    else
      registry_head_ = next_;
    if (next_) next_->prev_ = prev_;
  }

  /// A context's flag that polls read (device_windows::watched), set while some type 2
  /// window of the device is bound; removed before the flag goes. join throws bad_alloc.
  void join(unsigned* watched) {
    spin_lock::hold h(lock_);
    members_.push_back(watched);
    __atomic_store_n(watched, entries_.empty() ? 0u : 1u, __ATOMIC_RELEASE);
  }
  void leave(unsigned* watched) noexcept {
    spin_lock::hold h(lock_);
    std::erase(members_, watched);
  }

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
  void publish_() noexcept {
    for (unsigned* m : members_) __atomic_store_n(m, entries_.empty() ? 0u : 1u, __ATOMIC_RELEASE);
  }

  std::vector<entry> entries_;
  std::vector<unsigned*> members_;  // each context's watched flag: !entries_.empty()
  spin_lock lock_;
  // The process's records by device (of_device): a list through them, as open_devices.
  const void* identity_ = nullptr;
  shared_watch<peer_invalidations> self_;
  peer_invalidations* prev_ = nullptr;
  peer_invalidations* next_ = nullptr;
  static constinit inline spin_lock registry_lock_;
  static constinit inline peer_invalidations* registry_head_ = nullptr;
};

/// One context's view of its device's record: the flag its polls read inline, and the
/// shared record the rest goes to.
template <class B>
class device_windows {
 public:
  device_windows() = default;
  device_windows(const device_windows&) = delete;
  device_windows& operator=(const device_windows&) = delete;
  ~device_windows() {
    if (record_) record_->leave(&watched_);
  }
  /// Joins the record of the device `identity` names (peer_invalidations::of_device).
  void open(const void* identity) {
    auto r = peer_invalidations<B>::of_device(identity);
    r->join(&watched_);
    record_ = std::move(r);
  }
  /// Whether some type 2 window of the device is bound (or being bound): polls note
  /// invalidations then.
  RDMAKIT_ALWAYS_INLINE bool watched() const noexcept { return __atomic_load_n(&watched_, __ATOMIC_ACQUIRE) != 0; }
  void binding(std::uint32_t rkey) { record_->binding(rkey); }
  void bound(std::uint32_t old, std::uint32_t rkey) noexcept { record_->bound(old, rkey); }
  void forget(std::uint32_t rkey) noexcept { record_->forget(rkey); }
  void note(std::uint32_t rkey) noexcept { record_->note(rkey); }
  bool take_invalidated(std::uint32_t rkey) noexcept { return record_->take_invalidated(rkey); }

 private:
  unsigned watched_ = 0;  // __atomic builtins
  shared_owner<peer_invalidations<B>> record_;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
