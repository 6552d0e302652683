// Posting rules (docs/semantics.md#posting) and the capacities create calls report back.
#include "deviations.hpp"
#include "harness.hpp"

#include <array>

using namespace conf;

CONFORMANCE_CASE("posting: create_qp and create_cq write back at least what was asked") {
  fixture<B> fx;
  for (qp_type t : {qp_type::rc, qp_type::uc, qp_type::ud}) {
    CAPTURE(t);
    auto e = fx.make_qp({.type = t, .caps = {10, 20, 2, 3, 32}});
    CHECK(e.caps.max_send_wr >= 10);
    CHECK(e.caps.max_recv_wr >= 20);
    CHECK(e.caps.max_send_sge >= 2);
    CHECK(e.caps.max_recv_sge >= 3);
    CHECK(e.caps.max_inline_data >= 32);
  }
  auto cq = fx.make_cq(100);
  CHECK(B::cq_capacity(cq) >= 100);
  const auto dev = B::query_device(fx.ctx);
  CHECK(dev.max_sge >= 1);
  CHECK(dev.max_qp_wr >= 1);
  qp_cap too_many{4, 4, dev.max_sge + 1, 1, 0};
  CHECK(errno_of([&] { fx.make_qp({.caps = too_many}); }) == EINVAL);
  qp_cap too_deep{dev.max_qp_wr + 1, 4, 1, 1, 0};
  CHECK(errno_of([&] { fx.make_qp({.caps = too_deep}); }) == EINVAL);
}

// The library reads the grant back (auto_inline sends what fits max_inline_data; a CQ's
// room for its queue pairs is create_cq's size), so the mock must grant what rxe does.
CONFORMANCE_CASE("create: the send caps and the CQ size granted (rxe grants more than asked, and says so)") {
  fixture<B> fx;
  const auto want = expected(ids::create_grants, backend_traits<B>::profile());
  struct row {
    std::uint32_t sge, inline_data, want_sge, want_inline;
  };
  const row rows[] = {{1, 0, 1, 16}, {1, 64, 4, 64}, {2, 0, 2, 32}, {3, 16, 3, 48}};
  for (const row& r : rows) {
    auto q = fx.make_qp({.caps = {4, 4, r.sge, 1, r.inline_data}});
    CAPTURE(r.sge);
    CAPTURE(r.inline_data);
    CHECK(q.caps.max_send_sge == (want.rounds_grants ? r.want_sge : r.sge));
    CHECK(q.caps.max_inline_data == (want.rounds_grants ? r.want_inline : r.inline_data));
    CHECK(q.caps.max_recv_sge == 1);  // the receive side as asked, on both
  }
  for (int cqe : {1, 10, 16, 100}) {
    CAPTURE(cqe);
    const int rounded = cqe == 1 ? 1 : cqe == 10 ? 15 : cqe == 16 ? 31 : 127;
    CHECK(B::cq_capacity(fx.make_cq(cqe)) == (want.rounds_grants ? rounded : cqe));
  }
}

CONFORMANCE_CASE("posting: SQ full -> ENOMEM, bad_wr is the first WR not posted, earlier ones were posted") {
  fixture<B> fx;
  const auto want = expected(ids::queue_capacity, backend_traits<B>::profile());
  link_opts la, lb;
  la.rnr_retry = 7;  // the first SEND waits in RNR, so nothing leaves the SQ meanwhile
  lb.min_rnr_timer = 1;
  auto a = fx.make_qp({.caps = {8, 8, 1, 1, 0}});
  auto b = fx.make_qp({.caps = {8, 128, 1, 1, 0}, .cqe = 256});
  fx.connect(a, b);
  const std::uint32_t cap = a.caps.max_send_wr;
  REQUIRE(cap <= 60);
  auto& buf = fx.make_buffer(64);
  std::vector<typename fixture<B>::send_spec> list;
  for (std::uint32_t i = 0; i < 2 * cap + 2; ++i) list.push_back({.wr_id = i, .sg = {buf.sge(0, 8)}});
  auto r = fx.post_send_list(a, list);
  CHECK(r.rc == ENOMEM);
  REQUIRE(r.bad_index >= int(cap));
  if (want.exact_capacity) CHECK(r.bad_index == int(cap));
  const std::uint32_t posted = std::uint32_t(r.bad_index);
  // Another single post is refused too while the SQ is full.
  CHECK(fx.post_send(a, 999, opcode::send, {buf.sge(0, 8)}) == ENOMEM);
  for (std::uint32_t i = 0; i < posted; ++i) REQUIRE(fx.post_recv(b, 1000 + i, {buf.sge(8, 8)}) == 0);
  auto sq = fx.poll(a.send_cq, posted, "the posted part of the list");
  REQUIRE(sq.size() == posted);
  for (std::uint32_t i = 0; i < posted; ++i) {
    CHECK(sq[i].wr_id == i);
    CHECK(sq[i].status == wc_status::success);
  }
  CHECK(fx.poll(b.recv_cq, posted, "receives").size() == posted);
  CHECK(fx.drain(a.send_cq, 5).empty());
}

