// connect() checks its options before touching the QP, and when the device refuses a
// step the object left behind is an INIT queue pair whose device state is INIT too.
#include "fixture.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

using namespace policy_test;

namespace {

// The mock, except that it refuses the next `refuse_rts` RTR→RTS transitions after
// `allow_rts` more succeed (a device-side failure half-way through connect), and the
// next `refuse_init`, `refuse_rtr`, `refuse_err` transitions to that state.
struct rts_refusing : backends::mock {
  static inline int allow_rts = 0;
  static inline int refuse_rts = 0;
  static inline int refuse_init = 0;
  static inline int refuse_rtr = 0;
  static inline int refuse_err = 0;
  // Runs just before an RTR→RTS refusal: what the peer does while this side is in RTR.
  static inline std::function<void()> before_refusal;
  static void modify_qp(qp q, const qp_attr& a, qp_attr_mask m) {
    int* refuse = a.state == qp_state::init  ? &refuse_init
                  : a.state == qp_state::rtr ? &refuse_rtr
                  : a.state == qp_state::err ? &refuse_err
                                             : nullptr;
    if (refuse && *refuse > 0) {
      --*refuse;
      throw verbs_error("ibv_modify_qp", EINVAL, "injected: transition refused");
    }
    if (a.state == qp_state::rts && refuse_rts > 0) {
      if (allow_rts > 0) {
        --allow_rts;
      } else {
        --refuse_rts;
        if (before_refusal) std::exchange(before_refusal, {})();
        throw verbs_error("ibv_modify_qp", EINVAL, "injected: RTS refused");
      }
    }
    backends::mock::modify_qp(q, a, m);
  }
};
static_assert(verbs_backend<rts_refusing>);
using R = rts_refusing;
using rside = basic_side<R>;

}  // namespace

TEST_CASE("options out of range are refused before the QP is touched; connect can be retried") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto rx = x.pd.allocate<rw_access>(64);
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  REQUIRE(qp.post_recv(rx.local(), 1).ok());
  auto with = [](auto set) {
    connect_options o;
    set(o);
    return o;
  };
  const std::pair<const char*, connect_options> bad[] = {
      {"retry_cnt", with([](auto& o) { o.retry_cnt = 8; })},
      {"rnr_retry", with([](auto& o) { o.rnr_retry = 9; })},
      {"connect_options::timeout", with([](auto& o) { o.timeout = 32; })},
      {"min_rnr_timer", with([](auto& o) { o.min_rnr_timer = 40; })},
      {"sl", with([](auto& o) { o.sl = 16; })},
      {"path_mtu", with([](auto& o) { o.path_mtu = static_cast<mtu>(9); })},
  };
  for (const auto& [field, o] : bad) {
    const char* const name = field;  // CAPTURE's lambda: clang 14 cannot capture a binding
    CAPTURE(name);
    CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint(), o), doctest::Contains(name), usage_error);
    REQUIRE(qp);
    CHECK(qp.query_state() == qp_state::init);
    CHECK(qp.posted_recvs() == 1);
  }
  endpoint far = peer.local_endpoint();
  far.qpn = 1u << 24;
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(far), doctest::Contains("24 bits"), usage_error);
  // A peer MTU that names none (a garbled record) connected at this port's MTU.
  for (const char* m : {"0", "6", "4096"}) {
    endpoint garbled = peer.local_endpoint();
    garbled.mtu = static_cast<mtu>(std::stoul(m));
    CAPTURE(m);
    CHECK_THROWS_WITH_AS((void)std::move(qp).connect(garbled),
                         doctest::Contains(("endpoint::mtu (peer) = " + std::string(m) + " names no MTU").c_str()),
                         usage_error);
    CHECK(qp.query_state() == qp_state::init);
  }
  auto live = std::move(qp).connect(peer.local_endpoint());
  CHECK(live.query_state() == qp_state::rts);
}

