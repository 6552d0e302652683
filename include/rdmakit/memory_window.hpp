#pragma once
/// Memory windows: `memory_window<B, Access, Type>` grants peers `Access` (remote bits)
/// on part of a registered region through its own rkey, which changes on every bind.
/// `pd.alloc_window<access::remote_write>()` makes an unbound type 2 window;
/// `win.bind(qp, region, offset, length, wr_id)` binds it (type 1: the verbs call,
/// type 2: a BIND_MW WR; both take a send-queue slot and complete as BIND_MW);
/// `win.remote()` is the `remote_region<Access>` a peer writes, reads or updates
/// atomically exactly as a region's; `win.invalidate(qp, wr_id)` revokes it (type 2: a
/// LOCAL_INV WR; type 1: a zero-length bind), as does the peer's `op::send_inv`.
///
/// The types rule out a window granting a right its region lacks: binding compiles only
/// from a `memory_region<B, R>` whose R has access::mw_bind and every bit of Access. A
/// window keeps its protection domain alive, and the registration of the last region
/// it was bound to (a peer may still hold its rkey) until it is rebound elsewhere or
/// destroyed. Needs a backend with memory windows (mw_backend: mock, ibverbs).
#include <rdmakit/memory.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/queue_pair.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
struct region_access {
  template <class B, access A>
  static const mr_ref<B>& block(const memory_region<B, A>& r) noexcept {
    return r.blk_;
  }
};

// Memory-window WRs exist on connected queue pairs only (rxe and IBA: RC, UC).
struct window_rule {
  template <class T>
  static constexpr bool allowed_on = bool(T::connected);
  template <class T>
  static constexpr void check() noexcept {
    static_assert(T::connected,
                  "memory windows are bound and invalidated on RC or UC queue pairs: UD has none");
  }
};

// SEND_WITH_INV exists on RC only: the IBA defines its opcodes for RC (and XRC), none for
// UC (rxe completes one posted on UC with LOC_QP_OP_ERR, its queue pair in ERR).
struct send_inv_rule {
  template <class T>
  static constexpr bool allowed_on = bool(T::supports_read);  // (RC: the transport with READ)
  template <class T>
  static constexpr void check() noexcept {
    static_assert(T::supports_read,
                  "send_inv (SEND_WITH_INV) needs an RC queue pair: the IBA has no SEND_WITH_INV opcode for UC or "
                  "UD; invalidate the window on its side instead (memory_window::invalidate)");
  }
};

// The next rkey of a window: the same index, the next key byte (ibv_inc_rkey).
constexpr std::uint32_t next_rkey(std::uint32_t k) noexcept { return (k & ~0xFFu) | ((k + 1) & 0xFFu); }
}  // namespace detail

template <verbs_backend B, access Access, mw_type Type = mw_type::type2>
class memory_window;

namespace op {

/// SEND that also invalidates the peer's type 2 window whose descriptor is `window`
/// (RC only). The peer's receive completion names the rkey (completion::invalidated_rkey).
template <access A, detail::local_side L = local_buffer>
struct send_inv {
  /// The buffer or scatter/gather list sent.
  L local;
  /// The peer's window (its remote()), invalidated when the SEND arrives.
  remote_region<A> window;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::send_with_inv;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::send_inv_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    static_assert(mw_backend<typename D::backend>, "send_inv: this backend has no memory windows (mw_backend)");
    d.rkey = window.rkey();
  }
};
template <access A, class L>
send_inv(L, remote_region<A>) -> send_inv<A, L>;

/// BIND_MW of a type 2 window. Only memory_window::bind makes one: a bind posted past
/// the window would leave it with another rkey than the one it names next.
template <class B>
struct bind_window {
  /// Empty: a bind moves no data.
  std::span<const local_buffer> local;
  /// The window, the region and the rights granted.
  detail::mw_bind_args<B> args;
  /// The first byte granted.
  std::uint64_t addr;
  /// Bytes granted from addr.
  std::uint64_t length;
  /// The rkey the window gets (its key byte differs from the last one).
  std::uint32_t new_rkey;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::bind_mw;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::window_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    d.raddr = addr;
    d.compare_add = length;
    d.rkey = new_rkey;
    d.ext = &args;
  }

 private:
  template <verbs_backend, access, mw_type>
  friend class rdmakit::memory_window;
  bind_window(detail::mw_bind_args<B> a, std::uint64_t at, std::uint64_t len, std::uint32_t rkey) noexcept
      : local{}, args(a), addr(at), length(len), new_rkey(rkey) {}
};

