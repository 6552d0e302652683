#pragma once
// The shared control blocks behind the RAII handles. Each child keeps what it depends
// on alive (as rust-ibverbs keeps Arcs to its parents): a protection domain holds its
// device, a region, address handle or queue pair holds its PD, a queue pair holds its
// completion queues. The native object is destroyed when the last owner goes, so no
// order of destruction or move can reach a destroyed parent. Setup shares ownership
// (shared_owner copies); the data path only follows raw pointers held by live objects.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/owning_ptr.hpp>
#include <rdmakit/detail/peer_invalidations.hpp>
#include <rdmakit/detail/spin_lock.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class B>
struct device_state;

/// What names the device behind context `ctx`, the same for every context open on it
/// (B::device_identity), or null when the backend cannot tell.
template <class B>
const void* device_identity(typename B::context ctx) noexcept {
  if constexpr (requires { B::device_identity(ctx); })
    return B::device_identity(ctx);
  else
    return nullptr;
}

/// Whether B's open_device may lend a context another device object has open (a backend
/// says so with `static constexpr bool shares_contexts = true`: rdmacm, whose contexts
/// are librdmacm's, one per device). Such device objects share one device_state.
template <class B>
inline constexpr bool shares_contexts = [] {
  if constexpr (requires { B::shares_contexts; })
    return static_cast<bool>(B::shares_contexts);
  else
    return false;
}();

/// The device states open in the process, by context, under shares_contexts<B>: a
/// context has one event queue, read by one device_events, and one set of windows,
/// whichever device object made them. Setup only. A list through the states themselves,
/// whose head is a pointer: nothing of it is destroyed at exit, so a device object of
/// static storage duration may remove its state after every other static is gone.
template <class B>
class open_devices {
 public:
  /// The live state of `st`'s context if there is one, else `st`, now registered (its
  /// destructor removes it).
  static shared_owner<const device_state<B>> share_or_add(shared_owner<device_state<B>> st) noexcept {
    spin_lock::hold h(lock_);
    for (const device_state<B>* s = head_; s; s = s->registry_next)
      if (s->ctx == st->ctx)
        if (auto live = s->registry_self.share()) return live;  // empty: its last owner went, it is going
    st->registry_self = shared_watch<const device_state<B>>(st);
    st->registry_next = head_;
    if (head_) head_->registry_prev = st.get();
    head_ = st.get();
    return st;
  }
  static void remove(device_state<B>* st) noexcept {
    spin_lock::hold h(lock_);
    if (st->registry_prev)
      st->registry_prev->registry_next = st->registry_next;
    else
      head_ = st->registry_next;
    if (st->registry_next) st->registry_next->registry_prev = st->registry_prev;
  }

 private:
  static constinit inline spin_lock lock_;
  static constinit inline device_state<B>* head_ = nullptr;
};