TEST_CASE("RTR→RTS refused by the device: the queue pair is back in INIT, on the device too") {
  mock::fabric fab;
  rside x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(64);
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  const auto old_qpn = qp.qp_num();
  R::allow_rts = 0;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()),
                       doctest::Contains("reset to INIT: connect can be retried"), verbs_error);
  REQUIRE(qp);
  CHECK(qp.query_state() == qp_state::init);
  CHECK(qp.qp_num() == old_qpn);  // nothing posted: the same QP, taken back in place
  REQUIRE(qp.post_recv(rx.local(), 1).ok());
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()),
                       doctest::Contains("replaced by a new one in INIT"), verbs_error);
  REQUIRE(qp);
  CHECK(qp.query_state() == qp_state::init);
  CHECK(qp.qp_num() != old_qpn);  // receives posted: a new QP, the old one flushes them
  CHECK(qp.posted_recvs() == 0);
  std::vector<seen> got;
  // (A device writes the flush after the verb returns: the mock, once a poll found none.)
  for (int i = 0; i < 10 && got.empty(); ++i) (void)x.cq.poll([&](const auto& c) { got.push_back(copy(c)); });
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 1);
  CHECK(got[0].qp_num == old_qpn);
  CHECK(got[0].status == wc_status::wr_flush_err);
  REQUIRE(qp.post_recv(rx.local(), 2).ok());
  auto live = std::move(qp).connect(peer.local_endpoint());  // a retry works
  CHECK(live.query_state() == qp_state::rts);
  CHECK(live.posted_recvs() == 1);
}

// A receive consumed while the queue pair was in RTR completes after the refusal: the
// reset to INIT used to forget it was posted, and its completion then took the count
// of posted receives below zero (post_recv said rq_full for ever).
TEST_CASE("RTR→RTS refused after a receive was consumed in RTR: its completion is counted once, the QP stays usable") {
  mock::fabric fab;
  rside x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(64);
  auto tx = y.pd.allocate<rw_access>(64);
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer = std::move(y.pd.create_qp<rc>(y.cq, qp_cap{8, 8})).connect(qp.local_endpoint());
  REQUIRE(qp.post_recv(rx.local(0, 32), 1).ok());
  REQUIRE(qp.post_recv(rx.local(32, 32), 2).ok());
  R::allow_rts = 0;
  R::refuse_rts = 1;
  R::before_refusal = [&] { REQUIRE(peer.send(tx.local(0, 8), 7).ok()); };
  CHECK_THROWS_AS((void)std::move(qp).connect(peer.local_endpoint()), verbs_error);
  REQUIRE(qp);
  CHECK(qp.query_state() == qp_state::init);
  std::vector<seen> got;
  for (int i = 0; i < 100 && got.size() < 2; ++i)
    (void)x.cq.poll([&](const auto& c) { got.push_back(copy(c)); });
  // Both receives end with a completion of their own: the one the peer's SEND took, and
  // the one the refusal flushed. Neither is lost, neither counts twice.
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[1].wr_id == 2);
  CHECK(got[1].status == wc_status::wr_flush_err);
  CHECK(qp.posted_recvs() == 0);
  for (std::uint64_t id = 10; id < 18; ++id) REQUIRE(qp.post_recv(rx.local(0, 8), id).ok());  // the whole RQ
  CHECK(qp.post_recv(rx.local(0, 8), 18).status == post_status::rq_full);
  auto live = std::move(qp).connect(peer.local_endpoint());
  CHECK(live.query_state() == qp_state::rts);
  CHECK(live.posted_recvs() == 8);
}

