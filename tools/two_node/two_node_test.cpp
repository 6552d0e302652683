// rdmakit-two-node's scenarios on the mock, both roles in this process, under both
// device profiles (the expectations that differ come from the deviation table).
#include "two_node_mock.hpp"

#include <doctest/doctest.h>

#include <set>

using namespace rdmakit;
using namespace rdmakit_tools;

namespace {

void all_pass(mock::device_profile p) {
  two_node_options o;
  const auto r = run_two_node_on_mock(o, p);
  const auto names = two_node_scenarios();
  REQUIRE(r.server.size() == names.size());
  REQUIRE(r.client.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(r.server[i].line());
    CAPTURE(r.client[i].line());
    CHECK(r.server[i].name == names[i].name);
    CHECK(r.server[i].pass);
    CHECK(r.client[i].pass);
  }
}

/// Each side with its own options (profile included) on one mock fabric, spec profile.
two_node_pair run_sides(const two_node_options& server, const two_node_options& client,
                        std::chrono::milliseconds exchange_timeout = std::chrono::milliseconds{60'000}) {
  mock::fabric fab(mock::fabric_config{});
  exchange_options xo;
  xo.timeout = exchange_timeout;
  two_node_pair out;
  const auto lb = run_loopback(0, xo, [&](bool is_server, const exchange_fn& ex) {
    two_node_options mine = is_server ? server : client;
    mine.server = is_server;
    (is_server ? out.server : out.client) = run_two_node<backends::mock, yielding_poll<>>(
        mine, ex, device<backends::mock>(fab, is_server ? "mock0" : "mock1"), [](const two_node_result&) {});
  });
  INFO(lb.failure());
  REQUIRE(lb.ok());
  return out;
}

}  // namespace

TEST_CASE("two-node: the scenario list covers every opcode of each transport, RNR, retry and a bad rkey") {
  std::set<std::string> names;
  for (const auto& s : two_node_scenarios()) CHECK(names.insert(s.name).second);
  CHECK(names.size() == 30);
  for (const char* n : {"rc.send", "rc.send_imm", "rc.write", "rc.write_imm", "rc.read", "rc.cmp_swap", "rc.fetch_add",
                        "rc.send.multi_packet", "rc.read.multi_packet", "rc.rnr.no_retry", "rc.rnr.recv_posted_later",
                        "rc.retry.peer_destroyed", "rc.retry.peer_in_err", "rc.retry.peer_in_reset", "rc.bad_rkey.write", "uc.send",
                        "uc.write_imm.multi_packet", "ud.send", "ud.send_imm"})
    CHECK_MESSAGE(names.count(n) == 1, n);
  CHECK(two_node_large > 1024 * 9);  // ten packets at the path MTU the scenarios connect with
}

TEST_CASE("two-node: every scenario passes on the mock, spec profile") { all_pass(mock::device_profile::spec); }

TEST_CASE("two-node: every scenario passes on the mock, rxe profile") { all_pass(mock::device_profile::rxe); }

TEST_CASE("two-node: a lost message fails its scenario on both sides, and the run goes on") {
  two_node_options o;
  o.only = "ud.send";  // ud.send and ud.send_imm
  o.wait = std::chrono::milliseconds{300};
  const auto r = run_two_node_on_mock(o, mock::device_profile::rxe, [](mock::fabric& f) {
    f.inject({.kind = mock::fault_kind::drop, .count = 1});  // the first datagram only
  });
  REQUIRE(r.server.size() == 2);
  REQUIRE(r.client.size() == 2);
  CHECK(!r.server[0].pass);
  CHECK(r.server[0].detail.find("no receive completion") != std::string::npos);
  CHECK(!r.client[0].pass);
  CHECK(r.client[0].detail.find("the server failed") != std::string::npos);
  CHECK(r.server[1].pass);
  CHECK(r.client[1].pass);
}

TEST_CASE("two-node: a wrong expectation in the deviation table's profile is reported") {
  // No rows for this profile: the scenarios that read the table fail, naming the row.
  two_node_options o;
  o.only = "rc.send_imm";
  o.profile = "no-such-profile";
  const auto r = run_sides(o, o);
  REQUIRE(r.server.size() == 2);
  CHECK(!r.server[0].pass);
  CHECK(r.server[0].detail.find("no deviation row recv.grh_flag.rc_uc") != std::string::npos);
}

TEST_CASE("two-node: sides that run different scenarios stop at the first one, neither hangs") {
  two_node_options server, client;
  server.only = "rc.write";
  client.only = "rc.send";
  const auto r = run_sides(server, client, std::chrono::milliseconds{2'000});
  REQUIRE(r.server.size() == 1);
  REQUIRE(r.client.size() == 1);
  CHECK(!r.server[0].pass);
  CHECK(r.server[0].detail.find("stopped: the peer is at step") != std::string::npos);
  CHECK(!r.client[0].pass);
  CHECK(r.client[0].detail.find("stopped:") != std::string::npos);
}
