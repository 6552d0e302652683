#pragma once
/// The option structs of a queue pair: what creation (RESET→INIT) and connection
/// (INIT→RTR→RTS) may be told. Aggregates with defaults that work on rxe and real HCAs,
/// so designated initializers name only what changes:
///
///     auto qp = pd.create_qp<rc>(cq, caps, {.port = 2});
///     auto live = std::move(qp).connect(peer, {.path_mtu = mtu::mtu_1024, .retry_cnt = 3});
#include <rdmakit/types.hpp>

#include <cstdint>
#include <optional>

RDMAKIT_BEGIN_NAMESPACE

/// Creation options (RESET→INIT and the local address).
struct qp_options {
  std::uint8_t port = 1;              ///< the local port (1-based) the queue pair uses
  std::optional<int> gid_index{};     ///< unset: automatic (RoCEv2 IPv4-mapped first; index 0 on InfiniBand)
  std::uint16_t pkey_index = 0;       ///< P_Key table entry; 0 is the default partition
  std::uint32_t qkey = default_qkey;  ///< UD only
  /// What peers may do to this QP's memory (RC/UC; UC keeps only remote_write): the
  /// remote bits only, any other is refused at creation.
  access remote_access = access::remote_write | access::remote_read | access::remote_atomic;
  std::optional<std::uint32_t> psn{};  ///< first send PSN; default: a fresh one for each queue pair
  bool auto_inline = true;             ///< send data inline when it fits max_inline_data
};

/// Connection defaults that work on rxe and real HCAs (RC uses all, UC the PSN/MTU/AV).
struct connect_options {
  std::optional<mtu> path_mtu{};         ///< cap; the result is min(port active MTU, peer MTU, this)
  std::uint8_t timeout = 14;             ///< 4.096 µs · 2^14 ≈ 67 ms per try
  std::uint8_t retry_cnt = 6;            ///< 7 means "forever" on rxe: 6 fails instead of hanging
  std::uint8_t rnr_retry = 6;            ///< likewise; 7 would retry forever
  std::uint8_t min_rnr_timer = 12;       ///< 0.64 ms
  std::uint8_t max_rd_atomic = 16;       ///< clamped to the device's max_qp_init_rd_atom; RC: 0 (or a device maximum of 0) is refused
  std::uint8_t max_dest_rd_atomic = 16;  ///< clamped to the device's max_qp_rd_atom
  std::uint8_t hop_limit = 64;           ///< GRH hop limit (RoCE, or a routed InfiniBand path)
  std::uint8_t sl = 0;                   ///< service level; 0 unless the fabric is set up for QoS
  bool force_grh = false;                ///< GRH on InfiniBand too (always on RoCE)
};

/// Address handle options (protection_domain::create_ah).
struct ah_options {
  std::uint8_t port = 1;           ///< the local port the packets leave from
  std::optional<int> gid_index{};  ///< source GID; unset: automatic, as for queue pairs
  /// GRH hop limit (RoCE, or a routed InfiniBand path); rxe 6.1 sends 64 whatever this
  /// says (docs/semantics.md, `ud.grh_hop_limit`).
  std::uint8_t hop_limit = 64;
  /// Service level (InfiniBand; 0..15). Answering a UD client: its completion's sl().
  std::uint8_t sl = 0;
};

/// Queue capacities fixed at compile time: lets create_qp reject, at compile time, a
/// signal_every<N> with N above max_send_wr.
template <std::uint32_t SendWr, std::uint32_t RecvWr, std::uint32_t SendSge = 1,
          std::uint32_t RecvSge = 1, std::uint32_t Inline = 0>
struct static_caps {
  /// The send queue depth, known to the compiler (checked against signal_every<N>).
  static constexpr std::uint32_t max_send_wr = SendWr;
  /// The receive queue depth.
  static constexpr std::uint32_t max_recv_wr = RecvWr;
  /// The same capacities as a qp_cap, for create_qp.
  constexpr operator qp_cap() const noexcept { return {SendWr, RecvWr, SendSge, RecvSge, Inline}; }
};

RDMAKIT_END_NAMESPACE
