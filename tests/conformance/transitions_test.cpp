// QP state machine (docs/semantics.md#qp-states): every legal transition per transport, a sample
// of illegal ones, and the attribute checks of modify_qp.
#include "deviations.hpp"
#include "harness.hpp"

using namespace conf;

namespace {

constexpr qp_type all_transports[] = {qp_type::rc, qp_type::uc, qp_type::ud};

/// Runs `body(type)` once per transport, each in its own SUBCASE (fresh fixture).
template <class F>
void for_each_transport(F&& body) {
  for (qp_type t : all_transports) {
    SUBCASE(to_string(t)) { body(t); }
  }
}

template <class B>
int modify_errno(const endpoint<B>& e, const qp_attr& a, qp_attr_mask m) {
  return errno_of([&] { B::modify_qp(e.qp, a, m); });
}

template <class B>
qp_attr init_attr(fixture<B>& fx) {
  qp_attr a;
  a.state = qp_state::init;
  a.port_num = fx.port_num;
  a.qkey = default_qkey;
  a.access_flags = acc::remote_write;
  return a;
}

template <class B>
qp_attr rtr_attr(fixture<B>& fx, std::uint32_t dest) {
  qp_attr a;
  a.state = qp_state::rtr;
  a.path_mtu = mtu::mtu_1024;
  a.dest_qp_num = dest;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.av = fx.loopback_av();
  return a;
}

inline qp_attr rts_attr() {
  qp_attr a;
  a.state = qp_state::rts;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return a;
}

/// A QP of type `t` walked up to `s` along the legal path.
template <class B>
endpoint<B> qp_in(fixture<B>& fx, qp_type t, qp_state s) {
  auto e = fx.make_qp({.type = t});
  if (s == qp_state::reset) return e;
  fx.to_init(e);
  if (s == qp_state::init) return e;
  fx.to_rtr(e, e.num);  // loopback to itself is enough for state checks
  if (s == qp_state::rtr) return e;
  fx.to_rts(e);
  if (s == qp_state::rts) return e;
  if (s == qp_state::sqd) {
    fx.move_to(e, qp_state::sqd);
    return e;
  }
  fx.move_to(e, qp_state::err);
  return e;
}

}  // namespace

CONFORMANCE_CASE("transitions: a freshly created QP is in RESET") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    CHECK(B::query_qp_state(e.qp) == qp_state::reset);
    CHECK(e.num != 0);
  });
}

CONFORMANCE_CASE("transitions: RESET->INIT->INIT->RTR->RTS->RTS with exactly the required masks") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    B::modify_qp(e.qp, init_attr(fx), init_mask(t));
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
    // INIT→INIT with no optional attribute, then with the optional ones.
    B::modify_qp(e.qp, init_attr(fx), qp_attr_mask::state);
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
    B::modify_qp(e.qp, init_attr(fx), init_mask(t));
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
    B::modify_qp(e.qp, rtr_attr(fx, e.num), rtr_mask(t));
    CHECK(B::query_qp_state(e.qp) == qp_state::rtr);
    B::modify_qp(e.qp, rts_attr(), rts_mask(t));
    CHECK(B::query_qp_state(e.qp) == qp_state::rts);
    auto again = rts_attr();
    B::modify_qp(e.qp, again, qp_attr_mask::state);
    CHECK(B::query_qp_state(e.qp) == qp_state::rts);
  });
}

CONFORMANCE_CASE("transitions: optional attributes are accepted on each step") {
  fixture<B> fx;
  using m = qp_attr_mask;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    fx.to_init(e);
    auto rtr = rtr_attr(fx, e.num);
    rtr.qkey = default_qkey;
    rtr.access_flags = acc::remote_write;
    const auto rtr_opt = t == qp_type::ud ? m::pkey_index | m::qkey : m::pkey_index | m::access_flags;
    B::modify_qp(e.qp, rtr, rtr_mask(t) | rtr_opt);
    CHECK(B::query_qp_state(e.qp) == qp_state::rtr);
    auto rts = rts_attr();
    rts.cur_state = qp_state::rtr;
    rts.qkey = default_qkey;
    rts.access_flags = acc::remote_write;
    rts.min_rnr_timer = 12;
    const auto rts_opt = t == qp_type::ud   ? m::cur_state | m::qkey
                         : t == qp_type::uc ? m::cur_state | m::access_flags
                                            : m::cur_state | m::access_flags | m::min_rnr_timer;
    B::modify_qp(e.qp, rts, rts_mask(t) | rts_opt);
    CHECK(B::query_qp_state(e.qp) == qp_state::rts);
    // RTS→RTS takes the RTR→RTS optional set.
    rts.cur_state = qp_state::rts;
    B::modify_qp(e.qp, rts, m::state | rts_opt);
    CHECK(B::query_qp_state(e.qp) == qp_state::rts);
  });
}

