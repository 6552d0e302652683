// rdmakit-rping's protocol (rping.hpp) on the mock fabric's connection manager, against
// a client that breaks it: the server refuses what it cannot use, saying what, and never
// reads or writes outside its buffers.
#include "rping.hpp"

#include <rdmakit/backends/mock.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

using namespace rdmakit;
using namespace rdmakit_tools;
using namespace std::chrono_literals;
using B = backends::mock;

namespace {

/// Serves one client on mock0 with -S `size`; the client (on mock1) connects, advertises
/// `advertised` bytes of `fill` as its start buffer and sends nothing more. Returns what
/// the server threw ("" if nothing).
std::string serve_hostile(std::uint32_t size, std::uint32_t advertised, char fill) {
  mock::fabric fab;
  rping_options o;
  o.size = size;
  o.timeout = 1000ms;
  rping_side<B> srv(device<B>(fab, "mock0"), o);
  cm_listener<B> l(device<B>(fab, "mock0"), cm_address::parse("10.0.0.1", 7174));
  std::string err;
  auto server = std::async(std::launch::async, [&] {
    try {
      srv.serve(l, [] { return false; });
    } catch (const std::exception& e) {
      err = e.what();
    }
  });
  {
    device<B> dev(fab, "mock1");
    auto pd = dev.create_pd();
    auto cq = dev.create_cq(32);
    std::vector<char> mem(32 + advertised, fill);
    constexpr rdmakit::access rw = rping_side<B>::rw;
    auto mr = pd.register_memory<rw>(mem.data(), mem.size());
    auto c = cm_connect<rc>(pd, cq, qp_cap{16, 2, 1, 1, 0}, l.address(), {}, {},
                            [&](auto& qp) { REQUIRE(qp.post_recv(mr.local(0, 16), 1)); });
    rping_info{reinterpret_cast<std::uintptr_t>(mem.data() + 32), mr.rkey(), advertised}.write_to(mem.data() + 16);
    REQUIRE(c.qp().send(mr.local(16, 16), 2));
    server.wait();
    while (cq.poll([](const completion<B>&) {}) > 0) {
    }
  }
  return err;
}

}  // namespace

TEST_CASE("rping server: ping data without its NUL is refused, not read past the end of the buffer") {
  // -S 64 keeps 65 bytes for the data read: 65 'A's left strlen() running past them
  // (into whatever followed the buffer) to size the WRITE back.
  const std::string err = serve_hostile(64, 65, 'A');
  CHECK_MESSAGE(err.find("the client's ping data has no NUL in its 65 bytes") != std::string::npos, err);
}

TEST_CASE("rping server: more ping data than -S is refused") {
  const std::string err = serve_hostile(64, 200, 'A');
  CHECK_MESSAGE(err.find("the client advertised 200 bytes, more than -S 64") != std::string::npos, err);
}
