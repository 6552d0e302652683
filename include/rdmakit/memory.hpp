#pragma once
/// Registered memory: `memory_region<B, Access>` (access rights are part of the type),
/// `remote_region<Access>` (address, rkey, length: what a peer needs to target the
/// region, obtainable only from a region whose type allows remote access), the untyped
/// `local_buffer` (address, length, lkey) the data path takes, and `registered_pool`
/// (one registration, fixed-size slices handed out and returned without touching the
/// device: no registration per message).
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/owning_ptr.hpp>
#include <rdmakit/error.hpp>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

/// The remote access bits of an access set.
inline constexpr access remote_access_bits =
    access::remote_write | access::remote_read | access::remote_atomic;

/// A local buffer inside a registered region: what a scatter/gather entry holds.
struct local_buffer {
  /// The first byte, as the device sees it (a virtual address in the region).
  std::uint64_t addr = 0;
  /// Bytes from addr; one buffer holds at most 4 GiB, a limit of the verbs' sge.
  std::uint32_t length = 0;
  /// The local key of the region the buffer lies in.
  std::uint32_t lkey = 0;

  /// `len` bytes from `offset`; usage_error when they are not all inside this buffer
  /// (a buffer is never shortened: a WR carries the length asked for). 64-bit, as a
  /// size_t cursor is: one past 4 GiB is refused, not taken modulo 2^32.
  constexpr local_buffer sub(std::uint64_t offset, std::uint64_t len) const {
    if (RDMAKIT_UNLIKELY(offset > length || len > length - offset))
      detail::throw_range("local_buffer::sub", "buffer", offset, len, length);
    return {addr + offset, static_cast<std::uint32_t>(len), lkey};
  }
  /// The first `len` bytes (usage_error past the end, as sub).
  constexpr local_buffer first(std::uint64_t len) const { return sub(0, len); }
  /// The buffer's bytes, for the CPU to fill or read.
  std::byte* data() const noexcept { return reinterpret_cast<std::byte*>(addr); }
};

/// A remote memory descriptor: address, rkey and length, with the access rights the
/// owner registered. Build one with memory_region::remote(); only for descriptors
/// received from a peer (or tests) use the loudly named `unchecked`.
template <access Rights = remote_access_bits>
class remote_region {
 public:
  /// The rights the owner registered; operations check them at compile time.
  static constexpr access rights = Rights;

  constexpr remote_region() = default;

  /// A descriptor nobody checked: the rights are whatever `Rights` claims. For
  /// descriptors received from peers and for tests of wrong keys. Only a range that
  /// runs past the end of the 64-bit address space is refused (usage_error): no
  /// registration covers one, and sub() would wrap it to address 0.
  static constexpr remote_region unchecked(std::uint64_t addr, std::uint32_t rkey, std::uint64_t length) {
    if (RDMAKIT_UNLIKELY(length != 0 && length - 1 > ~addr))  // (one ending at 2^64 is whole)
      detail::throw_wrapping_region("remote_region::unchecked", addr, length);
    return remote_region(addr, rkey, length);
  }

  /// The region's first byte in the owner's address space.
  constexpr std::uint64_t addr() const noexcept { return addr_; }
  /// The key the owner's device checks on each RDMA access.
  constexpr std::uint32_t rkey() const noexcept { return rkey_; }
  /// The region's size in bytes.
  constexpr std::uint64_t length() const noexcept { return length_; }

  /// `len` bytes from `offset`; usage_error when they are not all inside this region
  /// (a descriptor is never shortened).
  constexpr remote_region sub(std::uint64_t offset, std::uint64_t len) const {
    if (RDMAKIT_UNLIKELY(offset > length_ || len > length_ - offset))
      detail::throw_range("remote_region::sub", "remote region", offset, len, length_);
    return remote_region(addr_ + offset, rkey_, len);
  }

  /// The same descriptor with fewer rights (never more).
  template <access Fewer>
  constexpr remote_region<Fewer> narrow() const noexcept {
    static_assert((Rights & Fewer) == Fewer, "narrow<>() can only drop access rights");
    return remote_region<Fewer>(addr_, rkey_, length_);
  }

