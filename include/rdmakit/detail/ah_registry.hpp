#pragma once
// Where a ud_address finds its address handle at each post. A ud_address is a value,
// copied into operations and post lists, so it cannot own the native handle (a count
// per copy would be two atomic operations per post); it points at the handle's record
// and remembers the record's generation instead. Destroying the handle advances the
// generation, so a post through an address taken before is refused, not sent through
// freed memory (libibverbs providers dereference the handle when posting).
//
// Records are never freed: an address may outlive its handle, PD and device and must
// still be checked. A destroyed handle's record is reused by the next one, so memory
// stays at the most handles alive at once, however many come and go.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/spin_lock.hpp>

#include <cstdint>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class B>
struct ah_record {
  static_assert(std::is_trivially_copyable_v<typename B::ah> && sizeof(typename B::ah) <= sizeof(void*),
                "B::ah is read atomically at each UD post: a pointer or integer handle");
  // Read at posts (atomically, as another thread may destroy the handle meanwhile: see
  // address_handle), written under the registry's lock.
  typename B::ah ah{};
  std::uint64_t generation = 0;
  ah_record* next_free = nullptr;
  // The protection domain the handle was made on (its pd_state): a post from a queue pair
  // of another is refused (post_rule::address_pd). Read after current().
  const void* pd = nullptr;

  // True while no handle was destroyed since an address of generation `gen` was taken.
  RDMAKIT_ALWAYS_INLINE bool current(std::uint64_t gen) const noexcept {
    return __atomic_load_n(&generation, __ATOMIC_ACQUIRE) == gen;
  }
  RDMAKIT_ALWAYS_INLINE typename B::ah handle() const noexcept {
    typename B::ah h;
    __atomic_load(&ah, &h, __ATOMIC_RELAXED);
    return h;
  }
};

// The records of backend B's address handles. Setup-path only: a spin lock (as
// pd_state's; create and destroy are short and rare next to posts).
template <class B>
class ah_registry {
 public:
  // A record holding `ah` (a reused one, or a new one); throws only std::bad_alloc.
  static ah_record<B>* hold(typename B::ah ah, const void* pd) {
    lock_.lock();
    ah_record<B>* r = free_;
    if (r) free_ = r->next_free;
    lock_.unlock();
    if (!r) r = new ah_record<B>;  // before the handle is published: may throw
    r->pd = pd;
    __atomic_store(&r->ah, &ah, __ATOMIC_RELEASE);
    return r;
  }
  // Ends the record's generation and returns the handle it held, for the caller to
  // destroy: every address taken from it is refused from here on.
  static typename B::ah release(ah_record<B>* r) noexcept {
    const typename B::ah h = r->handle();
    typename B::ah none{};  // not const: clang's __atomic_store takes a pointer to non-const
    __atomic_store_n(&r->generation, r->generation + 1, __ATOMIC_RELEASE);
    __atomic_store(&r->ah, &none, __ATOMIC_RELEASE);
    lock_.lock();
    r->next_free = free_;
    free_ = r;
    lock_.unlock();
    return h;
  }
  // The record of no handle, where an empty ud_address points: its generation is never
  // an address's (addresses of it take 0), so a post through one is refused.
  static const ah_record<B>* none() noexcept { return &none_; }

 private:

  static inline ah_record<B>* free_ = nullptr;
  static inline spin_lock lock_;
  static inline const ah_record<B> none_{typename B::ah{}, 1, nullptr, nullptr};
};

// What an address checks at a post: its handle's record and the generation it was taken
// in. A post list keeps one per UD WR, since a handle may go between add and post.
template <class B>
struct ah_ticket {
  const ah_record<B>* record = ah_registry<B>::none();
  std::uint64_t generation = 0;
  RDMAKIT_ALWAYS_INLINE bool live() const noexcept { return record->current(generation); }
  // Whether the handle was made on protection domain `pd` (read once live()).
  RDMAKIT_ALWAYS_INLINE bool in_pd(const void* pd) const noexcept { return record->pd == pd; }
};

// ud_address's ticket, for the post paths (the address shows users only live()).
struct ud_address_access {
  template <class A>
  static RDMAKIT_ALWAYS_INLINE const auto& ticket(const A& a) noexcept {
    return a.ticket_;
  }
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
