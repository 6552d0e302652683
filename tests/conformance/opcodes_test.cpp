// Every opcode per transport (docs/semantics.md#opcodes and the successful-completion rules, #wc-fields).
#include "deviations.hpp"
#include "harness.hpp"

using namespace conf;

namespace {

/// IBV_WC_GRH on RC/UC receives is a known rxe difference.
template <class B>
void check_rc_uc_grh_flag(const completion& c) {
  const auto want = expected(ids::grh_flag_rc_uc, backend_traits<B>::profile()).grh_flag;
  const bool has = has_all(c.flags, wc_flags::grh);
  if (want == tri::yes) CHECK_MESSAGE(has, "IBV_WC_GRH expected on this backend");
  if (want == tri::no) CHECK_MESSAGE(!has, "IBV_WC_GRH not expected on this backend");
}

/// IBV_WC_WITH_IMM on the sender's completion of a WR with immediate: rxe sets it.
template <class B>
void check_sender_imm_flag(const completion& c) {
  const auto want = expected(ids::sender_imm_flag, backend_traits<B>::profile()).imm_flag;
  const bool has = has_all(c.flags, wc_flags::with_imm);
  if (want == tri::yes) CHECK_MESSAGE(has, "IBV_WC_WITH_IMM expected on the sender's completion on this backend");
  if (want == tri::no) CHECK_MESSAGE(!has, "IBV_WC_WITH_IMM not expected on the sender's completion on this backend");
}

template <class F>
void for_rc_uc(F&& body) {
  SUBCASE("RC") { body(qp_type::rc); }
  SUBCASE("UC") { body(qp_type::uc); }
}

}  // namespace

CONFORMANCE_CASE("opcodes: SEND with two SGEs on RC and UC") {
  fixture<B> fx;
  for_rc_uc([&](qp_type t) {
    auto [a, b] = fx.make_pair({.type = t, .caps = {8, 8, 2, 1, 0}});
    auto& src = fx.make_buffer(4096);
    auto& dst = fx.make_buffer(4096);
    src.fill(7);
    REQUIRE(fx.post_recv(b, 77, {dst.sge(0, 4096)}) == 0);
    REQUIRE(fx.post_send(a, 11, opcode::send, {src.sge(0, 100), src.sge(1000, 900)}) == 0);
    auto s = fx.poll_one(a.send_cq, "send completion");
    CHECK(s.status == wc_status::success);
    CHECK(s.wr_id == 11);
    CHECK(s.op == wc_opcode::send);
    CHECK(s.qp_num == a.num);
    auto r = fx.poll_one(b.recv_cq, "receive completion");
    CHECK(r.status == wc_status::success);
    CHECK(r.wr_id == 77);
    CHECK(r.op == wc_opcode::recv);
    CHECK(r.byte_len == 1000);
    CHECK(r.qp_num == b.num);
    CHECK_FALSE(has_any(r.flags, wc_flags::with_imm));
    check_rc_uc_grh_flag<B>(r);
    CHECK(dst.holds(7, 0, 100));
    CHECK(dst.holds(7, 100, 900, 1000));
  });
}

