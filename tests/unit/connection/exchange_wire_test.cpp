#include <rdmakit/exchange_wire.hpp>
#include <rdmakit/connection.hpp>

#include <doctest/doctest.h>

#include <string>

#include "sample_records.hpp"

using namespace rdmakit;

// ---------------------------------------------------------------------------------------
// ibv_*_pingpong record

TEST_CASE("pingpong record: exact text for known endpoints") {
  // What rc_pingpong's "%04x:%06x:%06x:%s" with gid_to_wire_gid produces: the GID's
  // 16 bytes in network order as 32 lowercase hex digits.
  CHECK(wire::format_pingpong(sample_endpoint()) == "0011:00abcd:123456:00000000000000000000ffff0a000001");
  CHECK(wire::format_pingpong(other_endpoint()) == "0000:fedcba:000001:fe80000000000000020203fffe040506");
  CHECK(wire::format_pingpong(other_endpoint()).size() == 51);
  CHECK(wire::pingpong_record_size == 52);
  CHECK(wire::pingpong_ack.size() == 5);
  CHECK(wire::pingpong_ack[4] == '\0');
}

TEST_CASE("pingpong record: parse known strings") {
  const std::string rec = "0011:00abcd:123456:00000000000000000000ffff0a000001";
  endpoint ep = wire::parse_pingpong(rec, mtu::mtu_2048);
  CHECK(ep == sample_endpoint());
  std::string with_nul = rec + '\0';
  CHECK(wire::parse_pingpong(with_nul, mtu::mtu_2048) == sample_endpoint());
  // Upper-case hex (sscanf %x accepts it too).
  endpoint up = wire::parse_pingpong("0000:FEDCBA:000001:FE80000000000000020203FFFE040506");
  CHECK(up == other_endpoint());
  // Round trip.
  CHECK(wire::parse_pingpong(wire::format_pingpong(other_endpoint())) == other_endpoint());
}

