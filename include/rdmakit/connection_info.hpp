#pragma once
/// What one side of an endpoint exchange sends the other (connection_info: an
/// endpoint and optionally a region_descriptor), and the two wire formats it can take.
#include <rdmakit/detail/exchange_error.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/types.hpp>

#include <cstdint>
#include <optional>
#include <string>

RDMAKIT_BEGIN_NAMESPACE

/// A registered region as sent to a peer: address, rkey, length and the remote rights
/// its owner registered. Build it from `memory_region::remote()`; the receiver turns it
/// back into a typed `remote_region<A>` with `as<A>()`, which checks the rights.
struct region_descriptor {
  /// The region's first byte in the owner's address space.
  std::uint64_t addr = 0;
  /// The key the peer puts in its RDMA operations on this region.
  std::uint32_t rkey = 0;
  /// The region's size in bytes.
  std::uint64_t length = 0;
  access rights = access::none;  ///< remote_write / remote_read / remote_atomic bits

  region_descriptor() = default;
  /// From raw values (e.g. a record received); only the remote bits of `r` are kept.
  region_descriptor(std::uint64_t a, std::uint32_t k, std::uint64_t len, access r) noexcept
      : addr(a), rkey(k), length(len), rights(r & remote_access_bits) {}
  /// From a typed remote region, with its rights; implicit so a memory_region's remote() can be sent as is.
  template <access A>
  region_descriptor(const remote_region<A>& r) noexcept  // NOLINT: implicit on purpose
      : region_descriptor(r.addr(), r.rkey(), r.length(), A) {}

  /// The typed descriptor for operations needing rights `A`; throws exchange_error
  /// (invalid_argument) when the owner did not grant them, or when its range runs past
  /// the end of the 64-bit address space (no registration does: its sub-ranges would
  /// wrap to address 0).
  template <access A>
  remote_region<A> as() const {
    if (!has_all(rights, A))
      throw exchange_error(exchange_errc::invalid_argument,
                           detail::cat("the peer's region grants ", to_string(rights), " but ", to_string(A),
                                       " is needed: register it with those rights on the peer"));
    if (length != 0 && length - 1 > ~addr)  // (a range may end at 2^64: its last byte is the last address)
      throw exchange_error(exchange_errc::invalid_argument,
                           detail::cat("the peer's region, ", length, " bytes at ", detail::hex(addr),
                                       ", runs past the end of the address space: no registration does; the "
                                       "record is corrupt or not a region"));
    return remote_region<A>::unchecked(addr, rkey, length);
  }

  friend bool operator==(const region_descriptor&, const region_descriptor&) = default;
};

/// What one side sends the other: its queue pair's endpoint and, optionally, a region.
struct connection_info {
  /// The sender's queue pair: the address to connect to.
  endpoint ep{};
  /// A region the sender lets the receiver access, if it sent one.
  std::optional<region_descriptor> region{};

  connection_info() = default;
  /// A record with an endpoint and no region; implicit so that an endpoint can be sent as is.
  connection_info(const endpoint& e) : ep(e) {}  // NOLINT: implicit on purpose
  /// A record with an endpoint and a region.
  connection_info(const endpoint& e, const region_descriptor& r) : ep(e), region(r) {}

  friend bool operator==(const connection_info&, const connection_info&) = default;
};

/// The record format of an exchange (exchange_options::format).
enum class wire_format {
  rdmakit,   ///< rdmakit's own, versioned; carries the MTU and a remote region
  pingpong,  ///< rdma-core's ibv_*_pingpong record, to talk to those programs
};

/// The TCP port ibv_*_pingpong use by default.
inline constexpr std::uint16_t pingpong_port = 18515;

RDMAKIT_END_NAMESPACE
