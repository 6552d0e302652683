// Every fault row of docs/semantics.md#fault-statuses (RC): the statuses on both sides, the QP that
// reports an error ends in ERR, and the rest of its queues flush in order.
#include "deviations.hpp"
#include "harness.hpp"

using namespace conf;

namespace {

/// A connected RC pair whose requester `a` does not signal by default (errors must
/// still produce a CQE), takes up to three SGEs a send and has receives posted (they
/// must flush too); `b` takes up to three a receive. Separate send and receive CQs, so
/// the order within each queue is observable.
template <class B>
struct faulty_pair {
  explicit faulty_pair(fixture<B>& f, link_opts la = {}, link_opts lb = {})
      : fx(f), a(f.make_qp({.caps = {16, 16, 3, 1, 0}, .sig_all = false})), b(f.make_qp({.caps = {16, 16, 1, 3, 0}})),
        src(f.make_buffer(4096)), dst(f.make_buffer(4096)), abuf(f.make_buffer(256)) {
    fx.connect(a, b, la, lb);
    src.fill(5);
    REQUIRE(fx.post_recv_list(a, {{900, {abuf.sge(0, 64)}}, {901, {abuf.sge(64, 64)}}}).rc == 0);
  }

  /// Posts `bad` followed by an unsignaled and a signaled SEND in one list, then
  /// checks: `bad` completes with a status in `req`, the two SENDs and a's two
  /// receives flush in queue order, and a ends in ERR.
  void run_requester(typename fixture<B>::send_spec bad, status_set req) {
    bad.wr_id = 1;
    auto r = fx.post_send_list(a, {bad,
                                   {.wr_id = 2, .sg = {src.sge(0, 16)}, .flags = send_flags::none},
                                   {.wr_id = 3, .sg = {src.sge(0, 16)}, .flags = send_flags::signaled}});
    REQUIRE(r.rc == 0);
    auto sq = fx.poll(a.send_cq, 3, "the error and two send flushes");
    REQUIRE(sq.size() == 3);
    CHECK(sq[0].wr_id == 1);
    CONF_CHECK_STATUS(req, sq[0].status);
    CHECK(sq[0].qp_num == a.num);
    check_flushes({sq.begin() + 1, sq.end()}, {2, 3}, a.num);
    check_flushes(fx.poll(a.recv_cq, 2, "receive flushes"), {900, 901}, a.num);
    CHECK(fx.wait_state(a, qp_state::err) == qp_state::err);
    CHECK(fx.drain(a.send_cq, 3).empty());
  }

  fixture<B>& fx;
  endpoint<B> a, b;
  buffer<B>& src;
  buffer<B>& dst;
  buffer<B>& abuf;
};

template <class B>
void check_responder_flushed(fixture<B>& fx, const endpoint<B>& b, std::vector<std::uint64_t> wr_ids) {
  CHECK(fx.wait_state(b, qp_state::err) == qp_state::err);
  check_flushes(fx.poll(b.recv_cq, wr_ids.size(), "responder receive flushes"), wr_ids, b.num);
}

// A SEND of `len` bytes (of 5s) from `a` into a receive of `b` with SGEs `sg`, whose
// fault lies where the bytes do not reach: outcome `want`; landed, they are at dst[at, at + len).
template <class B>
void send_short_of_receive_fault(fixture<B>& fx, const outcome& want, const endpoint<B>& a, const endpoint<B>& b,
                                 buffer<B>& dst, std::vector<rdmakit::sge> sg, std::uint32_t len, std::size_t at) {
  auto& src = fx.make_buffer(256);
  src.fill(5);
  REQUIRE(fx.post_recv(b, 800, std::move(sg)) == 0);
  REQUIRE(fx.post_send(a, 1, opcode::send, {src.sge(0, len)}) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(a.send_cq).status);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.wr_id == 800);
  CONF_CHECK_STATUS(want.resp, r.status);
  if (r.status == wc_status::success) {
    CHECK(r.byte_len == len);
    CHECK(dst.holds(5, at, len));
    CHECK(B::query_qp_state(b.qp) == qp_state::rts);
  }
}

}  // namespace

// --- local SGE faults on the send side (rxe differs: deviation table) ---

CONFORMANCE_CASE("faults: send SGE with a bad lkey -> req error, QP ERR, rest flushed") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::send_bad_lkey, backend_traits<B>::profile());
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 4096)}) == 0);
  p.run_requester({.sg = {{p.src.addr(0), 64, p.src.lkey() ^ 0x5a5a00}}, .flags = send_flags::none}, want.req);
  if (want.resp.is_nothing()) CHECK(fx.drain(p.b.recv_cq, 5).empty());
  CHECK(B::query_qp_state(p.b.qp) == qp_state::rts);
}

