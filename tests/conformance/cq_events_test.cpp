// Completion queues (docs/semantics.md#cq): overflow, event-driven waiting, shared CQs.
#include "harness.hpp"

using namespace conf;

namespace {
template <class H>
const void* identity(H h) {
  return static_cast<const void*>(h);
}
}  // namespace

CONFORMANCE_CASE("cq: overflow loses the CQE that does not fit and raises CQ_ERR") {
  fixture<B> fx;
  auto small = fx.make_cq(4);
  const int cap = B::cq_capacity(small);
  REQUIRE(cap >= 4);
  REQUIRE(cap <= 64);
  auto a = fx.make_qp({.caps = {std::uint32_t(cap + 4), 4, 1, 1, 0}}, small, fx.make_cq(16));
  auto b = fx.make_qp({.caps = {4, std::uint32_t(cap + 4), 1, 1, 0}, .cqe = 2 * cap + 8});
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_recv(b, 100 + i, {buf.sge(0, 64)}) == 0);
  for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}) == 0);
  // Every message arrived, so every send completed; one of the cap + 1 CQEs had no room.
  CHECK(fx.poll(b.recv_cq, std::size_t(cap) + 1, "all receives").size() == std::size_t(cap) + 1);
  fx.settle();
  async_event ev;
  REQUIRE(B::get_async_event(fx.ctx, 2000ms, ev) == 0);
  CHECK(ev.type == async_event_type::cq_err);
  CHECK(ev.object == identity(small));
  auto got = fx.drain(small, 5);
  CHECK(got.size() == std::size_t(cap));
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].wr_id == i);
}

namespace {
// A connected pair a -> b whose sender's send CQ, or whose receiver's receive CQ, is
// `small` (cap entries): cap + 1 SENDs are posted, with a receive for each (and, for a
// small send CQ, one more for a later SEND).
template <class B>
struct overflowing_pair {
  typename B::cq small;
  int cap;
  buffer<B>& buf;
  endpoint<B> a, b;
  overflowing_pair(fixture<B>& fx, bool on_receiver)
      : small(fx.make_cq(4)), cap(B::cq_capacity(small)), buf(fx.make_buffer(64)) {
    REQUIRE(cap <= 64);
    const qp_cap sender{std::uint32_t(cap + 4), 4, 1, 1, 0}, receiver{4, std::uint32_t(cap + 4), 1, 1, 0};
    a = on_receiver ? fx.make_qp({.caps = sender, .cqe = 2 * cap + 8}) : fx.make_qp({.caps = sender}, small, fx.make_cq(16));
    b = on_receiver ? fx.make_qp({.caps = receiver}, fx.make_cq(16), small) : fx.make_qp({.caps = receiver, .cqe = 2 * cap + 8});
    fx.connect(a, b);
    for (int i = 0; i <= cap + (on_receiver ? 0 : 1); ++i) REQUIRE(fx.post_recv(b, 100 + i, {buf.sge(0, 64)}) == 0);
    for (int i = 0; i <= cap; ++i) REQUIRE(fx.post_send(a, i, opcode::send, {buf.sge(0, 8)}) == 0);
  }
};

// The overflow's events: CQ_ERR, then QP_FATAL for `qpn` where the row says so (and none
// within 200 ms where it says no), and the QP's state as the row says.
template <class B>
void check_overflow_outcome(fixture<B>& fx, const outcome& want, const endpoint<B>& qp) {
  async_event ev;
  REQUIRE(B::get_async_event(fx.ctx, 2000ms, ev) == 0);
  CHECK(ev.type == async_event_type::cq_err);
  const int more = B::get_async_event(fx.ctx, 200ms, ev);
  if (want.async_event == tri::yes) {
    REQUIRE(more == 0);
    CHECK(ev.type == async_event_type::qp_fatal);
    CHECK(ev.qp_num == qp.num);
  } else if (want.async_event == tri::no) {
    CHECK(more == ETIMEDOUT);
  }
  if (want.stays_rts != tri::either)
    CHECK((B::query_qp_state(qp.qp) == qp_state::rts) == (want.stays_rts == tri::yes));
}
}  // namespace

