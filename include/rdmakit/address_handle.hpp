#pragma once
/// Address handles (UD destinations): RAII over B::ah, and `ud_address`, the
/// (AH, remote QPN, Q_Key) triple every UD send names.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/error.hpp>

#include <cstdint>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

/// Where a UD send goes: an address handle, the remote QP number and its Q_Key.
template <verbs_backend B>
struct ud_address {
  /// The address handle of the destination's port (not owned: the address_handle keeps it).
  typename B::ah ah{};
  /// The destination queue pair's number.
  std::uint32_t qpn = 0;
  /// The Q_Key the destination accepts; a mismatch drops the datagram silently.
  std::uint32_t qkey = default_qkey;
};

/// An address handle. Prefer protection_domain::create_ah(peer) which fills the
/// address vector (GRH on RoCE) from an endpoint. It keeps its protection domain alive;
/// a ud_address taken from it is valid while the handle lives.
template <verbs_backend B>
class address_handle {
 public:
  address_handle() = default;
  /// Creates the handle on `pd`'s device. Prefer protection_domain::create_ah.
  address_handle(detail::pd_ref<B> pd, const ah_attr& attr)
      : pd_(std::move(pd)), ah_(B::create_ah(pd_->pd, attr)), attr_(attr) {}
  /// Takes over the handle; `o` becomes empty.
  address_handle(address_handle&& o) noexcept
      : pd_(std::move(o.pd_)), ah_(std::exchange(o.ah_, {})), attr_(o.attr_) {}
  /// Destroys the handle held, then takes over `o`'s; `o` becomes empty.
  address_handle& operator=(address_handle&& o) noexcept {
    if (this != &o) {
      release();
      pd_ = std::move(o.pd_);
      ah_ = std::exchange(o.ah_, {});
      attr_ = o.attr_;
    }
    return *this;
  }
  ~address_handle() { release(); }

  /// False for an empty (default-constructed or moved-from) handle.
  explicit operator bool() const noexcept { return ah_ != typename B::ah{}; }
  /// The destination for UD sends to QP `qpn` behind this address.
  ud_address<B> to(std::uint32_t qpn, std::uint32_t qkey = default_qkey) const {
    if (ah_ == typename B::ah{}) detail::throw_empty("address_handle", "to");
    return {ah_, qpn, qkey};
  }
  /// The destination for UD sends to the queue pair `peer` describes (its QPN and Q_Key).
  ud_address<B> to(const endpoint& peer) const { return to(peer.qpn, peer.qkey); }
  /// The address vector it was created from.
  const ah_attr& attr() const noexcept { return attr_; }
  /// The backend's handle (ibv_ah* on ibverbs), for calls rdmakit does not wrap.
  typename B::ah native() const noexcept { return ah_; }

 private:
  void release() noexcept {
    if (ah_ != typename B::ah{}) B::destroy_ah(ah_);
    ah_ = {};
    pd_.reset();
  }
  detail::pd_ref<B> pd_;
  typename B::ah ah_{};
  ah_attr attr_{};
};

RDMAKIT_END_NAMESPACE
