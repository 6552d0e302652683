#pragma once
/// Out-of-band endpoint exchange over TCP: each side sends the other what its INIT→RTR
/// transition (or UD address handle) needs, plus, for one-sided tests, a remote memory
/// region. Every wait is bounded (poll(2) with deadlines): a silent or slow peer is an
/// `exchange_error` with `exchange_errc::timeout`, never a hang; a malformed, oversized
/// or truncated record is rejected with a message saying what was wrong, and a listener
/// can accept again afterwards.
///
/// Two wire formats:
///
/// * `wire_format::rdmakit` (versioned, carries every field). A frame is a 16-byte
///   ASCII header `rdmakit/VV LLLL\n` (VV: two decimal digits, the format version, 01;
///   LLLL: four decimal digits, the payload length, at most `wire::max_payload`) and a
///   payload of `key=value\n` lines: `lid=0x%04x`, `qpn=0x%06x`, `psn=0x%06x`,
///   `gid=<32 hex digits, network byte order>`, `mtu=<bytes>`, optionally `qkey=0x%08x`
///   (absent: the default Q_Key; older v1 peers ignore it), and, all four or none,
///   `addr=0x%016x`, `rkey=0x%08x`, `len=<decimal>`, `access=0x%x` (the IBV_ACCESS_*
///   remote bits: 0x2 write, 0x4 read, 0x8 atomic). Numbers are hex with `0x` or
///   decimal. Each known key at most once; unknown keys are ignored (a newer v1 peer
///   may add some); another version is rejected. The acknowledgement is an empty frame,
///   `rdmakit/01 0000\n`.
///
/// * `wire_format::pingpong`, rdma-core's `ibv_rc_pingpong` / `ibv_uc_pingpong` /
///   `ibv_ud_pingpong` (default TCP port 18515): a 52-byte record, the text
///   `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID in 4, QPN in 6, PSN in 6 lowercase hex digits, the
///   16 GID bytes in network order as 32 hex digits) followed by one NUL byte. The
///   acknowledgement is the 5 bytes `done\0`. It carries no MTU (the peer's is assumed
///   equal to ours) and no remote region.
///
/// Sequence (both formats): the client connects and sends its record; the server reads
/// it, runs its `on_peer` callback (bring the QP to RTR/RTS there, so the client may
/// send as soon as it has the answer), sends its own record; the client reads it, runs
/// its `on_peer` callback, sends the acknowledgement; the server waits for it. When
/// both calls return, both callbacks have run.
#include <rdmakit/detail/exchange_error.hpp>
#include <rdmakit/detail/tcp.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/types.hpp>

#include <arpa/inet.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

/// A registered region as sent to a peer: address, rkey, length and the remote rights
/// its owner registered. Build it from `memory_region::remote()`; the receiver turns it
/// back into a typed `remote_region<A>` with `as<A>()`, which checks the rights.
struct region_descriptor {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t length = 0;
  access rights = access::none;  ///< remote_write / remote_read / remote_atomic bits

  region_descriptor() = default;
  region_descriptor(std::uint64_t a, std::uint32_t k, std::uint64_t len, access r) noexcept
      : addr(a), rkey(k), length(len), rights(r & remote_access_bits) {}
  template <access A>
  region_descriptor(const remote_region<A>& r) noexcept  // NOLINT: implicit on purpose
      : region_descriptor(r.addr(), r.rkey(), r.length(), A) {}

  /// The typed descriptor for operations needing rights `A`; throws exchange_error
  /// (invalid_argument) when the owner did not grant them.
  template <access A>
  remote_region<A> as() const {
    if (!has_all(rights, A))
      throw exchange_error(exchange_errc::invalid_argument,
                           "the peer's region grants " + to_string(rights) + " but " + to_string(A) +
                               " is needed: register it with those rights on the peer");
    return remote_region<A>::unchecked(addr, rkey, length);
  }

  friend bool operator==(const region_descriptor&, const region_descriptor&) = default;
};

/// What one side sends the other: its queue pair's endpoint and, optionally, a region.
struct connection_info {
  endpoint ep{};
  std::optional<region_descriptor> region{};