CONFORMANCE_CASE("posting: RQ full -> ENOMEM, bad_wr is the first WR not posted") {
  fixture<B> fx;
  const auto want = expected(ids::queue_capacity, backend_traits<B>::profile());
  auto e = fx.make_qp({.caps = {4, 4, 1, 1, 0}});
  fx.to_init(e);
  const std::uint32_t cap = e.caps.max_recv_wr;
  REQUIRE(cap <= 1024);
  auto& buf = fx.make_buffer(64);
  std::vector<typename fixture<B>::recv_spec> list;
  for (std::uint32_t i = 0; i < 2 * cap + 2; ++i) list.push_back({i, {buf.sge(0, 64)}});
  auto r = fx.post_recv_list(e, list);
  CHECK(r.rc == ENOMEM);
  REQUIRE(r.bad_index >= int(cap));
  if (want.exact_capacity) CHECK(r.bad_index == int(cap));
  const std::uint32_t posted = std::uint32_t(r.bad_index);
  CHECK(fx.post_recv(e, 77, {buf.sge(0, 64)}) == ENOMEM);
  // Exactly the posted ones are there: moving to ERR flushes them.
  fx.move_to(e, qp_state::err);
  auto flushed = fx.poll(e.recv_cq, posted, "flushes of the posted receives");
  REQUIRE(flushed.size() == posted);
  for (std::uint32_t i = 0; i < posted; ++i) CHECK(flushed[i].wr_id == i);
  CHECK(fx.drain(e.recv_cq, 3).empty());
}

CONFORMANCE_CASE("posting: more SGEs than max_send_sge / max_recv_sge is EINVAL") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.caps = {8, 8, 2, 2, 0}});
  auto& buf = fx.make_buffer(4096);
  const auto ns = a.caps.max_send_sge + 1, nr = b.caps.max_recv_sge + 1;
  std::vector<rdmakit::sge> s_sges, r_sges;
  for (std::uint32_t i = 0; i < ns; ++i) s_sges.push_back(buf.sge(i * 8, 8));
  for (std::uint32_t i = 0; i < nr; ++i) r_sges.push_back(buf.sge(i * 8, 8));
  CHECK(fx.post_send(a, 1, opcode::send, s_sges) == EINVAL);
  CHECK(fx.post_recv(b, 2, r_sges) == EINVAL);
  // Nothing was posted: the QPs still work and nothing completes.
  CHECK(fx.drain(a.send_cq, 3).empty());
  CHECK(fx.drain(b.recv_cq, 3).empty());
  CHECK(B::query_qp_state(a.qp) == qp_state::rts);
}

CONFORMANCE_CASE("posting: a list stops at its first invalid WR; the earlier ones are posted") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.caps = {8, 8, 1, 1, 0}});
  auto& buf = fx.make_buffer(4096);
  REQUIRE(fx.post_recv_list(b, {{10, {buf.sge(0, 64)}}, {11, {buf.sge(64, 64)}}}).rc == 0);
  auto r = fx.post_send_list(a, {{.wr_id = 1, .sg = {buf.sge(128, 8)}},
                                 {.wr_id = 2, .sg = {buf.sge(128, 8), buf.sge(136, 8)}},  // too many SGEs
                                 {.wr_id = 3, .sg = {buf.sge(128, 8)}}});
  CHECK(r.rc == EINVAL);
  CHECK(r.bad_index == 1);
  auto c = fx.poll(a.send_cq, 1);
  REQUIRE(c.size() == 1);
  CHECK(c[0].wr_id == 1);
  CHECK(c[0].status == wc_status::success);
  CHECK(fx.poll(b.recv_cq, 1).size() == 1);
  CHECK(fx.drain(a.send_cq, 3).empty());
  CHECK(fx.drain(b.recv_cq, 3).empty());
}

