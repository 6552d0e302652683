// Memory windows (docs/semantics.md#memory-windows): type 1 bound by the verbs call, type 2
// by a BIND_MW WR, invalidation (LOCAL_INV, the peer's SEND_WITH_INV, a zero-length type 1
// bind), remote access through the window's rkey and what the responder refuses.
#include "deviations.hpp"
#include "harness.hpp"

using namespace conf;

namespace {

constexpr acc region_rights =
    acc::local_write | acc::remote_write | acc::remote_read | acc::remote_atomic | acc::mw_bind;
constexpr acc rw = acc::remote_write | acc::remote_read;

template <class B>
typename B::mw make_mw(fixture<B>& fx, mw_type t) {
  auto w = B::alloc_mw(fx.pd, t);
  fx.on_cleanup([w] { CHECK_MESSAGE(B::dealloc_mw(w) == 0, "dealloc_mw at teardown"); });
  return w;
}

// The next rkey of a window: the same index, the key byte plus one (ibv_inc_rkey).
inline std::uint32_t inc_rkey(std::uint32_t k) { return (k & ~0xFFu) | ((k + 1) & 0xFFu); }

// Posts a type 2 BIND_MW WR on `e` giving `w` the rkey `rkey`.
template <class B>
int bind2(fixture<B>& fx, const endpoint<B>& e, typename B::mw w, std::uint32_t rkey, const buffer<B>& buf,
          std::size_t off, std::uint64_t len, acc rights, std::uint64_t wr_id) {
  return fx.post_send(e, wr_id, opcode::bind_mw, {}, send_flags::signaled, [&](typename B::send_wr& wr) {
    B::set_bind_mw(wr, w, rkey, buf.mr, buf.addr(off), len, rights);
  });
}

template <class B>
int local_inv(fixture<B>& fx, const endpoint<B>& e, std::uint32_t rkey, std::uint64_t wr_id) {
  return fx.post_send(e, wr_id, opcode::local_inv, {}, send_flags::signaled,
                      [&](typename B::send_wr& wr) { B::set_invalidate(wr, rkey); });
}

// A WRITE of 64 bytes from `src` to `raddr` through `rkey`, and its completion's status.
template <class B>
wc_status write_through(fixture<B>& fx, const endpoint<B>& a, const buffer<B>& src, std::uint64_t raddr,
                        std::uint32_t rkey, std::uint64_t wr_id) {
  REQUIRE(fx.post_rdma(a, wr_id, opcode::rdma_write, src.sge(0, 64), raddr, rkey) == 0);
  auto c = fx.poll_one(a.send_cq, "the WRITE's completion");
  CHECK(c.wr_id == wr_id);
  return c.status;
}

}  // namespace

CONFORMANCE_CASE("mw: type 1 bound by the verbs call grants WRITE and READ through its rkey") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(4096);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  const std::uint32_t before = B::mw_rkey(w);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(1024), 1024, rw, 70, send_flags::signaled) == 0);
  auto bc = fx.poll_one(b.send_cq, "the bind's completion");
  CHECK(bc.status == wc_status::success);
  CHECK(bc.op == wc_opcode::bind_mw);
  CHECK(bc.wr_id == 70);
  const std::uint32_t rkey = B::mw_rkey(w);
  CHECK(rkey != before);
  CHECK(rkey != dst.rkey());
  src.fill(3);
  CHECK(write_through(fx, a, src, dst.addr(1024 + 128), rkey, 1) == wc_status::success);
  CHECK(dst.holds(3, 1024 + 128, 64));
  auto& back = fx.make_buffer(64);
  REQUIRE(fx.post_rdma(a, 2, opcode::rdma_read, back.sge(0, 64), dst.addr(1024 + 128), rkey) == 0);
  auto rc = fx.poll_one(a.send_cq, "the READ's completion");
  CHECK(rc.status == wc_status::success);
  CHECK(back.holds(3, 0, 64));
}

CONFORMANCE_CASE("mw: a rebind changes the rkey and the old rkey is refused with REM_ACCESS_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 1024, rw, 70, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  const std::uint32_t first = B::mw_rkey(w);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 1024, rw, 71, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  const std::uint32_t second = B::mw_rkey(w);
  CHECK((second >> 8) == (first >> 8));
  CHECK(second != first);
  CHECK(write_through(fx, a, src, dst.addr(0), second, 1) == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), first, 2) == wc_status::rem_access_err);
}