// Code that puts an rkey where an lkey belongs works on rxe, whose MRs use one key for
// both, and fails on a device whose keys differ (the spec profile's).
CONFORMANCE_CASE("faults: an MR's rkey used as a send SGE's lkey") {
  fixture<B> fx;
  const auto want = expected(ids::rkey_as_lkey, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  auto& local_only = fx.make_buffer(64, acc::local_write);
  src.fill(4);
  const bool same_key = src.rkey() == src.lkey();
  CHECK(same_key == want.req.allows(wc_status::success));
  if (same_key) CHECK(local_only.rkey() == 0);  // rxe: no remote access, no rkey
  REQUIRE(fx.post_recv(b, 800, {dst.sge(0, 256)}) == 0);
  REQUIRE(fx.post_send(a, 1, opcode::send, {{src.addr(0), 64, src.rkey()}}) == 0);
  const auto s = fx.poll_one(a.send_cq, "the SEND");
  CONF_CHECK_STATUS(want.req, s.status);
  if (s.status == wc_status::success) {
    CHECK(fx.poll_one(b.recv_cq).byte_len == 64);
    CHECK(dst.holds(4, 0, 64));
  }
}

// A buffer registered with length 0: refused, or (rxe) a region of no bytes that a SEND
// of no bytes may name.
CONFORMANCE_CASE("faults: reg_mr of length 0") {
  fixture<B> fx;
  const auto want = expected(ids::mr_length_zero, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(64);
  alignas(64) static unsigned char bytes[64];
  typename B::mr empty{};
  const int e = errno_of([&] { empty = B::reg_mr(fx.pd, bytes, 0, acc::local_write | acc::remote_write); });
  CHECK(e == want.verb_errno);
  if (e != 0) return;
  fx.on_cleanup([empty] { CHECK_MESSAGE(B::dereg_mr(empty) == 0, "dereg_mr of the empty region"); });
  REQUIRE(fx.post_recv(b, 800, {dst.sge(0, 64)}) == 0);
  REQUIRE(fx.post_send(a, 1, opcode::send, {{reinterpret_cast<std::uint64_t>(bytes), 0, B::mr_lkey(empty)}}) == 0);
  CHECK(fx.poll_one(a.send_cq, "the SEND of no bytes").status == wc_status::success);
  const auto r = fx.poll_one(b.recv_cq, "its receive");
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 0);
}

// A READ whose result SGE is bad fails locally: nothing posted behind it in the same list
// reaches the responder (rxe finds the fault in its response, handled before its requester
// goes on; the mock's rxe profile sent the rest first, and a WRITE_WITH_IMM behind it
// landed and consumed a receive while its sender reported it flushed). One wire hop of
// no latency, as rxe's loopback.
CONFORMANCE_CASE("faults: a WR behind a READ that fails locally, in one list, does not reach the responder") {
  fixture<B> fx;
  auto [a, b] = fx.make_pair();
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  auto& inbox = fx.make_buffer(64);
  src.fill(6);
  dst.fill(1);
  REQUIRE(fx.post_recv(b, 50, {inbox.sge(0, 64)}) == 0);
  const rdmakit::sge bad{src.addr(0), 64, src.lkey() ^ 0x5a5a00};
  auto r = fx.post_send_list(a, {{.wr_id = 1, .op = opcode::rdma_read, .sg = {bad}, .remote_addr = dst.addr(0),
                                  .rkey = dst.rkey()},
                                 {.wr_id = 2, .op = opcode::rdma_write_with_imm, .sg = {src.sge(0, 48)},
                                  .remote_addr = dst.addr(128), .rkey = dst.rkey(), .imm_be = to_be32(7)}});
  REQUIRE(r.rc == 0);
  auto sq = fx.poll(a.send_cq, 2, "the READ's error and the WRITE's flush");
  REQUIRE(sq.size() == 2);
  CHECK(sq[0].wr_id == 1);
  CHECK(sq[0].status != wc_status::success);
  check_flushes({sq.begin() + 1, sq.end()}, {2}, a.num);
  // With a wire latency the WRITE leaves before the READ's response comes back, as between
  // two hosts, and may land (a flushed WR may have run: IBA allows both).
  if constexpr (requires { backend_traits<B>::latency(); })
    if (backend_traits<B>::latency().count() != 0) return;
  CHECK(fx.drain(b.recv_cq, 5).empty());
  CHECK(dst.holds(1, 128, 48, 128));  // as filled: the WRITE did not land
  CHECK(B::query_qp_state(b.qp) == qp_state::rts);
}

CONFORMANCE_CASE("faults: send SGE in an MR of another PD -> req error, QP ERR, rest flushed") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::send_other_pd, backend_traits<B>::profile());
  auto other_pd = fx.make_pd();
  auto& foreign = fx.make_buffer(256, acc::local_write, other_pd);
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 4096)}) == 0);
  p.run_requester({.sg = {foreign.sge(0, 64)}}, want.req);
  if (want.resp.is_nothing()) CHECK(fx.drain(p.b.recv_cq, 5).empty());
}

CONFORMANCE_CASE("faults: send SGE beyond the MR's range -> req error, QP ERR, rest flushed") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::send_out_of_range, backend_traits<B>::profile());
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 4096)}) == 0);
  p.run_requester({.sg = {p.src.sge(4000, 200)}}, want.req);
  if (want.resp.is_nothing()) CHECK(fx.drain(p.b.recv_cq, 5).empty());
}

// Two bad SGEs: the one a device meets first, in list order, gives the status (the
// first holds no byte of its MR: it starts at the MR's end).
CONFORMANCE_CASE("faults: send SGEs with a bad range and a bad lkey -> the first one's status") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto past_end = p.src.sge(4096, 4);
  const rdmakit::sge bad_lkey{p.src.addr(0), 64, p.src.lkey() ^ 0x5a5a00};
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 4096)}) == 0);
  outcome want;
  SUBCASE("bad range first") {
    want = expected(ids::send_out_of_range_before_bad_lkey, backend_traits<B>::profile());
    p.run_requester({.sg = {past_end, bad_lkey}}, want.req);
  }
  SUBCASE("bad lkey first") {
    want = expected(ids::send_bad_lkey, backend_traits<B>::profile());
    p.run_requester({.sg = {bad_lkey, past_end}}, want.req);
  }
  if (want.resp.is_nothing()) CHECK(fx.drain(p.b.recv_cq, 5).empty());
  CHECK(B::query_qp_state(p.b.qp) == qp_state::rts);
}

// A device reads a message's bytes as it makes its packets: those made before the bad
// byte may have gone out, and the responder written them (a SEND into its receive, which
// does not complete: a flush does).
CONFORMANCE_CASE("faults: send SGE running past its MR three packets in -> req error; the packets before it") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::send_runs_out_later, backend_traits<B>::profile());
  const auto bad = p.src.sge(1000, 3500);  // 3096 readable bytes: three whole packets of 1024
  SUBCASE("SEND") {
    REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 4096)}) == 0);
    p.run_requester({.sg = {bad}}, want.req);
    CHECK(fx.drain(p.b.recv_cq, 5).empty());  // the receive waits for the rest
  }
  SUBCASE("RDMA_WRITE") {
    p.run_requester({.op = opcode::rdma_write, .sg = {bad}, .remote_addr = p.dst.addr(0), .rkey = p.dst.rkey()},
                    want.req);
  }
  CHECK(B::query_qp_state(p.b.qp) == qp_state::rts);
  if (want.head_written == tri::yes) {
    CHECK(p.dst.holds(5, 0, 3072, 1000));
    CHECK(p.dst.zero(3072, 4096 - 3072));
  } else if (want.head_written == tri::no) {
    CHECK(p.dst.zero(0, 4096));
  }
}