CONFORMANCE_CASE("transitions: RTS->SQD->RTS") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    auto e = qp_in(fx, t, qp_state::rts);
    fx.move_to(e, qp_state::sqd);
    CHECK(fx.wait_state(e, qp_state::sqd) == qp_state::sqd);
    fx.move_to(e, qp_state::rts);
    CHECK(B::query_qp_state(e.qp) == qp_state::rts);
  });
}

// SQ_DRAINED comes once the WRs a queue pair had started when it moved to SQD are done,
// if the move asked for it (EN_SQD_ASYNC_NOTIFY); rxe 6.1 raises it at every move to SQD
// (audit 36, D5).
CONFORMANCE_CASE("transitions: SQ_DRAINED after RTS->SQD, asked for and not") {
  fixture<B> fx;
  const auto want = expected(ids::sq_drained_unasked, backend_traits<B>::profile());
  auto& buf = fx.make_buffer(4096);
  for (const bool ask : {true, false}) {
    CAPTURE(ask);
    auto [a, b] = fx.make_pair();
    for (std::uint64_t i = 0; i < 4; ++i)
      REQUIRE(fx.post_rdma(a, i, opcode::rdma_write, buf.sge(0, 64), buf.addr(1024), buf.rkey()) == 0);
    qp_attr attr;
    attr.state = qp_state::sqd;
    attr.en_sqd_async_notify = ask;
    REQUIRE(modify_errno(a, attr, ask ? qp_attr_mask::state | qp_attr_mask::en_sqd_async_notify
                                      : qp_attr_mask::state) == 0);
    CHECK(fx.poll(a.send_cq, 4, "the WRITEs started before SQD").size() == 4);
    async_event ev;
    const bool expect = ask || want.async_event == tri::yes;
    const int got = B::get_async_event(fx.ctx, expect ? 2000ms : 300ms, ev);
    CHECK(got == (expect ? 0 : ETIMEDOUT));
    if (got == 0) {
      CHECK(ev.type == async_event_type::sq_drained);
      CHECK(ev.object == static_cast<const void*>(a.qp));
      CHECK(B::get_async_event(fx.ctx, 100ms, ev) == ETIMEDOUT);  // once
    }
    fx.move_to(a, qp_state::err);
    fx.drain(a.send_cq, 4);
  }
}

CONFORMANCE_CASE("transitions: SQD->SQD, with the state alone or an optional attribute") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    auto e = qp_in(fx, t, qp_state::sqd);
    REQUIRE(fx.wait_state(e, qp_state::sqd) == qp_state::sqd);
    qp_attr a;
    a.state = qp_state::sqd;
    CHECK(modify_errno(e, a, qp_attr_mask::state) == 0);
    CHECK(B::query_qp_state(e.qp) == qp_state::sqd);
    // An attribute the table makes optional here (UD: QKEY; RC, UC: ACCESS_FLAGS).
    qp_attr_mask mask = qp_attr_mask::state;
    if (t == qp_type::ud) {
      a.qkey = default_qkey;
      mask = mask | qp_attr_mask::qkey;
    } else {
      a.access_flags = acc::remote_write | acc::remote_read;
      mask = mask | qp_attr_mask::access_flags;
    }
    CHECK(modify_errno(e, a, mask) == 0);
    CHECK(B::query_qp_state(e.qp) == qp_state::sqd);
    // One it does not (SQ_PSN) is still refused.
    a.sq_psn = 5;
    CHECK(modify_errno(e, a, qp_attr_mask::state | qp_attr_mask::sq_psn) == EINVAL);
    fx.move_to(e, qp_state::rts);
    CHECK(B::query_qp_state(e.qp) == qp_state::rts);
  });
}

CONFORMANCE_CASE("transitions: INIT, RTR, RTS, SQD and ERR may all move to ERR") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    for (qp_state from : {qp_state::init, qp_state::rtr, qp_state::rts, qp_state::sqd, qp_state::err}) {
      CAPTURE(from);
      auto e = qp_in(fx, t, from);
      CHECK(errno_of([&] { fx.move_to(e, qp_state::err); }) == 0);
      CHECK(B::query_qp_state(e.qp) == qp_state::err);
    }
  });
}

