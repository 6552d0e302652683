#pragma once
/// The records of the endpoint exchange (connection.hpp), encoded and parsed; every
/// malformed, oversized or truncated record is an exchange_error saying what was wrong.
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
#include <rdmakit/connection_info.hpp>
#include <rdmakit/detail/exchange_error.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/types.hpp>

#include <arpa/inet.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

RDMAKIT_BEGIN_NAMESPACE

namespace wire {

inline constexpr std::size_t header_size = 16;
inline constexpr std::size_t max_payload = 1024;
inline constexpr int version = 1;
/// Bytes of an ibv_*_pingpong record, its terminating NUL included.
inline constexpr std::size_t pingpong_record_size = sizeof "0000:000000:000000:00000000000000000000000000000000";
/// The pingpong acknowledgement, its NUL included.
inline constexpr std::string_view pingpong_ack{"done", 5};

namespace detail {
// Messages are built with the core joiner: `cat("byte ", i)` (an unqualified detail:: here is wire::detail).
using ::rdmakit::detail::append;
using ::rdmakit::detail::cat;

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
  out += "\"";
  return out;
}
[[noreturn]] inline void malformed(const std::string& what, std::string_view bytes = {}) {
  throw exchange_error(exchange_errc::malformed, bytes.empty() ? what : cat(what, " in ", excerpt(bytes)));
}
/// True for a decimal number written with a leading 0 ("010"), which a peer parsing
/// with C's strtoul(…, 0) reads as octal: refused, not guessed.
inline bool leading_zero(std::string_view s) noexcept {
  return s.size() > 1 && s[0] == '0' && s[1] != 'x' && s[1] != 'X';
}
/// Parses "0x<hex>" or "<decimal>" (no leading 0) into at most `max`.
inline bool parse_number(std::string_view s, std::uint64_t max, std::uint64_t& out) noexcept {
  int base = 10;
  if (leading_zero(s)) return false;
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
                         detail::cat("QPN ", ep.qpn, " / PSN ", ep.psn,
                                     " do not fit the 6 hex digits of an ibv_*_pingpong record (24 bits)"));
  char head[20];
  std::snprintf(head, sizeof head, "%04x:%06x:%06x:", static_cast<unsigned>(ep.lid), static_cast<unsigned>(ep.qpn),
                static_cast<unsigned>(ep.psn));
  return head + detail::gid_hex(ep.gid);
}

/// The bytes of an ibv_*_pingpong record that tell it from another program's ("LLLL:QQQQQQ:").
inline constexpr std::size_t pingpong_lead = 12;
/// Refuses the start of a record that is not an ibv_*_pingpong one: wrong_format for
/// rdmakit's header, malformed (quoting it) otherwise.
inline void check_pingpong_lead(std::string_view lead) {
  if (detail::looks_like_pingpong(lead)) return;
  if (lead.substr(0, 8) == "rdmakit/")
    throw exchange_error(exchange_errc::wrong_format,
                         "the peer speaks the rdmakit wire format, not the ibv_*_pingpong one: use "
                         "wire_format::rdmakit on this side (rdmakit-pingpong: drop --wire pingpong)");
  detail::malformed("not an ibv_*_pingpong record (expected LLLL:QQQQQQ:PPPPPP:<32 hex GID>): is the peer the right "
                    "program on the right port?",
                    lead);
}