/// LOCAL_INV of a type 2 window. Only memory_window::invalidate makes one: it knows
/// whether the window is bound, and a LOCAL_INV of an unbound one panics rxe's kernel.
struct invalidate_window {
  /// Empty: an invalidation moves no data.
  std::span<const local_buffer> local;
  /// The rkey of the window invalidated.
  std::uint32_t rkey;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::local_inv;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::window_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    d.rkey = rkey;
  }

 private:
  template <verbs_backend, access, mw_type>
  friend class rdmakit::memory_window;
  explicit invalidate_window(std::uint32_t k) noexcept : local{}, rkey(k) {}
};

}  // namespace op

template <class B>
inline constexpr bool detail::window_op<op::bind_window<B>> = true;
template <>
inline constexpr bool detail::window_op<op::invalidate_window> = true;

/// A memory window of type `Type` granting peers `Access` (remote_write, remote_read,
/// remote_atomic) on the part of a region it is bound to. See the file comment.
template <verbs_backend B, access Access, mw_type Type>
class memory_window {
  static_assert(mw_backend<B>, "memory_window: this backend has no memory windows (see mw_backend in backend.hpp)");
  static_assert(Access != access::none && (Access & ~remote_access_bits) == access::none,
                "memory_window<B, Access>: Access is what peers may do through the window: one or more of "
                "access::remote_write, remote_read, remote_atomic");

 public:
  /// The rights the window grants peers.
  static constexpr access rights = Access;
  /// Type 1 (bound by a verbs call) or type 2 (bound by a WR, usable through that QP only).
  static constexpr mw_type type = Type;

  /// An empty handle.
  memory_window() = default;
  /// Allocates an unbound window in the PD. Prefer protection_domain::alloc_window.
  explicit memory_window(detail::pd_ref<B> pd)
      : pd_(std::move(pd)), mw_(B::alloc_mw(pd_->pd, Type)), rkey_(B::mw_rkey(mw_)) {}
  /// Takes over the window; `o` becomes empty.
  memory_window(memory_window&& o) noexcept
      : pd_(std::move(o.pd_)),
        region_(std::move(o.region_)),
        mw_(std::exchange(o.mw_, {})),
        rkey_(std::exchange(o.rkey_, 0)),
        addr_(std::exchange(o.addr_, 0)),
        length_(std::exchange(o.length_, 0)),
        bound_(std::exchange(o.bound_, false)),
        bound_through_(std::exchange(o.bound_through_, 0)),
        holds_(std::move(o.holds_)) {}
  /// Frees this window, then takes over `o`'s; `o` becomes empty.
  memory_window& operator=(memory_window&& o) noexcept {
    if (this != &o) {
      release();
      pd_ = std::move(o.pd_);
      region_ = std::move(o.region_);
      mw_ = std::exchange(o.mw_, {});
      rkey_ = std::exchange(o.rkey_, 0);
      addr_ = std::exchange(o.addr_, 0);
      length_ = std::exchange(o.length_, 0);
      bound_ = std::exchange(o.bound_, false);
      bound_through_ = std::exchange(o.bound_through_, 0);
      holds_ = std::move(o.holds_);
    }
    return *this;
  }
  /// Frees the window (its rkey stops granting anything), then lets go of the region.
  ~memory_window() { release(); }

  /// False for an empty (default-constructed or moved-from) window.
  explicit operator bool() const noexcept { return mw_ != typename B::mw{}; }
  /// The rkey of the last bind posted (what peers must use); throws usage_error when empty.
  std::uint32_t rkey() const {
    native_("rkey");
    return rkey_;
  }
  /// The backend's window (ibv_mw* on ibverbs), for calls rdmakit does not wrap.
  typename B::mw native() const noexcept { return mw_; }

