#pragma once
// Command-line parsing shared by the tools: one reading of numbers for every option.
#include <cerrno>
#include <cstdlib>

namespace rdmakit_tools {

/// An unsigned number in decimal, hex (0x) or octal (0), at most `max`: false for
/// anything else (a sign, trailing characters, overflow, an empty string).
inline bool parse_uint(const char* s, unsigned long long max, unsigned long long& out) {
  if (!s || s[0] == '-' || s[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 0);
  if (errno || end == s || *end || v > max) return false;
  out = v;
  return true;
}

}  // namespace rdmakit_tools