// What a lost send completion does to its queue pair and CQ (IBA C9-218, C11-37): the QP
// goes to ERR with QP_FATAL and the CQ takes no more completions, or (rxe) the QP carries
// on and the CQ, once polled, takes the next one. (The mock's spec profile carried on as
// rxe does.)
CONFORMANCE_CASE("cq: the queue pair and CQ after a send completion was lost to an overflow") {
  fixture<B> fx;
  const auto want = expected(ids::send_overflow, backend_traits<B>::profile());
  overflowing_pair<B> p(fx, false);
  const auto cap = std::size_t(p.cap);
  REQUIRE(fx.poll(p.b.recv_cq, cap + 1, "all receives").size() == cap + 1);
  fx.settle();
  check_overflow_outcome(fx, want, p.a);
  CHECK(fx.drain(p.small, 5).size() == cap);
  // The CQ has room again: the next send's completion.
  (void)fx.post_send(p.a, 999, opcode::send, {p.buf.sge(0, 8)});
  const auto next = want.req.is_nothing() ? fx.drain(p.small) : fx.poll(p.small, 1, "the next send's completion");
  if (want.req.is_nothing()) {
    CHECK(next.empty());
  } else {
    REQUIRE(next.size() == 1);
    CHECK(next[0].wr_id == 999);
    CHECK(want.req.allows(next[0].status));
  }
}

// A receive completion lost to a full CQ takes its queue pair to ERR on both: with
// QP_FATAL (IBA C9-218), or silently (rxe). The sender's WR is not checked: unanswered,
// it runs out of retries on the mock, and rxe never completes it (semantics.md §13).
CONFORMANCE_CASE("cq: the queue pair after a receive completion was lost to an overflow") {
  fixture<B> fx;
  const auto want = expected(ids::recv_overflow, backend_traits<B>::profile());
  overflowing_pair<B> p(fx, true);
  const auto cap = std::size_t(p.cap);
  REQUIRE(fx.poll(p.a.send_cq, cap, "the sends whose receives fit").size() == cap);
  CHECK(fx.wait_state(p.b, qp_state::err) == qp_state::err);
  check_overflow_outcome(fx, want, p.b);
  CHECK(fx.drain(p.small, 5).size() == cap);
}

// The flushes of a queue pair moved to ERR while its send CQ is full (a program that
// undersized it), the CQ polled after: written when there is room, or lost as a device
// that writes them at once finds no room (rxe). The typed layer's CQ reservations never
// let a CQ fill so.
CONFORMANCE_CASE("cq: the flushes of a queue pair that enters ERR while its send CQ is full") {
  fixture<B> fx;
  const auto want = expected(ids::flushes_into_full_cq, backend_traits<B>::profile());
  auto small = fx.make_cq(4);
  const int cap = B::cq_capacity(small);
  REQUIRE(cap <= 64);
  auto a = fx.make_qp({.caps = {std::uint32_t(cap + 4), 4, 1, 1, 0}}, small, fx.make_cq(16));
  auto b = fx.make_qp({.cqe = 16});
  fx.connect(a, b);  // rnr_retry 7: a SEND without a receive waits for one
  auto& buf = fx.make_buffer(64, acc::local_write | acc::remote_write);
  for (int i = 0; i < cap; ++i)
    REQUIRE(fx.post_rdma(a, i, opcode::rdma_write, buf.sge(0, 8), buf.addr(32), buf.rkey()) == 0);
  fx.settle();
  REQUIRE(B::cq_capacity(small) == cap);
  REQUIRE(fx.post_send(a, 100, opcode::send, {buf.sge(0, 8)}) == 0);  // b has no receive: RNR
  REQUIRE(fx.post_send(a, 101, opcode::send, {buf.sge(0, 8)}) == 0);
  fx.settle();
  fx.move_to(a, qp_state::err);
  fx.settle();
  const auto writes = fx.poll(small, std::size_t(cap), "the WRITEs' completions");
  REQUIRE(writes.size() == std::size_t(cap));
  for (const auto& c : writes) CHECK(c.status == wc_status::success);
  const auto flushes = fx.drain(small, 10);
  if (want.req.is_nothing()) {
    CHECK(flushes.empty());
  } else {
    REQUIRE(flushes.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(flushes[i].wr_id == 100 + i);
      CHECK(want.req.allows(flushes[i].status));
    }
  }
  async_event ev;
  const int got = B::get_async_event(fx.ctx, want.async_event == tri::yes ? 2000ms : 200ms, ev);
  if (want.async_event == tri::yes) {
    REQUIRE(got == 0);
    CHECK(ev.type == async_event_type::cq_err);
    CHECK(ev.object == identity(small));
  } else {
    CHECK(got == ETIMEDOUT);
  }
}

