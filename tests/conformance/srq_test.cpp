// Shared receive queues (docs/semantics.md#srq): QPs of any transport that take their
// receives from one SRQ, RNR when it is empty, the limit event, destroy order, and ERR
// flushing only what is the QP's own.
#include "deviations.hpp"
#include "harness.hpp"

using namespace conf;

namespace {
template <class H>
const void* identity(H h) {
  return static_cast<const void*>(h);
}

/// An SRQ of 16 receives and, on it, two RC QPs `b1`, `b2` sharing one receive CQ, each
/// connected to its own sender (`a1`, `a2`).
template <class B>
struct srq_pairs {
  explicit srq_pairs(fixture<B>& f, link_opts la = {}, link_opts lb = {})
      : fx(f), srq(make_srq(f)), recv_cq(f.make_cq(64)), a1(f.make_qp()), a2(f.make_qp()),
        b1(f.make_qp_on_srq(srq, {}, {}, recv_cq)), b2(f.make_qp_on_srq(srq, {}, {}, recv_cq)),
        src(f.make_buffer(4096)), dst(f.make_buffer(4096)) {
    f.connect(a1, b1, la, lb);
    f.connect(a2, b2, la, lb);
    src.fill(7);
  }
  static typename B::srq make_srq(fixture<B>& f) {
    srq_attr a{.max_wr = 16, .max_sge = 1};
    auto s = f.make_srq(a);
    CHECK(a.max_wr >= 16);
    CHECK(a.max_sge >= 1);
    return s;
  }
  /// Receive `k` lands in dst[256k, 256k + 256) with wr_id 100 + k.
  void post(int k) { REQUIRE(fx.post_srq_recv(srq, 100 + k, {dst.sge(256 * k, 256)}) == 0); }
  /// A signaled 64-byte SEND of src[off, off + 64) from `a`, waited for.
  void send(const endpoint<B>& a, std::uint64_t wr_id, std::size_t off) {
    REQUIRE(fx.post_send(a, wr_id, opcode::send, {src.sge(off, 64)}) == 0);
    CHECK(fx.poll_one(a.send_cq, "the SEND").status == wc_status::success);
  }

  fixture<B>& fx;
  typename B::srq srq;
  typename B::cq recv_cq;
  endpoint<B> a1, a2, b1, b2;
  buffer<B>& src;
  buffer<B>& dst;
};
}  // namespace

CONFORMANCE_CASE("srq: two RC QPs take receives from one SRQ in order; each completion names its QP") {
  fixture<B> fx;
  srq_pairs<B> p(fx);
  for (int k = 0; k < 4; ++k) p.post(k);
  p.send(p.a1, 1, 0);
  p.send(p.a2, 2, 64);
  p.send(p.a1, 3, 128);
  auto got = fx.poll(p.recv_cq, 3, "three receives");
  REQUIRE(got.size() == 3);
  const std::uint32_t by[] = {p.b1.num, p.b2.num, p.b1.num};
  for (int k = 0; k < 3; ++k) {
    CAPTURE(k);
    CHECK(got[k].status == wc_status::success);
    CHECK(got[k].op == wc_opcode::recv);
    CHECK(got[k].wr_id == std::uint64_t(100 + k));  // the SRQ's order, whichever QP took it
    CHECK(got[k].qp_num == by[k]);
    CHECK(got[k].byte_len == 64);
    CHECK(p.dst.holds(7, 256 * k, 64, 64 * k));
  }
  CHECK(fx.drain(p.recv_cq, 5).empty());  // receive 103 is still posted
}

CONFORMANCE_CASE("srq: post_recv on a QP created on an SRQ is refused (EINVAL)") {
  fixture<B> fx;
  const auto want = expected(ids::recv_refused_bad_wr, backend_traits<B>::profile());
  srq_pairs<B> p(fx);
  const auto r = fx.post_recv_list(p.b1, {{1, {p.dst.sge(0, 64)}}, {2, {p.dst.sge(64, 64)}}});
  CHECK(r.rc == want.post_errno);
  CHECK(r.bad_index == (want.bad_wr_set ? 0 : -1));
  CHECK(fx.drain(p.recv_cq, 5).empty());
}

