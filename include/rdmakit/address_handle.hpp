#pragma once
/// Address handles (UD destinations): RAII over B::ah, and `ud_address`, the
/// (AH, remote QPN, Q_Key) triple every UD send names.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/ah_registry.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/error.hpp>

#include <cstdint>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

template <verbs_backend B>
class address_handle;

/// Where a UD send goes: an address handle, the remote QP number and its Q_Key. Taken
/// from a live handle (`ah.to(peer)`); it does not keep the handle alive, and is checked
/// at each post instead: after its address_handle is destroyed a post through it is
/// refused (post_status::stale_address), never sent through the freed handle. A
/// default-constructed one names no handle and is refused likewise.
template <verbs_backend B>
class ud_address {
 public:
  ud_address() = default;
  /// The destination queue pair's number.
  std::uint32_t qpn() const noexcept { return qpn_; }
  /// The Q_Key the destination accepts; a mismatch drops the datagram silently.
  std::uint32_t qkey() const noexcept { return qkey_; }
  /// True while the address_handle it was taken from lives (moved or not).
  RDMAKIT_ALWAYS_INLINE bool live() const noexcept { return ticket_.live(); }
  /// The backend's handle while live() (ibv_ah* on ibverbs), else none.
  typename B::ah native() const noexcept { return live() ? ticket_.record->handle() : typename B::ah{}; }

 private:
  friend class address_handle<B>;
  friend struct detail::ud_address_access;
  ud_address(const detail::ah_record<B>* r, std::uint32_t qpn, std::uint32_t qkey) noexcept
      : ticket_{r, r->generation}, qpn_(qpn), qkey_(qkey) {}

  detail::ah_ticket<B> ticket_;
  std::uint32_t qpn_ = 0;
  std::uint32_t qkey_ = default_qkey;
};

/// An address handle. Prefer protection_domain::create_ah(peer) which fills the
/// address vector (GRH on RoCE) from an endpoint. It keeps its protection domain alive;
/// a ud_address taken from it is posted through while the handle lives, and refused
/// after. Destroy a handle on one thread while another posts through its address and
/// that post may still read the handle being destroyed: order the two (as for any object
/// one thread destroys while another uses it).
template <verbs_backend B>
class address_handle {
 public:
  address_handle() = default;
  /// Creates the handle on `pd`'s device. Prefer protection_domain::create_ah.
  address_handle(detail::pd_ref<B> pd, const ah_attr& attr)
      : pd_(std::move(pd)), record_(hold_(B::create_ah(pd_->pd, attr), pd_.get())), attr_(attr) {}
  /// Takes over the handle (the addresses taken from it stay good); `o` becomes empty.
  address_handle(address_handle&& o) noexcept
      : pd_(std::move(o.pd_)), record_(std::exchange(o.record_, nullptr)), attr_(o.attr_) {}
  /// Destroys the handle held, then takes over `o`'s; `o` becomes empty.
  address_handle& operator=(address_handle&& o) noexcept {
    if (this != &o) {
      release();
      pd_ = std::move(o.pd_);
      record_ = std::exchange(o.record_, nullptr);
      attr_ = o.attr_;
    }
    return *this;
  }
  ~address_handle() { release(); }

  /// False for an empty (default-constructed or moved-from) handle.
  explicit operator bool() const noexcept { return record_ != nullptr; }
  /// The destination for UD sends to QP `qpn` behind this address. A number past 24
  /// bits is refused (usage_error): no QP has one, and the datagram would be lost.
  ud_address<B> to(std::uint32_t qpn, std::uint32_t qkey = default_qkey) const {
    if (!record_) detail::throw_empty("address_handle", "to");
    if (RDMAKIT_UNLIKELY(qpn > 0xFFFFFFu)) refuse_qpn_(qpn);
    return {record_, qpn, qkey};
  }
  /// The destination for UD sends to the queue pair `peer` describes (its QPN and Q_Key).
  ud_address<B> to(const endpoint& peer) const { return to(peer.qpn, peer.qkey); }
  /// The address vector it was created from.
  const ah_attr& attr() const noexcept { return attr_; }
  /// The backend's handle (ibv_ah* on ibverbs), for calls rdmakit does not wrap.
  typename B::ah native() const noexcept { return record_ ? record_->handle() : typename B::ah{}; }

 private:
  [[noreturn]] RDMAKIT_NOINLINE static void refuse_qpn_(std::uint32_t qpn) {
    throw usage_error(detail::cat("address_handle::to(): QP number ", qpn,
                                  " has more than 24 bits, which no queue pair has (its datagrams would go "
                                  "nowhere): check where the peer's QP number came from"));
  }
  static detail::ah_record<B>* hold_(typename B::ah ah, const void* pd) {
    try {
      return detail::ah_registry<B>::hold(ah, pd);
    } catch (...) {
      B::destroy_ah(ah);
      throw;
    }
  }
  void release() noexcept {
    // The addresses are refused first: the handle is destroyed once none can reach it.
    if (record_) B::destroy_ah(detail::ah_registry<B>::release(std::exchange(record_, nullptr)));
    pd_.reset();
  }
  detail::pd_ref<B> pd_;
  detail::ah_record<B>* record_ = nullptr;  // null when empty
  ah_attr attr_{};
};

RDMAKIT_END_NAMESPACE