  connection_info() = default;
  connection_info(const endpoint& e) : ep(e) {}  // NOLINT: implicit on purpose
  connection_info(const endpoint& e, const region_descriptor& r) : ep(e), region(r) {}

  friend bool operator==(const connection_info&, const connection_info&) = default;
};

enum class wire_format {
  rdmakit,   ///< rdmakit's own, versioned; carries the MTU and a remote region
  pingpong,  ///< rdma-core's ibv_*_pingpong record, to talk to those programs
};

/// The TCP port ibv_*_pingpong use by default.
inline constexpr std::uint16_t pingpong_port = 18515;

struct exchange_options {
  wire_format format = wire_format::rdmakit;
  /// Bound on one exchange once a client is there: connect, send, receive, callback
  /// excluded, acknowledgement. Must be positive; milliseconds::max(): no practical limit.
  std::chrono::milliseconds timeout{10'000};
  /// How long a server waits for a client to connect; 0 (the default): `timeout`.
  /// Negative: refused.
  std::chrono::milliseconds accept_timeout{0};
  /// Client: retry a refused connection (server not started yet) until `timeout`.
  bool retry_refused = false;
};

/// Called with the peer's record before the exchange completes (see the sequence above).
using on_peer_fn = std::function<void(const connection_info& peer)>;

namespace wire {

inline constexpr std::size_t header_size = 16;
inline constexpr std::size_t max_payload = 1024;
inline constexpr int version = 1;
/// Bytes of an ibv_*_pingpong record, its terminating NUL included.
inline constexpr std::size_t pingpong_record_size = sizeof "0000:000000:000000:00000000000000000000000000000000";
/// The pingpong acknowledgement, its NUL included.
inline constexpr std::string_view pingpong_ack{"done", 5};

namespace detail {
inline int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
inline std::string gid_hex(const gid& g) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (std::size_t i = 0; i < 16; ++i) {
    s[2 * i] = digits[g.raw[i] >> 4];
    s[2 * i + 1] = digits[g.raw[i] & 0xf];
  }
  return s;
}
/// Printable excerpt of received bytes for error messages.
inline std::string excerpt(std::string_view bytes, std::size_t max = 60) {
  std::string out = "\"";
  for (std::size_t i = 0; i < bytes.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\0') out += "\\0";
    else if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
    else {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  if (bytes.size() > max) out += "...";
  return out + "\"";
}
[[noreturn]] inline void malformed(const std::string& what, std::string_view bytes = {}) {
  throw exchange_error(exchange_errc::malformed,
                       what + (bytes.empty() ? std::string() : " in " + excerpt(bytes)));
}
/// Parses "0x<hex>" or "<decimal>" into at most `max`.
inline bool parse_number(std::string_view s, std::uint64_t max, std::uint64_t& out) noexcept {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return false;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc{} || p != s.data() + s.size() || v > max) return false;
  out = v;
  return true;
}
/// Parses a fixed-width decimal field: digits only (no sign, no "0x"), as documented.
inline bool parse_digits(std::string_view s, std::uint64_t& out) noexcept {
  if (s.empty()) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = v;
  return true;
}
/// True when `bytes` starts like an ibv_*_pingpong record ("hhhh:hhhhhh:").
inline bool looks_like_pingpong(std::string_view bytes) noexcept {
  if (bytes.size() < 12) return false;
  for (std::size_t i = 0; i < 12; ++i) {
    const bool colon = i == 4 || i == 11;
    if (colon ? bytes[i] != ':' : hex_value(bytes[i]) < 0) return false;
  }
  return true;
}
}  // namespace detail

// ---- ibv_*_pingpong ----

/// The 51 characters of an ibv_*_pingpong record for `ep` (the NUL that follows on the
/// wire is not included). Throws exchange_error(invalid_argument) when QPN or PSN do
/// not fit 24 bits.
inline std::string format_pingpong(const endpoint& ep) {
  if (ep.qpn > 0xFFFFFFu || ep.psn > 0xFFFFFFu)
    throw exchange_error(exchange_errc::invalid_argument,
                         "QPN " + std::to_string(ep.qpn) + " / PSN " + std::to_string(ep.psn) +
                             " do not fit the 6 hex digits of an ibv_*_pingpong record (24 bits)");
  char head[20];
  std::snprintf(head, sizeof head, "%04x:%06x:%06x:", static_cast<unsigned>(ep.lid), static_cast<unsigned>(ep.qpn),
                static_cast<unsigned>(ep.psn));
  return head + detail::gid_hex(ep.gid);
}

/// Parses an ibv_*_pingpong record: the 51 characters, optionally followed by its NUL.
/// The record has no MTU: the result's is `assumed_mtu`. Throws exchange_error.
inline endpoint parse_pingpong(std::string_view rec, mtu assumed_mtu = mtu::mtu_1024) {
  constexpr std::size_t text = pingpong_record_size - 1;
  if (rec.substr(0, 8) == "rdmakit/")
    throw exchange_error(exchange_errc::wrong_format,
                         "the peer speaks the rdmakit wire format, not the ibv_*_pingpong one: use "
                         "wire_format::rdmakit on this side (rdmakit-pingpong: drop --wire pingpong)");
  if (rec.size() < text)
    detail::malformed("ibv_*_pingpong record of " + std::to_string(rec.size()) + " characters instead of " +
                          std::to_string(text) + " (LLLL:QQQQQQ:PPPPPP:<32 hex GID>)",
                      rec);
  const std::string_view tail = rec.substr(text);
  rec = rec.substr(0, text);
  auto field = [&](std::size_t pos, std::size_t len, const char* name) -> std::uint32_t {
    std::uint32_t v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      int h = detail::hex_value(rec[i]);
      if (h < 0)
        detail::malformed(std::string("ibv_*_pingpong record: ") + name + " is not " + std::to_string(len) +
                              " hex digits (byte " + std::to_string(i) + ")",
                          rec);
      v = v << 4 | static_cast<std::uint32_t>(h);
    }
    if (pos + len < text && rec[pos + len] != ':')
      detail::malformed("ibv_*_pingpong record: expected ':' after the " + std::string(name) + " at byte " +
                            std::to_string(pos + len),
                        rec);
    return v;
  };
  endpoint ep;
  ep.lid = static_cast<std::uint16_t>(field(0, 4, "LID"));
  ep.qpn = field(5, 6, "QPN");
  ep.psn = field(12, 6, "PSN");
  for (std::size_t i = 0; i < 32; ++i)
    if (detail::hex_value(rec[19 + i]) < 0)
      detail::malformed("ibv_*_pingpong record: the GID is not 32 hex digits (byte " + std::to_string(19 + i) + ")",
                        rec);
  for (std::size_t i = 0; i < 16; ++i)
    ep.gid.raw[i] = static_cast<std::uint8_t>(detail::hex_value(rec[19 + 2 * i]) << 4 |
                                              detail::hex_value(rec[20 + 2 * i]));
  if (!tail.empty() && tail != std::string_view("", 1))
    throw exchange_error(exchange_errc::too_large,
                         "ibv_*_pingpong record followed by " + std::to_string(tail.size()) +
                             " more bytes (it has " + std::to_string(text) + " characters and a NUL): " +
                             detail::excerpt(tail));
  ep.mtu = assumed_mtu;
  return ep;
}

// ---- rdmakit ----

/// The header for a payload of `len` bytes: "rdmakit/01 LLLL\n".
inline std::string frame_header(std::size_t len) {
  char h[header_size + 1];
  std::snprintf(h, sizeof h, "rdmakit/%02d %04u\n", version, static_cast<unsigned>(len));
  return std::string(h, header_size);
}

/// A complete rdmakit frame (header and payload) for `info`.
inline std::string encode(const connection_info& info) {
  const endpoint& ep = info.ep;
  if (ep.qpn > 0xFFFFFFu || ep.psn > 0xFFFFFFu || mtu_bytes(ep.mtu) == 0)
    throw exchange_error(exchange_errc::invalid_argument,
                         "local endpoint out of range (QPN and PSN are 24 bits, MTU 256..4096)");
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "lid=0x%04x\nqpn=0x%06x\npsn=0x%06x\ngid=%s\nmtu=%u\n",
                        static_cast<unsigned>(ep.lid), static_cast<unsigned>(ep.qpn), static_cast<unsigned>(ep.psn),
                        detail::gid_hex(ep.gid).c_str(), static_cast<unsigned>(mtu_bytes(ep.mtu)));
  std::string payload(buf, static_cast<std::size_t>(n));
  if (ep.qkey != default_qkey) {
    n = std::snprintf(buf, sizeof buf, "qkey=0x%08x\n", static_cast<unsigned>(ep.qkey));
    payload.append(buf, static_cast<std::size_t>(n));
  }
  if (info.region) {
    n = std::snprintf(buf, sizeof buf, "addr=0x%016llx\nrkey=0x%08x\nlen=%llu\naccess=0x%x\n",
                      static_cast<unsigned long long>(info.region->addr), static_cast<unsigned>(info.region->rkey),
                      static_cast<unsigned long long>(info.region->length),
                      static_cast<unsigned>(to_underlying(info.region->rights)));
    payload.append(buf, static_cast<std::size_t>(n));
  }
  return frame_header(payload.size()) + payload;
}

