#pragma once
// The joiner of detail/text.hpp: inline in header-only builds, compiled once
// (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/detail/text.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_DECL std::string_view text_piece::view(char (&buf)[24]) const noexcept {
  if (size_ < c_string_mark) return {text_, size_};
  if (size_ == c_string_mark) return text_ ? std::string_view(text_) : std::string_view("(null)");
  // Digits from the end of the buffer; a negative number is its magnitude after a '-'.
  char* end = buf + sizeof buf;
  char* p = end;
  const bool negative = size_ == signed_mark && static_cast<std::int64_t>(number_) < 0;
  std::uint64_t v = negative ? 0 - number_ : number_;
  if (size_ == hex_mark) {
    do *--p = "0123456789abcdef"[v & 15]; while (v >>= 4);
    *--p = 'x';
    *--p = '0';
  } else {
    do *--p = static_cast<char>('0' + v % 10); while (v /= 10);
    if (negative) *--p = '-';
  }
  return {p, static_cast<std::size_t>(end - p)};
}

RDMAKIT_NOINLINE RDMAKIT_DECL void append_pieces(std::string& out, const text_piece* pieces, std::size_t n) {
  char buf[24];
  for (std::size_t i = 0; i < n; ++i) out.append(pieces[i].view(buf));
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
