// A moved-from (or default-constructed) handle gives a status on the data path and a
// usage_error at setup: never a null dereference.
#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("moved-from queue pair: posts return empty_handle, accessors and connect throw usage_error") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<all_access>(64);
  auto qp = x.pd.create_qp<rc>(x.cq, qp_cap{8, 8});
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  auto live = std::move(qp).connect(peer.local_endpoint());
  CHECK_FALSE(qp);
  CHECK(qp.post_recv(mr.local(), 1).status == post_status::empty_handle);
  CHECK(qp.post_recv(mr.local(), std::uint64_t{1} << 63).status == post_status::empty_handle);  // before bad_wr_id
  const local_buffer bufs[2] = {mr.local(0, 32), mr.local(32, 32)};
  CHECK(qp.post_recv(std::span<const local_buffer>(bufs), 1).status == post_status::empty_handle);
  CHECK(qp.post_recvs(bufs, 1).status == post_status::empty_handle);
  CHECK_THROWS_AS((void)qp.qp_num(), usage_error);
  CHECK_THROWS_AS((void)qp.send_credits(), usage_error);
  CHECK_THROWS_AS((void)qp.can_post(), usage_error);
  CHECK_THROWS_AS((void)qp.in_error(), usage_error);  // (its closed link is in error: not "true")
  CHECK_THROWS_AS((void)qp.posted_recvs(), usage_error);
  CHECK_THROWS_AS((void)qp.local_endpoint(), usage_error);
  CHECK_THROWS_AS((void)qp.query_state(), usage_error);
  // gid_index() returned 0, a real GID index, and port() 1 (an audit): they throw too.
  CHECK_THROWS_WITH_AS((void)qp.gid_index(), doctest::Contains("gid_index"), usage_error);
  CHECK_THROWS_WITH_AS((void)qp.port(), doctest::Contains("port"), usage_error);
  CHECK_THROWS_WITH_AS((void)std::move(qp).connect(peer.local_endpoint()),
                       doctest::Contains("queue_pair::connect(): this queue_pair is empty"), usage_error);

  auto moved = std::move(live);
  CHECK(live.send(mr.local(), 1).status == post_status::empty_handle);
  CHECK(live.write(mr.local(), mr.remote(), 1).status == post_status::empty_handle);
  CHECK(live.read(mr.local(), mr.remote(), 1).status == post_status::empty_handle);
  CHECK(live.fetch_add(mr.local(0, 8), mr.remote().sub(0, 8), 1, 1).status == post_status::empty_handle);
  auto batch = decltype(live)::make_batch<4>();
  CHECK(batch.write(mr.local(), mr.remote(), 1));
  CHECK(live.post(batch).status == post_status::empty_handle);
  CHECK(batch.size() == 1);
  CHECK_THROWS_AS((void)live.in_error(), usage_error);
  CHECK_FALSE(moved.in_error());
  CHECK(std::string(post_result{post_status::empty_handle}.message()).find("moved from") != std::string::npos);
}

TEST_CASE("moved-from completion queue: polls return -EBADF, create_qp and on() throw usage_error") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto cq = x.dev.create_cq(64);
  auto other = std::move(cq);
  auto f = [](const completion<B>&) {};
  CHECK(cq.poll(f) == -EBADF);
  CHECK(cq.drain(f) == -EBADF);
  CHECK(cq.wait(f, std::chrono::milliseconds(1)).error() == EBADF);
  CHECK(cq.dispatch() == -EBADF);
  CHECK(cq.dispatch_wait(std::chrono::milliseconds(1)).error() == EBADF);
  CHECK(cq.capacity() == 0);
  CHECK(cq.attached() == 0);
  cq.ack_events();
  CHECK_THROWS_WITH_AS((void)x.pd.create_qp<rc>(cq, qp_cap{8, 8}),
                       doctest::Contains("create_qp: send CQ: the completion_queue given is empty"), usage_error);
  auto qp = x.pd.create_qp<rc>(other, qp_cap{8, 8});
  CHECK_THROWS_WITH_AS(cq.on(qp, f), doctest::Contains("completion_queue::on(): this completion_queue is empty"),
                       usage_error);
  auto gone = std::move(qp);
  CHECK_THROWS_WITH_AS(other.on(qp, f), doctest::Contains("completion_queue::on: the queue_pair given is empty"),
                       usage_error);
  completion_queue<B, event_driven<>> ev;
  CHECK(ev.wait(f, std::chrono::milliseconds(1)).error() == EBADF);
}

TEST_CASE("moved-from device, PD, region, address handle, pool and slice throw usage_error") {
  mock::fabric fab;
  device<B> dev(fab, "mock0");
  auto d2 = std::move(dev);
  CHECK_FALSE(dev);
  CHECK_THROWS_AS((void)dev.name(), usage_error);
  CHECK_THROWS_AS((void)dev.attr(), usage_error);
  CHECK_THROWS_AS((void)dev.port(1), usage_error);
  CHECK_THROWS_AS((void)dev.gids(1), usage_error);
  CHECK_THROWS_AS((void)dev.create_pd(), usage_error);
  CHECK_THROWS_AS((void)dev.create_cq(8), usage_error);

  auto pd = d2.create_pd();
  auto pd2 = std::move(pd);
  CHECK_FALSE(pd);
  CHECK_THROWS_AS((void)pd.allocate<rw_access>(64), usage_error);
  CHECK_THROWS_AS((void)pd.create_pool<rw_access>(64, 2), usage_error);
  auto cq = d2.create_cq(64);
  CHECK_THROWS_AS((void)pd.create_qp<rc>(cq, qp_cap{8, 8}), usage_error);
  CHECK_THROWS_AS((void)pd.create_ah(endpoint{}), usage_error);

  auto mr = pd2.allocate<rw_access>(64);
  auto mr2 = std::move(mr);
  CHECK_FALSE(mr);
  CHECK(mr.data() == nullptr);
  CHECK(mr.size() == 0);
  CHECK_THROWS_AS((void)mr.local(), usage_error);
  CHECK_THROWS_AS((void)mr.lkey(), usage_error);
  CHECK_THROWS_AS((void)mr.rkey(), usage_error);
  CHECK_THROWS_AS((void)mr.remote(), usage_error);

  address_handle<B> ah;
  CHECK_THROWS_AS((void)ah.to(5), usage_error);

  auto pool = pd2.create_pool<rw_access>(64, 2);
  auto pool2 = std::move(pool);
  CHECK_FALSE(pool.acquire());
  CHECK(pool.available() == 0);
  CHECK_THROWS_AS((void)pool.region(), usage_error);
  auto s = pool2.acquire();
  auto s2 = std::move(s);
  CHECK_FALSE(s);
  CHECK(s.data() == nullptr);
  CHECK_THROWS_AS((void)s.local(), usage_error);
  CHECK_THROWS_AS((void)s.lkey(), usage_error);
}

TEST_CASE("moved-from and failed queue pair pools: empty, find() gives nullptr, next() throws") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto pool = x.pd.create_qp_pool<rc>(x.cq, 2, qp_cap{4, 4});
  auto p2 = std::move(pool);
  CHECK(pool.size() == 0);
  CHECK(pool.find(p2[0].qp_num()) == nullptr);
  CHECK_THROWS_AS((void)pool.next(), usage_error);
}
