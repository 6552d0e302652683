// device_peer: a server on -p 0 says the port the kernel picked, and a client given that
// port completes an exchange with it (the tools open their device before this, so a
// wrong -d never gets as far as the line: tools/meson.build *-device-before-listening).
#include "device_peer.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>

using namespace rdmakit;
using namespace rdmakit_tools;
using namespace std::chrono_literals;

TEST_CASE("a server on port 0 prints the port a client then reaches") {
  std::FILE* said = std::tmpfile();
  REQUIRE(said != nullptr);
  exchange_options xo;
  xo.timeout = 5000ms;
  xo.accept_timeout = 7000ms;
  device_peer server("tool", "", 0, xo, said);
  CHECK(server.server());

  std::rewind(said);
  char line[200] = {};
  REQUIRE(std::fgets(line, sizeof line, said) != nullptr);
  std::fclose(said);
  unsigned port = 0;
  char rest[100] = {};
  REQUIRE(std::sscanf(line, "tool: server on port %u, %99[^\n]", &port, rest) == 2);
  CHECK(port != 0);
  CHECK(std::string(rest) == "waiting for a client (up to 7 s)");

  const endpoint server_ep{.qpn = 0x11}, client_ep{.qpn = 0x22};
  auto served = std::async(std::launch::async, [&] { return server.exchange()(server_ep, {}); });
  device_peer client("tool", "127.0.0.1", static_cast<std::uint16_t>(port), xo);
  CHECK_FALSE(client.server());
  CHECK(client.exchange()(client_ep, {}).ep.qpn == 0x11);
  CHECK(served.get().ep.qpn == 0x22);
}