// On a CQ sized exactly for the queue pair there is no room for a new one beside the
// old one's receive flushes: the replacement used to be made anyway (16 entries
// promised + 1 flushing on 16) and the CQ could overflow.
TEST_CASE("RTR→RTS refused with receives posted on a CQ sized for the queue pair: it goes to ERR, then reset() starts over") {
  mock::fabric fab;
  rside x(fab, "mock0", 16), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(64);
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  const auto old_qpn = qp.qp_num();
  REQUIRE(qp.post_recv(rx.local(), 1).ok());
  R::allow_rts = 0;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()), doctest::Contains("was moved to ERR"),
                       verbs_error);
  CHECK(x.cq.reserved() + x.cq.flushing() <= 16);
  REQUIRE(qp);
  CHECK(qp.qp_num() == old_qpn);
  CHECK(qp.query_state() == qp_state::err);
  auto got = collect(x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 1);
  CHECK(got[0].status == wc_status::wr_flush_err);
  CHECK(qp.posted_recvs() == 0);
  CHECK(qp.in_error());
  CHECK(qp.post_recv(rx.local(), 2).status == post_status::qp_error);
  auto fresh = std::move(qp).reset();  // nothing outstanding: fits
  REQUIRE(fresh.post_recv(rx.local(), 3).ok());
  auto live = std::move(fresh).connect(peer.local_endpoint());
  CHECK(live.query_state() == qp_state::rts);
  CHECK(x.cq.reserved() == 16);
  CHECK(x.cq.flushing() == 0);
}

// A poll that drained the busy CQ after a destroy gave the destroyed queue pair's room
// back to create_qp and reset(), but not to the replacement a refused connect decides
// on: it counted the room still held and moved the queue pair to ERR (audit 34, F1).
TEST_CASE("RTR→RTS refused with receives posted after a drained poll freed a destroyed queue pair's room: replaced") {
  mock::fabric fab;
  rside x(fab, "mock0", 16), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(256);
  auto src = y.pd.allocate<rw_access>(64);
  auto busy = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{2, 2});  // 4 entries; keeps the CQ from being empty
  {
    auto gone = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
    for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(gone.post_recv(rx.local(8 * i, 8), 10 + i).ok());
  }  // destroyed with 4 receives: 4 entries held until a poll drains the CQ
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});  // 4 + 8 + 4 = 16
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
  const auto old_qpn = qp.qp_num();
  REQUIRE(qp.post_recv(rx.local(128, 8), 1).ok());
  REQUIRE(busy.a.post_recv(rx.local(192, 8), 100).ok());
  REQUIRE(busy.b.send(src.local(0, 8), 2).ok());
  REQUIRE(collect(y.cq, 1).size() == 1);
  REQUIRE(x.cq.poll() == 1);  // fewer than a batch: drained
  R::allow_rts = 0;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()), doctest::Contains("replaced"),
                       verbs_error);
  REQUIRE(qp);
  CHECK(qp.qp_num() != old_qpn);
  CHECK(qp.query_state() == qp_state::init);
  auto got = collect(x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].qp_num == old_qpn);
  CHECK(got[0].status == wc_status::wr_flush_err);
}

// The refusal's replacement used to destroy the generation an earlier reset() kept,
// with its flushes still in the CQ: they were never delivered.
TEST_CASE("RTR→RTS refused after a reset() whose flushes are unpolled: every generation's receives complete") {
  mock::fabric fab;
  rside x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(64);
  auto q0 = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  const auto first = q0.qp_num();
  REQUIRE(q0.post_recv(rx.local(0, 8), 1).ok());
  auto qp = std::move(q0).reset();
  const auto second = qp.qp_num();
  REQUIRE(qp.post_recv(rx.local(8, 8), 2).ok());
  R::allow_rts = 0;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()), doctest::Contains("replaced"),
                       verbs_error);
  REQUIRE(qp);
  CHECK(x.cq.flushing() == 2);
  auto got = collect(x.cq, 2);
  REQUIRE(got.size() == 2);
  std::vector<std::pair<std::uint32_t, std::uint64_t>> ids;
  for (const auto& c : got) {
    CHECK(c.status == wc_status::wr_flush_err);
    ids.emplace_back(c.qp_num, c.wr_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{first, 1}, {second, 2}});
  CHECK(x.cq.unrouted() == 0);
  CHECK(x.cq.flushing() == 0);
  auto live = std::move(qp).connect(peer.local_endpoint());
  CHECK(live.query_state() == qp_state::rts);
}

