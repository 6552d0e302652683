#pragma once
// Messages built by one out-of-line joiner: `cat("port ", port, " of ", name)`.
// Chains of std::string `+` and std::to_string inline their append code at every call
// site, which was a quarter of the code a translation unit of the walkthrough generated
// (issue 12, bench/README "Compile cost"); a call to the joiner is a few stores.
#include <rdmakit/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// An unsigned integer that cat() writes in hexadecimal, "0x1a".
struct hex_number {
  std::uint64_t value;
};
/// `cat("rkey ", hex(rkey))` writes "rkey 0x1a".
constexpr hex_number hex(std::uint64_t v) noexcept { return {v}; }

/// One argument of cat(): text, or an integer the joiner formats (in decimal unless hex()).
/// Two words, so a call site stores two values per piece: the text's pointer and size, or
/// a C string's pointer or a number, with a mark in place of the size (no text is that long).
class text_piece {
 public:
  constexpr text_piece(std::string_view s) noexcept : text_(s.data()), size_(s.size()) {}
  // Measured by the joiner, which writes a null pointer as "(null)" (an error path must
  // not crash on the text it reports).
  constexpr text_piece(const char* s) noexcept : text_(s), size_(c_string_mark) {}
  text_piece(const std::string& s) noexcept : text_piece(std::string_view(s)) {}
  // Integers by value; bool and the character types are refused (a message wants "yes"
  // or a character written as text, not a number).
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char> &&
             !std::is_same_v<I, char8_t> && !std::is_same_v<I, char16_t> && !std::is_same_v<I, char32_t> &&
             !std::is_same_v<I, wchar_t>)
  constexpr text_piece(I v) noexcept
      : number_(static_cast<std::uint64_t>(static_cast<widened<I>>(v))),
        size_(std::is_signed_v<I> ? signed_mark : unsigned_mark) {}
  constexpr text_piece(hex_number h) noexcept : number_(h.value), size_(hex_mark) {}

  /// The piece as text; numbers are written into `buf`.
  std::string_view view(char (&buf)[24]) const noexcept;

 private:
  // A signed integer sign-extended to 64 bits (its bits as the joiner reads them back).
  template <class I>
  using widened = std::conditional_t<std::is_signed_v<I>, std::int64_t, std::uint64_t>;
  static constexpr std::size_t signed_mark = ~std::size_t{0};
  static constexpr std::size_t unsigned_mark = signed_mark - 1;
  static constexpr std::size_t hex_mark = signed_mark - 2;
  static constexpr std::size_t c_string_mark = signed_mark - 3;
  union {
    const char* text_;
    std::uint64_t number_;
  };
  std::size_t size_;
};

/// Appends the pieces to `out`.
void append_pieces(std::string& out, const text_piece* pieces, std::size_t n);

/// The pieces joined: `cat("cqe=", cqe, " is above max_cqe=", max)`.
template <class... Parts>
  requires(sizeof...(Parts) > 0)
std::string cat(const Parts&... parts) {
  const text_piece pieces[] = {text_piece(parts)...};
  std::string s;
  append_pieces(s, pieces, sizeof...(Parts));
  return s;
}

/// Appends the pieces to `out`: `append(why, ": no such port ", port)`.
template <class... Parts>
  requires(sizeof...(Parts) > 0)
void append(std::string& out, const Parts&... parts) {
  const text_piece pieces[] = {text_piece(parts)...};
  append_pieces(out, pieces, sizeof...(Parts));
}

}  // namespace detail
RDMAKIT_END_NAMESPACE

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/text_impl.hpp>
#endif