CONFORMANCE_CASE("opcodes: zero-length SEND completes with byte_len 0") {
  fixture<B> fx;
  for_rc_uc([&](qp_type t) {
    auto [a, b] = fx.make_pair({.type = t});
    auto& dst = fx.make_buffer(64);
    REQUIRE(fx.post_recv(b, 1, {dst.sge(0, 64)}) == 0);
    REQUIRE(fx.post_send(a, 2, opcode::send, {}) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    auto r = fx.poll_one(b.recv_cq);
    CHECK(r.status == wc_status::success);
    CHECK(r.byte_len == 0);
  });
}

CONFORMANCE_CASE("opcodes: SEND_WITH_IMM carries the immediate and sets WITH_IMM on RC and UC") {
  fixture<B> fx;
  for_rc_uc([&](qp_type t) {
    auto [a, b] = fx.make_pair({.type = t});
    auto& src = fx.make_buffer(256);
    auto& dst = fx.make_buffer(256);
    src.fill(1);
    REQUIRE(fx.post_recv(b, 5, {dst.sge(0, 256)}) == 0);
    REQUIRE(fx.post_send(a, 6, opcode::send_with_imm, {src.sge(0, 64)}, send_flags::signaled,
                         [](typename B::send_wr& w) { B::set_imm(w, to_be32(0xdeadbeef)); }) == 0);
    auto s = fx.poll_one(a.send_cq);
    CHECK(s.status == wc_status::success);
    CHECK(s.op == wc_opcode::send);
    check_sender_imm_flag<B>(s);
    auto r = fx.poll_one(b.recv_cq);
    CHECK(r.status == wc_status::success);
    CHECK(r.op == wc_opcode::recv);
    CHECK(r.byte_len == 64);
    CHECK(has_all(r.flags, wc_flags::with_imm));
    CHECK(from_be32(r.imm) == 0xdeadbeef);
    CHECK(dst.holds(1, 0, 64));
  });
}

CONFORMANCE_CASE("opcodes: RDMA_WRITE places data and consumes no receive on RC and UC") {
  fixture<B> fx;
  for_rc_uc([&](qp_type t) {
    auto [a, b] = fx.make_pair({.type = t});
    auto& src = fx.make_buffer(8192);
    auto& remote = fx.make_buffer(8192);
    auto& rbuf = fx.make_buffer(64);
    src.fill(9);
    REQUIRE(fx.post_recv(b, 40, {rbuf.sge(0, 64)}) == 0);
    REQUIRE(fx.post_rdma(a, 41, opcode::rdma_write, src.sge(0, 5000), remote.addr(100), remote.rkey()) == 0);
    auto s = fx.poll_one(a.send_cq);
    CHECK(s.status == wc_status::success);
    CHECK(s.op == wc_opcode::rdma_write);
    CHECK(s.wr_id == 41);
    fx.settle();
    CHECK(remote.holds(9, 100, 5000));
    CHECK(fx.drain(b.recv_cq, 3).empty());
    // The receive is still posted: the next SEND takes it.
    REQUIRE(fx.post_send(a, 42, opcode::send, {src.sge(0, 8)}) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    auto r = fx.poll_one(b.recv_cq);
    CHECK(r.wr_id == 40);
    CHECK(r.byte_len == 8);
  });
}

CONFORMANCE_CASE("opcodes: RDMA_WRITE_WITH_IMM consumes a receive, byte_len is the write's length") {
  fixture<B> fx;
  for_rc_uc([&](qp_type t) {
    auto [a, b] = fx.make_pair({.type = t});
    auto& src = fx.make_buffer(4096);
    auto& remote = fx.make_buffer(4096);
    auto& rbuf = fx.make_buffer(64);
    src.fill(4);
    rbuf.clear(std::byte{0xee});
    REQUIRE(fx.post_recv(b, 50, {rbuf.sge(0, 64)}) == 0);
    REQUIRE(fx.post_rdma(a, 51, opcode::rdma_write_with_imm, src.sge(0, 3000), remote.addr(8), remote.rkey(),
                         send_flags::signaled, to_be32(0x01020304)) == 0);
    auto s = fx.poll_one(a.send_cq);
    CHECK(s.status == wc_status::success);
    CHECK(s.op == wc_opcode::rdma_write);
    check_sender_imm_flag<B>(s);
    auto r = fx.poll_one(b.recv_cq);
    CHECK(r.status == wc_status::success);
    CHECK(r.wr_id == 50);
    CHECK(r.op == wc_opcode::recv_rdma_with_imm);
    CHECK(r.byte_len == 3000);
    CHECK(r.qp_num == b.num);
    CHECK(has_all(r.flags, wc_flags::with_imm));
    CHECK(from_be32(r.imm) == 0x01020304);
    check_rc_uc_grh_flag<B>(r);
    CHECK(remote.holds(4, 8, 3000));
    CHECK(rbuf.data()[0] == std::byte{0xee});  // the receive buffer is not written
  });
}

CONFORMANCE_CASE("opcodes: RDMA_READ fetches remote bytes on RC") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& local = fx.make_buffer(8192);
  auto& remote = fx.make_buffer(8192);
  remote.fill(21);
  REQUIRE(fx.post_rdma(a, 61, opcode::rdma_read, local.sge(16, 6000), remote.addr(0), remote.rkey()) == 0);
  auto s = fx.poll_one(a.send_cq);
  CHECK(s.status == wc_status::success);
  CHECK(s.op == wc_opcode::rdma_read);
  CHECK(s.wr_id == 61);
  CHECK(s.byte_len == 6000);
  CHECK(local.holds(21, 16, 6000));
  CHECK(fx.drain(b.recv_cq, 3).empty());
}

CONFORMANCE_CASE("opcodes: ATOMIC_CMP_AND_SWP swaps on match and returns the old value") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  remote.set_u64(8, 1000);
  REQUIRE(fx.post_atomic(a, 71, opcode::atomic_cmp_and_swp, local.sge(0, 8), remote.addr(8), remote.rkey(), 1000,
                         2000) == 0);
  auto s = fx.poll_one(a.send_cq);
  CHECK(s.status == wc_status::success);
  CHECK(s.op == wc_opcode::comp_swap);
  CHECK(s.byte_len == 8);
  CHECK(local.u64(0) == 1000);
  CHECK(remote.u64(8) == 2000);
  // No match: nothing swapped, the current value comes back.
  REQUIRE(fx.post_atomic(a, 72, opcode::atomic_cmp_and_swp, local.sge(16, 8), remote.addr(8), remote.rkey(), 1,
                         3000) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(local.u64(16) == 2000);
  CHECK(remote.u64(8) == 2000);
}

CONFORMANCE_CASE("opcodes: ATOMIC_FETCH_AND_ADD adds and returns the old value") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  remote.set_u64(0, ~std::uint64_t{0} - 1);
  REQUIRE(fx.post_atomic(a, 81, opcode::atomic_fetch_and_add, local.sge(0, 8), remote.addr(0), remote.rkey(), 5) ==
          0);
  auto s = fx.poll_one(a.send_cq);
  CHECK(s.status == wc_status::success);
  CHECK(s.op == wc_opcode::fetch_add);
  CHECK(s.byte_len == 8);
  CHECK(local.u64(0) == ~std::uint64_t{0} - 1);
  CHECK(remote.u64(0) == 3);  // wraps modulo 2^64
  REQUIRE(fx.post_atomic(a, 82, opcode::atomic_fetch_and_add, local.sge(8, 8), remote.addr(0), remote.rkey(), 10) ==
          0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(local.u64(8) == 3);
  CHECK(remote.u64(0) == 13);
}

CONFORMANCE_CASE("opcodes: an atomic on an unaligned remote address or with length != 8 is EINVAL at post") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  CHECK(fx.post_atomic(a, 1, opcode::atomic_fetch_and_add, local.sge(0, 8), remote.addr(4), remote.rkey(), 1) ==
        EINVAL);
  CHECK(fx.post_atomic(a, 2, opcode::atomic_cmp_and_swp, local.sge(0, 4), remote.addr(0), remote.rkey(), 1, 2) ==
        EINVAL);
  CHECK(fx.drain(a.send_cq, 3).empty());
  CHECK(remote.u64(0) == 0);
  CHECK(B::query_qp_state(a.qp) == qp_state::rts);
}