/// Validates a frame header and returns its payload length. Throws exchange_error.
inline std::size_t parse_header(std::string_view h) {
  if (h.size() != header_size) detail::malformed("rdmakit frame header of " + std::to_string(h.size()) + " bytes", h);
  if (h.substr(0, 8) != "rdmakit/") {
    if (detail::looks_like_pingpong(h))
      throw exchange_error(exchange_errc::wrong_format,
                           "the peer speaks the ibv_*_pingpong wire format (LID:QPN:PSN:GID), not rdmakit's: use "
                           "wire_format::pingpong on this side (rdmakit-pingpong: --wire pingpong)");
    detail::malformed("not an rdmakit record (expected \"rdmakit/01 LLLL\\n\"): is the peer the right program on "
                      "the right port?",
                      h);
  }
  std::uint64_t ver = 0, len = 0;
  if (!detail::parse_digits(h.substr(8, 2), ver) || h[10] != ' ' || h[15] != '\n')
    detail::malformed("rdmakit frame header is not \"rdmakit/VV LLLL\\n\"", h);
  // Not parse_number: that would also take "0x53" (hex) for a payload length.
  if (!detail::parse_digits(h.substr(11, 4), len))
    detail::malformed("rdmakit frame header: the payload length LLLL must be four decimal digits (0000 to " +
                          std::to_string(max_payload) + ")",
                      h);
  if (ver != static_cast<std::uint64_t>(version))
    throw exchange_error(exchange_errc::version_mismatch,
                         "the peer speaks rdmakit wire format version " + std::to_string(ver) +
                             ", this build speaks version " + std::to_string(version) +
                             ": build both sides from the same rdmakit release");
  if (len > max_payload)
    throw exchange_error(exchange_errc::too_large, "the peer announced a " + std::to_string(len) +
                                                       "-byte record; rdmakit records are at most " +
                                                       std::to_string(max_payload) + " bytes");
  return static_cast<std::size_t>(len);
}