  /// What a peer needs to access the bound range: use it in qp.write/read/atomics as a
  /// region's remote(). Throws usage_error before the first bind.
  remote_region<Access> remote() const {
    native_("remote");
    if (length_ == 0)
      throw usage_error("memory_window::remote(): the window was never bound: bind(qp, region, offset, length, "
                        "wr_id) first");
    return remote_region<Access>::unchecked(addr_, rkey_, length_);
  }

  /// Binds the window to `length` bytes of `region` from `offset`: one WR on `qp`'s send
  /// queue, completing as wc_opcode::bind_mw (MW_BIND_ERR if the device refuses). On
  /// success remote() and rkey() describe the new binding at once; the old rkey is dead
  /// once the WR has run. A type 2 window must be unbound (new or invalidated) and is then
  /// usable only through `qp`; either type is invalidated only through `qp`. Throws
  /// usage_error for a range outside the region, a region, window and queue pair of
  /// different PDs, or empty handles.
  template <access R, transport T, signaling S>
  [[nodiscard]] post_result bind(queue_pair<B, T, S, qp_state::rts>& qp, const memory_region<B, R>& region, std::size_t offset,
                   std::size_t length, std::uint64_t wr_id, send_flags flags = send_flags::none) {
    static_assert(has_all(R, access::mw_bind),
                  "bind(): the region was registered without access::mw_bind; add it to the region's access flags");
    static_assert(has_all(R, Access),
                  "bind(): the window would grant a right its region lacks: register the region with every remote "
                  "right the window grants");
    detail::window_rule::check<T>();
    native_("bind");
    const auto& blk = detail::region_access::block(region);
    if (!blk) detail::throw_empty_argument("memory_region", "memory_window::bind");
    check_pds_(qp, *blk);
    if (length == 0 || offset > region.size() || length > region.size() - offset)
      throw usage_error(detail::cat("memory_window::bind(): ", length, " bytes from offset ", offset,
                                    " do not fit the ", region.size(),
                                    "-byte region (and a window grants at least one byte; invalidate() unbinds)"));
    if constexpr (Type == mw_type::type2) {
      // The device refuses a bind of a bound type 2 window (MW_BIND_ERR), its queue pair
      // going to ERR, and rkey() would name a binding it never made. A peer's send_inv
      // that a poll of the device's CQs saw unbound it.
      if (bound_) {
        if (!pd_->dev->windows.take_invalidated(rkey_))
          throw usage_error("memory_window::bind(): this type 2 window is bound: the device refuses to bind it "
                            "again (MW_BIND_ERR, and its queue pair goes to ERR); invalidate() it first, or bind it "
                            "once a peer's send_inv of it was polled");
        peer_invalidated_();
      }
    }
    const std::uint64_t addr = reinterpret_cast<std::uint64_t>(region.data()) + offset;
    post_result r;
    std::uint32_t next = 0;
    if constexpr (Type == mw_type::type1) {
      r = detail::policy_access::post_call(qp, wr_id, flags, [&](typename B::qp q, send_flags fl) noexcept {
        return B::bind_mw(q, mw_, blk->mr, addr, length, Access, wr_id, fl);
      });
      next = B::mw_rkey(mw_);
    } else {
      next = detail::next_rkey(rkey_);
      // The queue pair's native QP, which this window keeps until it is freed: the device
      // holds it for the binding (qp_native_hold). Made before the post, as it may throw.
      auto hold = detail::policy_access::native_hold_of(qp);
      bool new_hold = true;
      for (const auto& h : holds_) new_hold = new_hold && !(h == hold);
      if (new_hold) holds_.reserve(holds_.size() + 1);
      // The device's record of its bound type 2 windows, which its CQs' polls tell of a
      // peer's send_inv (peer_invalidations): the entry first, as it may throw.
      auto& windows = pd_->dev->windows;
      windows.binding(next);
      try {
        r = qp.post(op::bind_window<B>({mw_, blk->mr, Access}, addr, length, next), wr_id, flags);
      } catch (...) {
        windows.forget(next);
        throw;
      }
      if (r.ok()) {
        if (new_hold) {
          __atomic_fetch_add(&hold->windows, 1, __ATOMIC_RELEASE);
          holds_.push_back(std::move(hold));  // (room reserved above)
        }
        windows.bound(bound_ ? rkey_ : 0, next);
        // The next BIND_MW names the window by ibv_mw::rkey, which nothing else updates for
        // type 2 (type 1: ibv_bind_mw does): rxe refuses a bind naming an older rkey.
        B::set_mw_rkey(mw_, next);
      } else {
        windows.forget(next);
      }
    }
    if (r.ok()) {
      rkey_ = next;
      addr_ = addr;
      length_ = length;
      // The old region is let go here, before the device runs the bind: if it goes now,
      // the device refuses its deregistration and the PD keeps it (pd_state::retain).
      region_ = blk;
      bound_ = true;
      bound_through_ = detail::policy_access::serial_of(qp);
    }
    pd_->release_retained();  // an earlier bind has run by now, most likely
    return r;
  }

