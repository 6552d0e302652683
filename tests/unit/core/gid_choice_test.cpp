#include <rdmakit/detail/gid_choice.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace rdmakit;

namespace {

// A backend whose only working operations are the three choose_gid uses; the rest
// come from the archetype and are never called.
struct fake_gids : archetype_backend {
  static inline port_attr port{};
  static inline std::vector<gid_entry> table;

  static port_attr query_port(context, std::uint8_t) { return port; }
  static gid_entry query_gid(context, std::uint8_t, int index) {
    auto i = static_cast<std::size_t>(index);
    return i < table.size() ? table[i] : gid_entry{};
  }
  static std::string device_name(context) { return "fake0"; }
};
static_assert(verbs_backend<fake_gids>);

gid_entry entry(std::uint32_t index, gid value, gid_type type) {
  gid_entry e;
  e.value = value;
  e.index = index;
  e.type = type;
  e.valid = !value.is_zero();
  return e;
}

gid link_local() {
  gid g;
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  g.raw[15] = 0x01;
  return g;
}

gid global_v6() {
  gid g;
  g.raw[0] = 0x20;
  g.raw[1] = 0x01;
  g.raw[2] = 0x0d;
  g.raw[3] = 0xb8;
  g.raw[15] = 0x07;
  return g;
}

void set_table(link_layer layer, std::vector<gid_entry> t) {
  fake_gids::port = {};
  fake_gids::port.layer = layer;
  fake_gids::port.gid_tbl_len = static_cast<std::uint32_t>(t.size());
  fake_gids::table = std::move(t);
}

int choose() { return detail::choose_gid<fake_gids>(nullptr, 1); }

}  // namespace

TEST_CASE("RoCE: the rxe layout picks the IPv4-mapped RoCEv2 GID") {
  // rxe on an interface with an IPv4 address: 0 link-local, 1 IPv4-mapped (both RoCEv2).
  set_table(link_layer::ethernet, {entry(0, link_local(), gid_type::roce_v2),
                                   entry(1, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v2)});
  CHECK(choose() == 1);
}

TEST_CASE("RoCE: IPv4-mapped RoCEv2 wins over earlier RoCEv1 and RoCEv2 entries") {
  set_table(link_layer::ethernet, {entry(0, link_local(), gid_type::roce_v1),
                                   entry(1, link_local(), gid_type::roce_v2),
                                   entry(2, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v1),
                                   entry(3, global_v6(), gid_type::roce_v2),
                                   entry(4, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v2)});
  CHECK(choose() == 4);
}

TEST_CASE("RoCE: without an IPv4-mapped RoCEv2 GID, the first RoCEv2 one") {
  set_table(link_layer::ethernet, {entry(0, link_local(), gid_type::roce_v1),
                                   entry(1, {}, gid_type::roce_v2),  // empty slot
                                   entry(2, global_v6(), gid_type::roce_v2),
                                   entry(3, link_local(), gid_type::roce_v2)});
  CHECK(choose() == 2);
}

TEST_CASE("RoCE: a routable RoCEv2 GID beats an earlier link-local one") {
  set_table(link_layer::ethernet, {entry(0, link_local(), gid_type::roce_v2),
                                   entry(1, link_local(), gid_type::roce_v1),
                                   entry(2, global_v6(), gid_type::roce_v2)});
  CHECK(choose() == 2);
  set_table(link_layer::ethernet, {entry(0, link_local(), gid_type::roce_v1),
                                   entry(1, link_local(), gid_type::roce_v2)});
  CHECK(choose() == 1);  // only link-local RoCEv2: still RoCEv2 before RoCEv1
}

TEST_CASE("RoCE: IPv4-mapped but RoCEv1 does not count as RoCEv2") {
  set_table(link_layer::ethernet, {entry(0, link_local(), gid_type::roce_v1),
                                   entry(1, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v1)});
  CHECK(choose() == 0);  // no RoCEv2 at all: the first RoCEv1
}