/// Parses an rdmakit payload (the part after the header). Throws exchange_error.
inline connection_info decode_payload(std::string_view payload) {
  if (payload.size() > max_payload)
    throw exchange_error(exchange_errc::too_large, "rdmakit record of " + std::to_string(payload.size()) + " bytes");
  if (payload.empty() || payload.back() != '\n')
    detail::malformed("rdmakit record does not end with a newline (truncated?)", payload);
  enum { k_lid, k_qpn, k_psn, k_gid, k_mtu, k_addr, k_rkey, k_len, k_access, k_qkey, k_count };
  static constexpr std::string_view names[k_count] = {"lid", "qpn", "psn", "gid", "mtu",
                                                      "addr", "rkey", "len", "access", "qkey"};
  bool seen[k_count] = {};
  connection_info info;
  region_descriptor region;
  std::string_view rest = payload;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) detail::malformed("rdmakit record line is not key=value", line);
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    int k = 0;
    while (k < k_count && names[k] != key) ++k;
    if (k == k_count) {
      for (char c : key)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
          detail::malformed("rdmakit record key is not [a-z0-9_]+", line);
      continue;  // a key from a newer v1 peer
    }
    if (seen[k]) detail::malformed("rdmakit record repeats \"" + std::string(key) + "\"", payload);
    seen[k] = true;
    std::uint64_t v = 0;
    auto number = [&](std::uint64_t max) {
      if (!detail::parse_number(value, max, v))
        detail::malformed("rdmakit record: bad or out-of-range " + std::string(key), line);
      return v;
    };
    switch (k) {
      case k_lid: info.ep.lid = static_cast<std::uint16_t>(number(0xFFFF)); break;
      case k_qpn: info.ep.qpn = static_cast<std::uint32_t>(number(0xFFFFFF)); break;
      case k_psn: info.ep.psn = static_cast<std::uint32_t>(number(0xFFFFFF)); break;
      case k_gid:
        // 32 characters and gid::parse: exactly 32 hex digits (gid::parse alone also
        // takes the colon form "fe80:0000:...").
        if (value.size() != 32 || !gid::parse(value, info.ep.gid))
          detail::malformed("rdmakit record: gid= must be 32 hex digits (the 16 GID bytes in network order, no "
                            "colons)",
                            line);
        break;
      case k_mtu:
        if (!mtu_from_bytes(static_cast<std::uint32_t>(number(4096)), info.ep.mtu))
          detail::malformed("rdmakit record: MTU must be 256, 512, 1024, 2048 or 4096", line);
        break;
      case k_qkey: info.ep.qkey = static_cast<std::uint32_t>(number(0xFFFFFFFF)); break;
      case k_addr: region.addr = number(~std::uint64_t{0}); break;
      case k_rkey: region.rkey = static_cast<std::uint32_t>(number(0xFFFFFFFF)); break;
      case k_len: region.length = number(~std::uint64_t{0}); break;
      case k_access:
        region.rights = static_cast<access>(number(0xFFFFFFFF));
        if ((region.rights & ~remote_access_bits) != access::none)
          detail::malformed("rdmakit record: access holds bits other than remote write/read/atomic", line);
        break;
    }
  }
  for (int k = k_lid; k <= k_mtu; ++k)
    if (!seen[k]) detail::malformed("rdmakit record lacks \"" + std::string(names[k]) + "\"", payload);
  const int regions = seen[k_addr] + seen[k_rkey] + seen[k_len] + seen[k_access];
  if (regions != 0 && regions != 4)
    detail::malformed("rdmakit record: addr, rkey, len and access go together", payload);
  if (regions == 4) info.region = region;
  return info;
}