CONFORMANCE_CASE("srq: RC SEND with the SRQ empty is RNR NAKed") {
  fixture<B> fx;
  link_opts la, lb;
  lb.min_rnr_timer = 1;  // 0.01 ms
  SUBCASE("rnr_retry 1: RNR_RETRY_EXC_ERR") {
    la.rnr_retry = 1;
    srq_pairs<B> p(fx, la, lb);
    REQUIRE(fx.post_send(p.a1, 1, opcode::send, {p.src.sge(0, 64)}) == 0);
    CHECK(fx.poll_one(p.a1.send_cq).status == wc_status::rnr_retry_exc_err);
    CHECK(fx.drain(p.recv_cq, 5).empty());
  }
  SUBCASE("rnr_retry 7: retried until a receive is posted to the SRQ, then delivered") {
    la.rnr_retry = 7;
    srq_pairs<B> p(fx, la, lb);
    REQUIRE(fx.post_send(p.a1, 1, opcode::send, {p.src.sge(0, 64)}) == 0);
    CHECK(fx.drain(p.a1.send_cq, 20).empty());
    CHECK(B::query_qp_state(p.a1.qp) == qp_state::rts);
    p.post(0);
    CHECK(fx.poll_one(p.a1.send_cq, "the SEND after the SRQ receive").status == wc_status::success);
    auto r = fx.poll_one(p.recv_cq);
    CHECK(r.status == wc_status::success);
    CHECK(r.wr_id == 100);
    CHECK(r.qp_num == p.b1.num);
    CHECK(p.dst.holds(7, 0, 64));
  }
}

// The immediate needs a receive the empty SRQ does not have, and the rkey is bad: which is
// found first differs (deviation table, as for a QP's own empty receive queue).
CONFORMANCE_CASE("srq: RC WRITE_WITH_IMM with a bad rkey and the SRQ empty -> RNR or REM_ACCESS_ERR") {
  fixture<B> fx;
  link_opts la;
  la.rnr_retry = 0;
  srq_pairs<B> p(fx, la);
  const auto want = expected(ids::write_imm_bad_rkey_no_receive, backend_traits<B>::profile());
  REQUIRE(fx.post_rdma(p.a1, 1, opcode::rdma_write_with_imm, p.src.sge(0, 64), p.dst.addr(0), p.dst.rkey() ^ 0x77700,
                       send_flags::signaled, to_be32(9)) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(p.a1.send_cq).status);
  if (want.stays_rts == tri::no) CHECK(fx.wait_state(p.b1, qp_state::err) == qp_state::err);
  if (want.stays_rts == tri::yes) {
    fx.settle();
    CHECK(B::query_qp_state(p.b1.qp) == qp_state::rts);
  }
  CHECK(fx.drain(p.recv_cq, 5).empty());
  CHECK(p.dst.zero(0, 4096));
}

CONFORMANCE_CASE("srq: the armed limit raises SRQ_LIMIT_REACHED once, then is disarmed") {
  fixture<B> fx;
  srq_pairs<B> p(fx);
  for (int k = 0; k < 4; ++k) p.post(k);
  const std::uint32_t max_wr = B::query_srq(p.srq).max_wr;
  CHECK(B::arm_srq_limit(p.srq, 4 * max_wr + 64) == EINVAL);
  REQUIRE(B::arm_srq_limit(p.srq, 3) == 0);
  CHECK(B::query_srq(p.srq).limit == 3);
  async_event ev;
  p.send(p.a1, 1, 0);  // 3 left: not below the limit
  fx.settle();
  CHECK(B::get_async_event(fx.ctx, 100ms, ev) == ETIMEDOUT);
  p.send(p.a2, 2, 64);  // 2 left: below
  fx.settle();
  REQUIRE(B::get_async_event(fx.ctx, 2000ms, ev) == 0);
  CHECK(ev.type == async_event_type::srq_limit_reached);
  CHECK(ev.object == identity(p.srq));
  CHECK(B::query_srq(p.srq).limit == 0);
  p.send(p.a1, 3, 128);  // 1 left: disarmed, no second event
  fx.settle();
  CHECK(B::get_async_event(fx.ctx, 100ms, ev) == ETIMEDOUT);
  CHECK(fx.poll(p.recv_cq, 3, "three receives").size() == 3);
}

CONFORMANCE_CASE("srq: a receive a message took frees its slot before its completion is polled") {
  // So completions of one SRQ in a CQ are not bounded by max_wr where receives are
  // posted again before their completions are polled (docs/ownership-and-threads.md).
  // rxe (kernel 6.1, observed) and the mock; mlx5's provider frees the slot at the poll.
  fixture<B> fx;
  srq_pairs<B> p(fx);
  const std::uint32_t max_wr = B::query_srq(p.srq).max_wr;
  for (std::uint32_t k = 0; k < max_wr; ++k)
    REQUIRE(fx.post_srq_recv(p.srq, 100 + k, {p.dst.sge(64 * (k % 64), 64)}) == 0);
  CHECK(fx.post_srq_recv(p.srq, 99, {p.dst.sge(0, 64)}) == ENOMEM);  // max_wr posted: full
  p.send(p.a1, 1, 0);
  p.send(p.a2, 2, 64);
  fx.settle();
  // Two receives taken, their completions not polled: two slots are free again.
  CHECK(fx.post_srq_recv(p.srq, 98, {p.dst.sge(0, 64)}) == 0);
  CHECK(fx.post_srq_recv(p.srq, 97, {p.dst.sge(64, 64)}) == 0);
  CHECK(fx.post_srq_recv(p.srq, 96, {p.dst.sge(128, 64)}) == ENOMEM);
  auto got = fx.poll(p.recv_cq, 2, "the two receives");
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 100);
  CHECK(got[1].wr_id == 101);
}

