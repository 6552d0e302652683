// Selective signaling (docs/semantics.md#sq-credits), post lists and RC ordering (#rc-ordering).
#include "deviations.hpp"
#include "harness.hpp"

using namespace conf;

CONFORMANCE_CASE("signaling: with sq_sig_all = 0 only SIGNALED WRs produce a CQE") {
  fixture<B> fx;
  auto a = fx.make_qp({.sig_all = false});
  auto b = fx.make_qp();
  fx.connect(a, b);
  auto& buf = fx.make_buffer(256);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 64)}}, {2, {buf.sge(0, 64)}}, {3, {buf.sge(0, 64)}}}).rc == 0);
  auto r = fx.post_send_list(a, {{.wr_id = 10, .sg = {buf.sge(64, 8)}, .flags = send_flags::none},
                                 {.wr_id = 11, .sg = {buf.sge(64, 8)}, .flags = send_flags::none},
                                 {.wr_id = 12, .sg = {buf.sge(64, 8)}, .flags = send_flags::signaled}});
  REQUIRE(r.rc == 0);
  CHECK(fx.poll(b.recv_cq, 3, "three receives").size() == 3);
  auto s = fx.poll(a.send_cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].wr_id == 12);
  CHECK(fx.drain(a.send_cq, 5).empty());
}

CONFORMANCE_CASE("signaling: with sq_sig_all = 1 every WR produces a CQE, SIGNALED or not") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& buf = fx.make_buffer(256);
  auto& remote = fx.make_buffer(256);
  auto r = fx.post_send_list(a, {{.wr_id = 1, .op = opcode::rdma_write, .sg = {buf.sge(0, 8)}, .flags = send_flags::none,
                                  .remote_addr = remote.addr(0), .rkey = remote.rkey()},
                                 {.wr_id = 2, .op = opcode::rdma_write, .sg = {buf.sge(0, 8)}, .flags = send_flags::none,
                                  .remote_addr = remote.addr(8), .rkey = remote.rkey()}});
  REQUIRE(r.rc == 0);
  auto s = fx.poll(a.send_cq, 2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].wr_id == 1);
  CHECK(s[1].wr_id == 2);
}

CONFORMANCE_CASE("signaling: an unsignaled WR that fails still produces a CQE") {
  fixture<B> fx;
  auto a = fx.make_qp({.sig_all = false});
  auto b = fx.make_qp();
  fx.connect(a, b);
  auto& buf = fx.make_buffer(256);
  REQUIRE(fx.post_rdma(a, 5, opcode::rdma_write, buf.sge(0, 8), buf.addr(64), buf.rkey() ^ 0x1100,
                       send_flags::none) == 0);
  auto c = fx.poll_one(a.send_cq, "the error completion of an unsignaled WR");
  CHECK(c.wr_id == 5);
  CHECK(c.status == wc_status::rem_access_err);
}

CONFORMANCE_CASE("signaling: unsignaled WRs keep their SQ slots until a signaled one is polled") {
  fixture<B> fx;
  const auto want = expected(ids::slot_release, backend_traits<B>::profile());
  auto a = fx.make_qp({.caps = {4, 4, 1, 1, 0}, .sig_all = false});
  auto b = fx.make_qp({.caps = {4, 64, 1, 1, 0}, .cqe = 128});
  fx.connect(a, b);
  const std::uint32_t cap = a.caps.max_send_wr;
  REQUIRE(cap <= 30);
  auto& buf = fx.make_buffer(64);
  for (std::uint32_t i = 0; i < 2 * cap + 1; ++i) REQUIRE(fx.post_recv(b, 1000 + i, {buf.sge(0, 64)}) == 0);
  // A full SQ's worth closed by a signaled WR: polling it frees every slot.
  for (std::uint32_t i = 0; i < cap; ++i)
    REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}, i + 1 == cap ? send_flags::signaled : send_flags::none) ==
            0);
  auto s = fx.poll(a.send_cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].wr_id == cap - 1);
  CHECK(fx.poll(b.recv_cq, cap).size() == cap);
  // A full SQ's worth of unsignaled WRs: all complete, none is ever polled.
  for (std::uint32_t i = 0; i < cap; ++i)
    CHECK(fx.post_send(a, 100 + i, opcode::send, {buf.sge(0, 8)}, send_flags::none) == 0);
  CHECK(fx.poll(b.recv_cq, cap).size() == cap);
  fx.settle();
  CHECK(fx.drain(a.send_cq, 3).empty());
  CHECK(fx.post_send(a, 200, opcode::send, {buf.sge(0, 8)}, send_flags::signaled) == want.post_errno);
}

