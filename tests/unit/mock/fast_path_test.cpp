// The mock's fast path (docs/mock.md, "Message rate"): what it keeps from one message
// to the next (reused ring slots, the peer QP, the route, the MRs of the last keys)
// must go stale exactly when the objects change, and a post delivered within the call
// must look the same as one that went through the wire queue.
#include "harness.hpp"

#include <rdmakit/backends/mock.hpp>
#include <rdmakit/backends/mock/ring.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace conf;
using B = rdmakit::backends::mock;
namespace rm = rdmakit::mock;
using fx_t = fixture<B>;

namespace {

// Nothing left behind by a fixture-owned cleanup: the test destroys these itself.
endpoint<B> own_qp(fx_t& fx, qp_type t, B::cq cq) {
  endpoint<B> e;
  e.type = t;
  e.send_cq = e.recv_cq = cq;
  e.caps = {16, 16, 1, 1, 0};
  e.qp = B::create_qp(fx.pd, cq, cq, t, e.caps, true);
  e.num = B::qp_num(e.qp);
  return e;
}

}  // namespace

TEST_CASE("fast path: slot_ring reuses popped slots and keeps the last popped one intact while it grows") {
  rm::detail::slot_ring<std::vector<int>, true> r;
  r.push_back() = {1, 2, 3};
  r.pop_front();
  auto& again = r.push_back();  // the next slot; after a wrap-around, an old one
  again.assign({4});
  for (int i = 0; i < 20; ++i) {  // steady state: the same slots over and over
    r.pop_front();
    r.push_back() = {4};
  }
  CHECK(r.size() == 1);
  CHECK(r.front() == std::vector<int>{4});

  // Popped, then used in place while enough is pushed to grow the ring several times.
  const std::vector<int>& popped = r.front();
  r.pop_front();
  for (int i = 0; i < 100; ++i) r.push_back() = {i};
  CHECK(popped == std::vector<int>{4});
  r.release_retired();
  CHECK(r.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(r[static_cast<std::size_t>(i)] == std::vector<int>{i});

  // The same when the ring had grown before the pop as well (slots retired, not released).
  for (int i = 100; i < 300; ++i) r.push_back() = {i};
  const std::vector<int>& first = r.front();
  r.pop_front();
  for (int i = 0; i < 1000; ++i) r.push_back() = {i};
  CHECK(first == std::vector<int>{0});
  r.release_retired();
  while (r.size() > 100) r.pop_front();
  r.remove_if([](const std::vector<int>& v) { return v[0] % 2 == 1; });
  CHECK(r.size() == 50);
  CHECK(r.front() == std::vector<int>{900});
  CHECK(r.back() == std::vector<int>{998});
}

TEST_CASE("fast path: an MR deregistered between two WRITEs is refused (the rkey cache goes stale)") {
  fx_t fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(64);
  std::vector<std::uint64_t> target(8);
  auto mr = B::reg_mr(fx.pd, target.data(), 64, acc::local_write | acc::remote_write);
  const auto raddr = reinterpret_cast<std::uintptr_t>(target.data());
  const std::uint32_t rkey = B::mr_rkey(mr);
  src.fill(7);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 64), raddr, rkey) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(std::memcmp(target.data(), src.data(), 64) == 0);

  REQUIRE(B::dereg_mr(mr) == 0);
  // The same memory again: a new MR (likely where the old one was allocated) under a
  // new key. The old key must not reach it.
  auto again = B::reg_mr(fx.pd, target.data(), 64, acc::local_write | acc::remote_write);
  CHECK(B::mr_rkey(again) != rkey);
  REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, src.sge(0, 64), raddr, rkey) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::rem_access_err);
  CHECK(B::dereg_mr(again) == 0);
}

TEST_CASE("fast path: an lkey deregistered between two posts fails the next WR (the lkey cache goes stale)") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& dst = fx.make_buffer(64);
  std::vector<std::uint64_t> source(8, 0x1111);
  auto mr = B::reg_mr(fx.pd, source.data(), 64, acc::local_write);
  const rdmakit::sge s{reinterpret_cast<std::uintptr_t>(source.data()), 64, B::mr_lkey(mr)};
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, s, dst.addr(0), dst.rkey()) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  REQUIRE(B::dereg_mr(mr) == 0);
  auto again = B::reg_mr(fx.pd, source.data(), 64, acc::local_write);  // same memory, new key
  REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, s, dst.addr(0), dst.rkey()) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::loc_prot_err);
  CHECK(B::dereg_mr(again) == 0);
}

TEST_CASE("fast path: a destroyed peer QP receives nothing more (the peer hint goes stale)") {
  fx_t fx;
  auto cq = fx.make_cq(64);
  auto a = fx.make_qp({.type = qp_type::uc}, cq, cq);
  auto b = own_qp(fx, qp_type::uc, cq);
  fx.connect(a, b);
  auto& src = fx.make_buffer(64);
  auto& dst = fx.make_buffer(64);
  src.fill(3);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 64), dst.addr(0), dst.rkey()) == 0);
  CHECK(fx.poll_one(cq).wr_id == 1);
  CHECK(std::memcmp(dst.data(), src.data(), 64) == 0);

  REQUIRE(B::destroy_qp(b.qp) == 0);
  // A new QP (likely where the old one was allocated), ready to receive from a: it
  // never takes the old number, so a's messages, sent to that number, are dropped.
  auto c = own_qp(fx, qp_type::uc, cq);
  CHECK(c.num != b.num);
  fx.bring_up(c, a.num);
  src.fill(9);
  REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, src.sge(0, 64), dst.addr(0), dst.rkey()) == 0);
  CHECK(fx.poll_one(cq).status == wc_status::success);  // UC: sent is done
  CHECK(std::memcmp(dst.data(), src.data(), 64) != 0);   // but nothing landed
  CHECK(B::destroy_qp(c.qp) == 0);
}