/// Parses an ibv_*_pingpong record: the 51 characters, optionally followed by its NUL.
/// The record has no MTU: the result's is `assumed_mtu`. Throws exchange_error.
inline endpoint parse_pingpong(std::string_view rec, mtu assumed_mtu = mtu::mtu_1024) {
  constexpr std::size_t text = pingpong_record_size - 1;
  if (rec.size() >= pingpong_lead || rec.substr(0, 8) == "rdmakit/") check_pingpong_lead(rec.substr(0, pingpong_lead));
  if (rec.size() < text)
    detail::malformed(detail::cat("ibv_*_pingpong record of ", rec.size(), " characters instead of ", text,
                                  " (LLLL:QQQQQQ:PPPPPP:<32 hex GID>)"),
                      rec);
  const std::string_view tail = rec.substr(text);
  rec = rec.substr(0, text);
  auto field = [&](std::size_t pos, std::size_t len, const char* name) -> std::uint32_t {
    std::uint32_t v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      int h = detail::hex_value(rec[i]);
      if (h < 0)
        detail::malformed(detail::cat("ibv_*_pingpong record: ", name, " is not ", len, " hex digits (byte ", i, ")"),
                          rec);
      v = v << 4 | static_cast<std::uint32_t>(h);
    }
    if (pos + len < text && rec[pos + len] != ':')
      detail::malformed(detail::cat("ibv_*_pingpong record: expected ':' after the ", name, " at byte ", pos + len),
                        rec);
    return v;
  };
  endpoint ep;
  ep.lid = static_cast<std::uint16_t>(field(0, 4, "LID"));
  ep.qpn = field(5, 6, "QPN");
  ep.psn = field(12, 6, "PSN");
  for (std::size_t i = 0; i < 32; ++i)
    if (detail::hex_value(rec[19 + i]) < 0)
      detail::malformed(detail::cat("ibv_*_pingpong record: the GID is not 32 hex digits (byte ", 19 + i, ")"), rec);
  for (std::size_t i = 0; i < 16; ++i)
    ep.gid.raw[i] = static_cast<std::uint8_t>(detail::hex_value(rec[19 + 2 * i]) << 4 |
                                              detail::hex_value(rec[20 + 2 * i]));
  if (tail.size() == 1 && tail[0] != '\0') {  // the record's size read, something else where its NUL goes
    if (tail[0] == ':' || detail::hex_value(tail[0]) >= 0)
      throw exchange_error(exchange_errc::too_large,
                           detail::cat("ibv_*_pingpong record longer than its ", text, " characters: byte ", text,
                                       " is ", detail::excerpt(tail), " where its NUL should be"));
    detail::malformed(detail::cat("ibv_*_pingpong record ends with ", detail::excerpt(tail), " where its NUL should be (byte ",
                                  text, ")"));
  }
  if (!tail.empty() && tail != std::string_view("", 1))
    throw exchange_error(exchange_errc::too_large,
                         detail::cat("ibv_*_pingpong record followed by ", tail.size(), " more bytes (it has ", text,
                                     " characters and a NUL): ", detail::excerpt(tail)));
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
                        detail::gid_hex(ep.gid).c_str(), mtu_bytes(ep.mtu));
  std::string payload(buf, static_cast<std::size_t>(n));
  if (ep.qkey != default_qkey) {
    n = std::snprintf(buf, sizeof buf, "qkey=0x%08x\n", static_cast<unsigned>(ep.qkey));
    payload.append(buf, static_cast<std::size_t>(n));
  }
  if (info.region) {
    // What the peer's decode_payload refuses, refused here: the sender's mistake.
    const auto& r = *info.region;
    if ((r.rights & ~remote_access_bits) != access::none)
      throw exchange_error(exchange_errc::invalid_argument,
                           "local region descriptor: its access holds bits other than remote write/read/atomic");
    if (r.length != 0 && r.length - 1 > ~r.addr)
      throw exchange_error(exchange_errc::invalid_argument,
                           rdmakit::detail::cat("local region descriptor: ", r.length, " bytes at addr ",
                                                rdmakit::detail::hex(r.addr), " run past the end of the address space"));
    n = std::snprintf(buf, sizeof buf, "addr=0x%016llx\nrkey=0x%08x\nlen=%llu\naccess=0x%x\n",
                      static_cast<unsigned long long>(info.region->addr), static_cast<unsigned>(info.region->rkey),
                      static_cast<unsigned long long>(info.region->length),
                      to_underlying(info.region->rights));
    payload.append(buf, static_cast<std::size_t>(n));
  }
  return frame_header(payload.size()) + payload;
}

/// Validates a frame header and returns its payload length. Throws exchange_error.
inline std::size_t parse_header(std::string_view h) {
  if (h.size() != header_size) detail::malformed(detail::cat("rdmakit frame header of ", h.size(), " bytes"), h);
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
    detail::malformed(
        detail::cat("rdmakit frame header: the payload length LLLL must be four decimal digits (0000 to ", max_payload,
                    ")"),
        h);
  if (ver != static_cast<std::uint64_t>(version))
    throw exchange_error(exchange_errc::version_mismatch,
                         detail::cat("the peer speaks rdmakit wire format version ", ver,
                                     ", this build speaks version ", version,
                                     ": build both sides from the same rdmakit release"));
  if (len > max_payload)
    throw exchange_error(exchange_errc::too_large, detail::cat("the peer announced a ", len,
                                                               "-byte record; rdmakit records are at most ",
                                                               max_payload, " bytes"));
  return len;
}

/// Parses an rdmakit payload (the part after the header). Throws exchange_error.
inline connection_info decode_payload(std::string_view payload) {
  if (payload.size() > max_payload)
    throw exchange_error(exchange_errc::too_large, detail::cat("rdmakit record of ", payload.size(), " bytes"));
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
    if (line.empty()) detail::malformed("rdmakit record has an empty line (one key=value per line, none blank)");
    if (eq == std::string_view::npos || eq == 0) detail::malformed("rdmakit record line is not key=value", line);
    if (line.back() == '\r')
      detail::malformed("rdmakit record: a line ends in a carriage return (CRLF line endings): end each line with "
                        "LF only",
                        line);
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    int k = 0;
    while (k < k_count && names[k] != key) ++k;
    if (k == k_count) {
      for (char c : key)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
          detail::malformed("rdmakit record key is not [a-z0-9_]+", line);
      continue;  // a key from a newer v1 peer
    }
    if (seen[k]) detail::malformed(detail::cat("rdmakit record repeats \"", key, "\""), payload);
    seen[k] = true;
    std::uint64_t v = 0;
    auto number = [&](std::uint64_t max) {
      if (detail::leading_zero(value))
        detail::malformed(detail::cat("rdmakit record: ", key, " is a decimal number with a leading 0, which C "
                                      "reads as octal: write it without the 0, or in hex with 0x"),
                          line);
      if (!detail::parse_number(value, max, v))
        detail::malformed(detail::cat("rdmakit record: bad or out-of-range ", key), line);
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
    if (!seen[k]) detail::malformed(detail::cat("rdmakit record lacks \"", names[k], "\""), payload);
  const int regions = seen[k_addr] + seen[k_rkey] + seen[k_len] + seen[k_access];
  if (regions != 0 && regions != 4)
    detail::malformed("rdmakit record: addr, rkey, len and access go together", payload);
  if (regions == 4 && region.length != 0 && region.length - 1 > ~region.addr)  // addr + len - 1 wraps
    detail::malformed(detail::cat("rdmakit record: the region at addr ", rdmakit::detail::hex(region.addr), " of len ",
                                  region.length, " runs past the end of the address space"),
                      payload);
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

RDMAKIT_END_NAMESPACE