// Posts FETCH_AND_ADD 1 on `remote`'s first 8 bytes, its result into `sg` (wr_id 3),
// checks the post against `want`, and returns the completions; with none expected, also
// that `remote` is unchanged.
template <class B>
auto fetch_add_one(fixture<B>& fx, endpoint<B>& a, const std::vector<rdmakit::sge>& sg, buffer<B>& remote,
                   const outcome& want) {
  const std::uint64_t before = remote.u64(0);
  const int rc = fx.post_send(a, 3, opcode::atomic_fetch_and_add, sg, send_flags::signaled,
                              [&](typename B::send_wr& w) { B::set_atomic(w, remote.addr(0), remote.rkey(), 1, 0); });
  CHECK(rc == want.post_errno);
  auto got = fx.drain(a.send_cq, 5);
  if (want.req.is_nothing()) {
    CHECK(got.empty());
    CHECK(remote.u64(0) == before);
  }
  return got;
}

CONFORMANCE_CASE("opcodes: an atomic with a local SGE longer than 8 bytes") {
  fixture<B> fx;
  const auto want = expected(ids::atomic_len_over_8, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair({.caps = {16, 16, 4, 1, 0}});
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  remote.fill(3);
  const std::uint64_t before = remote.u64(0);
  std::vector<rdmakit::sge> sg{local.sge(0, 16)};
  SUBCASE("one SGE of 16 bytes") {}
  SUBCASE("two SGEs of 4 bytes and one of 8") { sg = {local.sge(0, 4), local.sge(32, 4), local.sge(48, 8)}; }
  auto got = fetch_add_one(fx, a, sg, remote, want);
  if (!want.req.is_nothing()) {
    REQUIRE(got.size() == 1);
    CONF_CHECK_STATUS(want.req, got[0].status);
    // The completion counts every byte of the SGEs; the original value fills the first 8.
    std::uint32_t total = 0;
    for (const auto& s : sg) total += s.length;
    CHECK(got[0].byte_len == total);
    CHECK(remote.u64(0) == before + 1);
    std::uint64_t original = 0;
    std::size_t at = 0;
    for (const auto& s : sg)
      for (std::uint32_t i = 0; i < s.length && at < 8; ++i, ++at)
        original |= std::uint64_t(std::to_integer<std::uint8_t>(local.data()[s.addr - local.addr(0) + i])) << (8 * at);
    CHECK(original == before);
  }
}

// An atomic's result is 8 bytes: SGEs past them, and a bad SGE among them after good
// bytes (deviation table: the spec profile takes one SGE of 8 bytes only).
CONFORMANCE_CASE("opcodes: an atomic's SGEs past its 8 result bytes, or bad after some of them") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.caps = {16, 16, 4, 1, 0}});
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  remote.fill(3);
  const std::uint64_t before = remote.u64(0);
  std::string_view id = ids::atomic_sge_past_result_unreached;
  std::vector<rdmakit::sge> sg;
  std::uint32_t good = 8;  // the result's bytes the good SGE takes
  SUBCASE("8 bytes, then an SGE with a bad lkey") { sg = {local.sge(0, 8), {local.addr(16), 8, local.lkey() ^ 0x3300}}; }
  SUBCASE("8 bytes, then an SGE running 20000 bytes past its region") {
    sg = {local.sge(0, 8), {local.addr(16), 20000, local.lkey()}};
  }
  SUBCASE("4 bytes, then 4 with a bad lkey") {
    id = ids::atomic_result_split_bad_sge;
    good = 4;
    sg = {local.sge(0, 4), {local.addr(16), 4, local.lkey() ^ 0x3300}};
  }
  SUBCASE("4 bytes, then 4 crossing their region's end") {
    id = ids::atomic_result_split_bad_sge;
    good = 4;
    sg = {local.sge(0, 4), {local.addr(62), 4, local.lkey()}};
  }
  const auto want = expected(id, backend_traits<B>::profile());
  auto got = fetch_add_one(fx, a, sg, remote, want);
  if (want.req.is_nothing()) return;
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 3u);
  CONF_CHECK_STATUS(want.req, got[0].status);
  if (want.remote_ran != tri::either) CHECK(remote.u64(0) == (want.remote_ran == tri::yes ? before + 1 : before));
  // The original value's first `good` bytes land in the good SGE (all 8 when the rest is
  // never reached); nothing else of `local` is written.
  std::uint8_t original[8];
  std::memcpy(original, &before, 8);
  if (want.head_written != tri::no)
    for (std::uint32_t i = 0; i < good; ++i) CHECK(std::to_integer<std::uint8_t>(local.data()[i]) == original[i]);
  if (want.head_written == tri::no) CHECK(local.zero(0, good));
  CHECK(local.zero(good, 64 - good));
  if (got[0].status == wc_status::success) CHECK(B::query_qp_state(a.qp) == qp_state::rts);
}