/// "LID 0x0001, QPN 0x00001a, PSN 0x3f2a10, GID fe80::1" (the ibv_*_pingpong style).
inline std::string describe(const endpoint& ep) {
  char g[INET6_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET6, ep.gid.raw.data(), g, sizeof g);
  char buf[128];
  std::snprintf(buf, sizeof buf, "LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", static_cast<unsigned>(ep.lid),
                static_cast<unsigned>(ep.qpn), static_cast<unsigned>(ep.psn), g);
  return buf;
}

}  // namespace wire

namespace detail {

/// Refuses timeouts that cannot be waited for before any socket work: a deadline
/// already past would fail later as a puzzling "timed out after -5 ms".
inline void check_timeouts(const exchange_options& o) {
  if (o.timeout.count() <= 0)
    throw exchange_error(exchange_errc::invalid_argument,
                         "exchange_options::timeout must be positive (got " + std::to_string(o.timeout.count()) +
                             " ms): give the longest wait in milliseconds, or milliseconds::max() for no limit");
  if (o.accept_timeout.count() < 0)
    throw exchange_error(exchange_errc::invalid_argument,
                         "exchange_options::accept_timeout must be positive, or 0 to use timeout (got " +
                             std::to_string(o.accept_timeout.count()) +
                             " ms): give the longest wait for a client in milliseconds, or milliseconds::max() "
                             "for no limit");
}

inline void send_record(int fd, const connection_info& local, const exchange_options& o,
                        const tcp::deadline& d) {
  if (o.format == wire_format::pingpong) {
    if (local.region)
      throw exchange_error(exchange_errc::invalid_argument,
                           "the ibv_*_pingpong format cannot carry a remote region: use wire_format::rdmakit");
    std::string rec = wire::format_pingpong(local.ep);
    rec.push_back('\0');
    tcp::write_all(fd, rec.data(), rec.size(), d, "our ibv_*_pingpong record");
  } else {
    const std::string frame = wire::encode(local);
    tcp::write_all(fd, frame.data(), frame.size(), d, "our rdmakit record");
  }
}

/// Reads and parses the peer's record. `last`: the peer must now wait for our answer,
/// so bytes beyond the record mean an oversized one.
inline connection_info receive_record(int fd, const connection_info& local, const exchange_options& o,
                                      const tcp::deadline& d, bool last) {
  connection_info peer;
  if (o.format == wire_format::pingpong) {
    char rec[wire::pingpong_record_size];
    tcp::read_exact(fd, rec, sizeof rec, d, "the peer's ibv_*_pingpong record");
    peer = wire::parse_pingpong(std::string_view(rec, sizeof rec), local.ep.mtu);
  } else {
    char h[wire::header_size];
    tcp::read_exact(fd, h, sizeof h, d, "the peer's rdmakit record header");
    const std::size_t len = wire::parse_header(std::string_view(h, sizeof h));
    if (len == 0) wire::detail::malformed("the peer sent an empty rdmakit record where its endpoint was expected");
    std::string payload(len, '\0');
    tcp::read_exact(fd, payload.data(), len, d, "the peer's rdmakit record");
    peer = wire::decode_payload(payload);
  }
  if (last && tcp::bytes_pending(fd))
    throw exchange_error(exchange_errc::too_large,
                         "the peer sent more bytes than its record holds: is it the right program and wire format?");
  return peer;
}

inline void send_ack(int fd, const exchange_options& o, const tcp::deadline& d) {
  if (o.format == wire_format::pingpong) {
    tcp::write_all(fd, wire::pingpong_ack.data(), wire::pingpong_ack.size(), d, "the \"done\" acknowledgement");
  } else {
    const std::string h = wire::frame_header(0);
    tcp::write_all(fd, h.data(), h.size(), d, "the acknowledgement");
  }
}

inline void receive_ack(int fd, const exchange_options& o, const tcp::deadline& d) {
  if (o.format == wire_format::pingpong) {
    char ack[wire::pingpong_ack.size()];
    tcp::read_exact(fd, ack, sizeof ack, d, "the peer's \"done\" acknowledgement");
    if (std::string_view(ack, sizeof ack) != wire::pingpong_ack)
      wire::detail::malformed("expected the acknowledgement \"done\\0\"", std::string_view(ack, sizeof ack));
  } else {
    char h[wire::header_size];
    tcp::read_exact(fd, h, sizeof h, d, "the peer's acknowledgement");
    if (wire::parse_header(std::string_view(h, sizeof h)) != 0)
      wire::detail::malformed("expected an empty rdmakit frame as the acknowledgement", std::string_view(h, sizeof h));
  }
}

}  // namespace detail