CONFORMANCE_CASE("cq: arm, complete, get_cq_event, ack, poll") {
  fixture<B> fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp({}, cq, fx.make_cq(16));
  auto b = fx.make_qp();
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 64)}) == 0);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 16)}) == 0);
  typename B::cq got{};
  REQUIRE(B::get_cq_event(ch, 5000ms, got) == 0);
  CHECK(got == cq);
  B::ack_cq_events(got, 1);
  REQUIRE(B::req_notify_cq(cq, false) == 0);  // re-arm, then poll until empty
  auto c = fx.poll_one(cq);
  CHECK(c.wr_id == 2);
  CHECK(c.status == wc_status::success);
  CHECK(fx.drain(cq, 3).empty());
}

CONFORMANCE_CASE("cq: a completion that lands before the arm is found by the re-poll after arming") {
  fixture<B> fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp();
  auto b = fx.make_qp({}, fx.make_cq(16), cq);
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 64)}) == 0);
  // The loop drained the CQ (empty), then the message lands before the arm.
  typename B::wc none[1];
  CHECK(B::poll_cq(cq, 1, none) == 0);
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 16)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  fx.settle();
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  // Waiting for an event here could wait forever; the re-poll finds the completion.
  auto c = fx.poll_one(cq, "the completion that arrived before the arm");
  CHECK(c.wr_id == 1);
  CHECK(c.op == wc_opcode::recv);
  // Any event that may still come must be acked before the CQ goes away.
  typename B::cq evcq{};
  if (B::get_cq_event(ch, 20ms, evcq) == 0) B::ack_cq_events(evcq, 1);
}

CONFORMANCE_CASE("cq: get_cq_event with a timeout returns ETIMEDOUT when nothing is pending") {
  fixture<B> fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  typename B::cq got{};
  CHECK(B::get_cq_event(ch, 20ms, got) == ETIMEDOUT);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  CHECK(B::get_cq_event(ch, 20ms, got) == ETIMEDOUT);  // armed, but nothing completes
}

CONFORMANCE_CASE("cq: an arm is good for one event only") {
  fixture<B> fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp({}, cq, fx.make_cq(16));
  auto b = fx.make_qp();
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 64)}}, {2, {buf.sge(0, 64)}}}).rc == 0);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  REQUIRE(fx.post_send(a, 10, opcode::send, {buf.sge(0, 8)}) == 0);
  typename B::cq got{};
  REQUIRE(B::get_cq_event(ch, 5000ms, got) == 0);
  B::ack_cq_events(got, 1);
  CHECK(fx.poll_one(cq).wr_id == 10);
  REQUIRE(fx.post_send(a, 11, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(cq).wr_id == 11);
  CHECK(B::get_cq_event(ch, 20ms, got) == ETIMEDOUT);  // not re-armed: no event
}

CONFORMANCE_CASE("cq: a solicited-only arm ignores unsolicited receives") {
  fixture<B> fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp();
  auto b = fx.make_qp({}, fx.make_cq(16), cq);
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv_list(b, {{1, {buf.sge(0, 64)}}, {2, {buf.sge(0, 64)}}}).rc == 0);
  REQUIRE(B::req_notify_cq(cq, true) == 0);
  REQUIRE(fx.post_send(a, 10, opcode::send, {buf.sge(0, 8)}) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
  typename B::cq got{};
  CHECK(B::get_cq_event(ch, 20ms, got) == ETIMEDOUT);
  REQUIRE(fx.post_send(a, 11, opcode::send, {buf.sge(0, 8)}, send_flags::signaled | send_flags::solicited) == 0);
  REQUIRE(B::get_cq_event(ch, 5000ms, got) == 0);
  CHECK(got == cq);
  B::ack_cq_events(got, 1);
  auto c = fx.poll(cq, 2);
  REQUIRE(c.size() == 2);
  CHECK(c[0].wr_id == 1);
  CHECK(c[1].wr_id == 2);
}

