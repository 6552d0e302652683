#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("qp_pool: create on a shared CQ, connect to a peer pool, use round-robin") {
  mock::fabric fab;
  side x(fab, "mock0", 256), y(fab, "mock1", 256);
  auto px = x.pd.create_qp_pool<rc, signal_every<4>>(x.cq, 4, qp_cap{8, 8});
  auto py = y.pd.create_qp_pool<rc, signal_every<4>>(y.cq, 4, qp_cap{8, 8});
  CHECK(px.size() == 4);
  CHECK(x.cq.reserved() == 64);
  auto ex = px.local_endpoints();
  auto ey = py.local_endpoints();
  auto cx = std::move(px).connect(ey);
  auto cy = std::move(py).connect(ex);
  CHECK(px.size() == 0);
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(256);
  for (auto& q : cy) REQUIRE(q.post_recv(dst.local(0, 64), q.qp_num()).ok());
  for (int i = 0; i < 4; ++i) REQUIRE(cx.next().send(src.local(0, 8), static_cast<std::uint64_t>(i)).ok());
  auto got = collect(y.cq, 4);
  REQUIRE(got.size() == 4);
  for (auto& g : got) {
    CHECK(g.status == wc_status::success);
    CHECK(g.wr_id == g.qp_num);  // each receive completed on its own QP
    CHECK(cy.find(g.qp_num) != nullptr);
  }
  CHECK(cx.find(12345678) == nullptr);
  CHECK(&cx.next() == &cx[0]);  // wrapped around
}

// find() searches an index (it was a pass over the pool: 400 times slower at 1024 queue
// pairs, audit 14); a member replaced or moved out through operator[] must not leave it
// giving a wrong queue pair or missing the new one.
TEST_CASE("qp_pool: find() by number, also after a member is replaced or moved out") {
  mock::fabric fab;
  side x(fab, "mock0", 256);
  auto pool = x.pd.create_qp_pool<rc>(x.cq, 8, qp_cap{4, 4});
  for (auto& q : pool) CHECK(pool.find(q.qp_num()) == &q);
  const std::uint32_t old3 = pool[3].qp_num();
  auto spare = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
  const std::uint32_t fresh = spare.qp_num();
  pool[3] = std::move(spare);  // the old member 3 is destroyed
  CHECK(pool.find(old3) == nullptr);
  CHECK(pool.find(fresh) == &pool[3]);
  const std::uint32_t num5 = pool[5].qp_num();
  auto taken = std::move(pool[5]);
  CHECK(pool.find(num5) == nullptr);
  for (std::size_t i = 0; i < pool.size(); ++i)
    if (pool[i]) CHECK(pool.find(pool[i].qp_num()) == &pool[i]);
  auto moved = std::move(pool);
  CHECK(pool.find(fresh) == nullptr);
  CHECK(moved.find(fresh) == &moved[3]);
}

TEST_CASE("qp_pool: the CQ must hold the whole pool, checked before any QP is made") {
  mock::fabric fab;
  side x(fab, "mock0", 100);
  try {
    auto p = x.pd.create_qp_pool<rc>(x.cq, 4, qp_cap{16, 16});
    FAIL("pool created");
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("create it with at least 128") != std::string::npos);
  }
  CHECK(x.cq.attached() == 0);
}

// The pool's check left out the room flushes of a reset queue pair hold.
TEST_CASE("qp_pool: the CQ must hold the pool beside the flushes of a reset queue pair") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto cq = x.dev.create_cq(16);
  auto mr = x.pd.allocate<access::local_write>(64);
  auto q = x.pd.create_qp<rc>(cq, qp_cap{4, 4});
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(q.post_recv(mr.local(8 * i, 8), i).ok());
  auto fresh = std::move(q).reset();
  REQUIRE(cq.flushing() == 4);
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp_pool<rc>(cq, 1, qp_cap{4, 4}),
                       doctest::Contains("create_qp_pool(): CQ of 16 entries is too small"), usage_error);
  // It names what holds the entries, as create_qp's refusal does (it said only "create it
  // with at least 20 entries", where polling the flushes was enough).
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp_pool<rc>(cq, 1, qp_cap{4, 4}),
                       doctest::Contains("(8 entries already promised to 1 attached queue pair) (4 entries held by "
                                         "completions that queue pairs replaced by reset() or destroyed"),
                       usage_error);
  CHECK(cq.attached() == 1);
  CHECK(collect(cq, 4).size() == 4);
  auto pool = x.pd.create_qp_pool<rc>(cq, 1, qp_cap{4, 4});
  CHECK(cq.reserved() == 16);
}

// A poll that drains a busy CQ (fewer completions than it asks for) after a queue pair's
// destroy gives its room back at the next create_qp; create_qp_pool counted that room
// still held, and kept refusing, with advice (poll) that could not help (audit 34, F1).
TEST_CASE("qp_pool: room a destroyed queue pair held comes back after a drained poll, as for create_qp") {
  destroyed_beside_busy r;
  r.drain();
  auto pool = r.x.pd.create_qp_pool<rc>(r.cq, 2, qp_cap{4, 4});
  CHECK(r.cq.reserved() == 20);
}