// The packets a device sends before it meets a bad SGE may be answered first: on rxe,
// where the responder on the same device handles them at once, a NAK decides the
// WQE's status; an RNR NAK leaves it to the bad SGE.
CONFORMANCE_CASE("faults: send SGE of another PD after a packet the responder answers -> its NAK, or the SGE's fault") {
  fixture<B> fx;
  link_opts lb;
  SUBCASE("WRITE_WITH_IMM, no REMOTE_WRITE") { lb.qp_access = acc::remote_read | acc::remote_atomic; }
  SUBCASE("SEND, no receive posted") {}
  const bool write = !has_any(lb.qp_access, acc::remote_write);
  faulty_pair<B> p(fx, {}, lb);
  auto other_pd = fx.make_pd();
  auto& foreign = fx.make_buffer(64, acc::local_write, other_pd);
  const std::vector<rdmakit::sge> sg{p.src.sge(0, 1677), foreign.sge(0, 7)};  // two packets of 1024
  const auto want = expected(write ? ids::send_bad_after_refused_packet : ids::send_other_pd,
                             backend_traits<B>::profile());
  if (write) {
    REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 64)}) == 0);
    p.run_requester({.op = opcode::rdma_write_with_imm, .sg = sg, .remote_addr = p.dst.addr(0),
                     .rkey = p.dst.rkey()},
                    want.req);
  } else {
    p.run_requester({.sg = sg}, want.req);
  }
  if (want.stays_rts == tri::no)
    check_responder_flushed(fx, p.b, {800});
  else
    CHECK(B::query_qp_state(p.b.qp) == qp_state::rts);
  CHECK(p.dst.zero(0, 4096));
}

// A device that meets a bad SGE while a WR before it still waits for its answer (an RNR
// retry, a peer in ERR that answers nothing): the spec's WR ahead runs out of retries and
// the faulty one flushes; rxe's requester stops without moving the QP to ERR, and nothing
// completes until the application moves it there (deviation table; the mock's rxe
// profile completes as the spec, which its row allows).
CONFORMANCE_CASE("faults: send SGE with a bad lkey behind a WR still unacknowledged -> the status of the row") {
  const auto want = expected(ids::local_fault_behind_unacked, backend_traits<B>::profile());
  // The WR ahead waits for an RNR retry (the faulty one posted with it, or by a later
  // post_send), or is lost to a peer in ERR.
  for (const int variant : {0, 1, 2}) {
    CAPTURE(variant);
    const bool peer_in_err = variant == 2;
    fixture<B> fx;
    link_opts l;
    l.rnr_retry = 1;
    l.retry_cnt = 2;
    l.timeout = 10;       // 4 ms
    l.min_rnr_timer = 5;  // 0.16 ms
    auto a = fx.make_qp({.caps = {16, 16, 1, 1, 0}});
    auto b = fx.make_qp();
    fx.connect(a, b, l, l);
    auto& src = fx.make_buffer(256);
    auto& dst = fx.make_buffer(256);
    src.fill(6);
    rdmakit::sge bad = src.sge(0, 100);
    bad.lkey ^= 0x3c3c00;
    if (peer_in_err) {
      fx.move_to(b, qp_state::err);
      REQUIRE(fx.wait_state(b, qp_state::err) == qp_state::err);
    }
    // Ahead: a WRITE of 64 bytes the peer in ERR drops, or a WRITE_WITH_IMM of 0 bytes
    // that finds no receive (RNR NAK).
    const typename fixture<B>::send_spec ahead{
        .wr_id = 1, .op = peer_in_err ? opcode::rdma_write : opcode::rdma_write_with_imm,
        .sg = peer_in_err ? std::vector<rdmakit::sge>{src.sge(0, 64)} : std::vector<rdmakit::sge>{},
        .remote_addr = dst.addr(0), .rkey = dst.rkey(), .imm_be = to_be32(1)};
    const typename fixture<B>::send_spec faulty{
        .wr_id = 2, .op = opcode::rdma_write, .sg = {bad}, .remote_addr = dst.addr(128), .rkey = dst.rkey()};
    if (variant == 1) {  // the RNR NAK has come when the faulty WR is posted
      REQUIRE(fx.post_send_list(a, {ahead}).rc == 0);
      REQUIRE(fx.post_send_list(a, {faulty}).rc == 0);
    } else {
      REQUIRE(fx.post_send_list(a, {ahead, faulty}).rc == 0);
    }
    // 1500 looks (1 ms apart on a device: 1.5 s, the retries' budget many times over).
    const auto sq = fx.drain(a.send_cq, 1500);
    if (sq.empty()) {
      CHECK_MESSAGE(want.req.allows_nothing(), "no completion, expected ", want.req.to_string());
      CHECK(B::query_qp_state(a.qp) == qp_state::rts);
      fx.move_to(a, qp_state::err);  // the application's move flushes both
      check_flushes(fx.poll(a.send_cq, 2, "the flushes"), {1, 2}, a.num);
    } else {
      REQUIRE(sq.size() == 2);
      CHECK(sq[0].wr_id == 1);
      CONF_CHECK_STATUS(want.req, sq[0].status);
      CHECK(sq[0].status == (peer_in_err ? wc_status::retry_exc_err : wc_status::rnr_retry_exc_err));
      check_flushes({sq[1]}, {2}, a.num);
      CHECK(fx.wait_state(a, qp_state::err) == qp_state::err);
    }
    CHECK(fx.drain(a.send_cq).empty());
    CHECK(dst.zero(0, 256));
  }
}

// --- local faults where the HCA writes the result ---

CONFORMANCE_CASE("faults: RDMA_READ into an MR without LOCAL_WRITE -> LOC_PROT_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  auto& ro = fx.make_buffer(256, acc::remote_read);  // no LOCAL_WRITE
  p.run_requester({.op = opcode::rdma_read, .sg = {ro.sge(0, 64)}, .remote_addr = p.dst.addr(0), .rkey = p.dst.rkey()},
                  {wc_status::loc_prot_err});
}

CONFORMANCE_CASE("faults: atomic result into an MR without LOCAL_WRITE -> LOC_PROT_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  auto& ro = fx.make_buffer(64, acc::remote_read);
  REQUIRE(fx.post_atomic(p.a, 1, opcode::atomic_fetch_and_add, ro.sge(0, 8), p.dst.addr(0), p.dst.rkey(), 1) == 0);
  auto c = fx.poll_one(p.a.send_cq);
  CHECK(c.status == wc_status::loc_prot_err);
  check_flushes(fx.poll(p.a.recv_cq, 2), {900, 901}, p.a.num);
  CHECK(fx.wait_state(p.a, qp_state::err) == qp_state::err);
}

