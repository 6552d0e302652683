// detail/text.hpp: messages joined out of line (cat, append, hex).
#include <rdmakit/detail/text.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace {

using rdmakit::detail::append;
using rdmakit::detail::cat;
using rdmakit::detail::hex;

TEST_CASE("cat joins text of every kind in order") {
  const std::string s = "string";
  const std::string_view v = "view";
  CHECK(cat("a ", s, ' ' == ' ' ? " b " : "", v) == "a string b view");
  CHECK(cat("") == "");
  CHECK(cat(std::string_view("abc", 2)) == "ab");  // a view's size, not a terminator
  char buffer[16] = "host";  // a C string in a larger array: up to its terminator
  CHECK(cat(buffer, ":", 80) == "host:80");
}

TEST_CASE("a null C string is written as (null), not read") {
  const char* none = nullptr;
  CHECK(cat("name ", none, "!") == "name (null)!");
}

TEST_CASE("cat writes integers of every width and sign in decimal") {
  CHECK(cat(0) == "0");
  CHECK(cat(7u, " ", -7, " ", 10, " ", 1234567890L) == "7 -7 10 1234567890");
  CHECK(cat(std::numeric_limits<std::int64_t>::min()) == "-9223372036854775808");
  CHECK(cat(std::numeric_limits<std::int64_t>::max()) == "9223372036854775807");
  CHECK(cat(std::numeric_limits<std::uint64_t>::max()) == "18446744073709551615");
  CHECK(cat(std::numeric_limits<std::int32_t>::min()) == "-2147483648");
  CHECK(cat(static_cast<std::uint8_t>(200), static_cast<std::int16_t>(-300)) == "200-300");
  CHECK(cat(static_cast<unsigned short>(65535)) == "65535");
}

TEST_CASE("hex() writes 0x and lowercase digits") {
  CHECK(cat(hex(0)) == "0x0");
  CHECK(cat("rkey ", hex(0x1a2bU)) == "rkey 0x1a2b");
  CHECK(cat(hex(std::numeric_limits<std::uint64_t>::max())) == "0xffffffffffffffff");
}

TEST_CASE("append adds to what the string holds") {
  std::string why = "port 1";
  append(why, ": GID table of ", 16, " entries");
  CHECK(why == "port 1: GID table of 16 entries");
}

// bool and characters are not numbers in a message: they do not convert.
static_assert(!std::is_constructible_v<rdmakit::detail::text_piece, bool>);
static_assert(!std::is_constructible_v<rdmakit::detail::text_piece, char>);
static_assert(std::is_constructible_v<rdmakit::detail::text_piece, unsigned char>);

}  // namespace