CONFORMANCE_CASE("transitions: every state may move to RESET, and RESET->INIT works again") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    for (qp_state from : {qp_state::reset, qp_state::init, qp_state::rtr, qp_state::rts, qp_state::sqd,
                          qp_state::err}) {
      CAPTURE(from);
      auto e = qp_in(fx, t, from);
      CHECK(errno_of([&] { fx.move_to(e, qp_state::reset); }) == 0);
      CHECK(B::query_qp_state(e.qp) == qp_state::reset);
      CHECK(errno_of([&] { fx.to_init(e); }) == 0);
      CHECK(B::query_qp_state(e.qp) == qp_state::init);
    }
  });
}

CONFORMANCE_CASE("transitions: RESET->ERR is illegal") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    CHECK(errno_of([&] { fx.move_to(e, qp_state::err); }) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::reset);
  });
}

CONFORMANCE_CASE("transitions: skipping a state is illegal") {
  fixture<B> fx;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    CHECK(modify_errno(e, rtr_attr(fx, e.num), rtr_mask(t) | qp_attr_mask::pkey_index | qp_attr_mask::port) ==
          EINVAL);
    CHECK(modify_errno(e, rts_attr(), rts_mask(t)) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::reset);
    fx.to_init(e);
    CHECK(modify_errno(e, rts_attr(), rts_mask(t)) == EINVAL);
    CHECK(modify_errno(e, rts_attr(), qp_attr_mask::state) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
    // INIT→SQD is not a transition either.
    qp_attr sqd;
    sqd.state = qp_state::sqd;
    CHECK(modify_errno(e, sqd, qp_attr_mask::state) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
  });
}

CONFORMANCE_CASE("transitions: a mask missing a required bit is EINVAL") {
  fixture<B> fx;
  using m = qp_attr_mask;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    // RESET→INIT without PORT, without the transport's ACCESS_FLAGS/QKEY.
    CHECK(modify_errno(e, init_attr(fx), init_mask(t) & ~m::port) == EINVAL);
    CHECK(modify_errno(e, init_attr(fx), init_mask(t) & ~(t == qp_type::ud ? m::qkey : m::access_flags)) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::reset);
    fx.to_init(e);
    if (t != qp_type::ud) {
      CHECK(modify_errno(e, rtr_attr(fx, e.num), rtr_mask(t) & ~m::dest_qpn) == EINVAL);
      CHECK(modify_errno(e, rtr_attr(fx, e.num), rtr_mask(t) & ~m::av) == EINVAL);
      if (t == qp_type::rc) CHECK(modify_errno(e, rtr_attr(fx, e.num), rtr_mask(t) & ~m::min_rnr_timer) == EINVAL);
      CHECK(B::query_qp_state(e.qp) == qp_state::init);
    }
    fx.to_rtr(e, e.num);
    CHECK(modify_errno(e, rts_attr(), rts_mask(t) & ~m::sq_psn) == EINVAL);
    if (t == qp_type::rc) {
      CHECK(modify_errno(e, rts_attr(), rts_mask(t) & ~m::retry_cnt) == EINVAL);
      CHECK(modify_errno(e, rts_attr(), rts_mask(t) & ~m::max_qp_rd_atomic) == EINVAL);
    }
    CHECK(B::query_qp_state(e.qp) == qp_state::rtr);
  });
}

