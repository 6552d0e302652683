#pragma once
/// What one side of a connection tells the other: everything the peer's INIT→RTR
/// transition (or a UD address handle) needs. A queue pair describes itself with
/// `local_endpoint()`; connect() takes the peer's.
#include <rdmakit/types.hpp>

#include <cstdint>

RDMAKIT_BEGIN_NAMESPACE

/// A queue pair's address: LID (InfiniBand), QP number, starting PSN, GID (RoCE, or
/// IB across subnets), the active MTU of its port, and (UD) the Q_Key it accepts.
struct endpoint {
  /// The port's LID on InfiniBand; 0 on RoCE, where the GID addresses.
  std::uint16_t lid = 0;
  /// The queue pair's number, as the peer's remote_qpn.
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  ///< 24 bits: the first PSN this side sends
  /// The port's GID (RoCE; InfiniBand across subnets). All zero when not used.
  ::rdmakit::gid gid{};
  /// The active MTU of the port; each side connects with the smaller of the two.
  ::rdmakit::mtu mtu = ::rdmakit::mtu::mtu_1024;
  std::uint32_t qkey = default_qkey;  ///< UD: what senders must put in their WRs

  friend constexpr bool operator==(const endpoint&, const endpoint&) = default;
};

RDMAKIT_END_NAMESPACE
