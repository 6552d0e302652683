// rdmakit-faults' scenario on the mock under the rxe profile, with the fault rates
// tests/rxe/netem.sh puts on the real link (docs/faults.md compares the two).
#include "faults_mock.hpp"

#include <doctest/doctest.h>

using namespace rdmakit;
using namespace rdmakit_tools;

namespace {

faults_options opts(fault_op op = fault_op::send, std::uint32_t size = 4096) {
  faults_options o;
  o.op = op;
  o.count = 200;
  o.size = size;
  o.grace = std::chrono::milliseconds{20};  // the mock delivers within the post or the poll
  // RC: the mock's clock follows the wall clock while two threads share a fabric, so the
  // ACK timeout is wall-clock time too. rdmakit-faults' 17 ms: with 1 ms, seven tries in a
  // row outran a server thread kept off the CPU (an ASan run on a loaded machine ended
  // in RETRY_EXC_ERR at 10 % loss).
  o.timeout = 12;
  return o;
}

}  // namespace

TEST_CASE("faults: payload check tells intact, partial and misplaced messages apart") {
  std::vector<std::byte> m(4096);
  fill_message(m.data(), 7, 4096);
  CHECK(check_message(m.data(), 4096) == std::optional<std::uint32_t>(7));
  m[2000] = std::byte{0};  // a lost middle packet leaves the old bytes
  CHECK(!check_message(m.data(), 4096));
  fill_message(m.data(), 7, 4096);
  CHECK(!check_message(m.data(), 1024));  // a message of another size
}

TEST_CASE("faults: RC delivers every message exactly once, in order, at 0, 1 and 10 % loss") {
  for (double p : {0.0, 0.01, 0.10})
    for (fault_op op : {fault_op::send, fault_op::write_imm}) {
      CAPTURE(p);
      CAPTURE(to_string(op));
      const auto r = run_faults_on_mock<rc>(opts(op), {.loss = p, .seed = 1});
      CHECK(r.client.posted == 200);
      CHECK(r.client.completions("success") == 200);
      CHECK(r.server.exactly_once_in_order(200));
    }
}

TEST_CASE("faults: the server waits for the client's end as long as the client may take, not the exchange's timeout") {
  // 67 ms per try at 10 % loss: the client needs longer than the 300 ms exchange timeout.
  // The server gave up at that timeout, saying no client had connected.
  faults_options o = opts();
  o.timeout = 14;
  exchange_options xo;
  xo.timeout = std::chrono::milliseconds{300};
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_faults_on_mock<rc>(o, {.loss = 0.10, .seed = 1}, xo);
  CHECK(std::chrono::steady_clock::now() - start > xo.timeout);  // else the case tests nothing
  CHECK(r.client.completions("success") == 200);
  CHECK(r.server.exactly_once_in_order(200));
}

TEST_CASE("faults: RC at 100 % loss ends in RETRY_EXC_ERR, the rest flushed") {
  const auto r = run_faults_on_mock<rc>(opts(), {.loss = 1.0, .seed = 1});
  CHECK(r.client.first_error == "retry_exc_err");
  CHECK(r.client.completions("success") == 0);
  CHECK(r.client.completions("retry_exc_err") == 1);
  CHECK(r.client.completions("wr_flush_err") == r.client.posted - 1);
  CHECK(r.server.delivered == 0);
  CHECK(r.server.partial == 0);
}

TEST_CASE("faults: UC loses whole messages, never completes a partial one") {
  for (double p : {0.01, 0.10, 1.0})
    for (fault_op op : {fault_op::send, fault_op::write_imm}) {
      CAPTURE(p);
      CAPTURE(to_string(op));
      const auto r = run_faults_on_mock<uc>(opts(op), {.loss = p, .seed = 1});
      CHECK(r.client.completions("success") == 200);  // UC sends complete locally
      CHECK(r.server.partial == 0);
      CHECK(r.server.duplicates == 0);
      CHECK(r.server.in_order);
      CHECK(r.server.delivered + r.server.missing == 200);
      if (p == 1.0) CHECK(r.server.delivered == 0);
      else CHECK(r.server.missing > 0);
    }
}

TEST_CASE("faults: UD drops datagrams, nothing else") {
  for (double p : {0.01, 0.10, 1.0}) {
    CAPTURE(p);
    const auto r = run_faults_on_mock<ud>(opts(fault_op::send, 1024), {.loss = p, .seed = 1});
    CHECK(r.client.completions("success") == 200);
    CHECK(r.server.partial == 0);
    CHECK(r.server.duplicates == 0);
    CHECK(r.server.delivered + r.server.missing == 200);
    if (p == 1.0) CHECK(r.server.delivered == 0);
    else CHECK(r.server.missing > 0);
  }
}

TEST_CASE("faults: loss is per packet, so a 4-packet UC message is lost about 4 times as often as a 1-packet one") {
  // 10 % per packet: a 4096-byte message at path MTU 1024 survives with 0.9^4 = 66 %,
  // as on a link with netem (docs/faults.md); one per message would lose only 10 %.
  const auto four = run_faults_on_mock<uc>(opts(fault_op::send, 4096), {.loss = 0.10, .seed = 1});
  const auto one = run_faults_on_mock<uc>(opts(fault_op::send, 1024), {.loss = 0.10, .seed = 1});
  CHECK(four.server.missing > 45);  // expected 69 of 200 (sd ~7)
  CHECK(four.server.missing < 95);
  CHECK(one.server.missing > 8);    // expected 20 (sd ~4)
  CHECK(one.server.missing < 35);
  CHECK(four.server.partial == 0);
}

TEST_CASE("faults: RC under 10 % duplication or reordering delivers every message exactly once, in order") {
  const auto dup = run_faults_on_mock<rc>(opts(), {.dup = 0.10, .seed = 1});
  CHECK(dup.client.completions("success") == 200);
  CHECK(dup.server.exactly_once_in_order(200));
  const auto reorder = run_faults_on_mock<rc>(opts(), {.reorder = 0.10, .seed = 1});
  CHECK(reorder.client.completions("success") == 200);
  CHECK(reorder.server.exactly_once_in_order(200));
}

TEST_CASE("faults: a duplicated 1-packet UC message is delivered twice, as rxe does") {
  const auto r = run_faults_on_mock<uc>(opts(fault_op::send, 1024), {.dup = 0.10, .seed = 1});
  CHECK(r.server.duplicates > 5);
  CHECK(r.server.partial == 0);
  CHECK(r.server.delivered + r.server.missing == 200);
}