CONFORMANCE_CASE("transitions: a mask with a bit that is neither required nor optional is EINVAL") {
  fixture<B> fx;
  using m = qp_attr_mask;
  for_each_transport([&](qp_type t) {
    auto e = fx.make_qp({.type = t});
    auto ia = init_attr(fx);
    ia.path_mtu = mtu::mtu_1024;
    CHECK(modify_errno(e, ia, init_mask(t) | m::path_mtu) == EINVAL);
    if (t != qp_type::ud) CHECK(modify_errno(e, ia, init_mask(t) | m::qkey) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::reset);
    fx.to_init(e);
    auto ra = rtr_attr(fx, e.num);
    ra.sq_psn = 0;
    CHECK(modify_errno(e, ra, rtr_mask(t) | m::sq_psn) == EINVAL);
    if (t == qp_type::uc) CHECK(modify_errno(e, ra, rtr_mask(t) | m::max_dest_rd_atomic) == EINVAL);
    if (t == qp_type::ud) CHECK(modify_errno(e, ra, rtr_mask(t) | m::av) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
    fx.to_rtr(e, e.num);
    auto sa = rts_attr();
    if (t == qp_type::uc) CHECK(modify_errno(e, sa, rts_mask(t) | m::min_rnr_timer) == EINVAL);
    if (t == qp_type::ud) CHECK(modify_errno(e, sa, rts_mask(t) | m::timeout) == EINVAL);
    if (t == qp_type::rc) CHECK(modify_errno(e, sa, rts_mask(t) | m::dest_qpn) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::rtr);
  });
}

CONFORMANCE_CASE("transitions: ACCESS_FLAGS on a UD QP is EINVAL") {
  fixture<B> fx;
  auto e = fx.make_qp({.type = qp_type::ud});
  CHECK(modify_errno(e, init_attr(fx), init_mask(qp_type::ud) | qp_attr_mask::access_flags) == EINVAL);
  CHECK(B::query_qp_state(e.qp) == qp_state::reset);
  fx.to_init(e);
  CHECK(modify_errno(e, init_attr(fx), qp_attr_mask::state | qp_attr_mask::access_flags) == EINVAL);
}

CONFORMANCE_CASE("transitions: timeout > 31 and max_rd_atomic > 128 are EINVAL") {
  fixture<B> fx;
  auto e = fx.make_qp({.type = qp_type::rc});
  fx.to_init(e);
  fx.to_rtr(e, e.num);
  auto a = rts_attr();
  a.timeout = 32;
  CHECK(modify_errno(e, a, rts_mask(qp_type::rc)) == EINVAL);
  a.timeout = 14;
  a.max_rd_atomic = 129;
  CHECK(modify_errno(e, a, rts_mask(qp_type::rc)) == EINVAL);
  CHECK(B::query_qp_state(e.qp) == qp_state::rtr);
  a.timeout = 31;
  a.max_rd_atomic = 1;
  CHECK(modify_errno(e, a, rts_mask(qp_type::rc)) == 0);
}

CONFORMANCE_CASE("transitions: a path_mtu above the port's max MTU is EINVAL") {
  fixture<B> fx;
  for (qp_type t : {qp_type::rc, qp_type::uc}) {
    CAPTURE(t);
    auto e = fx.make_qp({.type = t});
    fx.to_init(e);
    auto a = rtr_attr(fx, e.num);
    a.path_mtu = static_cast<mtu>(static_cast<std::uint32_t>(fx.port.max_mtu) + 1);
    CHECK(modify_errno(e, a, rtr_mask(t)) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
    a.path_mtu = fx.port.max_mtu;
    CHECK(modify_errno(e, a, rtr_mask(t)) == 0);
  }
}

CONFORMANCE_CASE("transitions: on RoCE an address vector without GRH is EINVAL") {
  fixture<B> fx;
  REQUIRE_MESSAGE(fx.port.layer == link_layer::ethernet, "the conformance device is RoCE (mock default, rxe)");
  for (qp_type t : {qp_type::rc, qp_type::uc}) {
    CAPTURE(t);
    auto e = fx.make_qp({.type = t});
    fx.to_init(e);
    auto a = rtr_attr(fx, e.num);
    a.av.is_global = false;
    CHECK(modify_errno(e, a, rtr_mask(t)) == EINVAL);
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
  }
  auto av = fx.loopback_av();
  av.is_global = false;
  CHECK(errno_of([&] { fx.make_ah(av); }) == EINVAL);
}

CONFORMANCE_CASE("transitions: PSNs are 24 bits and a QP goes RTS with the largest one") {
  fixture<B> fx;
  link_opts l;
  l.sq_psn = l.rq_psn = psn_mask;  // wraps to 0 on the next packet
  auto [a, b] = fx.make_pair({}, l, l);
  auto& buf = fx.make_buffer(256);
  buf.fill(3);
  auto& dst = fx.make_buffer(256);
  for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(fx.post_recv(b, 100 + i, {dst.sge(0, 256)}) == 0);
  for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 256)}) == 0);
  auto sent = fx.poll(a.send_cq, 3, "sends across the PSN wrap");
  for (auto& c : sent) CHECK(c.status == wc_status::success);
  auto got = fx.poll(b.recv_cq, 3, "receives across the PSN wrap");
  for (auto& c : got) CHECK(c.status == wc_status::success);
  CHECK(dst.holds(3, 0, 256));
}