CONFORMANCE_CASE("faults: atomic whose result SGE has a bad lkey -> LOC_PROT_ERR; the target changes on rxe") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::atomic_result_bad_lkey, backend_traits<B>::profile());
  auto& res = fx.make_buffer(64);
  p.dst.set_u64(0, 41);
  REQUIRE(fx.post_atomic(p.a, 1, opcode::atomic_fetch_and_add, {res.addr(0), 8, res.lkey() ^ 0x5a5a00},
                         p.dst.addr(0), p.dst.rkey(), 1) == 0);
  CONF_CHECK_STATUS(want.req, fx.poll_one(p.a.send_cq).status);
  check_flushes(fx.poll(p.a.recv_cq, 2), {900, 901}, p.a.num);
  CHECK(fx.wait_state(p.a, qp_state::err) == qp_state::err);
  fx.settle();
  if (want.remote_ran != tri::either) CHECK(p.dst.u64(0) == (want.remote_ran == tri::yes ? 42u : 41u));
}

// A READ whose second local SGE has a bad lkey: the response's bytes before it.
CONFORMANCE_CASE("faults: RDMA_READ into a bad local SGE after a good one -> LOC_PROT_ERR; the bytes before it") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::read_response_bad_sge_after_bytes, backend_traits<B>::profile());
  auto& land = fx.make_buffer(1024);
  p.dst.fill(7);
  std::vector<rdmakit::sge> sg;
  std::uint32_t in_land = 0;  // the bytes rxe writes to land
  SUBCASE("bad lkey, in the only packet") {
    sg = {land.sge(0, 100), {land.addr(512), 100, land.lkey() ^ 0x6600}};
    in_land = 100;
  }
  SUBCASE("bad lkey, in the second packet") {
    sg = {land.sge(0, 1000), p.src.sge(0, 200), {land.addr(1000), 24, land.lkey() ^ 0x6600}};
    in_land = 1000;
  }
  p.run_requester({.op = opcode::rdma_read, .sg = sg, .remote_addr = p.dst.addr(0), .rkey = p.dst.rkey()}, want.req);
  if (want.head_written == tri::no) in_land = 0;
  if (want.head_written != tri::either) {
    CHECK(land.holds(7, 0, in_land));
    CHECK(land.zero(in_land, 1024 - in_land));
  }
}

// --- remote access faults ---

CONFORMANCE_CASE("faults: RDMA_WRITE with a bad rkey -> REM_ACCESS_ERR, responder ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  REQUIRE(fx.post_recv_list(p.b, {{800, {p.dst.sge(0, 64)}}, {801, {p.dst.sge(64, 64)}}}).rc == 0);
  p.run_requester({.op = opcode::rdma_write, .sg = {p.src.sge(0, 64)}, .remote_addr = p.dst.addr(0),
                   .rkey = p.dst.rkey() ^ 0x77700},
                  {wc_status::rem_access_err});
  check_responder_flushed(fx, p.b, {800, 801});
  CHECK(p.dst.u64(0) == 0);
  // The responder's QP went to ERR for the request: the spec's QP_ACCESS_ERR, or nothing.
  const auto want = expected(ids::responder_error_event, backend_traits<B>::profile());
  async_event ev;
  const int rc = B::get_async_event(fx.ctx, 200ms, ev);
  if (want.async_event == tri::yes) {
    REQUIRE(rc == 0);
    CHECK(ev.type == async_event_type::qp_access_err);
    CHECK(ev.qp_num == p.b.num);
  } else if (want.async_event == tri::no) {
    CHECK(rc == ETIMEDOUT);
  }
}

CONFORMANCE_CASE("faults: RDMA_WRITE_WITH_IMM with a bad rkey -> REM_ACCESS_ERR; the consumed receive fails too") {
  fixture<B> fx;
  faulty_pair<B> p(fx);  // path MTU 1024
  std::string_view id = ids::write_imm_bad_rkey;
  std::uint32_t length = 64;
  SUBCASE("one packet") {}
  SUBCASE("two packets") {
    id = ids::write_imm_bad_rkey_2_packets;
    length = 2048;
  }
  const auto want = expected(id, backend_traits<B>::profile());
  REQUIRE(fx.post_recv_list(p.b, {{800, {p.dst.sge(0, 64)}}, {801, {p.dst.sge(64, 64)}}}).rc == 0);
  p.run_requester({.op = opcode::rdma_write_with_imm, .sg = {p.src.sge(0, length)}, .remote_addr = p.dst.addr(128),
                   .rkey = p.dst.rkey() ^ 0x77700, .imm_be = to_be32(9)},
                  want.req);
  auto rq = fx.poll(p.b.recv_cq, 2, "the consumed receive and a flush");
  REQUIRE(rq.size() == 2);
  CHECK(rq[0].wr_id == 800);
  CONF_CHECK_STATUS(want.resp, rq[0].status);
  CHECK(rq[0].qp_num == p.b.num);
  check_flushes({rq[1]}, {801}, p.b.num);
  CHECK(fx.wait_state(p.b, qp_state::err) == qp_state::err);
}

// The same with no receive posted (RNR retry count 0): the receive the immediate needs is
// missing as well as the rkey; which is found first differs (deviation table).
CONFORMANCE_CASE("faults: RDMA_WRITE_WITH_IMM with a bad rkey and no receive posted -> RNR or REM_ACCESS_ERR") {
  fixture<B> fx;
  link_opts la;
  la.rnr_retry = 0;
  faulty_pair<B> p(fx, la);  // path MTU 1024; b has no receive
  auto& ro = fx.make_buffer(2048, acc::local_write | acc::remote_read);
  std::string_view id = ids::write_imm_bad_rkey_no_receive;
  std::uint32_t length = 64;
  std::uint64_t remote = p.dst.addr(128);
  std::uint32_t rkey = p.dst.rkey() ^ 0x77700;
  SUBCASE("bad rkey, one packet") {}
  SUBCASE("MR without REMOTE_WRITE, one packet") {
    remote = ro.addr(0);
    rkey = ro.rkey();
  }
  SUBCASE("bad rkey, two packets") {  // the first packet takes no receive: the rkey is checked first
    id = ids::write_imm_bad_rkey_2_packets;
    length = 2048;
  }
  const auto want = expected(id, backend_traits<B>::profile());
  p.run_requester({.op = opcode::rdma_write_with_imm, .sg = {p.src.sge(0, length)}, .remote_addr = remote,
                   .rkey = rkey, .imm_be = to_be32(9)},
                  want.req);
  const bool rnr = want.req.allows(wc_status::rnr_retry_exc_err);
  CHECK(fx.wait_state(p.b, rnr ? qp_state::rts : qp_state::err) == (rnr ? qp_state::rts : qp_state::err));
  if (want.stays_rts != tri::either)
    CHECK((B::query_qp_state(p.b.qp) == qp_state::rts) == (want.stays_rts == tri::yes));
  CHECK(fx.drain(p.b.recv_cq).empty());
  CHECK(p.dst.zero(0, 4096));
  CHECK(ro.zero(0, 2048));
}

