// Bit 63 of a wr_id is rdmakit's (it tells receive completions from sends, flushed ones
// included): a wr_id that uses it is refused at post, never silently changed.
#include "fixture.hpp"

using namespace policy_test;

// A receive's wr_id is also not 2^63 - 1: as rdmakit writes it (bit 63 set) that is the
// drain marker reset() posts on the queue pair it replaces (docs/ownership-and-threads.md).
TEST_CASE("wr_ids with bit 63 are refused with bad_wr_id on every post path; 2^63 - 1 round-trips on a send, 2^63 - 2 on a receive") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<rw_access>(256);
  auto dst = y.pd.allocate<rw_access>(256);
  auto pair = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  constexpr std::uint64_t top = std::uint64_t{1} << 63;
  CHECK(pair.a.send(mr.local(0, 8), top | 5).status == post_status::bad_wr_id);
  CHECK(pair.a.write(mr.local(0, 8), mr.remote(), top).status == post_status::bad_wr_id);
  CHECK(pair.b.post_recv(mr.local(0, 64), top).status == post_status::bad_wr_id);
  const local_buffer bufs[2] = {mr.local(0, 64), mr.local(64, 64)};
  CHECK(pair.b.post_recvs(bufs, top - 1).status == post_status::bad_wr_id);  // the second is 2^63
  CHECK(pair.b.posted_recvs() == 0);
  auto batch = decltype(pair.a)::make_batch<4>();
  CHECK(batch.write(mr.local(0, 8), mr.remote(), 1));
  CHECK(batch.write(mr.local(0, 8), mr.remote(), top | 2));
  CHECK(pair.a.post(batch).status == post_status::bad_wr_id);
  CHECK(pair.a.send_credits() == 8);
  CHECK(std::string(post_result{post_status::bad_wr_id}.message()).find("bit 63") != std::string::npos);

  CHECK(pair.b.post_recv(dst.local(128, 64), top - 1).status == post_status::bad_wr_id);
  CHECK(pair.b.post_recvs(bufs, top - 2).status == post_status::bad_wr_id);  // the second is 2^63 - 1
  CHECK(pair.b.posted_recvs() == 0);
  REQUIRE(pair.b.post_recv(dst.local(128, 64), top - 2).ok());
  REQUIRE(pair.a.send(mr.local(0, 8), top - 1).ok());
  auto rx = collect(y.cq, 1);
  auto tx = collect(x.cq, 1);
  REQUIRE(rx.size() == 1);
  REQUIRE(tx.size() == 1);
  CHECK(rx[0].wr_id == top - 2);
  CHECK(rx[0].recv);
  CHECK(tx[0].wr_id == top - 1);
}