/// A TCP listener that serves endpoint exchanges, one client per `exchange` call. A
/// failed exchange (timeout, malformed record...) throws and leaves it usable.
class exchange_listener {
 public:
  /// Listens on `port` (0: any free port, see port()) on `bind_address` (empty: every
  /// interface, IPv6 and IPv4).
  explicit exchange_listener(std::uint16_t port = pingpong_port, const std::string& bind_address = {})
      : listener_(port, bind_address) {}

  std::uint16_t port() const noexcept { return listener_.port(); }

  /// Waits for one client (up to `accept_timeout`) and exchanges records with it.
  connection_info exchange(const connection_info& local, const exchange_options& o = {},
                           const on_peer_fn& on_peer = {}) {
    detail::check_timeouts(o);
    const auto accept_budget = o.accept_timeout.count() > 0 ? o.accept_timeout : o.timeout;
    detail::tcp::socket_fd c = listener_.accept(detail::tcp::deadline::after(accept_budget));
    auto d = detail::tcp::deadline::after(o.timeout);
    connection_info peer = detail::receive_record(c.get(), local, o, d, true);
    if (on_peer) {
      on_peer(peer);
      d = detail::tcp::deadline::after(o.timeout);  // the callback's own time is not the peer's fault
    }
    detail::send_record(c.get(), local, o, d);
    detail::receive_ack(c.get(), o, d);
    return peer;
  }