CONFORMANCE_CASE("faults: RDMA_WRITE beyond the remote MR's range -> REM_ACCESS_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 64)}) == 0);
  p.run_requester({.op = opcode::rdma_write, .sg = {p.src.sge(0, 256)}, .remote_addr = p.dst.addr(4096 - 128),
                   .rkey = p.dst.rkey()},
                  {wc_status::rem_access_err});
  check_responder_flushed(fx, p.b, {800});
}

CONFORMANCE_CASE("faults: RDMA_WRITE to an MR without REMOTE_WRITE -> REM_ACCESS_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  auto& ro = fx.make_buffer(256, acc::local_write | acc::remote_read);
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 64)}) == 0);
  p.run_requester({.op = opcode::rdma_write, .sg = {p.src.sge(0, 64)}, .remote_addr = ro.addr(0), .rkey = ro.rkey()},
                  {wc_status::rem_access_err});
  check_responder_flushed(fx, p.b, {800});
  CHECK(ro.u64(0) == 0);
}

CONFORMANCE_CASE("faults: RDMA_READ from an MR without REMOTE_READ -> REM_ACCESS_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  auto& wo = fx.make_buffer(256, acc::local_write | acc::remote_write);
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 64)}) == 0);
  p.run_requester({.op = opcode::rdma_read, .sg = {p.src.sge(0, 64)}, .remote_addr = wo.addr(0), .rkey = wo.rkey()},
                  {wc_status::rem_access_err});
  check_responder_flushed(fx, p.b, {800});
}

CONFORMANCE_CASE("faults: RDMA_READ beyond the remote MR's range -> REM_ACCESS_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 64)}) == 0);
  p.run_requester({.op = opcode::rdma_read, .sg = {p.src.sge(0, 512)}, .remote_addr = p.dst.addr(4096 - 256),
                   .rkey = p.dst.rkey()},
                  {wc_status::rem_access_err});
  check_responder_flushed(fx, p.b, {800});
}

CONFORMANCE_CASE("faults: atomic on an MR without REMOTE_ATOMIC -> REM_ACCESS_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  auto& rw = fx.make_buffer(64, acc::local_write | acc::remote_write | acc::remote_read);
  auto& res = fx.make_buffer(64);
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 64)}) == 0);
  REQUIRE(fx.post_atomic(p.a, 1, opcode::atomic_cmp_and_swp, res.sge(0, 8), rw.addr(0), rw.rkey(), 0, 5) == 0);
  CHECK(fx.poll_one(p.a.send_cq).status == wc_status::rem_access_err);
  CHECK(rw.u64(0) == 0);
  CHECK(fx.wait_state(p.a, qp_state::err) == qp_state::err);
  check_responder_flushed(fx, p.b, {800});
}

// --- responder QP access flags ---

CONFORMANCE_CASE("faults: responder QP without the remote access in qp_access_flags -> REM_INV_REQ_ERR") {
  fixture<B> fx;
  link_opts lb;
  SUBCASE("WRITE, no REMOTE_WRITE") { lb.qp_access = acc::remote_read | acc::remote_atomic; }
  SUBCASE("READ, no REMOTE_READ") { lb.qp_access = acc::remote_write | acc::remote_atomic; }
  SUBCASE("atomic, no REMOTE_ATOMIC") { lb.qp_access = acc::remote_write | acc::remote_read; }
  faulty_pair<B> p(fx, {}, lb);
  auto& res = fx.make_buffer(64);
  if (!has_any(lb.qp_access, acc::remote_write))
    p.run_requester({.op = opcode::rdma_write, .sg = {p.src.sge(0, 64)}, .remote_addr = p.dst.addr(0),
                     .rkey = p.dst.rkey()},
                    {wc_status::rem_inv_req_err});
  else if (!has_any(lb.qp_access, acc::remote_read))
    p.run_requester({.op = opcode::rdma_read, .sg = {p.src.sge(0, 64)}, .remote_addr = p.dst.addr(0),
                     .rkey = p.dst.rkey()},
                    {wc_status::rem_inv_req_err});
  else {
    REQUIRE(fx.post_atomic(p.a, 1, opcode::atomic_fetch_and_add, res.sge(0, 8), p.dst.addr(0), p.dst.rkey(), 1) == 0);
    CHECK(fx.poll_one(p.a.send_cq).status == wc_status::rem_inv_req_err);
    CHECK(fx.wait_state(p.a, qp_state::err) == qp_state::err);
  }
  CHECK(p.dst.u64(0) == 0);
}

CONFORMANCE_CASE("faults: max_dest_rd_atomic = 0 at the responder -> READ/atomic get REM_INV_REQ_ERR") {
  fixture<B> fx;
  link_opts lb;
  lb.max_dest_rd_atomic = 0;
  faulty_pair<B> p(fx, {}, lb);
  auto& res = fx.make_buffer(64);
  SUBCASE("READ") {
    p.run_requester({.op = opcode::rdma_read, .sg = {p.src.sge(0, 64)}, .remote_addr = p.dst.addr(0),
                     .rkey = p.dst.rkey()},
                    {wc_status::rem_inv_req_err});
  }
  SUBCASE("atomic") {
    REQUIRE(fx.post_atomic(p.a, 1, opcode::atomic_fetch_and_add, res.sge(0, 8), p.dst.addr(0), p.dst.rkey(), 1) == 0);
    CHECK(fx.poll_one(p.a.send_cq).status == wc_status::rem_inv_req_err);
    CHECK(p.dst.u64(0) == 0);
  }
}

// --- receive-side faults (rxe differs: deviation table) ---