CONFORMANCE_CASE("mw: an access outside the window but inside its region") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(1024), 1024, rw, 70, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  const auto want = expected(ids::mw_out_of_window, backend_traits<B>::profile());
  src.fill(9);
  CONF_CHECK_STATUS(want.req, write_through(fx, a, src, dst.addr(2048 + 64), B::mw_rkey(w), 1));
  if (want.req.allows(wc_status::rem_access_err) && !want.req.allows(wc_status::success))
    CHECK(dst.u64(2048 + 64) == 0);
}

CONFORMANCE_CASE("mw: a right the window lacks is refused with REM_ACCESS_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 4096, acc::remote_read, 70, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), B::mw_rkey(w), 1) == wc_status::rem_access_err);
  CHECK(dst.u64(0) == 0);
}

CONFORMANCE_CASE("mw: type 1 unbound by a zero-length bind refuses access with REM_ACCESS_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 4096, rw, 70, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), B::mw_rkey(w), 1) == wc_status::success);
  // The region is named even to unbind: providers read its lkey.
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 0, acc::none, 71, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), B::mw_rkey(w), 2) == wc_status::rem_access_err);
}

CONFORMANCE_CASE("mw: type 2 bound by a BIND_MW WR grants access through its new rkey") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 512, 512, rw | acc::remote_atomic, 70) == 0);
  auto bc = fx.poll_one(b.send_cq, "the bind's completion");
  CHECK(bc.status == wc_status::success);
  CHECK(bc.op == wc_opcode::bind_mw);
  src.fill(5);
  CHECK(write_through(fx, a, src, dst.addr(512), rkey, 1) == wc_status::success);
  CHECK(dst.holds(5, 512, 64));
  auto& old = fx.make_buffer(8);
  dst.set_u64(1016, 40);
  REQUIRE(fx.post_atomic(a, 2, opcode::atomic_fetch_and_add, old.sge(0, 8), dst.addr(1016), rkey, 2) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  CHECK(old.u64(0) == 40);
  CHECK(dst.u64(1016) == 42);
}

CONFORMANCE_CASE("mw: type 2 after LOCAL_INV refuses access with REM_ACCESS_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 1) == wc_status::success);
  REQUIRE(local_inv(fx, b, rkey, 71) == 0);
  auto ic = fx.poll_one(b.send_cq, "the invalidation's completion");
  CHECK(ic.status == wc_status::success);
  CHECK(ic.op == wc_opcode::local_inv);
  dst.clear();
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 2) == wc_status::rem_access_err);
  CHECK(dst.u64(0) == 0);
}

// IBA's Local Invalidate Fence: a LOCAL_INV posted with the fence flag starts only
// once every WR before it completed, not only READs and atomics (rxe_wqe_is_fenced).
// The mock invalidated at once, behind a SEND waiting for an RNR retry (audit 44).
CONFORMANCE_CASE("mw: a fenced LOCAL_INV waits for the WRs before it: a SEND in RNR wait keeps the window usable") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();  // rnr_retry 7: b's SEND waits for a's receive
  auto& src = fx.make_buffer(256);
  auto& msg = fx.make_buffer(64);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  // One list: the SEND (no receive at a yet) and the fenced LOCAL_INV behind it.
  typename B::sge s;
  B::set_sge(s, msg.addr(0), 16, msg.lkey());
  typename B::send_wr send{}, invalidate{};
  B::set_send(send, 71, opcode::send, send_flags::signaled, &s, 1);
  B::set_send(invalidate, 72, opcode::local_inv, send_flags::signaled | send_flags::fence, nullptr, 0);
  B::set_invalidate(invalidate, rkey);
  B::set_next(send, &invalidate);
  typename B::send_wr* bad = nullptr;
  REQUIRE(B::post_send(b.qp, &send, &bad) == 0);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 1) == wc_status::success);  // not invalidated yet
  REQUIRE(fx.post_recv(a, 80, {src.sge(128, 64)}) == 0);
  const auto sent = fx.poll_one(b.send_cq, "the SEND's completion");
  CHECK(sent.wr_id == 71);
  CHECK(sent.status == wc_status::success);
  const auto inv = fx.poll_one(b.send_cq, "the invalidation's completion");
  CHECK(inv.wr_id == 72);
  CHECK(inv.status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 2) == wc_status::rem_access_err);
}