TEST_CASE("RoCE: empty slots are skipped") {
  set_table(link_layer::ethernet,
            {entry(0, {}, gid_type::roce_v2), entry(1, {}, gid_type::roce_v2),
             entry(2, gid::from_ipv4(192, 168, 1, 5), gid_type::roce_v2)});
  CHECK(choose() == 2);
}

TEST_CASE("InfiniBand and unspecified link layers use index 0") {
  set_table(link_layer::infiniband, {entry(0, link_local(), gid_type::ib),
                                     entry(1, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v2)});
  CHECK(choose() == 0);
  set_table(link_layer::unspecified, {entry(0, link_local(), gid_type::ib)});
  CHECK(choose() == 0);
}

TEST_CASE("no fitting GID: verbs_error listing every entry") {
  set_table(link_layer::ethernet,
            {entry(0, {}, gid_type::roce_v2), entry(1, link_local(), gid_type::ib)});
  try {
    choose();
    FAIL("choose_gid should have thrown");
  } catch (const verbs_error& e) {
    CHECK(e.verb() == "choose_gid");
    CHECK(e.errno_value() == ENOENT);
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("fake0 port 1") != std::string::npos);
    CHECK(what.find("Ethernet") != std::string::npos);
    CHECK(what.find("[0] (empty)") != std::string::npos);
    CHECK(what.find("[1] fe80:0000:0000:0000:0000:0000:0000:0001 IB (link-local)") != std::string::npos);
  }
}

TEST_CASE("RoCE: a GID past index 255 is never chosen (an address vector's sgid_index has 8 bits)") {
  // rxe's table has 1024 entries: an IPv4-mapped GID at 300 was chosen, and the
  // address vector sent from slot 44 (300 mod 256).
  std::vector<gid_entry> t(301);
  t[0] = entry(0, link_local(), gid_type::roce_v2);
  t[300] = entry(300, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v2);
  set_table(link_layer::ethernet, t);
  CHECK(choose() == 0);
  // Nothing usable at 0..255: refused, saying why.
  t[0] = gid_entry{};
  set_table(link_layer::ethernet, t);
  CHECK_THROWS_WITH_AS(choose(), doctest::Contains("past index 255"), verbs_error);
}

TEST_CASE("no fitting GID: empty table and empty IB index 0") {
  set_table(link_layer::ethernet, {});
  CHECK_THROWS_AS(choose(), verbs_error);
  set_table(link_layer::infiniband, {entry(0, {}, gid_type::ib)});
  CHECK_THROWS_WITH_AS(choose(), doctest::Contains("index 0, which is empty"), verbs_error);
}

TEST_CASE("describe_gid_table marks IPv4-mapped entries and folds empty runs") {
  std::vector<gid_entry> t(1024);  // rxe's table: 1024 entries, two in use
  t[0] = entry(0, link_local(), gid_type::roce_v2);
  t[1] = entry(1, gid::from_ipv4(10, 0, 0, 1), gid_type::roce_v2);
  t[5] = entry(5, global_v6(), gid_type::roce_v1);
  set_table(link_layer::ethernet, t);
  auto text = detail::describe_gid_table<fake_gids>(nullptr, 1, fake_gids::port);
  CHECK(text ==
        "\n  [0] fe80:0000:0000:0000:0000:0000:0000:0001 RoCEv2 (link-local)"
        "\n  [1] 0000:0000:0000:0000:0000:ffff:0a00:0001 RoCEv2 (IPv4-mapped)"
        "\n  [2..4] (empty)"
        "\n  [5] 2001:0db8:0000:0000:0000:0000:0000:0007 RoCEv1"
        "\n  [6..1023] (empty)");
  t.resize(3);
  t[2] = {};
  set_table(link_layer::ethernet, t);
  text = detail::describe_gid_table<fake_gids>(nullptr, 1, fake_gids::port);
  CHECK(text.find("\n  [2] (empty)") != std::string::npos);
}