CONFORMANCE_CASE("posting: INLINE above max_inline_data is EINVAL") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.caps = {8, 8, 1, 1, 64}});
  REQUIRE(a.caps.max_inline_data >= 64);
  std::vector<std::uint8_t> data(a.caps.max_inline_data + 1, 0x42);
  CHECK(fx.post_send(a, 1, opcode::send, {{reinterpret_cast<std::uintptr_t>(data.data()), std::uint32_t(data.size()), 0}},
                     send_flags::signaled | send_flags::inline_data) == EINVAL);
  CHECK(fx.drain(a.send_cq, 3).empty());
}

// A WRITE of more than 2^31 bytes (one SGE past a small region: its keys are never
// looked at): refused at post by the spec; posted by rxe, whose requester fails it
// (audit 36, D7).
CONFORMANCE_CASE("posting: a WRITE above 2^31 bytes") {
  fixture<B> fx;
  const auto want = expected(ids::message_over_2g, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& buf = fx.make_buffer(64);
  typename B::sge s;
  B::set_sge(s, buf.addr(0), 0x80000001u, buf.lkey());
  typename B::send_wr wr{};
  B::set_send(wr, 1, opcode::rdma_write, send_flags::signaled, &s, 1);
  B::set_rdma(wr, buf.addr(0), buf.rkey());
  (void)check_post_outcome<B>(fx, a, wr, want, "the WRITE's completion");
  CHECK((fx.wait_state(a, qp_state::rts) == qp_state::rts) == (want.stays_rts != tri::no));
}

CONFORMANCE_CASE("posting: INLINE data is copied at post time and needs no lkey") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair({.caps = {8, 8, 1, 1, 64}});
  auto& dst = fx.make_buffer(128);
  REQUIRE(fx.post_recv(b, 5, {dst.sge(0, 128)}) == 0);
  std::array<std::uint8_t, 60> data{};
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::uint8_t(i + 1);
  REQUIRE(fx.post_send(a, 6, opcode::send, {{reinterpret_cast<std::uintptr_t>(data.data()), 60, 0}},
                       send_flags::signaled | send_flags::inline_data) == 0);
  data.fill(0xff);  // reused at once
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 60);
  bool same = true;
  for (std::size_t i = 0; i < 60; ++i) same = same && dst.data()[i] == std::byte(i + 1);
  CHECK(same);
}

// Verbs allow a WR whose target overlaps its source (a loopback pair, one region): the
// device reads a packet before it writes it, so the target gets the source's bytes as
// they were. The mock delivered such a message with memcpy from the sender's buffer:
// undefined behaviour (ASan: memcpy-param-overlap).
CONFORMANCE_CASE("posting: a WRITE or SEND whose target overlaps its source gets the source's bytes") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& mem = fx.make_buffer(256);
  mem.fill(9);
  SUBCASE("RDMA_WRITE forward") {
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, mem.sge(0, 64), mem.addr(16), mem.rkey()) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    CHECK(mem.holds(9, 16, 64, 0));
    CHECK(mem.holds(9, 0, 16));  // the bytes before the target, untouched
  }
  SUBCASE("RDMA_WRITE backward") {
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, mem.sge(16, 64), mem.addr(0), mem.rkey()) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    CHECK(mem.holds(9, 0, 64, 16));
  }
  SUBCASE("SEND into a receive over its own bytes") {
    REQUIRE(fx.post_recv(b, 7, {mem.sge(0, 128)}) == 0);
    REQUIRE(fx.post_send(a, 2, opcode::send, {mem.sge(40, 64)}) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    auto r = fx.poll_one(b.recv_cq);
    CHECK(r.status == wc_status::success);
    CHECK(r.byte_len == 64);
    CHECK(mem.holds(9, 0, 64, 40));
  }
}