CONFORMANCE_CASE("faults: RC receive buffer too small -> both sides error, both QPs ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::recv_too_small_rc, backend_traits<B>::profile());
  REQUIRE(fx.post_recv_list(p.b, {{800, {p.dst.sge(0, 32)}}, {801, {p.dst.sge(64, 4000)}}}).rc == 0);
  p.run_requester({.sg = {p.src.sge(0, 100)}}, want.req);
  auto rq = fx.poll(p.b.recv_cq, 2, "the failed receive and a flush");
  REQUIRE(rq.size() == 2);
  CHECK(rq[0].wr_id == 800);
  CONF_CHECK_STATUS(want.resp, rq[0].status);
  check_flushes({rq[1]}, {801}, p.b.num);
  CHECK(fx.wait_state(p.b, qp_state::err) == qp_state::err);
}

// The receive fails on the packet that does not fit: those before it may have been written.
CONFORMANCE_CASE("faults: RC SEND of three packets into a receive with room for two and a half") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::recv_too_small_later, backend_traits<B>::profile());
  const auto size_want = expected(ids::recv_too_small_rc, backend_traits<B>::profile());
  REQUIRE(fx.post_recv(p.b, 800, {p.dst.sge(0, 2560)}) == 0);
  p.run_requester({.sg = {p.src.sge(0, 3000)}}, size_want.req);
  auto rq = fx.poll(p.b.recv_cq, 1, "the failed receive");
  REQUIRE(rq.size() == 1);
  CONF_CHECK_STATUS(size_want.resp, rq[0].status);
  if (want.head_written == tri::yes) {
    CHECK(p.dst.holds(5, 0, 2048));
    CHECK(p.dst.zero(2048, 4096 - 2048));
  } else {
    CHECK(p.dst.zero(0, 4096));
  }
}

// A receive fails where the data meets its bad SGE, which may lie inside a packet: at
// the SGE for a bad lkey, at the region's end for a range.
CONFORMANCE_CASE("faults: RC SEND reaching a receive's bad SGE inside a packet -> the bytes before it") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  auto& region = fx.make_buffer(1200);
  const auto want = expected(ids::recv_bad_sge_mid_packet, backend_traits<B>::profile());
  const auto status_want = expected(ids::recv_bad_lkey_rc, backend_traits<B>::profile());
  const rdmakit::sge bad_lkey{p.dst.addr(2048), 23, p.dst.lkey() ^ 0x4400};
  std::vector<rdmakit::sge> sg;
  std::uint32_t len = 0, in_dst = 0, in_region = 0;  // the bytes rxe writes to each
  SUBCASE("bad lkey, in the only packet") {
    sg = {p.dst.sge(0, 21), bad_lkey, p.dst.sge(2100, 1000)};
    len = 559;
    in_dst = 21;
  }
  SUBCASE("bad lkey, in the second packet") {
    sg = {p.dst.sge(0, 1500), bad_lkey, p.dst.sge(2100, 1000)};
    len = 2000;
    in_dst = 1500;
  }
  SUBCASE("past its region, in the second packet") {  // the first packet's piece lies inside
    sg = {p.dst.sge(0, 100), region.sge(0, 1900)};
    len = 2000;
    in_dst = 100;
    in_region = 924;
  }
  REQUIRE(fx.post_recv(p.b, 800, sg) == 0);
  p.run_requester({.sg = {p.src.sge(0, len)}}, status_want.req);
  auto rq = fx.poll(p.b.recv_cq, 1, "the failed receive");
  REQUIRE(rq.size() == 1);
  CONF_CHECK_STATUS(status_want.resp, rq[0].status);
  if (want.head_written == tri::no) in_dst = in_region = 0;
  if (want.head_written != tri::either) {
    CHECK(p.dst.holds(5, 0, in_dst));
    CHECK(p.dst.zero(in_dst, 4096 - in_dst));
    CHECK(region.holds(5, 0, in_region, in_dst));
    CHECK(region.zero(in_region, 1200 - in_region));
  }
}

CONFORMANCE_CASE("faults: RC receive SGE with a bad lkey -> resp error, req REM_OP_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::recv_bad_lkey_rc, backend_traits<B>::profile());
  REQUIRE(fx.post_recv_list(p.b, {{800, {{p.dst.addr(0), 256, p.dst.lkey() ^ 0x4400}}}, {801, {p.dst.sge(256, 256)}}})
              .rc == 0);
  p.run_requester({.sg = {p.src.sge(0, 100)}}, want.req);
  auto rq = fx.poll(p.b.recv_cq, 2, "the failed receive and a flush");
  REQUIRE(rq.size() == 2);
  CHECK(rq[0].wr_id == 800);
  CONF_CHECK_STATUS(want.resp, rq[0].status);
  check_flushes({rq[1]}, {801}, p.b.num);
  CHECK(fx.wait_state(p.b, qp_state::err) == qp_state::err);
}