 private:
  detail::tcp::listener listener_;
};

/// Server side: listens on `port`, exchanges with the first client, stops listening.
inline connection_info exchange_server(std::uint16_t port, const connection_info& local,
                                       const exchange_options& o = {}, const on_peer_fn& on_peer = {}) {
  exchange_listener l(port);
  return l.exchange(local, o, on_peer);
}

/// Client side: connects to host:port and exchanges records.
inline connection_info exchange_client(const std::string& host, std::uint16_t port, const connection_info& local,
                                       const exchange_options& o = {}, const on_peer_fn& on_peer = {}) {
  detail::check_timeouts(o);
  auto d = detail::tcp::deadline::after(o.timeout);
  detail::tcp::socket_fd c = detail::tcp::connect(host, port, d, o.retry_refused);
  detail::send_record(c.get(), local, o, d);
  connection_info peer = detail::receive_record(c.get(), local, o, d, true);
  if (on_peer) {
    on_peer(peer);
    d = detail::tcp::deadline::after(o.timeout);
  }
  detail::send_ack(c.get(), o, d);
  return peer;
}

/// A queue pair connected through an exchange, and the record its peer sent.
template <class QP>
struct exchanged {
  QP qp;
  connection_info peer;
};

namespace detail {
template <class QP, class... ConnectArgs>
using connected_t = decltype(std::declval<QP&&>().connect(std::declval<const endpoint&>(),
                                                         std::declval<const ConnectArgs&>()...));
}  // namespace detail

/// Client side of "exchange, then connect" for an RC/UC queue pair: sends its
/// local_endpoint() (and `region`, rdmakit format only) to the server at host:port and
/// connects it to the answer (`connect(peer, args...)`) before acknowledging.
template <class QP, class... ConnectArgs>
exchanged<detail::connected_t<QP, ConnectArgs...>> connect_client(QP&& qp, const std::string& host,
                                                                  std::uint16_t port,
                                                                  const exchange_options& o = {},
                                                                  const std::optional<region_descriptor>& region = {},
                                                                  const ConnectArgs&... args) {
  static_assert(!std::is_lvalue_reference_v<QP>, "connect_client(std::move(qp), ...): connecting consumes the queue pair");
  std::optional<detail::connected_t<QP, ConnectArgs...>> live;
  connection_info local(qp.local_endpoint());
  local.region = region;
  connection_info peer = exchange_client(host, port, local, o, [&](const connection_info& p) {
    live.emplace(std::move(qp).connect(p.ep, args...));
  });
  return {std::move(*live), std::move(peer)};
}

/// Server side: waits on `listener` for one client, connects `qp` to it before
/// answering (so the client may send as soon as it returns).
template <class QP, class... ConnectArgs>
exchanged<detail::connected_t<QP, ConnectArgs...>> connect_server(QP&& qp, exchange_listener& listener,
                                                                  const exchange_options& o = {},
                                                                  const std::optional<region_descriptor>& region = {},
                                                                  const ConnectArgs&... args) {
  static_assert(!std::is_lvalue_reference_v<QP>, "connect_server(std::move(qp), ...): connecting consumes the queue pair");
  std::optional<detail::connected_t<QP, ConnectArgs...>> live;
  connection_info local(qp.local_endpoint());
  local.region = region;
  connection_info peer = listener.exchange(local, o, [&](const connection_info& p) {
    live.emplace(std::move(qp).connect(p.ep, args...));
  });
  return {std::move(*live), std::move(peer)};
}

RDMAKIT_END_NAMESPACE