CONFORMANCE_CASE("mw: type 2 invalidated by the peer's SEND_WITH_INV") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto& inbox = fx.make_buffer(256);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  REQUIRE(fx.post_recv(b, 80, {inbox.sge(0, 256)}) == 0);
  src.fill(4);
  REQUIRE(fx.post_send(a, 1, opcode::send_with_inv, {src.sge(0, 32)}, send_flags::signaled,
                       [&](typename B::send_wr& wr) { B::set_invalidate(wr, rkey); }) == 0);
  auto s = fx.poll_one(a.send_cq, "the SEND_WITH_INV's completion");
  CHECK(s.status == wc_status::success);
  CHECK(s.op == wc_opcode::send);
  typename B::wc raw[1];
  completion r;
  for (int i = 0; i < 100000; ++i) {
    if (B::poll_cq(b.recv_cq, 1, raw) == 1) {
      r = to_completion<B>(raw[0]);
      break;
    }
    fx.settle();
  }
  CHECK(r.wr_id == 80);
  CHECK(r.status == wc_status::success);
  CHECK(r.op == wc_opcode::recv);
  CHECK(r.byte_len == 32);
  const auto want = expected(ids::recv_with_inv_flag, backend_traits<B>::profile());
  if (want.inv_flag == tri::yes) CHECK(has_all(r.flags, wc_flags::with_inv));
  if (want.inv_flag == tri::no) CHECK_FALSE(has_all(r.flags, wc_flags::with_inv));
  CHECK(B::get_invalidated_rkey(raw[0]) == rkey);
  CHECK(inbox.holds(4, 0, 32));
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 2) == wc_status::rem_access_err);
}

// The spec checks a SEND_WITH_INV's rkey against the receiving QP's PD; rxe looks it up
// in the whole device, so a peer connected to another PD's queue pair revokes the window.
// memory_window's record of peers' invalidations is the device's, not the PD's, for this.
CONFORMANCE_CASE("mw: a SEND_WITH_INV naming a type 2 window of another PD of the device") {
  fixture<B> fx;
  const auto want = expected(ids::send_inv_other_pd, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto pd2 = fx.make_pd();
  auto a2 = fx.make_qp({});
  auto c = fx.make_qp({}, {}, {}, pd2);
  fx.connect(a2, c);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto& inbox = fx.make_buffer(256, acc::local_write, pd2);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  REQUIRE(fx.post_recv(c, 80, {inbox.sge(0, 256)}) == 0);
  REQUIRE(fx.post_send(a2, 1, opcode::send_with_inv, {src.sge(0, 32)}, send_flags::signaled,
                       [&](typename B::send_wr& wr) { B::set_invalidate(wr, rkey); }) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(a2.send_cq, "the SEND_WITH_INV's completion").status);
  CONF_CHECK_STATUS(want.resp, fx.poll_one(c.recv_cq, "its receive's completion").status);
  const wc_status after = write_through(fx, a, src, dst.addr(0), rkey, 2);
  if (want.window_invalidated == tri::yes) CHECK(after == wc_status::rem_access_err);
  if (want.window_invalidated == tri::no) CHECK(after == wc_status::success);
}

// Only a type 2 window's rkey can be invalidated by a SEND_WITH_INV: one naming a memory
// region's is an invalid request. rxe fails the receive and acknowledges the SEND, so its
// sender sees success while the receiver's queue pair is in ERR (audit 36, D3).
CONFORMANCE_CASE("mw: a SEND_WITH_INV naming a memory region's rkey") {
  fixture<B> fx;
  const auto want = expected(ids::send_inv_region_rkey, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto& inbox = fx.make_buffer(256);
  REQUIRE(fx.post_recv(b, 80, {inbox.sge(0, 256)}) == 0);
  REQUIRE(fx.post_send(a, 1, opcode::send_with_inv, {src.sge(0, 32)}, send_flags::signaled,
                       [&](typename B::send_wr& wr) { B::set_invalidate(wr, dst.rkey()); }) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(a.send_cq, "the SEND_WITH_INV's completion").status);
  CONF_CHECK_STATUS(want.resp, fx.poll_one(b.recv_cq, "its receive's completion").status);
  CHECK(fx.wait_state(b, qp_state::err) == qp_state::err);
}

// rdmavt and the IBA take LOCAL_INV on UC as on RC; rxe's opcode table has it for RC only.
CONFORMANCE_CASE("mw: LOCAL_INV of a type 2 window on the UC queue pair it was bound through") {
  fixture<B> fx;
  const auto want = expected(ids::local_inv_on_uc, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair({.type = qp_type::uc});
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, acc::local_write | acc::remote_write | acc::mw_bind);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, acc::remote_write, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 1) == wc_status::success);
  REQUIRE(local_inv(fx, b, rkey, 71) == 0);
  const auto c = fx.poll_one(b.send_cq, "the LOCAL_INV's completion");
  CHECK_MESSAGE(want.req.allows(c.status), "LOCAL_INV: ", to_string(c.status), ", expected ", want.req.to_string());
}

