#include <rdmakit/types.hpp>

#include <doctest/doctest.h>

using namespace rdmakit;

TEST_CASE("flag enums combine and test bits") {
  auto a = access::local_write | access::remote_read;
  CHECK(has_all(a, access::local_write));
  CHECK_FALSE(has_all(a, access::local_write | access::remote_write));
  CHECK(has_any(a, access::remote_write | access::remote_read));
  CHECK(to_string(a) == "LOCAL_WRITE|REMOTE_READ");
  CHECK(to_string(access::none) == "none");
  auto m = qp_attr_mask::state | qp_attr_mask::av | qp_attr_mask::dest_qpn;
  CHECK(to_string(m) == "STATE|AV|DEST_QPN");
  m &= ~qp_attr_mask::av;
  CHECK(to_string(m) == "STATE|DEST_QPN");
}

TEST_CASE("enumerators carry the libibverbs ABI values") {
  CHECK(to_underlying(qp_attr_mask::dest_qpn) == (1u << 20));
  CHECK(static_cast<int>(wc_status::general_err) == 21);
  CHECK(static_cast<int>(wc_opcode::recv_rdma_with_imm) == 129);
  CHECK(static_cast<int>(opcode::atomic_fetch_and_add) == 6);
  CHECK(static_cast<int>(qp_type::ud) == 4);
}

TEST_CASE("MTU conversions") {
  CHECK(mtu_bytes(mtu::mtu_256) == 256);
  CHECK(mtu_bytes(mtu::mtu_4096) == 4096);
  CHECK(mtu_bytes(static_cast<mtu>(9)) == 0);
  mtu m{};
  CHECK(mtu_from_bytes(2048, m));
  CHECK(m == mtu::mtu_2048);
  CHECK_FALSE(mtu_from_bytes(1500, m));
}

TEST_CASE("status and state names") {
  CHECK(std::string(to_string(wc_status::rem_access_err)) == "remote access error");
  CHECK(std::string(to_string(wc_status::wr_flush_err)) == "Work Request Flushed Error");
  CHECK(std::string(to_string(qp_state::rts)) == "RTS");
  CHECK(std::string(to_string(async_event_type::cq_err)) == "CQ_ERR");
  CHECK(std::string(to_string(async_event_type::gid_change)) == "GID_CHANGE");
  CHECK(std::string(to_string(opcode::rdma_read)) == "RDMA_READ");
}

TEST_CASE("GIDs: IPv4 mapping, printing and parsing both text forms") {
  auto g = gid::from_ipv4(10, 0, 0, 7);
  CHECK(g.is_ipv4_mapped());
  CHECK_FALSE(g.is_link_local());
  CHECK(g.to_string() == "0000:0000:0000:0000:0000:ffff:0a00:0007");
  gid parsed;
  REQUIRE(gid::parse(g.to_string(), parsed));
  CHECK(parsed == g);
  REQUIRE(gid::parse("fe800000000000000000000000000001", parsed));
  CHECK(parsed.is_link_local());
  CHECK(parsed.raw[15] == 1);
  CHECK_FALSE(gid::parse("fe80", parsed));
  CHECK_FALSE(gid::parse("zz800000000000000000000000000001", parsed));
  CHECK_FALSE(gid::parse("fe80:0000:0000:0000:0000:0000:0000:00011", parsed));
  CHECK_FALSE(gid::parse(":fe80000000000000000000000000001", parsed));
  // One form or the other: eight groups of four between single colons, or 32 digits.
  CHECK_FALSE(gid::parse("fe80::0000:0000:0000:0000:0000:0000:0001", parsed));
  CHECK_FALSE(gid::parse("fe80:0000000000000000000000000001", parsed));
  CHECK_FALSE(gid::parse("fe80:0000:0000:0000:0000:0000:00000001", parsed));
  CHECK_FALSE(gid::parse("fe800000:0000:0000:0000:0000:0000:0001", parsed));
  CHECK(gid{}.is_zero());
  CHECK_FALSE(parsed.is_multicast());
  CHECK_FALSE(g.is_multicast());
  REQUIRE(gid::parse("ff0e0000000000000000000000000001", parsed));
  CHECK(parsed.is_multicast());
}