namespace {
/// An RC pair whose `a` has two SENDs stuck in RNR (b has no receive) and two receives posted.
template <class B>
std::pair<endpoint<B>, endpoint<B>> stalled_pair(fixture<B>& fx, buffer<B>& buf) {
  link_opts la, lb;
  la.rnr_retry = 7;
  lb.min_rnr_timer = 1;
  auto a = fx.make_qp({.sig_all = false});
  auto b = fx.make_qp();
  fx.connect(a, b, la, lb);
  REQUIRE(fx.post_recv_list(a, {{900, {buf.sge(0, 64)}}, {901, {buf.sge(64, 64)}}}).rc == 0);
  REQUIRE(fx.post_send_list(a, {{.wr_id = 1, .sg = {buf.sge(128, 8)}, .flags = send_flags::none},
                                {.wr_id = 2, .sg = {buf.sge(128, 8)}, .flags = send_flags::signaled}})
              .rc == 0);
  CHECK(fx.drain(a.send_cq, 5).empty());  // stuck in RNR
  return {a, b};
}

// `a`, just moved to RESET, connected to `b` again carries a SEND: what it dropped never
// comes back.
template <class B>
void check_usable_after_reset(fixture<B>& fx, endpoint<B>& a, endpoint<B>& b, buffer<B>& buf) {
  fx.bring_up(a, b.num);
  REQUIRE(fx.post_recv(b, 50, {buf.sge(192, 64)}) == 0);
  REQUIRE(fx.post_send(a, 3, opcode::send, {buf.sge(128, 8)}) == 0);
  auto c = fx.poll_one(a.send_cq);
  CHECK(c.wr_id == 3);
  CHECK(c.status == wc_status::success);
  CHECK(fx.poll_one(b.recv_cq).wr_id == 50);
}
}  // namespace

CONFORMANCE_CASE("transitions: moving to ERR flushes every outstanding WR in queue order, signaled or not") {
  fixture<B> fx;
  auto& buf = fx.make_buffer(256);
  auto [a, b] = stalled_pair(fx, buf);
  fx.move_to(a, qp_state::err);
  CHECK(B::query_qp_state(a.qp) == qp_state::err);
  check_flushes(fx.poll(a.send_cq, 2, "send flushes"), {1, 2}, a.num);
  check_flushes(fx.poll(a.recv_cq, 2, "receive flushes"), {900, 901}, a.num);
  CHECK(fx.drain(a.send_cq, 3).empty());
}

CONFORMANCE_CASE("transitions: moving to RESET drops outstanding WRs without completions") {
  fixture<B> fx;
  auto& buf = fx.make_buffer(256);
  auto [a, b] = stalled_pair(fx, buf);
  fx.move_to(a, qp_state::reset);
  CHECK(B::query_qp_state(a.qp) == qp_state::reset);
  CHECK(fx.drain(a.send_cq).empty());
  CHECK(fx.drain(a.recv_cq).empty());
  // The QP is usable again from RESET: the dropped WRs never come back.
  check_usable_after_reset(fx, a, b, buf);
}

// ERR, then RESET before anything is polled: whether the flushes the move to ERR
// caused are already in the CQs differs (deviation table).
CONFORMANCE_CASE("transitions: ERR then at once RESET: the flushes the move to ERR wrote, or none") {
  fixture<B> fx;
  const auto want = expected(ids::err_then_reset_flushes, backend_traits<B>::profile());
  auto& buf = fx.make_buffer(256);
  auto [a, b] = stalled_pair(fx, buf);
  fx.move_to(a, qp_state::err);
  fx.move_to(a, qp_state::reset);
  CHECK(B::query_qp_state(a.qp) == qp_state::reset);
  fx.settle();
  auto sends = fx.drain(a.send_cq, 5);
  auto recvs = fx.drain(a.recv_cq, 5);
  if (want.req.is_nothing()) CHECK(sends.empty());
  if (want.req.allows(wc_status::wr_flush_err) && !want.req.allows_nothing()) check_flushes(sends, {1, 2}, a.num);
  if (want.resp.is_nothing()) CHECK(recvs.empty());
  if (want.resp.allows(wc_status::wr_flush_err) && !want.resp.allows_nothing())
    check_flushes(recvs, {900, 901}, a.num);
  // Nothing more comes, and the QP is usable again.
  check_usable_after_reset(fx, a, b, buf);
  CHECK(fx.drain(a.recv_cq).empty());
}