// rxe takes more receives than the max_wr its create reports: a receive CQ with room
// for only that many overflowed (a completion lost, a queue pair stuck; seen in the
// guest). query_srq reports what the SRQ takes, on every device the suite runs on, and
// shared_receive_queue sizes by it.
CONFORMANCE_CASE("srq: full at the max_wr query_srq reports, which takes the limit too (rxe: above create's)") {
  fixture<B> fx;
  const auto want = expected(ids::srq_ring, backend_traits<B>::profile());
  srq_attr a{.max_wr = 8, .max_sge = 1};
  auto srq = fx.make_srq(a);
  const std::uint32_t held = B::query_srq(srq).max_wr;
  CHECK(a.max_wr >= 8);
  if (want.exact_capacity) {
    CHECK(held == a.max_wr);
  } else {
    CHECK(a.max_wr == 8);  // as asked
    CHECK(held == 15);     // 16 slots, one kept empty
  }
  REQUIRE(held <= 64);
  auto& buf = fx.make_buffer(64);
  for (std::uint32_t k = 0; k < held; ++k) REQUIRE(fx.post_srq_recv(srq, k, {buf.sge(0, 64)}) == 0);
  CHECK(fx.post_srq_recv(srq, 99, {buf.sge(0, 64)}) == ENOMEM);
  CHECK(B::arm_srq_limit(srq, held + 1) == EINVAL);
  CHECK(B::arm_srq_limit(srq, held) == 0);
}

CONFORMANCE_CASE("srq: a limit given at creation is armed") {
  fixture<B> fx;
  srq_attr a{.max_wr = 16, .max_sge = 1, .limit = 2};
  auto srq = fx.make_srq(a);
  CHECK(B::query_srq(srq).limit == 2);
}

CONFORMANCE_CASE("srq: destroying an SRQ a QP uses is refused (EBUSY); after the QP it succeeds") {
  fixture<B> fx;
  auto cq = fx.make_cq(16);
  srq_attr a{.max_wr = 8, .max_sge = 1};
  auto srq = B::create_srq(fx.pd, a);
  qp_cap caps{8, 0, 1, 0, 0};
  auto qp = B::create_qp_on_srq(fx.pd, cq, cq, srq, qp_type::rc, caps, true);
  CHECK(B::destroy_srq(srq) == EBUSY);
  CHECK(B::dealloc_pd(fx.pd) == EBUSY);  // the SRQ and the QP hold the PD
  CHECK(B::destroy_qp(qp) == 0);
  CHECK(B::destroy_srq(srq) == 0);
}

CONFORMANCE_CASE("srq: a QP moved to ERR flushes nothing of the SRQ; the other QP still takes its receives") {
  fixture<B> fx;
  srq_pairs<B> p(fx);
  p.post(0);
  p.post(1);
  const auto want = expected(ids::srq_last_wqe_event, backend_traits<B>::profile());
  fx.move_to(p.b1, qp_state::err);
  fx.settle();
  CHECK(fx.drain(p.recv_cq, 10).empty());  // b1 has no receive of its own to flush
  async_event ev;
  const int rc = B::get_async_event(fx.ctx, 200ms, ev);
  if (want.async_event == tri::yes) {
    REQUIRE(rc == 0);
    CHECK(ev.type == async_event_type::qp_last_wqe_reached);
    CHECK(ev.qp_num == p.b1.num);
  } else if (want.async_event == tri::no) {
    CHECK(rc == ETIMEDOUT);
  }
  p.send(p.a2, 1, 0);
  p.send(p.a2, 2, 64);
  auto got = fx.poll(p.recv_cq, 2, "both SRQ receives, through b2");
  REQUIRE(got.size() == 2);
  for (int k = 0; k < 2; ++k) {
    CAPTURE(k);
    CHECK(got[k].status == wc_status::success);
    CHECK(got[k].wr_id == std::uint64_t(100 + k));
    CHECK(got[k].qp_num == p.b2.num);
  }
}