CONFORMANCE_CASE("mw: binding to a region registered without MW_BIND completes with MW_BIND_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(4096, region_rights & ~acc::mw_bind);
  SUBCASE("type 1") {
    auto w = make_mw(fx, mw_type::type1);
    REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 4096, rw, 70, send_flags::signaled) == 0);
    CHECK(fx.poll_one(b.send_cq).status == wc_status::mw_bind_err);
  }
  SUBCASE("type 2") {
    auto w = make_mw(fx, mw_type::type2);
    REQUIRE(bind2(fx, b, w, inc_rkey(B::mw_rkey(w)), dst, 0, 4096, rw, 70) == 0);
    CHECK(fx.poll_one(b.send_cq).status == wc_status::mw_bind_err);
  }
}

CONFORMANCE_CASE("mw: a writable window on a region without LOCAL_WRITE completes with MW_BIND_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(4096, acc::remote_read | acc::mw_bind);
  auto w = make_mw(fx, mw_type::type2);
  REQUIRE(bind2(fx, b, w, inc_rkey(B::mw_rkey(w)), dst, 0, 4096, acc::remote_write, 70) == 0);
  CHECK(fx.poll_one(b.send_cq).status == wc_status::mw_bind_err);
}

CONFORMANCE_CASE("mw: a window bound past its region's end completes with MW_BIND_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  REQUIRE(bind2(fx, b, w, inc_rkey(B::mw_rkey(w)), dst, 2048, 4096, rw, 70) == 0);
  CHECK(fx.poll_one(b.send_cq).status == wc_status::mw_bind_err);
}

CONFORMANCE_CASE("mw: a deallocated window refuses access with REM_ACCESS_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = B::alloc_mw(fx.pd, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  REQUIRE(B::dealloc_mw(w) == 0);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 1) == wc_status::rem_access_err);
}

CONFORMANCE_CASE("mw: a region with a bound window cannot be deregistered") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  std::vector<std::uint64_t> mem(512);
  auto mr = B::reg_mr(fx.pd, mem.data(), 4096, region_rights);
  auto w = B::alloc_mw(fx.pd, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w, mr, reinterpret_cast<std::uintptr_t>(mem.data()), 4096, rw, 70,
                     send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  const int refused = B::dereg_mr(mr);
  CHECK(refused == EINVAL);
  CHECK(B::dealloc_mw(w) == 0);
  if (refused != 0) CHECK(B::dereg_mr(mr) == 0);
}