CONFORMANCE_CASE("signaling: a list of mixed WRs in one post completes in SQ order") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(1024);
  auto& remote = fx.make_buffer(1024);
  auto& dst = fx.make_buffer(1024);
  src.fill(40);
  remote.fill(50, 512, 256);
  REQUIRE(fx.post_recv_list(b, {{1, {dst.sge(0, 256)}}, {2, {dst.sge(256, 256)}}}).rc == 0);
  auto r = fx.post_send_list(
      a, {{.wr_id = 10, .op = opcode::send, .sg = {src.sge(0, 100)}},
          {.wr_id = 11, .op = opcode::rdma_write, .sg = {src.sge(100, 200)}, .remote_addr = remote.addr(0),
           .rkey = remote.rkey()},
          {.wr_id = 12, .op = opcode::send_with_imm, .sg = {src.sge(300, 50)}, .imm_be = to_be32(77)},
          {.wr_id = 13, .op = opcode::rdma_read, .sg = {src.sge(512, 256)}, .remote_addr = remote.addr(512),
           .rkey = remote.rkey()}});
  REQUIRE(r.rc == 0);
  auto s = fx.poll(a.send_cq, 4);
  REQUIRE(s.size() == 4);
  const wc_opcode ops[4] = {wc_opcode::send, wc_opcode::rdma_write, wc_opcode::send, wc_opcode::rdma_read};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(s[i].wr_id == std::uint64_t(10 + i));
    CHECK(s[i].status == wc_status::success);
    CHECK(s[i].op == ops[i]);
  }
  auto rr = fx.poll(b.recv_cq, 2);
  REQUIRE(rr.size() == 2);
  CHECK(rr[0].wr_id == 1);
  CHECK(rr[0].byte_len == 100);
  CHECK(rr[1].wr_id == 2);
  CHECK(rr[1].byte_len == 50);
  CHECK(from_be32(rr[1].imm) == 77);
  CHECK(remote.holds(40, 0, 200, 100));
  CHECK(src.holds(50, 512, 256));
}

CONFORMANCE_CASE("ordering: an RC WRITE then a READ of the same bytes sees the write") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& local = fx.make_buffer(4096);
  auto& remote = fx.make_buffer(4096);
  local.fill(61, 0, 2048);
  auto r = fx.post_send_list(a, {{.wr_id = 1, .op = opcode::rdma_write, .sg = {local.sge(0, 2048)},
                                  .flags = send_flags::none, .remote_addr = remote.addr(0), .rkey = remote.rkey()},
                                 {.wr_id = 2, .op = opcode::rdma_read, .sg = {local.sge(2048, 2048)},
                                  .remote_addr = remote.addr(0), .rkey = remote.rkey()}});
  REQUIRE(r.rc == 0);
  auto s = fx.poll(a.send_cq, 2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].wr_id == 1);
  CHECK(s[1].wr_id == 2);
  CHECK(local.holds(61, 2048, 2048));
}

CONFORMANCE_CASE("ordering: a FENCEd WRITE waits for an earlier READ of the same bytes") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& local = fx.make_buffer(4096);
  auto& remote = fx.make_buffer(4096);
  remote.fill(71, 0, 1024);
  local.fill(81, 0, 1024);
  auto r = fx.post_send_list(a, {{.wr_id = 1, .op = opcode::rdma_read, .sg = {local.sge(2048, 1024)},
                                  .remote_addr = remote.addr(0), .rkey = remote.rkey()},
                                 {.wr_id = 2, .op = opcode::rdma_write, .sg = {local.sge(0, 1024)},
                                  .flags = send_flags::signaled | send_flags::fence, .remote_addr = remote.addr(0),
                                  .rkey = remote.rkey()}});
  REQUIRE(r.rc == 0);
  auto s = fx.poll(a.send_cq, 2);
  REQUIRE(s.size() == 2);
  CHECK(local.holds(71, 2048, 1024));  // the READ saw the old bytes
  CHECK(remote.holds(81, 0, 1024));    // then the WRITE landed
}

CONFORMANCE_CASE("ordering: RC SENDs are received in posting order") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.caps = {32, 32, 1, 1, 0}});
  auto& buf = fx.make_buffer(4096);
  std::vector<typename fixture<B>::recv_spec> rl;
  std::vector<typename fixture<B>::send_spec> sl;
  for (std::uint32_t i = 0; i < 16; ++i) {
    rl.push_back({i, {buf.sge(2048 + i * 64, 64)}});
    sl.push_back({.wr_id = 100 + i, .sg = {buf.sge(0, i + 1)}});
  }
  REQUIRE(fx.post_recv_list(b, rl).rc == 0);
  REQUIRE(fx.post_send_list(a, sl).rc == 0);
  auto s = fx.poll(a.send_cq, 16);
  auto rr = fx.poll(b.recv_cq, 16);
  REQUIRE(rr.size() == 16);
  for (std::uint32_t i = 0; i < 16; ++i) {
    CAPTURE(i);
    CHECK(s[i].wr_id == 100 + i);
    CHECK(rr[i].wr_id == i);
    CHECK(rr[i].byte_len == i + 1);
  }
}