CONFORMANCE_CASE("posting: post_recv in RESET is EINVAL") {
  fixture<B> fx;
  const auto want = expected(ids::recv_refused_bad_wr, backend_traits<B>::profile());
  auto& buf = fx.make_buffer(128);
  for (qp_type t : {qp_type::rc, qp_type::uc, qp_type::ud}) {
    CAPTURE(t);
    auto e = fx.make_qp({.type = t});
    const auto r = fx.post_recv_list(e, {{1, {buf.sge(0, 64)}}, {2, {buf.sge(64, 64)}}});
    CHECK(r.rc == want.post_errno);
    CHECK(r.bad_index == (want.bad_wr_set ? 0 : -1));
    fx.to_init(e);  // takes receives from INIT on; none of the refused ones is there
    REQUIRE(fx.post_recv(e, 3, {buf.sge(0, 64)}) == 0);
    fx.move_to(e, qp_state::err);
    auto flushed = fx.poll(e.recv_cq, 1, "the one receive posted in INIT");
    REQUIRE(flushed.size() == 1);
    CHECK(flushed[0].wr_id == 3);
    CHECK(fx.drain(e.recv_cq, 3).empty());
  }
}

CONFORMANCE_CASE("posting: post_send below RTS is EINVAL") {
  fixture<B> fx;
  const auto want = expected(ids::post_below_rts, backend_traits<B>::profile());
  auto& buf = fx.make_buffer(64);
  for (qp_type t : {qp_type::rc, qp_type::uc, qp_type::ud}) {
    CAPTURE(t);
    auto e = fx.make_qp({.type = t});
    auto ah = t == qp_type::ud ? fx.make_ah(fx.loopback_av()) : typename B::ah{};
    auto try_post = [&] {
      int rc = 0;
      typename B::send_wr* bad = nullptr;
      typename B::sge s;
      B::set_sge(s, buf.addr(0), 8, buf.lkey());
      typename B::send_wr wr{};
      B::set_send(wr, 1, opcode::send, send_flags::signaled, &s, 1);
      if (t == qp_type::ud) B::set_ud(wr, ah, e.num, default_qkey);  // a UD WR always names an AH
      rc = B::post_send(e.qp, &wr, &bad);
      typename fixture<B>::list_result r{rc, bad == nullptr ? -1 : bad == &wr ? 0 : -2};
      CHECK(r.rc == want.post_errno);
      CHECK(r.bad_index == (want.bad_wr_set ? 0 : -1));
    };
    try_post();  // RESET
    fx.to_init(e);
    try_post();
    fx.to_rtr(e, e.num);
    try_post();
    CHECK(fx.drain(e.send_cq, 3).empty());
  }
}

// A send posted in SQD is accepted and waits; what sends it after SQD->RTS differs
// (deviation table).
CONFORMANCE_CASE("posting: a send posted in SQD, once the QP is back in RTS or in ERR") {
  fixture<B> fx;
  const auto want = expected(ids::sqd_post_waits_for_doorbell, backend_traits<B>::profile());
  const bool at_rts = !want.req.allows_nothing();  // it runs at the move to RTS itself
  auto& src = fx.make_buffer(1024);
  src.fill(4);
  for (bool to_err : {false, true}) {
    CAPTURE(to_err);
    auto& dst = fx.make_buffer(1024);
    auto a = fx.make_qp();
    auto b = fx.make_qp();
    fx.connect(a, b);
    for (int k = 0; k < 2; ++k) REQUIRE(fx.post_recv(b, 100 + k, {dst.sge(256 * k, 256)}) == 0);
    fx.move_to(a, qp_state::sqd);
    REQUIRE(fx.wait_state(a, qp_state::sqd) == qp_state::sqd);
    REQUIRE(fx.post_send(a, 1, opcode::send, {src.sge(0, 64)}) == 0);
    fx.settle();
    CHECK(fx.drain(a.send_cq).empty());  // nothing goes out in SQD
    fx.move_to(a, qp_state::rts);
    if (at_rts) {
      auto c = fx.poll_one(a.send_cq, "the SEND, at the move to RTS");
      CHECK(c.wr_id == 1);
      CONF_CHECK_STATUS(want.req, c.status);
      CHECK(fx.poll_one(b.recv_cq, "its receive").wr_id == 100);
    } else {
      fx.settle();
      CHECK(fx.drain(a.send_cq).empty());
      CHECK(fx.drain(b.recv_cq).empty());
    }
    if (to_err) {  // the move to ERR flushes what still waits
      fx.move_to(a, qp_state::err);
      if (!at_rts) {
        auto c = fx.poll_one(a.send_cq, "the flush");
        CHECK(c.wr_id == 1);
        CHECK(c.status == wc_status::wr_flush_err);
      }
      CHECK(fx.drain(a.send_cq).empty());
      CHECK(dst.zero(at_rts ? 64 : 0, at_rts ? 960 : 1024));
      continue;
    }
    REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(64, 64)}) == 0);  // the next doorbell
    auto sent = fx.poll(a.send_cq, at_rts ? 1 : 2, "the SENDs");
    REQUIRE(sent.size() == (at_rts ? 1u : 2u));
    if (!at_rts) {
      CHECK(sent[0].wr_id == 1);
      CHECK(sent[0].status == wc_status::success);
    }
    CHECK(sent.back().wr_id == 2);
    CHECK(sent.back().status == wc_status::success);
    auto got = fx.poll(b.recv_cq, at_rts ? 1 : 2, "the receives");
    REQUIRE(got.size() == (at_rts ? 1u : 2u));
    CHECK(got.back().wr_id == 101);
    CHECK(dst.holds(4, 0, 64, 0));
    CHECK(dst.holds(4, 256, 64, 64));
    CHECK(fx.drain(a.send_cq).empty());
  }
}