// What holds a region (a window bound to it) is let go by a rebind to another region,
// a LOCAL_INV, or the window's dealloc; a type 2 window's queue pair destroyed leaves it
// bound. (The mock counts each region's windows instead of walking all of them at each
// dereg_mr: audit 26, F5.)
CONFORMANCE_CASE("mw: a region is freed by its window's rebind elsewhere, invalidation or dealloc") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  std::vector<std::uint64_t> mem(4 * 512);
  auto region = [&](int i) { return B::reg_mr(fx.pd, mem.data() + i * 512, 4096, region_rights); };
  auto addr = [&](int i) { return reinterpret_cast<std::uintptr_t>(mem.data() + i * 512); };
  auto m0 = region(0), m1 = region(1), m2 = region(2), m3 = region(3);
  // Type 1: bound to m0, then rebound to m1: m0 is free, m1 is not.
  auto w1 = B::alloc_mw(fx.pd, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w1, m0, addr(0), 4096, rw, 70, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  REQUIRE(B::bind_mw(b.qp, w1, m1, addr(1), 4096, rw, 71, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(B::dereg_mr(m0) == 0);
  const int m1_refused = B::dereg_mr(m1);  // (a region deregistered is not deregistered again)
  CHECK(m1_refused == EINVAL);
  // A new type 2 window bound through b to region i (`m`), with WR `wr_id`: its rkey.
  // (`binder` names b: clang 14 cannot capture a structured binding.)
  auto bind_type2 = [&, &binder = b](auto w, auto m, int i, std::uint64_t wr_id) {
    const std::uint32_t k = inc_rkey(B::mw_rkey(w));
    REQUIRE(fx.post_send(binder, wr_id, opcode::bind_mw, {}, send_flags::signaled, [&](typename B::send_wr& wr) {
      B::set_bind_mw(wr, w, k, m, addr(i), 4096, rw);
    }) == 0);
    REQUIRE(fx.poll_one(binder.send_cq).status == wc_status::success);
    return k;
  };
  // Type 2: bound to m2 through b, then invalidated: m2 is free.
  auto w2 = B::alloc_mw(fx.pd, mw_type::type2);
  const std::uint32_t k2 = bind_type2(w2, m2, 2, 72);
  const int m2_refused = B::dereg_mr(m2);
  CHECK(m2_refused == EINVAL);
  REQUIRE(local_inv(fx, b, k2, 73) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  if (m2_refused) CHECK(B::dereg_mr(m2) == 0);
  // Type 2 bound to m3 and freed while bound: m3 is free; w1 freed: m1 is.
  auto w3 = B::alloc_mw(fx.pd, mw_type::type2);
  (void)bind_type2(w3, m3, 3, 74);
  const int m3_refused = B::dereg_mr(m3);
  CHECK(m3_refused == EINVAL);
  CHECK(B::dealloc_mw(w3) == 0);
  if (m3_refused) CHECK(B::dereg_mr(m3) == 0);
  CHECK(B::dealloc_mw(w1) == 0);
  if (m1_refused) CHECK(B::dereg_mr(m1) == 0);
  CHECK(B::dealloc_mw(w2) == 0);
}

CONFORMANCE_CASE("mw: LOCAL_INV of a type 1 window completes with LOC_QP_OP_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  REQUIRE(B::bind_mw(b.qp, w, dst.mr, dst.addr(0), 4096, rw, 70, send_flags::signaled) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  REQUIRE(local_inv(fx, b, B::mw_rkey(w), 71) == 0);
  CHECK(fx.poll_one(b.send_cq).status == wc_status::loc_qp_op_err);
}

CONFORMANCE_CASE("mw: a type 2 window is usable only through the queue pair that bound it") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto [a2, b2] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, rkey, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 1) == wc_status::success);
  CHECK(write_through(fx, a2, src, dst.addr(0), rkey, 2) == wc_status::rem_access_err);
}

CONFORMANCE_CASE("mw: binding a type 2 window on a queue pair of another PD completes with MW_BIND_ERR") {
  fixture<B> fx;
  auto pd2 = fx.make_pd();
  auto a = fx.make_qp({});
  auto b = fx.make_qp({}, {}, {}, pd2);
  fx.connect(a, b);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  REQUIRE(bind2(fx, b, w, inc_rkey(B::mw_rkey(w)), dst, 0, 4096, rw, 70) == 0);
  CHECK(fx.poll_one(b.send_cq).status == wc_status::mw_bind_err);
}

// A BIND_MW names the window by its current rkey (rxe's provider passes ibv_mw::rkey,
// and the device refuses the bind when it is not the window's rkey now; mlx5 passes it
// too). Nothing updates ibv_mw::rkey after a type 2 bind: the poster sets it to the rkey
// the bind gave (B::set_mw_rkey), or the next bind of the window names a stale one. The
// mock took any bind of a known window, so memory_window never kept it current and a
// type 2 window could not be bound again after an invalidation on rxe.
CONFORMANCE_CASE("mw: a type 2 BIND_MW names the window's current rkey; a stale one completes with MW_BIND_ERR") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t first = inc_rkey(B::mw_rkey(w));
  REQUIRE(bind2(fx, b, w, first, dst, 0, 4096, rw, 70) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  REQUIRE(local_inv(fx, b, first, 71) == 0);
  REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
  SUBCASE("ibv_mw::rkey kept current: the window is bound again") {
    B::set_mw_rkey(w, first);
    const std::uint32_t second = inc_rkey(first);
    REQUIRE(bind2(fx, b, w, second, dst, 0, 4096, rw, 72) == 0);
    REQUIRE(fx.poll_one(b.send_cq).status == wc_status::success);
    B::set_mw_rkey(w, second);
    CHECK(B::mw_rkey(w) == second);
    CHECK(write_through(fx, a, src, dst.addr(0), second, 1) == wc_status::success);
  }
  SUBCASE("ibv_mw::rkey left as it was before the first bind: refused") {
    REQUIRE(bind2(fx, b, w, inc_rkey(first), dst, 0, 4096, rw, 72) == 0);
    CHECK(fx.poll_one(b.send_cq).status == wc_status::mw_bind_err);
  }
}