TEST_CASE("qp_pool: a count whose CQ entries overflow 64 bits is a usage_error, not a length_error") {
  mock::fabric fab;
  side x(fab, "mock0", 100);
  for (const std::size_t count : {std::size_t{1} << 56, std::size_t{1} << 63, ~std::size_t{0}})
    CHECK_THROWS_WITH_AS(x.pd.create_qp_pool<rc>(x.cq, count, qp_cap{128, 128}),
                         doctest::Contains("needs more CQ entries than any CQ has"), usage_error);
  CHECK_THROWS_WITH_AS(x.pd.create_qp_pool<rc>(x.cq, 2, qp_cap{4, 4}, {.psn = 0x1000000u}),
                       doctest::Contains("qp_options::psn = 16777216 is out of range"), usage_error);
  CHECK(x.cq.attached() == 0);
}

TEST_CASE("qp_pool: UD pools activate; wrong endpoint counts are refused") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto pu = x.pd.create_qp_pool<ud>(x.cq, 2, qp_cap{4, 4});
  auto live = std::move(pu).activate();
  CHECK(live.size() == 2);
  auto pr = x.pd.create_qp_pool<rc>(x.cq, 2, qp_cap{4, 4});
  std::vector<endpoint> one(1);
  CHECK_THROWS_AS(std::move(pr).connect(one), usage_error);
}

// As connect() of one queue pair: rxe would take a READ at depth 0 and never run it.
TEST_CASE("qp_pool: an RC pool connected with max_rd_atomic 0 is refused before any queue pair moves") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto px = x.pd.create_qp_pool<rc>(x.cq, 2, qp_cap{4, 4});
  auto py = y.pd.create_qp_pool<rc>(y.cq, 2, qp_cap{4, 4});
  CHECK_THROWS_WITH_AS((void)std::move(px).connect(py.local_endpoints(), {.max_rd_atomic = 0}),
                       doctest::Contains("connect_options::max_rd_atomic = 0"), usage_error);
  CHECK(px.size() == 2);
  CHECK(px[0].query_state() == qp_state::init);
}

// operator[] hands out the pool's queue pairs by reference, so one can be moved out
// (`auto q = std::move(pool[0]);`, or connected on its own). connect() then read the
// empty member's protection domain while checking the endpoints (a null dereference:
// SIGSEGV), and activate() destroyed the members it had already activated before
// refusing the empty one. Both now refuse a pool with an empty member before anything
// changes.
TEST_CASE("qp_pool: a member moved out is a usage_error for connect and activate, before anything changes") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  SUBCASE("connect") {
    auto px = x.pd.create_qp_pool<rc>(x.cq, 3, qp_cap{4, 4});
    auto py = y.pd.create_qp_pool<rc>(y.cq, 3, qp_cap{4, 4});
    auto taken = std::move(px[1]);
    CHECK(taken);
    CHECK_THROWS_WITH_AS((void)std::move(px).connect(py.local_endpoints()),
                         doctest::Contains("queue pair 1 of 3 is empty"), usage_error);
    CHECK(px.size() == 3);
    CHECK(px[0]);
    CHECK(px[2]);
  }
  SUBCASE("activate") {
    auto pu = x.pd.create_qp_pool<ud>(x.cq, 3, qp_cap{4, 4});
    auto taken = std::move(pu[2]);
    CHECK_THROWS_WITH_AS((void)std::move(pu).activate(), doctest::Contains("queue pair 2 of 3 is empty"),
                         usage_error);
    CHECK(pu.size() == 3);
    CHECK(pu[0]);  // not activated and destroyed on the way
    CHECK(pu[1]);
  }
}

// Queue pairs of depths 0 + 0 take no CQ entries, so the CQ check let any count through
// and the pool's reserve() threw std::length_error (2^62) or std::bad_alloc (2^40; under
// ASan an allocation-size-too-big abort) instead of a usage_error. The device's max_qp
// bounds a pool whatever its depths.
TEST_CASE("qp_pool: more queue pairs than the device's max_qp is a usage_error, whatever their depths") {
  mock::fabric fab;
  side x(fab, "mock0");
  const std::size_t most = x.dev.attr().max_qp;
  REQUIRE(most > 0);
  for (const std::size_t count : {most + 1, std::size_t{1} << 40, std::size_t{1} << 62})
    CHECK_THROWS_WITH_AS((void)x.pd.create_qp_pool<rc>(x.cq, count, qp_cap{0, 0}),
                         doctest::Contains("max_qp"), usage_error);
  CHECK(x.cq.attached() == 0);
}

// An empty pool (moved from, or emptied by a refused connect) went through connect() and
// activate() as another empty pool, and create_qp_pool(cq, 0, ...) made one whose next()
// blamed a move or a failed connect: setup calls on empty handles are usage_errors
// (docs/errors.md), and a pool of none is refused where it is asked for (an audit).
TEST_CASE("qp_pool: a pool of none is refused at creation; an empty pool's connect and activate are usage_errors") {
  mock::fabric fab;
  side x(fab, "mock0");
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp_pool<rc>(x.cq, 0, qp_cap{4, 4}), doctest::Contains("a pool of 0"),
                       usage_error);
  auto rc_pool = x.pd.create_qp_pool<rc>(x.cq, 2, qp_cap{4, 4});
  auto rc_kept = std::move(rc_pool);
  CHECK_THROWS_WITH_AS((void)std::move(rc_pool).connect(std::span<const endpoint>{}),
                       doctest::Contains("qp_pool::connect(): the pool is empty"), usage_error);
  auto ud_pool = x.pd.create_qp_pool<ud>(x.cq, 1, qp_cap{4, 4});
  auto ud_kept = std::move(ud_pool);
  CHECK_THROWS_WITH_AS((void)std::move(ud_pool).activate(), doctest::Contains("qp_pool::activate(): the pool is empty"),
                       usage_error);
  CHECK(rc_kept.size() == 2);
  CHECK(ud_kept.size() == 1);
}