template <class B>
struct device_state {
  typename B::context ctx{};
  std::string name;
  device_attr attr{};
  // open_devices<B>'s list (shares_contexts<B>): a watch on this state, set when it is
  // registered, and its neighbours.
  shared_watch<const device_state> registry_self;
  device_state* registry_prev = nullptr;
  device_state* registry_next = nullptr;
  // Who reads this context's asynchronous events: bit 0, a device_events on an event loop;
  // the rest, 2 per device::next_event() running (on any thread). A device_events is the
  // only reader: another reader would take some of its events, so it is refused while a
  // next_event() waits, and next_event() while it exists.
  // Read and written with __atomic builtins (as shared_count: no <atomic> in the core).
  static constexpr unsigned events_by_loop = 1, events_next_call = 2;
  mutable unsigned events_readers = 0;
  /// Makes a device_events the reader: 0, or the readers already there (nothing changed).
  unsigned watch_events() const noexcept {
    unsigned seen = 0;
    if (__atomic_compare_exchange_n(&events_readers, &seen, events_by_loop, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return 0;
    return seen;
  }
  void unwatch_events() const noexcept { __atomic_fetch_and(&events_readers, ~events_by_loop, __ATOMIC_RELEASE); }
  /// A next_event() starts reading; false (nothing changed) while a device_events is the reader.
  bool begin_next_event() const noexcept {
    unsigned seen = __atomic_load_n(&events_readers, __ATOMIC_ACQUIRE);
    do {
      if (seen & events_by_loop) return false;
    } while (!__atomic_compare_exchange_n(&events_readers, &seen, seen + events_next_call, true, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    return true;
  }
  void end_next_event() const noexcept { __atomic_fetch_sub(&events_readers, events_next_call, __ATOMIC_RELEASE); }
  // Its device's bound type 2 memory windows, and the peers' invalidations of them its
  // CQs polled: a record shared with every device object open on the same device.
  mutable device_windows<B> windows;

  device_state() = default;
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;
  ~device_state() {
    if (registry_self.get()) open_devices<B>::remove(this);  // first: no device object shares it now
    if (ctx != typename B::context{}) B::close_device(ctx);
  }

  port_attr port(std::uint8_t n) const {
    if (n == 0 || n > attr.phys_port_cnt)
      throw usage_error(cat("port(): device ", name, " has no port ", n, " (ports are 1..", attr.phys_port_cnt, ")"));
    return B::query_port(ctx, n);
  }
};

// Frees a buffer protection_domain::allocate made (page-aligned).
inline void free_page_aligned(std::byte* p) noexcept { ::operator delete[](p, std::align_val_t{4096}); }

template <class B>
struct pd_state {
  shared_owner<const device_state<B>> dev;
  typename B::pd pd{};

  explicit pd_state(shared_owner<const device_state<B>> d) : dev(std::move(d)), pd(B::alloc_pd(dev->ctx)) {}
  pd_state(const pd_state&) = delete;
  pd_state& operator=(const pd_state&) = delete;
  ~pd_state() {
    release_retained();  // what is still refused now stays registered: it is leaked, not freed
    if (pd != typename B::pd{}) B::dealloc_pd(pd);
  }

  // A registration the device refused to deregister, as rxe and the mock do while a
  // memory window is still bound to it (IBA 10.6.7.2.6: a rebind runs after it is
  // posted, and a failed one leaves the window where it was). Its buffer is kept too:
  // a peer may still write it through the window.
  void retain(typename B::mr mr, std::byte* owned) const noexcept {
    lock_.lock();
    try {
      retained_.push_back({mr, owned});
      __atomic_store_n(&any_retained_, true, __ATOMIC_RELEASE);
    } catch (...) {  // no memory to remember it: it stays registered and allocated
    }
    lock_.unlock();
  }
  // Deregisters (and frees) the retained registrations the device now lets go: called
  // when a window of this PD is bound, invalidated or freed, and when the PD goes. With
  // none retained (nearly always), one load.
  void release_retained() const noexcept {
    if (!__atomic_load_n(&any_retained_, __ATOMIC_ACQUIRE)) return;
    lock_.lock();
    std::erase_if(retained_, [](const retained_mr& r) {
      if (B::dereg_mr(r.mr) != 0) return false;
      if (r.owned) free_page_aligned(r.owned);
      return true;
    });
    __atomic_store_n(&any_retained_, !retained_.empty(), __ATOMIC_RELEASE);
    lock_.unlock();
  }

 private:
  struct retained_mr {
    typename B::mr mr;
    std::byte* owned;  // null when the region borrowed its memory
  };
  mutable std::vector<retained_mr> retained_;
  mutable bool any_retained_ = false;  // !retained_.empty(), read without the lock
  spin_lock lock_;  // regions of one PD may go on different threads; this path is rare and short
};

template <class B>
using device_ref = shared_owner<const device_state<B>>;
template <class B>
using pd_ref = shared_owner<const pd_state<B>>;

}  // namespace detail
RDMAKIT_END_NAMESPACE