TEST_CASE("UD activate refused at RTR→RTS with receives posted: replaced, the receive flushes on the old QP") {
  mock::fabric fab;
  rside x(fab, "mock0", 64);
  auto rx = x.pd.allocate<rw_access>(256);
  auto qp = x.pd.create_qp<ud>(x.cq, qp_cap{8, 8});
  const auto old_qpn = qp.qp_num();
  REQUIRE(qp.post_recv(rx.local(0, 128), 1).ok());
  R::allow_rts = 0;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(qp).activate(), doctest::Contains("replaced"), verbs_error);
  REQUIRE(qp);
  CHECK(qp.qp_num() != old_qpn);
  auto got = collect(x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].qp_num == old_qpn);
  CHECK(got[0].status == wc_status::wr_flush_err);
  auto live = std::move(qp).activate();
  CHECK(live.query_state() == qp_state::rts);
}

// A handler set with cq.on() stays with the replaced queue pair (its flushes reach it),
// as after reset(); the new queue pair has none until on() is called for it.
TEST_CASE("RTR→RTS refused with a handler set by on(): the flush reaches it, the new queue pair needs its own") {
  mock::fabric fab;
  rside x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(64);
  auto tx = y.pd.allocate<rw_access>(64);
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer0 = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  int handled = 0, fallback = 0;
  x.cq.on(qp, [&](const completion<R>& c) { handled += c.status() == wc_status::wr_flush_err; });
  REQUIRE(qp.post_recv(rx.local(), 1).ok());
  R::allow_rts = 0;
  R::refuse_rts = 1;
  CHECK_THROWS_AS((void)std::move(qp).connect(peer0.local_endpoint()), verbs_error);
  for (int i = 0; i < 10 && handled == 0; ++i) (void)x.cq.dispatch([&](const completion<R>&) { ++fallback; });
  CHECK(handled == 1);
  CHECK(fallback == 0);
  REQUIRE(qp.post_recv(rx.local(), 2).ok());
  auto live = std::move(qp).connect(peer0.local_endpoint());
  auto peer = std::move(peer0).connect(live.local_endpoint());
  REQUIRE(peer.send(tx.local(0, 8), 9).ok());
  for (int i = 0; i < 100 && fallback == 0; ++i) (void)x.cq.dispatch([&](const completion<R>&) { ++fallback; });
  CHECK(fallback == 1);  // no handler on the new queue pair
  x.cq.on(live, [&](const completion<R>&) { ++handled; });
  REQUIRE(live.post_recv(rx.local(), 3).ok());
  REQUIRE(peer.send(tx.local(0, 8), 10).ok());
  for (int i = 0; i < 100 && handled == 1; ++i) (void)x.cq.dispatch([&](const completion<R>&) { ++fallback; });
  CHECK(handled == 2);
}

