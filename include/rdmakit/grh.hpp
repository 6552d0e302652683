#pragma once
/// `parse_grh`: who sent a UD datagram, read from the 40 bytes every UD receive starts
/// with, so that a server can answer a client it was never told about
/// (`pd.create_ah(endpoint{.qpn = c.src_qp(), .gid = g->source})`).
///
/// Those 40 bytes hold one of two headers, by the sender's GID type: RoCE v2 over IPv4
/// puts the packet's IPv4 header in the last 20 (the first 20 are undefined: zero on
/// rxe); InfiniBand, RoCE v1 and RoCE v2 over IPv6 put a GRH (IPv6-shaped) in all 40.
/// docs/semantics.md §7.1.
#include <rdmakit/config.hpp>
#include <rdmakit/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

RDMAKIT_BEGIN_NAMESPACE

/// What a UD receive's GRH area says about its datagram.
struct grh_info {
  gid source{};                     ///< the sender's GID (IPv4: `::ffff:a.b.c.d`)
  gid destination{};                ///< the GID it was sent to: one of the receiver's
  std::uint8_t hop_limit = 0;       ///< hop limit (IPv4: TTL) as it arrived
  std::uint8_t traffic_class = 0;   ///< traffic class (IPv4: TOS)
  bool ipv4 = false;                ///< an IPv4 header (RoCE v2 over IPv4), not a GRH
};

namespace detail {
// The ones' complement sum of the 20-byte IPv4 header at h, complemented: 0 when its
// checksum field is right, the value that field needs when it holds 0.
inline std::uint16_t ipv4_header_sum(const std::byte* h) noexcept {
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2)
    sum += static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(h[i])) << 8 | std::to_integer<std::uint8_t>(h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum & 0xffff);
}
}  // namespace detail

/// Reads the GRH area of a UD receive (its first grh_bytes bytes, where the completion's
/// has_grh() is true). An IPv4 header is taken when the last 20 bytes start one (version
/// 4, 20 bytes long) and either the first 20 do not start a GRH (version 6) or the IPv4
/// header's checksum holds (rxe leaves it 0, behind 20 zero bytes); else a GRH with
/// version 6. std::nullopt when the area is shorter than 40 bytes or holds neither (a
/// receive without a GRH, or bytes that are not the ones the device wrote).
inline std::optional<grh_info> parse_grh(std::span<const std::byte> area) noexcept {
  if (area.size() < grh_bytes) return std::nullopt;
  auto u8 = [&](std::size_t i) { return std::to_integer<std::uint8_t>(area[i]); };
  const std::byte* ip4 = area.data() + 20;
  const bool grh_version = u8(0) >> 4 == 6;
  // An IPv4 header is believed where the first half is not a GRH, or where its
  // checksum holds (the first half is undefined: it may look like one by chance).
  if (u8(20) == 0x45 && (!grh_version || detail::ipv4_header_sum(ip4) == 0)) {
    grh_info g;
    g.ipv4 = true;
    g.traffic_class = u8(21);
    g.hop_limit = u8(28);
    g.source = gid::from_ipv4(u8(32), u8(33), u8(34), u8(35));
    g.destination = gid::from_ipv4(u8(36), u8(37), u8(38), u8(39));
    return g;
  }
  if (!grh_version) return std::nullopt;
  grh_info g;
  g.traffic_class = static_cast<std::uint8_t>((u8(0) & 0x0f) << 4 | u8(1) >> 4);
  g.hop_limit = u8(7);
  for (std::size_t i = 0; i < 16; ++i) {
    g.source.raw[i] = u8(8 + i);
    g.destination.raw[i] = u8(24 + i);
  }
  return g;
}

RDMAKIT_END_NAMESPACE