  friend constexpr bool operator==(const remote_region&, const remote_region&) = default;

 private:
  template <verbs_backend, access>
  friend class memory_region;
  template <access>
  friend class remote_region;  // narrow(): the range was checked already
  constexpr remote_region(std::uint64_t a, std::uint32_t k, std::uint64_t l) noexcept
      : addr_(a), rkey_(k), length_(l) {}
  std::uint64_t addr_ = 0;
  std::uint32_t rkey_ = 0;
  std::uint64_t length_ = 0;
};

namespace detail {
struct region_access;  // memory_window.hpp: a window shares the region's registration
struct aligned_free {
  void operator()(std::byte* p) const noexcept { free_page_aligned(p); }
};
using aligned_bytes = unique_owner<std::byte[], aligned_free>;

inline aligned_bytes allocate_zeroed(std::size_t bytes) {
  auto* p = static_cast<std::byte*>(::operator new[](bytes ? bytes : 1, std::align_val_t{4096}));
  std::memset(p, 0, bytes);
  return aligned_bytes(p);
}

// One registration: deregistered (and an owned buffer freed) when the last holder goes.
// The region holds it, and so does a memory window bound to the region, so a peer
// holding the window's rkey can never reach memory that was freed or registered anew.
// A registration the device refuses to deregister (a window still bound to it on the
// device) is handed to the PD with its buffer, and deregistered later (pd_state::retain).
template <class B>
struct mr_block {
  pd_ref<B> pd;
  typename B::mr mr{};
  aligned_bytes owned;

  mr_block() = default;
  mr_block(const mr_block&) = delete;
  mr_block& operator=(const mr_block&) = delete;
  ~mr_block() {
    if (mr != typename B::mr{} && B::dereg_mr(mr) != 0) pd->retain(mr, owned.release());
  }
};
template <class B>
using mr_ref = shared_owner<const mr_block<B>>;
}  // namespace detail

/// A registered memory region with access rights `Access` (local_write, remote_*,
/// mw_bind). Owns its buffer when made with protection_domain::allocate, else borrows
/// it. It keeps its protection domain alive; a memory window bound to it keeps the
/// registration (and an owned buffer) alive past the region's own destruction.
template <verbs_backend B, access Access>
class memory_region {
  static_assert(!has_any(Access, access::remote_write | access::remote_atomic) || has_any(Access, access::local_write),
                "memory_region: access::remote_write and access::remote_atomic need access::local_write too "
                "(every device refuses the registration without it): add access::local_write");

 public:
  /// The access rights the region was registered with.
  static constexpr access rights = Access;
  /// Whether peers may target this region (any remote bit).
  static constexpr bool remote_access = has_any(Access, remote_access_bits);

  memory_region() = default;

  /// Registers `length` bytes at `addr` (borrowed: they must outlive the region).
  /// Prefer protection_domain::register_memory.
  memory_region(detail::pd_ref<B> pd, void* addr, std::size_t length)
      : memory_region(checked_borrow_(std::move(pd), addr, length), addr, length, detail::aligned_bytes{}) {}

  /// Allocates `length` zeroed, page-aligned bytes and registers them. Prefer
  /// protection_domain::allocate.
  static memory_region allocate(detail::pd_ref<B> pd, std::size_t length) {
    check_length_(pd, length);  // first: not gigabytes zeroed for a registration refused
    // Past PTRDIFF_MAX no object fits, and within a page of SIZE_MAX libstdc++'s aligned
    // new rounds the size to 0 (a tiny block, which the zeroing then overran).
    if (length > static_cast<std::size_t>(PTRDIFF_MAX))
      throw usage_error(detail::cat("allocate(): ", length, " bytes is more than the address space can hold (one ",
                                    "buffer takes at most ", PTRDIFF_MAX, "): ask for the bytes the program needs"));
    auto buf = zeroed_(length);
    void* addr = buf.get();
    return memory_region(std::move(pd), addr, length, std::move(buf));
  }