CONFORMANCE_CASE("faults: RC receive whose second SGE has a bad lkey, for a message the first holds") {
  fixture<B> fx;
  const auto want = expected(ids::recv_bad_lkey_unreached_rc, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair({.caps = {16, 16, 1, 2, 0}});
  auto& dst = fx.make_buffer(256);
  send_short_of_receive_fault(fx, want, a, b, dst, {dst.sge(0, 64), {dst.addr(64), 64, dst.lkey() ^ 0x5a5a00}}, 32, 0);
}

CONFORMANCE_CASE("faults: RC receive whose SGE runs past its region, for a message the region holds") {
  fixture<B> fx;
  const auto want = expected(ids::recv_past_region_unreached_rc, backend_traits<B>::profile());
  auto [a, b] = fx.make_pair();
  auto& dst = fx.make_buffer(256);
  send_short_of_receive_fault(fx, want, a, b, dst, {dst.sge(200, 100)}, 6, 200);  // 44 bytes past the region's end
}

CONFORMANCE_CASE("faults: RC receive into an MR without LOCAL_WRITE -> resp error, req REM_OP_ERR") {
  fixture<B> fx;
  faulty_pair<B> p(fx);
  const auto want = expected(ids::recv_no_local_write_rc, backend_traits<B>::profile());
  auto& ro = fx.make_buffer(256, acc::remote_read);
  REQUIRE(fx.post_recv_list(p.b, {{800, {ro.sge(0, 256)}}, {801, {p.dst.sge(0, 256)}}}).rc == 0);
  p.run_requester({.sg = {p.src.sge(0, 100)}}, want.req);
  auto rq = fx.poll(p.b.recv_cq, 2, "the failed receive and a flush");
  REQUIRE(rq.size() == 2);
  CHECK(rq[0].wr_id == 800);
  CONF_CHECK_STATUS(want.resp, rq[0].status);
  check_flushes({rq[1]}, {801}, p.b.num);
  CHECK(fx.wait_state(p.b, qp_state::err) == qp_state::err);
  CHECK(ro.u64(0) == 0);
}

// --- RNR and transport retries ---

CONFORMANCE_CASE("faults: RC SEND without a posted receive and small rnr_retry -> RNR_RETRY_EXC_ERR") {
  fixture<B> fx;
  link_opts la, lb;
  la.rnr_retry = 1;
  lb.min_rnr_timer = 1;  // 0.01 ms
  faulty_pair<B> p(fx, la, lb);
  SUBCASE("SEND") { p.run_requester({.sg = {p.src.sge(0, 64)}}, {wc_status::rnr_retry_exc_err}); }
  SUBCASE("RDMA_WRITE_WITH_IMM") {
    p.run_requester({.op = opcode::rdma_write_with_imm, .sg = {p.src.sge(0, 64)}, .remote_addr = p.dst.addr(0),
                     .rkey = p.dst.rkey(), .imm_be = to_be32(1)},
                    {wc_status::rnr_retry_exc_err});
  }
  // Only the last packet, which carries the immediate, needs the receive: the two before
  // it (path MTU 1024) were written.
  SUBCASE("RDMA_WRITE_WITH_IMM over three packets: the first two are written") {
    p.run_requester({.op = opcode::rdma_write_with_imm, .sg = {p.src.sge(0, 2500)}, .remote_addr = p.dst.addr(0),
                     .rkey = p.dst.rkey(), .imm_be = to_be32(1)},
                    {wc_status::rnr_retry_exc_err});
    CHECK(p.dst.holds(5, 0, 2048));
    CHECK(p.dst.zero(2048, 4096 - 2048));
  }
  CHECK(fx.drain(p.b.recv_cq, 5).empty());
}

// A device sends a message's packets, and the next WRs', before any answer comes: the
// responder that refuses one for want of a receive meets more behind it. rxe NAKs the
// first of those with a PSN sequence error, which costs its requester a transport retry
// (the first since an ACK only): with RETRY_CNT 0 the WR fails at once.
CONFORMANCE_CASE("faults: RNR NAK with packets behind it, retry_cnt 0 -> the status of the row") {
  const auto want = expected(ids::rnr_nak_packets_behind, backend_traits<B>::profile());
  // With RETRY_CNT 1 the one retry goes and the RNR budget decides, on every device.
  auto each_retry_cnt = [&](auto&& send, std::uint8_t rnr_retry = 3) {
    for (const int retry_cnt : {0, 1}) {
      CAPTURE(retry_cnt);
      fixture<B> fx;
      link_opts la, lb;
      la.retry_cnt = static_cast<std::uint8_t>(retry_cnt);
      la.rnr_retry = rnr_retry;
      lb.min_rnr_timer = 1;  // 0.01 ms
      faulty_pair<B> p(fx, la, lb);
      send(fx, p, retry_cnt == 0 ? want.req : status_set{wc_status::rnr_retry_exc_err});
      if (want.resp.is_nothing()) CHECK(fx.drain(p.b.recv_cq, 5).empty());
      CHECK(B::query_qp_state(p.b.qp) == qp_state::rts);
    }
  };
  // run_requester posts two SENDs behind it.
  SUBCASE("SEND") {
    each_retry_cnt([](fixture<B>&, faulty_pair<B>& p, status_set req) {
      p.run_requester({.sg = {p.src.sge(0, 64)}}, req);
    });
  }
  SUBCASE("SEND of three packets") {
    each_retry_cnt([](fixture<B>&, faulty_pair<B>& p, status_set req) {
      p.run_requester({.sg = {p.src.sge(0, 2500)}}, req);
    });
  }
  // The packets behind come from a later post_send, made while the SEND waits for its
  // RNR timer: rxe's requester sends them then (audit note N3). RNR_RETRY 1: the resend
  // the timer makes is the last.
  SUBCASE("SEND, then a WRITE posted by a later post_send") {
    each_retry_cnt([](fixture<B>& fx, faulty_pair<B>& p, status_set req) {
      REQUIRE(fx.post_send(p.a, 1, opcode::send, {p.src.sge(0, 64)}) == 0);
      REQUIRE(fx.post_rdma(p.a, 2, opcode::rdma_write, p.src.sge(0, 64), p.dst.addr(0), p.dst.rkey()) == 0);
      auto sq = fx.poll(p.a.send_cq, 2, "the SEND's error and the WRITE's flush");
      REQUIRE(sq.size() == 2);
      CHECK(sq[0].wr_id == 1);
      CONF_CHECK_STATUS(req, sq[0].status);
      check_flushes({sq[1]}, {2}, p.a.num);
      CHECK(fx.wait_state(p.a, qp_state::err) == qp_state::err);
      CHECK(p.dst.zero(0, 4096));
    }, 1);
  }
  SUBCASE("SEND of three packets, alone") {
    each_retry_cnt([](fixture<B>& fx, faulty_pair<B>& p, status_set req) {
      REQUIRE(fx.post_send(p.a, 1, opcode::send, {p.src.sge(0, 2500)}) == 0);
      auto c = fx.poll_one(p.a.send_cq, "the SEND's error");
      CHECK(c.wr_id == 1);
      CONF_CHECK_STATUS(req, c.status);
      CHECK(fx.wait_state(p.a, qp_state::err) == qp_state::err);
    });
  }
}

CONFORMANCE_CASE("faults: RNR with rnr_retry = 7 retries until a receive is posted, then succeeds") {
  fixture<B> fx;
  link_opts la, lb;
  la.rnr_retry = 7;
  lb.min_rnr_timer = 1;
  auto [a, b] = fx.make_pair({}, la, lb);
  auto& src = fx.make_buffer(256);
  auto& dst = fx.make_buffer(256);
  src.fill(2);
  REQUIRE(fx.post_send(a, 1, opcode::send, {src.sge(0, 200)}) == 0);
  CHECK(fx.drain(a.send_cq, 20).empty());  // RNR NAKs, retried forever
  CHECK(B::query_qp_state(a.qp) == qp_state::rts);
  REQUIRE(fx.post_recv(b, 2, {dst.sge(0, 256)}) == 0);
  auto s = fx.poll_one(a.send_cq, "the send after the receive was posted");
  CHECK(s.status == wc_status::success);
  auto r = fx.poll_one(b.recv_cq);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 200);
  CHECK(dst.holds(2, 0, 200));
}

