// UC (docs/semantics.md#uc and the UC rows of #fault-statuses): no ACKs, silent drops.
#include "harness.hpp"

using namespace conf;

CONFORMANCE_CASE("uc: SEND with no receive posted -> sender SUCCESS, receiver nothing") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  src.fill(6);
  REQUIRE(fx.post_send(a, 1, opcode::send, {src.sge(0, 40)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  REQUIRE(fx.post_recv(b, 7, {dst.sge(0, 256)}) == 0);
  CHECK(fx.drain(b.recv_cq).empty());
  CHECK(B::query_qp_state(b.qp) == qp_state::rts);
  // The next message takes the receive: the first one was dropped, not held.
  REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(0, 30)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.wr_id == 7);
  CHECK(r.byte_len == 30);
}

CONFORMANCE_CASE("uc: RDMA_WRITE_WITH_IMM with no receive posted is dropped silently") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  src.fill(6);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write_with_imm, src.sge(0, 40), dst.addr(0), dst.rkey(),
                       send_flags::signaled, to_be32(5)) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  CHECK(fx.drain(b.recv_cq).empty());
  CHECK(B::query_qp_state(b.qp) == qp_state::rts);
}

// Only the last packet carries the immediate and looks for a receive: the ones before it
// (path MTU 1024) were written when they came.
CONFORMANCE_CASE("uc: RDMA_WRITE_WITH_IMM over three packets with no receive: the first two are written") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& src = fx.make_buffer(4096);
  auto& dst = fx.make_buffer(4096);
  src.fill(6);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write_with_imm, src.sge(0, 2500), dst.addr(0), dst.rkey(),
                       send_flags::signaled, to_be32(5)) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  CHECK(fx.drain(b.recv_cq).empty());
  CHECK(dst.holds(6, 0, 2048));
  CHECK(dst.zero(2048, 4096 - 2048));
  CHECK(B::query_qp_state(b.qp) == qp_state::rts);
}

CONFORMANCE_CASE("uc: an access violation (bad rkey) is dropped silently and the QP keeps working") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  src.fill(6);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 40), dst.addr(0), dst.rkey() ^ 0x3300) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  CHECK(dst.u64(0) == 0);
  CHECK(B::query_qp_state(b.qp) == qp_state::rts);
  CHECK(B::query_qp_state(a.qp) == qp_state::rts);
  REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, src.sge(0, 40), dst.addr(0), dst.rkey()) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  CHECK(dst.holds(6, 0, 40));
}

// A UC WRITE_WITH_IMM whose rkey the responder refuses, with a receive posted: the spec
// drops it silently (UC has no NAK), the receive stays posted. rxe does so for a QP's own
// receive queue, but takes a receive of a shared receive queue first and completes it
// REM_ACCESS_ERR (seen in the guest by a differential fuzzer); the QP stays in RTS.
CONFORMANCE_CASE("uc: RDMA_WRITE_WITH_IMM with a bad rkey and a receive posted (own queue, SRQ)") {
  for (const bool on_srq : {false, true}) {
    CAPTURE(on_srq);
    fixture<B> fx;
    const auto want = expected(ids::uc_write_imm_bad_rkey, backend_traits<B>::profile());
    srq_attr sa{.max_wr = 4, .max_sge = 1};
    auto srq = on_srq ? fx.make_srq(sa) : typename B::srq{};
    auto a = fx.make_qp({.type = qp_type::uc});
    auto b = on_srq ? fx.make_qp_on_srq(srq, {.type = qp_type::uc}) : fx.make_qp({.type = qp_type::uc});
    fx.connect(a, b);
    auto& src = fx.make_buffer(256);
    auto& dst = fx.make_buffer(256);
    src.fill(6);
    REQUIRE((on_srq ? fx.post_srq_recv(srq, 10, {dst.sge(128, 64)}) : fx.post_recv(b, 10, {dst.sge(128, 64)})) == 0);
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write_with_imm, src.sge(0, 40), dst.addr(0), dst.rkey() ^ 0x3300,
                         send_flags::signaled, to_be32(5)) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    fx.settle();
    CHECK(dst.u64(0) == 0);
    const auto got = fx.drain(b.recv_cq);
    const bool taken = on_srq && !want.resp.is_nothing();
    if (!taken) {
      CHECK(got.empty());
    } else {
      REQUIRE(got.size() == 1);
      CHECK(got[0].wr_id == 10);
      CHECK(want.resp.allows(got[0].status));
    }
    CHECK(B::query_qp_state(b.qp) == qp_state::rts);
    // The next message takes the receive if it is still there, else finds none (dropped).
    REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write_with_imm, src.sge(0, 40), dst.addr(0), dst.rkey(),
                         send_flags::signaled, to_be32(6)) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    fx.settle();
    CHECK(fx.drain(b.recv_cq).size() == (taken ? 0u : 1u));
  }
}

CONFORMANCE_CASE("uc: a multi-packet SEND (several MTUs) arrives whole") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  const std::uint32_t len = 5 * mtu_bytes(mtu::mtu_1024) + 17;
  auto& src = fx.make_buffer(len);
  auto& dst = fx.make_buffer(len);
  src.fill(29);
  REQUIRE(fx.post_recv(b, 1, {dst.whole()}) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {src.whole()}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == len);
  CHECK(dst.holds(29, 0, len));
}