CONFORMANCE_CASE("srq: UD QPs on an SRQ: receives after the GRH, routed by qp_num; dropped when the SRQ is empty") {
  fixture<B> fx;
  srq_attr sa{.max_wr = 8, .max_sge = 1};
  auto srq = fx.make_srq(sa);
  auto recv_cq = fx.make_cq(32);
  const qp_opts ud{.type = qp_type::ud, .caps = {16, 0, 1, 0, 0}};
  auto a = fx.make_qp(ud);
  auto b1 = fx.make_qp_on_srq(srq, ud, {}, recv_cq);
  auto b2 = fx.make_qp_on_srq(srq, ud, {}, recv_cq);
  for (const auto* e : {&a, &b1, &b2}) fx.bring_up(*e, 0);
  auto ah = fx.make_ah(fx.loopback_av());
  auto& src = fx.make_buffer(512);
  auto& dst = fx.make_buffer(2048);
  src.fill(9);
  // The SRQ is empty: the datagram is dropped, the sender completes.
  REQUIRE(fx.post_ud(a, 1, ah, b1.num, default_qkey, {src.sge(0, 100)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  CHECK(fx.drain(recv_cq, 5).empty());
  REQUIRE(fx.post_srq_recv(srq, 10, {dst.sge(0, 1024)}) == 0);
  REQUIRE(fx.post_srq_recv(srq, 11, {dst.sge(1024, 1024)}) == 0);
  REQUIRE(fx.post_ud(a, 2, ah, b2.num, default_qkey, {src.sge(0, 100)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  REQUIRE(fx.post_ud(a, 3, ah, b1.num, default_qkey, {src.sge(100, 200)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  auto got = fx.poll(recv_cq, 2, "two datagrams");
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 10);
  CHECK(got[0].qp_num == b2.num);
  CHECK(got[0].byte_len == 100 + grh_bytes);
  CHECK(got[1].wr_id == 11);
  CHECK(got[1].qp_num == b1.num);
  CHECK(got[1].byte_len == 200 + grh_bytes);
  for (const auto& r : got) {
    CHECK(r.status == wc_status::success);
    CHECK(r.src_qp == a.num);
    CHECK(has_all(r.flags, wc_flags::grh));
  }
  CHECK(dst.holds(9, grh_bytes, 100));
  CHECK(dst.holds(9, 1024 + grh_bytes, 200, 100));
}

namespace {
// An SRQ in a PD of its own, an RC QP on it in the fixture's PD, and a 64-byte SEND into
// an SRQ receive whose buffer is registered in the SRQ's PD or in the QP's. The
// statuses are the deviation table's row `id`.
template <class B>
void send_into_srq_buffer(bool in_srq_pd, std::string_view id) {
  fixture<B> fx;
  auto srq_pd = fx.make_pd();
  srq_attr at{.max_wr = 4, .max_sge = 1};
  auto srq = fx.make_srq(at, srq_pd);
  auto a = fx.make_qp();
  auto b = fx.make_qp_on_srq(srq);
  fx.connect(a, b);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256, acc::local_write, in_srq_pd ? srq_pd : typename B::pd{});
  src.fill(5);
  const auto want = expected(id, backend_traits<B>::profile());
  REQUIRE(fx.post_srq_recv(srq, 1, {dst.sge(0, 256)}) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(0, 64)}) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(a.send_cq, "the SEND").status);
  const auto r = fx.poll_one(b.recv_cq, "the receive");
  CONF_CHECK_STATUS(want.resp, r.status);
  if (r.status == wc_status::success) CHECK(dst.holds(5, 0, 64));
}
}  // namespace

CONFORMANCE_CASE("srq: a receive whose buffer is in the SRQ's PD (the QP in another)") {
  send_into_srq_buffer<B>(true, ids::srq_recv_in_srq_pd);
}

CONFORMANCE_CASE("srq: a receive whose buffer is in the QP's PD, not the SRQ's") {
  send_into_srq_buffer<B>(false, ids::srq_recv_in_qp_pd);
}

CONFORMANCE_CASE("srq: a limit given at creation above max_wr, up to the receives the SRQ takes") {
  fixture<B> fx;
  const auto want = expected(ids::srq_create_limit, backend_traits<B>::profile());
  srq_attr plain{.max_wr = 10, .max_sge = 1};
  const std::uint32_t held = B::query_srq(fx.make_srq(plain)).max_wr;  // rxe: 15, its ring
  CHECK(errno_of([&] {
          srq_attr a{.max_wr = 10, .max_sge = 1, .limit = 11};
          auto s = fx.make_srq(a);
          CHECK(B::query_srq(s).limit == 11);
        }) == want.verb_errno);
  CHECK(errno_of([&] {  // above what the SRQ takes: refused everywhere
          srq_attr a{.max_wr = 10, .max_sge = 1, .limit = held + 1};
          (void)fx.make_srq(a);
        }) == EINVAL);
}