CONFORMANCE_CASE("posting: a send refused below RTS, once the QP is in RTS or ERR") {
  fixture<B> fx;
  const auto want = expected(ids::below_rts_left_in_ring, backend_traits<B>::profile());
  const bool runs = !want.req.allows_nothing();
  auto& src = fx.make_buffer(1024);
  auto& dst = fx.make_buffer(1024);
  src.fill(4);
  for (int where = 0; where < 3; ++where) {  // refused in RESET, INIT, RTR
    CAPTURE(where);
    auto a = fx.make_qp();
    auto b = fx.make_qp();
    fx.bring_up(b, a.num);
    for (int k = 0; k < 2; ++k) REQUIRE(fx.post_recv(b, 100 + k, {dst.sge(256 * k, 256)}) == 0);
    if (where >= 1) fx.to_init(a);
    if (where >= 2) fx.to_rtr(a, b.num);
    CHECK(fx.post_send(a, 1, opcode::send, {src.sge(0, 64)}) == EINVAL);
    if (where < 1) fx.to_init(a);
    if (where < 2) fx.to_rtr(a, b.num);
    fx.to_rts(a);
    fx.settle();
    CHECK(fx.drain(a.send_cq).empty());  // nothing goes out at the move to RTS itself
    REQUIRE(fx.post_send(a, 2, opcode::send, {src.sge(64, 64)}) == 0);
    auto sent = fx.poll(a.send_cq, runs ? 2 : 1, "the SENDs");
    REQUIRE(sent.size() == (runs ? 2u : 1u));
    if (runs) {
      CHECK(sent[0].wr_id == 1);
      CONF_CHECK_STATUS(want.req, sent[0].status);
    }
    CHECK(sent.back().wr_id == 2);
    CHECK(sent.back().status == wc_status::success);
    auto got = fx.poll(b.recv_cq, runs ? 2 : 1, "the receives");
    REQUIRE(got.size() == (runs ? 2u : 1u));
    CHECK(dst.holds(4, 0, 64, runs ? 0 : 64));
    CHECK(fx.drain(a.send_cq).empty());
  }
  // Refused in INIT, then moved to ERR: flushed where it sits in the ring.
  auto a = fx.make_qp();
  fx.to_init(a);
  CHECK(fx.post_send(a, 7, opcode::send, {src.sge(0, 64)}) == EINVAL);
  fx.move_to(a, qp_state::err);
  if (runs) {
    auto c = fx.poll_one(a.send_cq, "the flush");
    CHECK(c.wr_id == 7);
    CHECK(c.status == wc_status::wr_flush_err);
  }
  fx.settle();
  CHECK(fx.drain(a.send_cq).empty());
}