TEST_CASE("fast path: the sender's completion comes before the receiver's on a shared CQ") {
  fx_t fx;
  for (qp_type t : {qp_type::uc, qp_type::rc}) {
    CAPTURE(t);
    auto cq = fx.make_cq(64);
    auto a = fx.make_qp({.type = t}, cq, cq);
    auto b = fx.make_qp({.type = t}, cq, cq);
    fx.connect(a, b);
    auto& buf = fx.make_buffer(128);
    REQUIRE(fx.post_recv(b, 20, {buf.sge(64, 64)}) == 0);
    REQUIRE(fx.post_send(a, 10, opcode::send, {buf.sge(0, 64)}) == 0);
    const auto got = fx.poll(cq, 2);
    REQUIRE(got.size() == 2);
    // UC completes at send time, before delivery; RC only on the ACK, after it.
    CHECK(got[0].wr_id == (t == qp_type::uc ? 10u : 20u));
    CHECK(got[1].wr_id == (t == qp_type::uc ? 20u : 10u));
  }
}

// A device reads a WR's bytes some time after the post; the mock (spec profile) reads a
// SEND's or WRITE's when its message arrives (its buffer is the device's until the
// completion), and the one-message fast path borrows the buffer for no longer than that.
// A UC WR's bytes were read at the post, as it completed there.
TEST_CASE("fast path: a post list's sources are read when each message arrives (UC and RC)") {
  fx_t fx;
  for (qp_type t : {qp_type::uc, qp_type::rc}) {
    CAPTURE(t);
    auto [a, b] = fx.make_pair({.type = t});
    auto& mem = fx.make_buffer(192);
    mem.fill(1, 0, 64);    // A
    mem.fill(50, 64, 64);  // B
    // WR 1 writes A over B, WR 2 writes B over C: C gets B as WR 2 finds it when it
    // arrives, after WR 1 landed: A.
    const auto r = fx.post_send_list(a, {{.wr_id = 1, .op = opcode::rdma_write, .sg = {mem.sge(0, 64)},
                                          .remote_addr = mem.addr(64), .rkey = mem.rkey()},
                                         {.wr_id = 2, .op = opcode::rdma_write, .sg = {mem.sge(64, 64)},
                                          .remote_addr = mem.addr(128), .rkey = mem.rkey()}});
    REQUIRE(r.rc == 0);
    CHECK(fx.poll(a.send_cq, 2).size() == 2);
    CHECK(std::memcmp(mem.data() + 128, mem.data(), 64) == 0);
    CHECK(std::memcmp(mem.data() + 64, mem.data(), 64) == 0);
  }
}

// A SEND of no bytes whose one SGE is {0, 0}: the message borrowed "address 0", which
// reads as "no borrowed buffer", so the receive was written with what an earlier message
// left in the reused message (byte_len 0 all the same): alone, on the one-message path,
// every time; in a post list, most times (audit 20, F2).
TEST_CASE("fast path: a SEND of no bytes writes nothing into its receive, alone or in a post list") {
  fx_t fx;
  auto [a, b] = fx.make_pair({.caps = {64, 64, 2, 2, 0}});
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(2048);
  src.fill(5);
  const std::vector<rdmakit::sge> two{src.sge(0, 32), src.sge(32, 32)};  // gathered: a payload of its own
  const rdmakit::sge empty{0, 0, src.lkey()};
  for (const bool list : {false, true}) {
    for (int round = 0; round < 6; ++round) {
      CAPTURE(list);
      CAPTURE(round);
      dst.clear(std::byte{0xAB});
      for (int pad = 0; pad < round % 3; ++pad) {  // moves the messages to other wire slots
        REQUIRE(fx.post_recv(b, 9, {dst.sge(1536, 64)}) == 0);
        REQUIRE(fx.post_send(a, 9, opcode::send, {src.sge(0, 8)}) == 0);
      }
      REQUIRE(fx.post_recv(b, 1, {dst.sge(0, 64)}) == 0);
      REQUIRE(fx.post_recv(b, 2, {dst.sge(1024, 64)}) == 0);
      if (list) {
        REQUIRE(fx.post_send_list(a, {{.wr_id = 1, .op = opcode::send, .sg = two},
                                      {.wr_id = 2, .op = opcode::send, .sg = {empty}}})
                    .rc == 0);
      } else {
        REQUIRE(fx.post_send(a, 1, opcode::send, two) == 0);
        REQUIRE(fx.post_send(a, 2, opcode::send, {empty}) == 0);
      }
      const auto got = fx.poll(b.recv_cq, 2 + round % 3);
      REQUIRE(got.size() == std::size_t(2 + round % 3));
      CHECK(got.back().byte_len == 0);
      CHECK(std::all_of(dst.data() + 1024, dst.data() + 1088, [](std::byte x) { return x == std::byte{0xAB}; }));
      fx.drain(a.send_cq, 3);
    }
  }
}
