#include <rdmakit/grh.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstring>

using namespace rdmakit;

namespace {
using area = std::array<std::byte, grh_bytes>;

// An IPv4 header (RoCE v2) in the last 20 bytes, its checksum right; the first 20 as given.
area ipv4_area(std::uint8_t first_byte = 0) {
  area a{};
  const std::uint8_t h[20] = {0x45, 0x0c, 0, 76, 0, 0, 0x40, 0, 63, 17, 0, 0, 10, 0, 2, 15, 10, 0, 2, 16};
  std::memcpy(a.data() + 20, h, 20);
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += std::uint32_t{h[i]} << 8 | h[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  a[30] = std::byte(static_cast<std::uint8_t>(~sum >> 8));
  a[31] = std::byte(static_cast<std::uint8_t>(~sum));
  a[0] = std::byte{first_byte};
  return a;
}

// A GRH (IPv6 layout): traffic class 0xab, hop limit 9, source fe80::1, destination fe80::2.
area grh_area() {
  area a{};
  a[0] = std::byte{0x6a};
  a[1] = std::byte{0xb0};
  a[6] = std::byte{0x1b};
  a[7] = std::byte{9};
  a[8] = a[24] = std::byte{0xfe};
  a[9] = a[25] = std::byte{0x80};
  a[23] = std::byte{1};
  a[39] = std::byte{2};
  return a;
}
}  // namespace

TEST_CASE("parse_grh: RoCE v2 over IPv4: the addresses of the IPv4 header in the last 20 bytes") {
  const auto g = parse_grh(ipv4_area());
  REQUIRE(g);
  CHECK(g->ipv4);
  CHECK(g->source == gid::from_ipv4(10, 0, 2, 15));
  CHECK(g->destination == gid::from_ipv4(10, 0, 2, 16));
  CHECK(g->hop_limit == 63);
  CHECK(g->traffic_class == 0x0c);
}

TEST_CASE("parse_grh: a GRH (InfiniBand, RoCE v1, RoCE v2 over IPv6): its GIDs") {
  const auto g = parse_grh(grh_area());
  REQUIRE(g);
  CHECK_FALSE(g->ipv4);
  gid src, dst;
  REQUIRE(gid::parse("fe80:0000:0000:0000:0000:0000:0000:0001", src));
  REQUIRE(gid::parse("fe80:0000:0000:0000:0000:0000:0000:0002", dst));
  CHECK(g->source == src);
  CHECK(g->destination == dst);
  CHECK(g->hop_limit == 9);
  CHECK(g->traffic_class == 0xab);
}

// The first 20 bytes of an IPv4 area are undefined: they may start like a GRH's version.
TEST_CASE("parse_grh: an IPv4 header is told from a GRH by its checksum when the first byte says 6") {
  const auto g = parse_grh(ipv4_area(0x60));
  REQUIRE(g);
  CHECK(g->ipv4);
  auto a = grh_area();  // a GRH whose source GID's third quarter happens to read 0x45
  a[20] = std::byte{0x45};
  const auto h = parse_grh(a);
  REQUIRE(h);
  CHECK_FALSE(h->ipv4);
}

TEST_CASE("parse_grh: no answer for an area too short or holding neither header") {
  const auto a = ipv4_area();
  CHECK_FALSE(parse_grh(std::span(a).first(39)));
  CHECK_FALSE(parse_grh(area{}));  // a receive without a GRH: nothing was written
  auto bad = ipv4_area();
  bad[20] = std::byte{0x46};  // options: never RoCE v2's header
  CHECK_FALSE(parse_grh(bad));
}