CONFORMANCE_CASE("opcodes: an atomic marked inline") {
  fixture<B> fx;
  const auto want = expected(ids::atomic_inline, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair({.caps = {16, 16, 1, 1, 64}});
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  const int rc = fx.post_send(a, 4, opcode::atomic_fetch_and_add, {local.sge(0, 8)},
                              send_flags::signaled | send_flags::inline_data,
                              [&](typename B::send_wr& w) { B::set_atomic(w, remote.addr(0), remote.rkey(), 5, 0); });
  CHECK(rc == want.post_errno);
  auto got = fx.drain(a.send_cq, 5);
  if (want.req.is_nothing()) {
    CHECK(got.empty());
  } else {
    REQUIRE(got.size() == 1);
    CONF_CHECK_STATUS(want.req, got[0].status);
  }
  CHECK((want.remote_ran == tri::yes) == (remote.u64(0) == 5));
  CHECK(local.u64(0) == 0);  // the result lands nowhere
}

CONFORMANCE_CASE("opcodes: an opcode the transport lacks (UC READ/atomic/SEND_WITH_INV, UD WRITE/READ)") {
  fixture<B> fx;
  const auto want = expected(ids::invalid_opcode, backend_traits<B>::profile());
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  auto check_one = [&](const endpoint<B>& e, int rc) {
    CHECK(rc == want.post_errno);
    auto got = fx.drain(e.send_cq, 5);
    if (want.req.is_nothing()) {
      CHECK(got.empty());
    } else {
      REQUIRE(got.size() >= 1);
      CONF_CHECK_STATUS(want.req, got[0].status);
    }
  };
  SUBCASE("UC RDMA_READ") {
    auto [a, b] = fx.make_pair({.type = qp_type::uc});
    check_one(a, fx.post_rdma(a, 1, opcode::rdma_read, local.sge(0, 8), remote.addr(0), remote.rkey()));
  }
  SUBCASE("UC ATOMIC_FETCH_AND_ADD") {
    auto [a, b] = fx.make_pair({.type = qp_type::uc});
    check_one(a, fx.post_atomic(a, 1, opcode::atomic_fetch_and_add, local.sge(0, 8), remote.addr(0), remote.rkey(), 1));
    CHECK(remote.u64(0) == 0);
  }
  SUBCASE("UC SEND_WITH_INV") {  // the IBA defines it for RC (and XRC) only
    auto [a, b] = fx.make_pair({.type = qp_type::uc});
    REQUIRE(fx.post_recv(b, 80, {remote.sge(0, 64)}) == 0);
    check_one(a, fx.post_send(a, 1, opcode::send_with_inv, {local.sge(0, 8)}, send_flags::signaled,
                              [&](typename B::send_wr& w) { B::set_invalidate(w, remote.rkey()); }));
    CHECK(fx.drain(b.recv_cq, 3).empty());
  }
  SUBCASE("UD RDMA_WRITE") {
    auto pair = fx.make_pair({.type = qp_type::ud});
    auto& a = pair.first;
    const auto bnum = pair.second.num;
    auto ah = fx.make_ah(fx.loopback_av());
    check_one(a, fx.post_send(a, 1, opcode::rdma_write, {local.sge(0, 8)}, send_flags::signaled,
                              [&](typename B::send_wr& w) {
                                B::set_rdma(w, remote.addr(0), remote.rkey());
                                B::set_ud(w, ah, bnum, default_qkey);
                              }));
  }
  SUBCASE("UD RDMA_READ") {
    auto pair = fx.make_pair({.type = qp_type::ud});
    auto& a = pair.first;
    const auto bnum = pair.second.num;
    auto ah = fx.make_ah(fx.loopback_av());
    check_one(a, fx.post_send(a, 1, opcode::rdma_read, {local.sge(0, 8)}, send_flags::signaled,
                              [&](typename B::send_wr& w) {
                                B::set_rdma(w, remote.addr(0), remote.rkey());
                                B::set_ud(w, ah, bnum, default_qkey);
                              }));
  }
}