// On a shared receive queue the receives are not the queue pair's: RESET→INIT in place,
// and a receive a message took in RTR completes on the same QP number, counted once.
TEST_CASE("on_srq: RTR→RTS refused after a message took a receive of the SRQ: it completes, the QP is reset in place") {
  mock::fabric fab;
  rside x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto rx = x.pd.allocate<rw_access>(64);
  auto tx = y.pd.allocate<rw_access>(64);
  auto srq = x.pd.create_srq({.max_wr = 8, .max_sge = 1});
  auto qp = x.pd.create_qp<rc>(x.cq, srq, qp_cap{8, 0});
  auto peer = std::move(y.pd.create_qp<rc>(y.cq, qp_cap{8, 8})).connect(qp.local_endpoint());
  const auto qpn = qp.qp_num();
  REQUIRE(srq.post_recv(rx.local(0, 32), 1).ok());
  REQUIRE(srq.post_recv(rx.local(32, 32), 2).ok());
  R::allow_rts = 0;
  R::refuse_rts = 1;
  R::before_refusal = [&] { REQUIRE(peer.send(tx.local(0, 8), 7).ok()); };
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()), doctest::Contains("reset to INIT"),
                       verbs_error);
  REQUIRE(qp);
  CHECK(qp.qp_num() == qpn);
  auto got = collect(x.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 1);
  CHECK(got[0].qp_num == qpn);
  CHECK(got[0].status == wc_status::success);
  CHECK(x.cq.unrouted() == 0);
  auto live = std::move(qp).connect(peer.local_endpoint());
  CHECK(live.query_state() == qp_state::rts);
}

TEST_CASE("a failed verbs error says the verb and errno once") {
  mock::fabric fab;
  rside x(fab, "mock0", 64);
  auto qp = x.pd.create_qp<uc>(x.cq, qp_cap{8, 8});
  auto ep = qp.local_endpoint();
  R::allow_rts = 0;
  R::refuse_rts = 1;
  try {
    (void)std::move(qp).connect(ep);
    FAIL("connect should have thrown");
  } catch (const verbs_error& e) {
    const std::string w = e.what();
    CAPTURE(w);
    CHECK(w.find("ibv_modify_qp") == w.rfind("ibv_modify_qp"));
    CHECK(w.find("Invalid argument") == w.rfind("Invalid argument"));
    CHECK(e.detail().find("RTR→RTS") != std::string::npos);
    const auto* t = e.transition();  // the same facts, structured
    REQUIRE(t != nullptr);
    CHECK(t->qp_num == ep.qpn);
    CHECK(t->from == qp_state::rtr);
    CHECK(t->to == qp_state::rts);
    CHECK(has_all(t->mask, qp_attr_mask::sq_psn));
    CHECK(t->missing == qp_attr_mask::none);  // uc::rts_mask is what the table asks
    CHECK(t->extra == qp_attr_mask::none);
  }
}

TEST_CASE("qp_pool::connect refused half-way: the pool is emptied, find() is safe, the error says so") {
  mock::fabric fab;
  rside x(fab, "mock0", 256), y(fab, "mock1", 256);
  auto pool = x.pd.create_qp_pool<rc>(x.cq, 3, qp_cap{8, 8});
  auto peers = y.pd.create_qp_pool<rc>(y.cq, 3, qp_cap{8, 8});
  const auto eps = peers.local_endpoints();
  const auto qpn0 = pool[0].qp_num();
  CHECK_THROWS_AS((void)std::move(pool).connect(std::span<const endpoint>(eps.data(), 2)), usage_error);
  CHECK(pool.size() == 3);
  // A peer the second queue pair cannot reach (RoCE without a GID): refused before any
  // transition, so the pool is as it was (it connected the first and emptied itself).
  auto gidless = eps;
  gidless[1].gid = {};
  CHECK_THROWS_WITH_AS((void)std::move(pool).connect(gidless), doctest::Contains("no GID"), usage_error);
  CHECK(pool.size() == 3);
  CHECK(pool.local_endpoints().size() == 3);
  R::allow_rts = 1;
  R::refuse_rts = 1;
  try {
    (void)std::move(pool).connect(eps);
    FAIL("connect went through");
  } catch (const verbs_error& e) {
    const std::string w = e.what();
    CHECK(w.find("queue pair 1 of 3") != std::string::npos);
    CHECK(w.find("create a new pool") != std::string::npos);
    CHECK(w.find("can be retried") == std::string::npos);  // not the queue pair's own advice
    CHECK(e.transition() != nullptr);                         // which transition was refused
  }
  CHECK(pool.size() == 0);
  CHECK(pool.find(qpn0) == nullptr);
  CHECK(x.cq.attached() == 0);
}

