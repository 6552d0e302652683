#pragma once
// Command-line parsing shared by the tools: one reading of numbers for every option.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rdmakit_tools {

/// An unsigned number in decimal or hex (0x), at most `max`: false for anything else (a
/// sign, a space, trailing characters, a value above `max`, an empty string, and a
/// leading 0: strtoul reads "010" as octal 8, which nobody typing -s 010 means).
/// Digit by digit rather than strtoull, which skips spaces and negates after them
/// (" -1" is 2^64-1).
inline bool parse_uint(const char* s, unsigned long long max, unsigned long long& out) {
  if (!s || !*s) return false;
  unsigned base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s += 2;
    if (!*s) return false;
  } else if (s[0] == '0' && s[1]) {
    return false;
  }
  unsigned long long v = 0;
  for (; *s; ++s) {
    const char ch = *s;
    unsigned d = 0;
    if (ch >= '0' && ch <= '9') d = static_cast<unsigned>(ch - '0');
    else if (base == 16 && ch >= 'a' && ch <= 'f') d = static_cast<unsigned>(ch - 'a' + 10);
    else if (base == 16 && ch >= 'A' && ch <= 'F') d = static_cast<unsigned>(ch - 'A' + 10);
    else return false;
    if (d > max || v > (max - d) / base) return false;
    v = v * base + d;
  }
  out = v;
  return true;
}

/// Why parse_uint refused `s`, where "invalid" alone would leave the user guessing: the
/// text to append to the tool's message ("" for a word or a value out of range).
inline std::string uint_hint(const char* s) {
  if (!s || !*s) return "";
  auto digits = [](const char* p) {
    if (!*p) return false;
    for (; *p; ++p)
      if (*p < '0' || *p > '9') return false;
    return true;
  };
  if (s[0] == '0' && digits(s + 1)) {
    const char* d = s;
    while (d[0] == '0' && d[1]) ++d;
    return ": a leading 0 is refused (strtoul, as rdma-core's tools use it, reads it as octal): write " +
           std::string(d) + " for decimal, 0x... for hex";
  }
  if (s[0] == ' ' || s[0] == '\t' || s[0] == '+' || s[0] == '-')
    return ": digits only (decimal, or hex as 0x...), no sign or spaces";
  return "";
}