CONFORMANCE_CASE("posting: READ and atomics on a QP connected with max_rd_atomic 0") {
  fixture<B> fx;
  const auto want = expected(ids::read_max_rd_atomic_0, backend_traits<B>::profile());
  link_opts la;
  la.max_rd_atomic = 0;
  auto a = fx.make_qp();
  auto b = fx.make_qp();
  fx.connect(a, b, la);
  auto& src = fx.make_buffer(1024);
  auto& dst = fx.make_buffer(1024);
  dst.fill(9);
  CHECK(fx.post_rdma(a, 1, opcode::rdma_read, src.sge(0, 64), dst.addr(0), dst.rkey()) == want.post_errno);
  CHECK(fx.post_atomic(a, 2, opcode::atomic_fetch_and_add, src.sge(512, 8), dst.addr(512), dst.rkey(), 1) ==
        want.post_errno);
  REQUIRE(fx.post_rdma(a, 3, opcode::rdma_write, src.sge(128, 8), dst.addr(256), dst.rkey()) == 0);
  fx.settle();
  if (want.post_errno != 0) {  // nothing ahead of the WRITE
    CHECK(fx.poll_one(a.send_cq, "the WRITE").wr_id == 3);
    return;
  }
  CHECK(want.req.is_nothing());
  CHECK(fx.drain(a.send_cq).empty());  // the READ never issues, and the WRITE waits behind it
  CHECK(src.zero(0, 64));        // nothing was read
  CHECK(dst.holds(9, 512, 8, 512));  // the atomic's target as it was
  CHECK((B::query_qp_state(a.qp) == qp_state::rts) == (want.stays_rts == tri::yes));
  fx.move_to(a, qp_state::err);
  check_flushes(fx.poll(a.send_cq, 3, "the flushes"), {1, 2, 3}, a.num);
}

CONFORMANCE_CASE("posting: post_recv is EINVAL in RESET and allowed from INIT on") {
  fixture<B> fx;
  auto a = fx.make_qp();
  auto b = fx.make_qp();
  auto& buf = fx.make_buffer(256);
  buf.fill(8, 0, 64);
  CHECK(fx.post_recv(b, 1, {buf.sge(128, 64)}) == EINVAL);
  fx.to_init(b);
  CHECK(fx.post_recv(b, 2, {buf.sge(128, 64)}) == 0);  // posted in INIT, used once connected
  fx.bring_up(a, b.num);
  fx.to_rtr(b, a.num);
  CHECK(fx.post_recv(b, 3, {buf.sge(192, 64)}) == 0);  // RTR
  fx.to_rts(b);
  CHECK(fx.post_recv(b, 4, {buf.sge(192, 64)}) == 0);  // RTS
  REQUIRE(fx.post_send(a, 10, opcode::send, {buf.sge(0, 64)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.wr_id == 2);
  CHECK(r.status == wc_status::success);
  CHECK(buf.holds(8, 128, 64));
}

CONFORMANCE_CASE("posting: WRs posted to a QP in ERR complete with WR_FLUSH_ERR") {
  fixture<B> fx;
  const auto want = expected(ids::post_in_err, backend_traits<B>::profile());
  auto pair = fx.make_pair();
  const auto &a = pair.first, &b = pair.second;
  auto& buf = fx.make_buffer(256);
  fx.move_to(a, qp_state::err);
  CHECK(fx.post_send(a, 1, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.post_recv(a, 2, {buf.sge(64, 64)}) == 0);
  auto check_side = [&](typename B::cq cq, status_set allowed, std::uint64_t wr_id) {
    auto got = allowed.allows_nothing() ? fx.drain(cq) : fx.poll(cq, 1, "a flush of a WR posted in ERR");
    if (got.empty()) {
      CHECK_MESSAGE(allowed.allows_nothing(), "no completion, expected " << allowed.to_string());
      return;
    }
    CHECK(got[0].wr_id == wr_id);
    CONF_CHECK_STATUS(allowed, got[0].status);
    CHECK(got[0].qp_num == a.num);
  };
  check_side(a.send_cq, want.req, 1);
  check_side(a.recv_cq, want.resp, 2);
  CHECK(fx.drain(b.recv_cq, 3).empty());
}

CONFORMANCE_CASE("posting: post_recv on a QP in RESET is EINVAL") {
  fixture<B> fx;
  auto& buf = fx.make_buffer(64);
  for (qp_type t : {qp_type::rc, qp_type::uc, qp_type::ud}) {
    CAPTURE(t);
    auto e = fx.make_qp({.type = t});
    CHECK(fx.post_recv(e, 1, {buf.sge(0, 64)}) == EINVAL);
    fx.to_init(e);
    CHECK(fx.post_recv(e, 2, {buf.sge(0, 64)}) == 0);  // from INIT on, always
  }
}