TEST_CASE("pingpong record: malformed input is rejected with the reason") {
  const std::string good = "0011:00abcd:123456:00000000000000000000ffff0a000001";
  CHECK(error_of([] { wire::parse_pingpong("garbage"); }) == exchange_errc::malformed);
  CHECK(error_of([&] { wire::parse_pingpong(good.substr(0, 40)); }) == exchange_errc::malformed);
  std::string bad_gid = good;
  bad_gid[30] = 'g';
  CHECK(error_of([&] { wire::parse_pingpong(bad_gid); }) == exchange_errc::malformed);
  std::string bad_colon = good;
  bad_colon[11] = '-';
  CHECK(error_of([&] { wire::parse_pingpong(bad_colon); }) == exchange_errc::malformed);
  std::string bad_qpn = good;
  bad_qpn[6] = ' ';
  CHECK(error_of([&] { wire::parse_pingpong(bad_qpn); }) == exchange_errc::malformed);
  // The record's 52 bytes with something else where the NUL goes: said as it is, not as
  // "followed by 1 more bytes" (there may be none): a record that runs on is too long, any
  // other byte ends it wrongly.
  CHECK(error_of([&] { wire::parse_pingpong(good + 'x'); }) == exchange_errc::malformed);
  CHECK(error_of([&] { wire::parse_pingpong(good + '\n'); }) == exchange_errc::malformed);
  CHECK(last_error.find("ends with \"\\n\" where its NUL should be") != std::string::npos);
  CHECK(error_of([&] { wire::parse_pingpong(good + '0'); }) == exchange_errc::too_large);
  CHECK(last_error.find("longer than its 51 characters") != std::string::npos);
  CHECK(error_of([&] { wire::parse_pingpong(good + std::string("\0x", 2)); }) == exchange_errc::too_large);
  CHECK(error_of([&] { wire::parse_pingpong(good + "0123456789"); }) == exchange_errc::too_large);
  std::string rdmakit_frame = wire::encode(sample_endpoint()).substr(0, 52);
  CHECK(error_of([&] { wire::parse_pingpong(rdmakit_frame); }) == exchange_errc::wrong_format);
  endpoint wide = sample_endpoint();
  wide.qpn = 0x1000000;
  CHECK(error_of([&] { wire::format_pingpong(wide); }) == exchange_errc::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// rdmakit record

TEST_CASE("pingpong record: its first 12 bytes tell it from another program's") {
  CHECK_NOTHROW(wire::check_pingpong_lead("0001:00abcd:"));
  CHECK(error_of([] { wire::check_pingpong_lead("GET / HTTP/1"); }) == exchange_errc::malformed);
  CHECK(error_of([] { wire::check_pingpong_lead("rdmakit/01 0"); }) == exchange_errc::wrong_format);
}

TEST_CASE("rdmakit record: exact text and round trip") {
  const std::string frame = wire::encode(sample_endpoint());
  CHECK(frame ==
        "rdmakit/01 0083\n"
        "lid=0x0011\nqpn=0x00abcd\npsn=0x123456\ngid=00000000000000000000ffff0a000001\nmtu=2048\n");
  CHECK(wire::parse_header(std::string_view(frame).substr(0, 16)) == frame.size() - 16);
  CHECK(wire::decode_payload(std::string_view(frame).substr(16)) == connection_info(sample_endpoint()));

  connection_info with_region(other_endpoint(), region_descriptor{0x7f0012345678, 0xdeadbeef, 1u << 20,
                                                                  access::remote_write | access::remote_read});
  const std::string f2 = wire::encode(with_region);
  CHECK(f2.find("addr=0x00007f0012345678\nrkey=0xdeadbeef\nlen=1048576\naccess=0x6\n") != std::string::npos);
  auto back = wire::decode_payload(std::string_view(f2).substr(16));
  CHECK(back == with_region);
  REQUIRE(back.region);
  CHECK(back.region->rkey == 0xdeadbeef);
  // Typed again on the receiving side, rights checked.
  auto w = back.region->as<access::remote_write>();
  CHECK(w.addr() == 0x7f0012345678);
  CHECK(w.rkey() == 0xdeadbeef);
  CHECK(w.length() == 1u << 20);
  CHECK(error_of([&] { (void)back.region->as<access::remote_atomic>(); }) == exchange_errc::invalid_argument);
  CHECK(last_error.find("register it with those rights on the peer") != std::string::npos);
  CHECK(last_error.find("local") == std::string::npos);  // the peer's registration is at fault, not a local argument
  // A range running past 2^64, built in memory (the wire decoder refuses it already): its
  // sub-ranges wrapped to address 0 (an audit). Up to the last byte is a range.
  const region_descriptor wraps{~std::uint64_t{0} - 15, 1, 17, access::remote_write};
  CHECK(error_of([&] { (void)wraps.as<access::remote_write>(); }) == exchange_errc::invalid_argument);
  CHECK(last_error.find("runs past the end of the address space") != std::string::npos);
  CHECK(region_descriptor{~std::uint64_t{0} - 15, 1, 16, access::remote_write}.as<access::remote_write>().length() == 16);
  // From a typed descriptor (what memory_region::remote() returns).
  auto typed = remote_region<access::remote_read>::unchecked(0x1000, 7, 64);
  region_descriptor rd = typed;
  CHECK(rd.rights == access::remote_read);
  CHECK(rd.length == 64);
  CHECK(wire::frame_header(0) == "rdmakit/01 0000\n");
}

TEST_CASE("rdmakit record: a UD endpoint's Q_Key travels (omitted when it is the default)") {
  endpoint ud_ep = sample_endpoint();
  ud_ep.qkey = 0x2222beef;
  const std::string frame = wire::encode(ud_ep);
  CHECK(frame.find("qkey=0x2222beef\n") != std::string::npos);
  CHECK(wire::decode_payload(std::string_view(frame).substr(16)).ep.qkey == 0x2222beefu);
  CHECK(wire::encode(sample_endpoint()).find("qkey") == std::string::npos);  // v1 peers see what they always saw
  CHECK(wire::decode_payload("lid=0\nqpn=1\npsn=2\ngid=00000000000000000000000000000000\nmtu=1024\n").ep.qkey ==
        default_qkey);
}

TEST_CASE("rdmakit record: malformed, oversized and foreign input is rejected") {
  CHECK(error_of([] { wire::parse_header("hello, world!!!\n"); }) == exchange_errc::malformed);
  CHECK(error_of([] { wire::parse_header("rdmakit/01 12a4\n"); }) == exchange_errc::malformed);
  CHECK(error_of([] { wire::parse_header("rdmakit/02 0080\n"); }) == exchange_errc::version_mismatch);
  CHECK(error_of([] { wire::parse_header("rdmakit/01 5000\n"); }) == exchange_errc::too_large);
  CHECK(error_of([] { wire::parse_header("0011:00abcd:1234"); }) == exchange_errc::wrong_format);

  const std::string base = "lid=0x0011\nqpn=0x00abcd\npsn=0x123456\ngid=00000000000000000000ffff0a000001\nmtu=2048\n";
  CHECK(wire::decode_payload(base + "future_key=42\n").ep == sample_endpoint());  // unknown keys: ignored
  CHECK(error_of([&] { wire::decode_payload(base.substr(0, base.size() - 1)); }) == exchange_errc::malformed);
  CHECK(error_of([&] { wire::decode_payload(base + "qpn=0x1\n"); }) == exchange_errc::malformed);
  CHECK(error_of([&] { wire::decode_payload(base + "addr=0x1000\n"); }) == exchange_errc::malformed);
  CHECK(error_of([&] { wire::decode_payload(base + "addr=0x1000\nrkey=0x1\nlen=8\naccess=0x1\n"); }) ==
        exchange_errc::malformed);
  CHECK(wire::decode_payload(base + "addr=0x1000\nrkey=0x1\nlen=8\naccess=0x8\n").region->rights ==
        access::remote_atomic);
  // A region that would run past the end of the address space (addr + len wraps).
  CHECK(error_of([&] {
          wire::decode_payload(base + "addr=0xfffffffffffff000\nrkey=0x1\nlen=8192\naccess=0x2\n");
        }) == exchange_errc::malformed);
  CHECK(wire::decode_payload(base + "addr=0xfffffffffffff000\nrkey=0x1\nlen=4096\naccess=0x2\n").region->length ==
        4096);
  // A decimal number with a leading 0 was read as decimal, where a peer using C's
  // strtoul(…, 0) means octal ("qpn=010": 8, not 10): refused, naming why.
  const std::string tail = "psn=0x1\ngid=00000000000000000000ffff0a000001\n";
  CHECK(error_of([&] { wire::decode_payload("lid=0x1\nqpn=010\n" + tail + "mtu=1024\n"); }) ==
        exchange_errc::malformed);
  CHECK(last_error.find("leading 0") != std::string::npos);
  CHECK(error_of([&] { wire::decode_payload("lid=0x1\nqpn=0x10\n" + tail + "mtu=01024\n"); }) ==
        exchange_errc::malformed);
  CHECK(wire::decode_payload("lid=0\nqpn=0x010\n" + tail + "mtu=1024\n").ep.qpn == 16);  // hex may pad
  CHECK(error_of([&] { wire::decode_payload(base + "no equals sign\n"); }) == exchange_errc::malformed);
  CHECK(last_error.find("\"no equals sign\"") != std::string::npos);
  // Windows line endings: "lid=0\r" was blamed on a leading 0 (an audit).
  CHECK(error_of([&] { wire::decode_payload("lid=0\r\nqpn=0x10\r\n" + tail + "mtu=1024\n"); }) ==
        exchange_errc::malformed);
  CHECK(last_error.find("CRLF") != std::string::npos);
  CHECK(last_error.find("leading 0") == std::string::npos);
  // An empty line has no text to show: the message says what it is.
  CHECK(error_of([&] { wire::decode_payload(base + "\n"); }) == exchange_errc::malformed);
  CHECK(last_error.find("empty line") != std::string::npos);
  CHECK(error_of([] { wire::decode_payload("lid=0x1\nqpn=0x1\npsn=0x1\nmtu=1024\n"); }) == exchange_errc::malformed);
  CHECK(error_of([] {
          wire::decode_payload("lid=0x1\nqpn=0x1000000\npsn=0x1\ngid=00000000000000000000ffff0a000001\nmtu=1024\n");
        }) == exchange_errc::malformed);
  CHECK(error_of([] {
          wire::decode_payload("lid=0x1\nqpn=0x1\npsn=0x1\ngid=00000000000000000000ffff0a000001\nmtu=1000\n");
        }) == exchange_errc::malformed);
  CHECK(error_of([] {
          wire::decode_payload("lid=0x1\nqpn=0x1\npsn=0x1\ngid=0000000000000000000ffff0a000001\nmtu=1024\n");
        }) == exchange_errc::malformed);  // a 31-digit GID
}

TEST_CASE("describe prints the ibv_*_pingpong style line") {
  CHECK(wire::describe(sample_endpoint()) == "LID 0x0011, QPN 0x00abcd, PSN 0x123456, GID ::ffff:10.0.0.1");
}

// encode sent what the peer's decode refuses (found by fuzzing): the peer was blamed for
// a malformed record the sender made.
TEST_CASE("rdmakit record: encode refuses a region the peer would refuse") {
  connection_info past_end(sample_endpoint(), region_descriptor{0xffffffffffff0000, 1, 0x20000, access::remote_write});
  CHECK_THROWS_WITH_AS((void)wire::encode(past_end), doctest::Contains("past the end of the address space"),
                       exchange_error);
  region_descriptor local_bits{0x1000, 1, 64, access::remote_write};
  local_bits.rights = access::local_write | access::remote_write;
  CHECK_THROWS_WITH_AS((void)wire::encode(connection_info(sample_endpoint(), local_bits)),
                       doctest::Contains("other than remote"), exchange_error);
  CHECK_NOTHROW((void)wire::encode(
      connection_info(sample_endpoint(), region_descriptor{0xffffffffffff0000, 1, 0x10000, access::remote_write})));
}