CONFORMANCE_CASE("faults: RC towards a QP number that does not exist -> RETRY_EXC_ERR") {
  fixture<B> fx;
  link_opts l;
  l.timeout = 1;
  l.retry_cnt = 1;
  auto a = fx.make_qp({.sig_all = false});
  auto& buf = fx.make_buffer(256);
  fx.bring_up(a, 0xfffff0, l);
  REQUIRE(fx.post_recv(a, 900, {buf.sge(0, 64)}) == 0);
  auto r = fx.post_send_list(a, {{.wr_id = 1, .sg = {buf.sge(0, 64)}, .flags = send_flags::none},
                                 {.wr_id = 2, .sg = {buf.sge(0, 64)}, .flags = send_flags::signaled}});
  REQUIRE(r.rc == 0);
  auto sq = fx.poll(a.send_cq, 2, "retry exceeded and a flush");
  REQUIRE(sq.size() == 2);
  CHECK(sq[0].wr_id == 1);
  CHECK(sq[0].status == wc_status::retry_exc_err);
  check_flushes({sq[1]}, {2}, a.num);
  check_flushes(fx.poll(a.recv_cq, 1), {900}, a.num);
  CHECK(fx.wait_state(a, qp_state::err) == qp_state::err);
}

// connect_options and cm_options default RETRY_CNT to 6 for this: on rxe a WR to a peer
// that died never completed, and every post after it found the queue full.
CONFORMANCE_CASE("faults: RC with retry_cnt 7 towards a QP number that does not exist -> the status of the row") {
  const auto want = expected(ids::retry_cnt_7, backend_traits<B>::profile());
  fixture<B> fx;
  auto& buf = fx.make_buffer(256);
  const auto send_to_nobody = [&](std::uint8_t retry_cnt) {
    link_opts l;
    l.timeout = 1;  // 8 µs (rxe's timer ticks in jiffies)
    l.retry_cnt = retry_cnt;
    auto a = fx.make_qp();
    fx.bring_up(a, 0xfffff0, l);
    REQUIRE(fx.post_send(a, 1, opcode::send, {buf.sge(0, 64)}) == 0);
    return a;
  };
  // RETRY_CNT 6 ends everywhere: the time it takes bounds the wait below.
  auto six = send_to_nobody(6);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(fx.poll_one(six.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
  const auto six_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  auto seven = send_to_nobody(7);
  if (want.req.is_nothing()) {
    // 300 looks (1 ms apart on a device, expiries on the mock), or three times RETRY_CNT 6's time.
    CHECK(fx.drain(seven.send_cq, std::max(300, 3 * static_cast<int>(six_ms.count()))).empty());
    CHECK(B::query_qp_state(seven.qp) == qp_state::rts);
  } else {
    CHECK(want.req.allows(fx.poll_one(seven.send_cq, "retry exceeded").status));
    CHECK(fx.wait_state(seven, qp_state::err) == qp_state::err);
  }
}

// A responder answers its own peer only (docs/semantics.md#wrong-peer): a QP brought up
// towards another's responder (a QP number mixed up in an exchange, a second client on a
// server's QP) is never answered. A device may execute what it sent (its ACK goes to the
// peer); the mock drops it. Either way the sender ends in RETRY_EXC_ERR.
CONFORMANCE_CASE("faults: RC from a QP that is not the responder's peer -> RETRY_EXC_ERR") {
  fixture<B> fx;
  link_opts l;
  l.timeout = 1;
  l.retry_cnt = 1;
  auto& buf = fx.make_buffer(256);
  // `target` is connected to `peer`; `stranger` is brought up towards `target`.
  auto target = fx.make_qp();
  auto peer = fx.make_qp();
  auto stranger = fx.make_qp();
  fx.connect(target, peer, l, l);
  fx.bring_up(stranger, target.num, l);
  SUBCASE("a WRITE") {
    REQUIRE(fx.post_rdma(stranger, 1, opcode::rdma_write, buf.sge(0, 64), buf.addr(128), buf.rkey()) == 0);
    CHECK(fx.poll_one(stranger.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
    CHECK(fx.drain(peer.send_cq, 3).empty());
  }
  SUBCASE("two clients SEND to one server QP") {
    for (std::uint64_t i = 0; i < 2; ++i) REQUIRE(fx.post_recv(target, 100 + i, {buf.sge(64 * i, 64)}) == 0);
    REQUIRE(fx.post_send(peer, 1, opcode::send, {buf.sge(128, 8)}) == 0);
    CHECK(fx.poll_one(peer.send_cq).status == wc_status::success);
    REQUIRE(fx.post_send(stranger, 2, opcode::send, {buf.sge(128, 8)}) == 0);
    CHECK(fx.poll_one(stranger.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
  }
}

CONFORMANCE_CASE("faults: RC READ behind the responder's PSN that it never executed -> RETRY_EXC_ERR") {
  fixture<B> fx;
  link_opts la;
  la.timeout = 1;
  la.retry_cnt = 1;
  la.sq_psn = 0x100;
  link_opts lb;
  lb.rq_psn = 0x200;  // b expects 0x200 from a
  auto [a, b] = fx.make_pair({}, la, lb);
  auto& local = fx.make_buffer(64);
  auto& remote = fx.make_buffer(64);
  remote.fill(9);
  std::uint32_t rkey = remote.rkey();
  SUBCASE("its rkey right") {}
  SUBCASE("its rkey wrong") { rkey ^= 0x5500; }
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_read, local.sge(0, 64), remote.addr(), rkey) == 0);
  CHECK(fx.poll_one(a.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
  CHECK(local.zero(0, 64));
}

CONFORMANCE_CASE("faults: RC towards a peer that is not in RTR -> RETRY_EXC_ERR") {
  fixture<B> fx;
  link_opts l;
  l.timeout = 1;
  l.retry_cnt = 1;
  auto a = fx.make_qp();
  auto b = fx.make_qp();
  fx.to_init(b);  // stays in INIT
  fx.bring_up(a, b.num, l);
  auto& buf = fx.make_buffer(256);
  REQUIRE(fx.post_recv(b, 800, {buf.sge(0, 64)}) == 0);
  REQUIRE(fx.post_send(a, 1, opcode::send, {buf.sge(64, 64)}) == 0);
  auto c = fx.poll_one(a.send_cq, "retry exceeded");
  CHECK(c.status == wc_status::retry_exc_err);
  CHECK(fx.drain(b.recv_cq, 3).empty());
}