/// What to append to an "invalid <option> "<value>"" message for an option taking
/// lo..hi: uint_hint's reason for a malformed number, the range for a well-formed one
/// outside it (": from 8 to 1048576"), nothing for a word. hi 0: no range (uint_hint).
inline std::string range_hint(const char* s, unsigned long long lo, unsigned long long hi) {
  if (std::string why = uint_hint(s); !why.empty() || hi == 0) return why;
  if (!s || !*s) return "";
  const bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const char* p = hex ? s + 2 : s;
  if (!*p) return "";
  for (; *p; ++p) {
    const bool digit = (*p >= '0' && *p <= '9') || (hex && ((*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')));
    if (!digit) return "";
  }
  return ": from " + std::to_string(lo) + " to " + std::to_string(hi);
}

/// A plain decimal number ("2", "0.25", ".5"): digits with at most one point, and
/// nothing else; false for a sign, a space, an exponent, hex or an empty string (strtod
/// takes " +1e-3" and "0x1p-3"). Its value in `out`.
inline bool parse_decimal(const char* s, double& out) {
  if (!s || !*s) return false;
  bool point = false, digit = false;
  for (const char* p = s; *p; ++p) {
    if (*p >= '0' && *p <= '9') digit = true;
    else if (*p == '.' && !point) point = true;
    else return false;
  }
  if (!digit) return false;
  out = std::strtod(s, nullptr);  // now only digits and a point: read as written
  return true;
}

/// Why parse_decimal refused `s` (the text to append to the tool's message): empty when
/// it did not (a well-formed number out of the option's range, which the message says).
inline std::string decimal_hint(const char* s) {
  double ignored = 0;
  if (!s || !*s || parse_decimal(s, ignored)) return "";
  return ": a decimal number, digits with at most one point (as 0.25), no sign, spaces or exponent";
}

// ---- --mock-latency and --mock-profile (every tool with a mock loopback) -------------

/// The largest --mock-latency, in microseconds: 1 s one way. A wire is microseconds; more
/// than this only makes a run wait.
inline constexpr unsigned long long max_mock_latency_us = 1'000'000;

/// What the tools call --mock-latency in an "invalid <what> "<value>"" message: the unit,
/// the form and the range, i.e. what to write instead.
inline constexpr const char* mock_latency_what =
    "--mock-latency (the mock's one-way wire latency in microseconds: a plain decimal from 0 to 1000000, "
    "i.e. at most 1 s, as 2 or 0.5)";

/// --mock-latency=<microseconds>: a plain decimal (parse_decimal) from 0 to
/// max_mock_latency_us, into nanoseconds (rounded). False for anything else.
inline bool parse_mock_latency(const char* s, std::chrono::nanoseconds& out) {
  double us = 0;
  if (!parse_decimal(s, us) || us > static_cast<double>(max_mock_latency_us)) return false;
  out = std::chrono::nanoseconds(std::llround(us * 1000.0));
  return true;
}

/// --mock-profile=spec|rxe: true for either, `rxe` set to which.
inline bool parse_mock_profile(const char* s, bool& rxe) {
  if (!s) return false;
  if (!std::strcmp(s, "spec")) rxe = false;
  else if (!std::strcmp(s, "rxe")) rxe = true;
  else return false;
  return true;
}

/// A latency as the tools print it: microseconds, the fraction only when there is one
/// ("20 us", "0.5 us").
inline std::string format_latency(std::chrono::nanoseconds d) {
  const long long ns = d.count();
  std::string s = std::to_string(ns / 1000);
  if (const long long frac = ns % 1000) {
    char buf[8];
    std::snprintf(buf, sizeof buf, ".%03lld", frac);
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    s += f;
  }
  return s + " us";
}

/// The mock fabric's settings that are not the defaults, as a run's header line ends
/// (", wire latency 20 us, rxe profile"; "" for the defaults).
inline std::string mock_fabric_note(std::chrono::nanoseconds latency, bool rxe) {
  std::string note;
  if (latency.count()) note += ", wire latency " + format_latency(latency);
  if (rxe) note += ", rxe profile";
  return note;
}

/// A wait for a completion on a mock fabric with `latency`: `wait` plus four one-way
/// latencies (a round trip to the peer and back, twice over), so a latency the options
/// allow never makes a sound run report "no completion" (the tools say so in --help).
template <class Rep, class Period>
std::chrono::duration<Rep, Period> wait_with_latency(std::chrono::duration<Rep, Period> wait,
                                                     std::chrono::nanoseconds latency) {
  using D = std::chrono::duration<Rep, Period>;
  return wait + std::chrono::ceil<D>(4 * latency);
}

/// Why an RC run on a mock fabric with `latency` cannot work: a WR's ACK comes a round
/// trip after it is sent, and a requester that waits for it less than that, over all its
/// tries (`timeout`: the ACK timeout's exponent, 4.096 us * 2^timeout per try;
/// `retry_cnt` retries after the first; 7 is endless), fails every WR with a retry
/// exceeded error. The text after "--mock-latency=<value>: "; empty when the round trip
/// fits (or the retries are endless). `how`: what the tool lets the user change instead.
inline std::string rc_latency_refusal(std::chrono::nanoseconds latency, std::uint8_t timeout, std::uint8_t retry_cnt,
                                      const char* how) {
  if (retry_cnt >= 7 || timeout == 0 || timeout > 31) return "";
  const double per_try_ms = 4.096e-3 * static_cast<double>(1ull << timeout);
  const double budget_ms = per_try_ms * (retry_cnt + 1);
  const double round_trip_ms = 2e-6 * static_cast<double>(latency.count());
  if (round_trip_ms < budget_ms) return "";
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "a round trip (%.0f ms) outlasts RC's wait for an ACK (%u tries of %.0f ms, %.0f ms in all): every "
                "WR would fail with a retry exceeded error; give --mock-latency below %.0f%s%s",
                round_trip_ms, retry_cnt + 1u, per_try_ms, budget_ms, budget_ms * 500.0, how && *how ? ", " : "",
                how ? how : "");
  return buf;
}

/// The host argument after the options (none: this side is the server) into `host`.
/// Refuses a second argument and an empty one (a script's unset "$HOST", which would
/// make a server), naming it; false then (the message is printed: exit).
inline bool take_host(const char* tool, int argc, char** argv, int first, std::string& host) {
  if (first >= argc) return true;
  if (first < argc - 1) {
    std::fprintf(stderr, "%s: unexpected argument \"%s\": give at most one host (the server's), after the options\n",
                 tool, argv[first + 1]);
    return false;
  }
  host = argv[first];
  if (!host.empty()) return true;
  std::fprintf(stderr, "%s: an empty host argument: give the server's host name or address, or none to be the server\n",
               tool);
  return false;
}

/// What the tools say of an empty -d (a script's unset "$DEV"), which would otherwise
/// run on the mock: the hint after their "invalid device """ message.
inline constexpr const char* empty_device =
    ": an empty device name: give the device (e.g. rxe0), or leave -d out to run on the mock";

}  // namespace rdmakit_tools