CONFORMANCE_CASE("mw: a BIND_MW WR naming a type 1 window") {
  fixture<B> fx;
  const auto want = expected(ids::mw_bind_wr_type1, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  const std::uint32_t before = B::mw_rkey(w);
  const std::uint32_t rkey = inc_rkey(before);
  typename B::send_wr wr{};
  B::set_send(wr, 70, opcode::bind_mw, send_flags::signaled, nullptr, 0);
  B::set_bind_mw(wr, w, rkey, dst.mr, dst.addr(0), 1024, rw);
  typename B::send_wr* bad = nullptr;
  CHECK(B::post_send(b.qp, &wr, &bad) == want.post_errno);
  CHECK(B::mw_rkey(w) == before);  // a WR leaves ibv_mw::rkey alone
  if (want.post_errno != 0) {
    CHECK(bad == &wr);
    CHECK(fx.drain(b.send_cq).empty());
    return;
  }
  auto bc = fx.poll_one(b.send_cq, "the bind's completion");
  CONF_CHECK_STATUS(want.req, bc.status);
  CHECK(bc.op == wc_opcode::bind_mw);
  src.fill(3);
  CHECK(write_through(fx, a, src, dst.addr(0), rkey, 1) == wc_status::success);
  CHECK(dst.holds(3, 0, 64));
}

CONFORMANCE_CASE("mw: a BIND_MW WR with imm_data, or on a UD queue pair") {
  fixture<B> fx;
  const auto want = expected(ids::mw_bind_wr_imm, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type2);
  const std::uint32_t rkey = inc_rkey(B::mw_rkey(w));
  typename B::send_wr wr{};
  B::set_send(wr, 80, opcode::bind_mw, send_flags::signaled, nullptr, 0);
  B::set_bind_mw(wr, w, rkey, dst.mr, dst.addr(0), 1024, rw);
  B::set_imm(wr, to_be32(5));
  if (check_post_outcome<B>(fx, b, wr, want, "the bind's completion")) B::set_mw_rkey(w, rkey);
  CHECK(B::query_qp_state(b.qp) == qp_state::rts);
  // On UD a BIND_MW is refused at post everywhere (spec §2; rxe's provider checks the type).
  auto [u1, u2] = fx.make_pair({.type = qp_type::ud});
  auto ah = fx.make_ah(fx.loopback_av());
  typename B::send_wr uwr{};
  B::set_send(uwr, 81, opcode::bind_mw, send_flags::signaled, nullptr, 0);
  B::set_bind_mw(uwr, w, inc_rkey(B::mw_rkey(w)), dst.mr, dst.addr(0), 1024, rw);
  B::set_ud(uwr, ah, u2.num, default_qkey);
  typename B::send_wr* bad = nullptr;
  CHECK(B::post_send(u1.qp, &uwr, &bad) == EINVAL);
  CHECK(bad == &uwr);
  CHECK(fx.drain(u1.send_cq).empty());
  CHECK(B::query_qp_state(u1.qp) == qp_state::rts);
}

CONFORMANCE_CASE("mw: ibv_bind_mw of a type 1 window on a UD queue pair is refused (EINVAL), nothing posted") {
  // rxe's provider refuses a BIND_MW on a QP that is not RC or UC (validate_send_wr); the
  // mock dereferenced the WR's missing address handle (a crash).
  fixture<B> fx;
  auto& dst = fx.make_buffer(4096, region_rights);
  auto w = make_mw(fx, mw_type::type1);
  auto [u1, u2] = fx.make_pair({.type = qp_type::ud});
  (void)u2;
  const std::uint32_t before = B::mw_rkey(w);
  CHECK(B::bind_mw(u1.qp, w, dst.mr, dst.addr(0), 1024, rw, 90, send_flags::signaled) == EINVAL);
  CHECK(B::mw_rkey(w) == before);
  CHECK(fx.drain(u1.send_cq).empty());
  CHECK(B::query_qp_state(u1.qp) == qp_state::rts);
}