// ibv_req_notify_cq(3) counts a failed completion as solicited; rxe 6.1 does not (send
// completions are never solicited there, a receive's is its packet's SE bit), so a
// solicited-only wait sleeps through a failure on rxe. A receive's flush raises it on both
// (audit 36, D1).
CONFORMANCE_CASE("cq: failed completions and a flushed receive on a CQ armed solicited-only") {
  fixture<B> fx;
  const auto want = expected(ids::solicited_arm_failed, backend_traits<B>::profile());
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp({}, cq, fx.make_cq(16));  // a's sends complete on cq
  auto b = fx.make_qp();
  auto c = fx.make_qp();
  auto d = fx.make_qp({}, fx.make_cq(16), cq);  // d's receives too
  fx.connect(a, b);
  fx.connect(c, d);
  auto& buf = fx.make_buffer(256);
  typename B::cq got{};
  const auto wait = [&](const char* what) {
    INFO(what);
    const int e = B::get_cq_event(ch, want.verb_errno == 0 ? 5000ms : 300ms, got);
    CHECK(e == want.verb_errno);
    if (e == 0) B::ack_cq_events(got, 1);
  };
  // A WRITE the responder refuses (a bad rkey): REM_ACCESS_ERR on a's side.
  REQUIRE(B::req_notify_cq(cq, true) == 0);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, buf.sge(0, 8), buf.addr(0), buf.rkey() ^ 0x77700) == 0);
  wait("a failed send completion");
  CHECK(fx.poll_one(cq).status == wc_status::rem_access_err);
  // An unsolicited SEND into a receive too small: d's receive fails.
  REQUIRE(fx.post_recv(d, 2, {buf.sge(64, 8)}) == 0);
  REQUIRE(B::req_notify_cq(cq, true) == 0);
  REQUIRE(fx.post_send(c, 3, opcode::send, {buf.sge(0, 64)}) == 0);
  wait("a failed receive of an unsolicited SEND");
  const auto failed = fx.poll_one(cq);
  CHECK(failed.wr_id == 2);
  CHECK(failed.status != wc_status::success);
  // A receive flushed by a move to ERR raises the event everywhere.
  auto h = fx.make_qp({}, fx.make_cq(16), cq);
  fx.connect(fx.make_qp(), h);
  REQUIRE(fx.post_recv(h, 4, {buf.sge(64, 8)}) == 0);
  REQUIRE(B::req_notify_cq(cq, true) == 0);
  fx.move_to(h, qp_state::err);
  REQUIRE(B::get_cq_event(ch, 5000ms, got) == 0);
  B::ack_cq_events(got, 1);
  CHECK(fx.poll_one(cq).status == wc_status::wr_flush_err);
}

CONFORMANCE_CASE("cq: one CQ shared by several QPs, completions routed by qp_num") {
  fixture<B> fx;
  auto shared = fx.make_cq(128);
  auto a1 = fx.make_qp({}, shared, shared);
  auto b1 = fx.make_qp({}, shared, shared);
  auto a2 = fx.make_qp({}, shared, shared);
  auto b2 = fx.make_qp({}, shared, shared);
  fx.connect(a1, b1);
  fx.connect(a2, b2);
  auto& buf = fx.make_buffer(1024);
  for (std::uint64_t i = 0; i < 3; ++i) {
    REQUIRE(fx.post_recv(b1, 100 + i, {buf.sge(0, 64)}) == 0);
    REQUIRE(fx.post_recv(b2, 100 + i, {buf.sge(64, 64)}) == 0);  // same wr_ids on purpose
  }
  for (std::uint64_t i = 0; i < 3; ++i) {
    REQUIRE(fx.post_send(a1, i, opcode::send, {buf.sge(512, 10)}) == 0);
    REQUIRE(fx.post_send(a2, i, opcode::send, {buf.sge(512, 20)}) == 0);
  }
  auto all = fx.poll(shared, 12, "12 completions on the shared CQ");
  std::vector<std::uint64_t> per[4];
  const std::uint32_t nums[4] = {a1.num, b1.num, a2.num, b2.num};
  for (auto& c : all) {
    CHECK(c.status == wc_status::success);
    int k = -1;
    for (int j = 0; j < 4; ++j)
      if (c.qp_num == nums[j]) k = j;
    REQUIRE_MESSAGE(k >= 0, "completion for an unknown qp_num " << c.qp_num);
    per[k].push_back(c.wr_id);
    if (k == 1) CHECK(c.byte_len == 10);
    if (k == 3) CHECK(c.byte_len == 20);
    CHECK(c.op == (k % 2 == 0 ? wc_opcode::send : wc_opcode::recv));
  }
  CHECK(per[0] == std::vector<std::uint64_t>{0, 1, 2});
  CHECK(per[1] == std::vector<std::uint64_t>{100, 101, 102});
  CHECK(per[2] == std::vector<std::uint64_t>{0, 1, 2});
  CHECK(per[3] == std::vector<std::uint64_t>{100, 101, 102});
}