  /// Takes over the registration (and the buffer, if owned); `o` becomes empty.
  memory_region(memory_region&& o) noexcept
      : blk_(std::move(o.blk_)),
        mr_(std::exchange(o.mr_, {})),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  /// Deregisters what this region holds, then takes over `o`'s; `o` becomes empty.
  memory_region& operator=(memory_region&& o) noexcept {
    if (this != &o) {
      release();
      blk_ = std::move(o.blk_);
      mr_ = std::exchange(o.mr_, {});
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~memory_region() { release(); }

  /// False for an empty (default-constructed or moved-from) region.
  explicit operator bool() const noexcept { return mr_ != typename B::mr{}; }
  /// The bytes (nullptr and 0 when empty).
  std::byte* data() const noexcept { return data_; }
  /// Registered bytes (0 when empty).
  std::size_t size() const noexcept { return size_; }
  /// data() and size() as a span.
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  /// The local key that sges on this region carry; throws usage_error when empty.
  std::uint32_t lkey() const { return B::mr_lkey(native_("lkey")); }
  /// The backend's region (ibv_mr* on ibverbs), for calls rdmakit does not wrap.
  typename B::mr native() const noexcept { return mr_; }

  /// The whole region as a local buffer (usage_error for a region of 4 GiB or more,
  /// more than one SGE holds: use local(offset, len)).
  local_buffer local() const { return local(0, size_); }
  /// `len` bytes from `offset` as a local buffer; usage_error when they are not all in
  /// the region (a buffer is never shortened: a WR carries the length asked for), or
  /// for 4 GiB or more.
  local_buffer local(std::size_t offset, std::size_t len) const {
    const std::uint32_t key = B::mr_lkey(native_("local"));
    if (RDMAKIT_UNLIKELY(offset > size_ || len > size_ - offset || len > 0xFFFFFFFFu))
      detail::throw_range("memory_region::local", "region", offset, len, size_);
    return {reinterpret_cast<std::uint64_t>(data_ + offset), static_cast<std::uint32_t>(len), key};
  }

  /// The remote key. Only regions registered with a remote access bit have one worth
  /// sending.
  std::uint32_t rkey() const {
    static_assert(remote_access,
                  "rkey(): this memory_region was registered without remote access; add "
                  "access::remote_write, remote_read or remote_atomic to its access flags");
    return B::mr_rkey(native_("rkey"));
  }

  /// The descriptor a peer needs to READ/WRITE/atomically access this region.
  remote_region<Access & remote_access_bits> remote() const {
    static_assert(remote_access,
                  "remote(): this memory_region was registered without remote access; add "
                  "access::remote_write, remote_read or remote_atomic to its access flags");
    return remote_region<Access & remote_access_bits>(reinterpret_cast<std::uint64_t>(data_),
                                                      B::mr_rkey(native_("remote")), size_);
  }

 private:
  friend struct detail::region_access;

  static void check_length_(const detail::pd_ref<B>& pd, std::size_t length) {
    if (length == 0)
      throw usage_error("allocate()/register_memory(): a memory region needs at least 1 byte (asked for 0)");
    const std::uint64_t most = pd ? pd->dev->attr.max_mr_size : 0;
    if (most != 0 && length > most)
      throw usage_error(detail::cat("allocate()/register_memory(): ", length, " bytes is more than one registration on ",
                                    pd->dev->name, " may cover (its max_mr_size is ", most,
                                    "): register several smaller regions"));
  }

  // The buffer, or an allocation_error naming the call and the size where the allocator
  // has no memory for it (a bare std::bad_alloc named neither).
  static detail::aligned_bytes zeroed_(std::size_t length) {
    try {
      return detail::allocate_zeroed(length);
    } catch (const std::bad_alloc&) {
      throw allocation_error(detail::cat("allocate(): ", length, " bytes could not be allocated (out of memory, or ",
                                         "over this process's limit): ask for fewer bytes"));
    }
  }

  // A borrowed range's checks (allocate makes its own, within the limits checked first).
  static detail::pd_ref<B> checked_borrow_(detail::pd_ref<B> pd, const void* addr, std::size_t length) {
    check_length_(pd, length);
    if (!addr)
      throw usage_error(
          detail::cat("register_memory(): cannot register ", length, " bytes at a null address: give a buffer"));
    if (reinterpret_cast<std::uintptr_t>(addr) + length < reinterpret_cast<std::uintptr_t>(addr))
      throw usage_error(detail::cat("register_memory(): ", length, " bytes from ", reinterpret_cast<std::uintptr_t>(addr),
                                    " run past the end of the address space: give the buffer's real length"));
    return pd;
  }

  // Registers a range checked by the caller (checked_borrow_, or allocate's check_length_).
  memory_region(detail::pd_ref<B> pd, void* addr, std::size_t length, detail::aligned_bytes owned)
      : data_(static_cast<std::byte*>(addr)), size_(length) {
    auto blk = detail::make_shared_owner<detail::mr_block<B>>();
    blk->pd = std::move(pd);
    blk->mr = B::reg_mr(blk->pd->pd, addr, length, Access);
    blk->owned = std::move(owned);
    mr_ = blk->mr;
    blk_ = std::move(blk);
  }
  typename B::mr native_(const char* call) const {
    if (RDMAKIT_UNLIKELY(mr_ == typename B::mr{})) detail::throw_empty("memory_region", call);
    return mr_;
  }
  void release() noexcept {
    mr_ = {};
    blk_.reset();  // deregisters, unless a memory window still holds the registration
  }

  detail::mr_ref<B> blk_;
  typename B::mr mr_{};  // blk_->mr, here for the data path's lkey
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// One registered region cut into `slots` slices of `slot_size` bytes. acquire() and
/// the slices' destructors never touch the device: the data path can take and return
/// buffers per message. Single-threaded. Slices keep the registration alive: a pool
/// destroyed while slices are out hands its state to them, and the last one frees it.
template <verbs_backend B, access Access>
class registered_pool {
  struct state {
    memory_region<B, Access> region;
    std::size_t slot_size = 0;
    std::size_t slots = 0;
    std::vector<std::uint32_t> free;  // stack of free slot indexes
    bool pool_alive = true;           // false: the last slice deletes this state

    void give_back(std::uint32_t index) noexcept {
      free.push_back(index);  // capacity reserved
      if (!pool_alive && free.size() == slots) delete this;
    }
  };

 public:
  /// The access rights the pool's region was registered with.
  static constexpr access rights = Access;

  /// A slice of the pool; goes back to the pool when destroyed. Empty when the pool
  /// was exhausted (test with `if (slice)`).
  class slice {
   public:
    slice() = default;
    /// Takes over the slot; `o` becomes empty.
    slice(slice&& o) noexcept : st_(std::exchange(o.st_, nullptr)), index_(o.index_) {}
    /// Gives back the slot held, then takes over `o`'s; `o` becomes empty.
    slice& operator=(slice&& o) noexcept {
      if (this != &o) {
        reset();
        st_ = std::exchange(o.st_, nullptr);
        index_ = o.index_;
      }
      return *this;
    }
    ~slice() { reset(); }

    /// False for an empty slice (pool exhausted, moved from, or given back).
    explicit operator bool() const noexcept { return st_ != nullptr; }
    /// Which slot of the pool this is, e.g. to index per-slot state or as a wr_id.
    std::size_t index() const noexcept { return index_; }
    /// The slot's size in bytes (the pool's slot_size; 0 when empty).
    std::size_t size() const noexcept { return st_ ? st_->slot_size : 0; }
    /// The slot's first byte (nullptr when empty).
    std::byte* data() const noexcept { return st_ ? st_->region.data() + offset() : nullptr; }
    /// data() and size() as a span.
    std::span<std::byte> bytes() const noexcept { return {data(), size()}; }
    /// The local key of the pool's region; throws usage_error when empty.
    std::uint32_t lkey() const { return state_("lkey").region.lkey(); }
    /// The whole slice as a local buffer (carries the pool's lkey).
    local_buffer local() const { return state_("local").region.local(offset(), size()); }
    /// The first `len` bytes of the slice (usage_error past its end).
    local_buffer local(std::size_t len) const {
      const auto& st = state_("local");
      if (RDMAKIT_UNLIKELY(len > st.slot_size)) detail::throw_range("registered_pool::slice::local", "slice", 0, len, st.slot_size);
      return st.region.local(offset(), len);
    }
    /// This slice as a remote descriptor (pools with remote access only).
    remote_region<Access & remote_access_bits> remote() const {
      return state_("remote").region.remote().sub(offset(), size());
    }
    /// Gives the slice back to the pool now.
    void reset() noexcept {
      if (st_) st_->give_back(static_cast<std::uint32_t>(index_));
      st_ = nullptr;
    }

   private:
    friend class registered_pool;
    slice(state* s, std::size_t i) noexcept : st_(s), index_(i) {}
    std::size_t offset() const noexcept { return index_ * st_->slot_size; }
    const state& state_(const char* call) const {
      if (!st_) detail::throw_empty("registered_pool::slice", call);
      return *st_;
    }
    state* st_ = nullptr;
    std::size_t index_ = 0;
  };

  registered_pool() = default;

  /// Allocates and registers slots × slot_size bytes (slot_size rounded up to 64).
  /// Prefer protection_domain::create_pool.
  registered_pool(detail::pd_ref<B> pd, std::size_t slot_size, std::size_t slots) {
    if (slot_size == 0 || slots == 0 || slots > 0xFFFFFFFFu || slot_size > (std::size_t{1} << 40) / slots)
      throw usage_error(detail::cat(
          "create_pool(): a registered pool needs slot_size > 0, 0 < slots < 2^32 and at most 1 TiB in all (got ",
          slot_size, " × ", slots, ")"));
    auto st = detail::make_unique_owner<state>();
    st->slot_size = (slot_size + 63) / 64 * 64;
    st->slots = slots;
    st->region = memory_region<B, Access>::allocate(std::move(pd), st->slot_size * slots);
    st->free.reserve(slots);
    for (std::size_t i = slots; i-- > 0;) st->free.push_back(static_cast<std::uint32_t>(i));
    st_ = st.release();
  }
  /// Takes over the pool; `o` becomes empty. Slices taken from it stay valid.
  registered_pool(registered_pool&& o) noexcept : st_(std::exchange(o.st_, nullptr)) {}
  /// Releases this pool (its slices stay valid until given back), then takes over `o`'s.
  registered_pool& operator=(registered_pool&& o) noexcept {
    if (this != &o) {
      release();
      st_ = std::exchange(o.st_, nullptr);
    }
    return *this;
  }
  ~registered_pool() { release(); }

  /// False for an empty (default-constructed or moved-from) pool.
  explicit operator bool() const noexcept { return st_ != nullptr; }
  /// A free slice, or an empty one when all are in use (or this pool is empty). Never allocates.
  slice acquire() noexcept {
    if (!st_ || st_->free.empty()) return {};
    auto i = st_->free.back();
    st_->free.pop_back();
    return slice(st_, i);
  }
  /// Slots free now: acquire() succeeds this many times before returning empty slices.
  std::size_t available() const noexcept { return st_ ? st_->free.size() : 0; }
  /// The number of slots, in use or not.
  std::size_t slots() const noexcept { return st_ ? st_->slots : 0; }
  /// The size of one slot in bytes (slot_size as asked, rounded up to 64).
  std::size_t slot_size() const noexcept { return st_ ? st_->slot_size : 0; }
  /// The registered region behind every slot; throws usage_error when the pool is empty.
  const memory_region<B, Access>& region() const {
    if (!st_) detail::throw_empty("registered_pool", "region");
    return st_->region;
  }

 private:
  void release() noexcept {
    if (!st_) return;
    if (st_->free.size() == st_->slots)
      delete st_;
    else
      st_->pool_alive = false;  // the last slice returned deletes it
    st_ = nullptr;
  }
  state* st_ = nullptr;
};

RDMAKIT_END_NAMESPACE