  /// Revokes the window: type 2 posts LOCAL_INV (wc_opcode::local_inv), type 1 a
  /// zero-length bind (wc_opcode::bind_mw). Once the WR has run, accesses through the
  /// rkey fail with REM_ACCESS_ERR at the peer. remote() keeps the last range, with an
  /// rkey that no longer grants anything. A window is invalidated through the queue pair
  /// it was last bound through (its WR then runs after the bind, or is flushed when the
  /// bind failed). Throws usage_error before the first bind, when the window is not
  /// bound, for another queue pair, and for a type 2 window a peer's send_inv invalidated
  /// (its receive polled from any CQ of the device: see take_invalidation).
  template <transport T, signaling S>
  [[nodiscard]] post_result invalidate(queue_pair<B, T, S, qp_state::rts>& qp, std::uint64_t wr_id,
                         send_flags flags = send_flags::none) {
    detail::window_rule::check<T>();
    native_("invalidate");
    if (!region_)
      throw usage_error("memory_window::invalidate(): the window was never bound: there is nothing to revoke");
    // (A LOCAL_INV of an unbound type 2 window panics rxe's kernel, Linux 6.1: observed.)
    if (!bound_)
      throw usage_error("memory_window::invalidate(): the window is not bound (invalidated already, by invalidate() "
                        "or by the peer's send_inv that take_invalidation() recorded): there is nothing to revoke; "
                        "bind it again first");
    check_pds_(qp, *region_);
    // Through another queue pair the WR may run before the bind (still queued there), or
    // after a bind that failed: type 2's LOCAL_INV then reaches an unbound window (rxe's
    // kernel panics, as above); type 1's zero-length bind names an rkey the device has not
    // given yet and fails, and the bind then runs: the peer keeps its access. reset()
    // makes a new queue pair: the window is bound through the old one.
    if (detail::policy_access::serial_of(qp) != bound_through_)
      throw usage_error("memory_window::invalidate(): a window is invalidated through the queue pair it was bound "
                        "through (the last bind's qp; not another one, nor that one's replacement after reset()); "
                        "to stop using the window otherwise, destroy it");
    if constexpr (Type == mw_type::type2) {
      // A peer's send_inv that a poll of the device's CQs saw, on any of its queue pairs
      // (take_invalidation() not told of it, or another queue pair's receive).
      if (pd_->dev->windows.take_invalidated(rkey_)) {
        peer_invalidated_();
        throw usage_error("memory_window::invalidate(): a peer's send_inv invalidated the window already (its "
                          "receive was polled, on a queue pair of this device): there is nothing to revoke; bind "
                          "it again first");
      }
    }
    if constexpr (Type == mw_type::type1) {
      const auto r = detail::policy_access::post_call(qp, wr_id, flags, [&](typename B::qp q, send_flags fl) noexcept {
        return B::bind_mw(q, mw_, region_->mr, addr_, 0, access::none, wr_id, fl);
      });
      if (r.ok()) {
        rkey_ = B::mw_rkey(mw_);
        bound_ = false;
      }
      pd_->release_retained();
      return r;
    } else {
      const post_result r = qp.post(op::invalidate_window(rkey_), wr_id, flags);
      if (r.ok()) {
        pd_->dev->windows.forget(rkey_);
        bound_ = false;
      }
      pd_->release_retained();
      return r;
    }
  }