CONFORMANCE_CASE("cq: a solicited-only arm does not narrow a pending arm for the next completion") {
  fixture<B> fx;
  auto ch = fx.make_channel();
  auto cq = fx.make_cq(16, ch);
  auto a = fx.make_qp();
  auto b = fx.make_qp({}, fx.make_cq(16), cq);
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_recv(b, 1, {buf.sge(0, 64)}) == 0);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  REQUIRE(B::req_notify_cq(cq, true) == 0);  // IBA C11-31/C11-32: the arm stays "next"
  REQUIRE(fx.post_send(a, 2, opcode::send, {buf.sge(0, 16)}) == 0);  // not solicited
  typename B::cq got{};
  REQUIRE(B::get_cq_event(ch, 5000ms, got) == 0);
  CHECK(got == cq);
  B::ack_cq_events(got, 1);
  CHECK(fx.poll_one(cq).wr_id == 1);
}

CONFORMANCE_CASE("cq: arming a CQ that has no completion channel") {
  fixture<B> fx;
  const auto want = expected(ids::arm_without_channel, backend_traits<B>::profile());
  auto cq = fx.make_cq(16);
  CHECK(B::req_notify_cq(cq, false) == want.verb_errno);
  CHECK(B::req_notify_cq(cq, true) == want.verb_errno);
}

CONFORMANCE_CASE("cq: the completions a QP left unpolled when it was destroyed") {
  fixture<B> fx;
  const auto want = expected(ids::destroyed_qp_completions, backend_traits<B>::profile());
  auto cq = fx.make_cq(16);
  auto b = fx.make_qp();
  // The requester is destroyed by the scenario, not at teardown.
  endpoint<B> a;
  a.send_cq = a.recv_cq = cq;
  a.caps = {8, 8, 1, 1, 0};
  a.qp = B::create_qp(fx.pd, cq, cq, qp_type::rc, a.caps, false);
  a.num = B::qp_num(a.qp);
  auto gone = std::make_shared<bool>(false);
  fx.on_cleanup([q = a.qp, gone] {
    if (!*gone) CHECK_MESSAGE(B::destroy_qp(q) == 0, "destroy_qp at teardown");
  });
  fx.connect(a, b);
  auto& src = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  src.fill(3);
  for (std::uint64_t id = 1; id <= 3; ++id)
    REQUIRE(fx.post_rdma(a, id, opcode::rdma_write, src.sge(0, 8), remote.addr(8 * id), remote.rkey()) == 0);
  for (int i = 0; i < 100 && !remote.holds(3, 24, 8); ++i) fx.settle();
  REQUIRE(remote.holds(3, 24, 8));  // the last WRITE landed
  fx.settle();                      // and its ACK came back: all three completed
  REQUIRE(B::destroy_qp(a.qp) == 0);
  *gone = true;
  const auto left = fx.drain(cq);
  if (want.req.is_nothing()) {
    CHECK(left.empty());
  } else {
    REQUIRE(left.size() == 3);
    for (std::uint64_t i = 0; i < 3; ++i) {
      CHECK(left[i].wr_id == i + 1);
      CHECK(want.req.allows(left[i].status));
      CHECK(left[i].qp_num == a.num);
    }
  }
}

CONFORMANCE_CASE("cq: comp_vector must be below the device's num_comp_vectors") {
  fixture<B> fx;
  const auto dev = B::query_device(fx.ctx);
  REQUIRE(dev.num_comp_vectors >= 1);
  CHECK(errno_of([&] { fx.make_cq_on_vector(16, static_cast<int>(dev.num_comp_vectors) - 1); }) == 0);
  CHECK(errno_of([&] { fx.make_cq_on_vector(16, static_cast<int>(dev.num_comp_vectors)); }) == EINVAL);
  CHECK(errno_of([&] { fx.make_cq_on_vector(16, 1000000); }) == EINVAL);
  CHECK(errno_of([&] { fx.make_cq_on_vector(16, -1); }) == EINVAL);
}

// poll_cq with a negative count: the mock refuses it; rxe's provider (and mlx5's) polls
// nothing and says 0 (audit 36, D8). Either way the completion stays for the next poll.
CONFORMANCE_CASE("cq: poll_cq with a negative count") {
  fixture<B> fx;
  const auto want = expected(ids::poll_negative_count, backend_traits<B>::profile());
  auto cq = fx.make_cq(16);
  auto a = fx.make_qp({}, cq);
  auto b = fx.make_qp();
  fx.connect(a, b);
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_rdma(a, 7, opcode::rdma_write, buf.sge(0, 8), buf.addr(32), buf.rkey()) == 0);
  typename B::wc wcs[2];
  const int polled = B::poll_cq(cq, -1, wcs);
  CHECK(polled == -want.verb_errno);
  const auto c = fx.poll_one(cq);
  CHECK(c.wr_id == 7);
  CHECK(c.status == wc_status::success);
}