// activate() refused half-way left a pool of empty handles (the first was activated and
// destroyed with the pool of the result): its next() gave an empty queue pair.
TEST_CASE("qp_pool::activate refused half-way: the pool is emptied and the error says so") {
  mock::fabric fab;
  rside x(fab, "mock0", 256);
  auto pool = x.pd.create_qp_pool<ud>(x.cq, 3, qp_cap{8, 8});
  R::allow_rts = 1;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(pool).activate(), doctest::Contains("create a new pool"), verbs_error);
  CHECK(pool.size() == 0);
  CHECK(x.cq.attached() == 0);
}

TEST_CASE("every step of create and connect refused in turn: nothing leaks, the object matches the device") {
  mock::fabric fab;
  rside x(fab, "mock0", 64), y(fab, "mock1", 64);
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});

  R::refuse_init = 1;  // RESET→INIT inside create_qp: the QP is destroyed, the CQ keeps no reservation
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(x.cq, qp_cap{8, 8}), doctest::Contains("RESET→INIT"), verbs_error);
  CHECK(x.cq.attached() == 0);
  CHECK(x.cq.reserved() == 0);

  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  R::refuse_rtr = 1;  // INIT→RTR: still INIT
  try {
    (void)std::move(qp).connect(peer.local_endpoint());
    FAIL("INIT→RTR should have been refused");
  } catch (const verbs_error& e) {
    REQUIRE(e.transition() != nullptr);
    CHECK(e.transition()->from == qp_state::init);
    CHECK(e.transition()->to == qp_state::rtr);
  }
  REQUIRE(qp);
  CHECK(qp.query_state() == qp_state::init);

  R::allow_rts = 0;
  R::refuse_rts = 1;  // RTR→RTS: back to INIT
  CHECK_THROWS_AS((void)std::move(qp).connect(peer.local_endpoint()), verbs_error);
  CHECK(qp.query_state() == qp_state::init);

  auto live = std::move(qp).connect(peer.local_endpoint());  // nothing refused: RTS
  CHECK(live.query_state() == qp_state::rts);
  CHECK(x.cq.attached() == 1);
}

// reset() moves the old QP to ERR so that its outstanding WRs flush. When the device
// refused that move, reset() destroyed the old QP and returned a new one without a word:
// the receive never completed, and a program waiting for its flush to take its buffer
// back waited for ever (audit 17, F1). The queue pair is now left as it was, and the
// error says so.
TEST_CASE("reset(): a refused move to ERR leaves the queue pair as it was, its WRs still to flush") {
  mock::fabric fab;
  rside x(fab, "mock0"), y(fab, "mock1");
  auto rx = x.pd.allocate<rw_access>(64);
  auto a = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto b = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  const auto ae = a.local_endpoint();
  auto la = std::move(a).connect(b.local_endpoint());
  auto lb = std::move(b).connect(ae);
  REQUIRE(la.post_recv(rx.local(), 77).ok());
  const auto qpn = la.qp_num();
  R::refuse_err = 1;
  CHECK_THROWS_WITH_AS((void)std::move(la).reset(),
                       doctest::Contains("could not be moved to ERR, so its 1 outstanding WRs cannot flush: this "
                                         "queue pair is as it was"),
                       verbs_error);
  REQUIRE(la);
  CHECK(la.qp_num() == qpn);
  CHECK(la.posted_recvs() == 1);
  CHECK(la.query_state() == qp_state::rts);
  auto fresh = std::move(la).reset();  // the device no longer refuses
  std::vector<std::uint64_t> flushed;
  for (int i = 0; i < 20 && flushed.empty(); ++i)
    (void)x.cq.poll([&](const completion<R>& c) {
      CHECK(c.status() == wc_status::wr_flush_err);
      flushed.push_back(c.wr_id());
    });
  CHECK(flushed == std::vector<std::uint64_t>{77});
}