  /// Records that the peer's op::send_inv invalidated this window when `c` says so (a
  /// successful receive without immediate data whose invalidated_rkey() is this window's
  /// rkey()): true then, and the window is unbound: bind() binds it again. You need not
  /// call it for invalidate() to know: every poll of the device's CQs notes such a
  /// receive, whichever queue pair it came on (rxe's kernel panics on a LOCAL_INV of a
  /// type 2 window a peer invalidated); it tells you which completion it was.
  bool take_invalidation(const completion<B>& c) noexcept {
    if constexpr (Type == mw_type::type1) {
      return false;  // a SEND_WITH_INV invalidates type 2 windows only
    } else {
      // By the rule the device's polls note it by (detail::invalidated_by_peer).
      if (!bound_ || detail::invalidated_by_peer<B>(c.native()) != rkey_) return false;
      pd_->dev->windows.forget(rkey_);
      peer_invalidated_();
      return true;
    }
  }

 private:
  typename B::mw native_(const char* call) const {
    if (RDMAKIT_UNLIKELY(mw_ == typename B::mw{})) detail::throw_empty("memory_window", call);
    return mw_;
  }
  template <class QP>
  void check_pds_(const QP& qp, const detail::mr_block<B>& region) const {
    const auto& qpd = detail::policy_access::pd_of(qp);
    if (!qpd) detail::throw_empty_argument("queue_pair", "memory_window");
    if (qpd != pd_ || region.pd != pd_)
      throw usage_error("memory_window: the window, the region and the queue pair must belong to one protection "
                        "domain (the verbs refuse such a bind; rxe 6.1 makes it, and a peer reaches the other "
                        "domain's memory through the window)");
  }
  // A peer's send_inv of the binding ran (its receive was polled): the window is unbound,
  // and the device holds none of the QPs it was bound through for it (the binding the
  // peer invalidated ran after every earlier one was invalidated, or it would have
  // failed), so they go, as when the window is freed.
  void peer_invalidated_() noexcept {
    bound_ = false;
    let_qps_go_();
  }
  // The QPs it was bound through, which the device no longer holds for it: one whose
  // queue pair went meanwhile is destroyed now (qp_native_hold).
  void let_qps_go_() noexcept {
    for (auto& h : holds_) __atomic_fetch_sub(&h->windows, 1, __ATOMIC_RELEASE);
    holds_.clear();
  }
  void release() noexcept {
    if (Type == mw_type::type2 && bound_) pd_->dev->windows.forget(rkey_);
    if (mw_ != typename B::mw{}) B::dealloc_mw(mw_);  // first: then the region may be deregistered
    mw_ = {};
    let_qps_go_();  // then the QPs: the device let go of them with the window
    region_.reset();
    if (pd_) pd_->release_retained();  // regions this window kept the device from letting go
    pd_.reset();
    rkey_ = 0;
    addr_ = length_ = 0;
    bound_ = false;
    bound_through_ = 0;
  }

  detail::pd_ref<B> pd_;
  detail::mr_ref<B> region_;  // the last region bound to
  typename B::mw mw_{};
  std::uint32_t rkey_ = 0;
  std::uint64_t addr_ = 0;
  std::uint64_t length_ = 0;
  // A bind was posted and no invalidation since (invalidate(), or the peer's send_inv
  // that take_invalidation recorded): what the window knows, not what the device ran.
  bool bound_ = false;
  // The serial of the queue pair last bound through (detail::qp_link::serial).
  std::uint64_t bound_through_ = 0;
  // Type 2: the native QPs it was bound through, kept until it is freed or a peer's
  // send_inv of its binding is known to have run (qp_native_hold).
  std::vector<detail::shared_owner<detail::qp_native_hold<B>>> holds_;
};

RDMAKIT_END_NAMESPACE
