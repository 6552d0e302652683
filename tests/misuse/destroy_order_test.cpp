// Handles may be destroyed in any order: children keep their parents alive, so no
// order reaches a destroyed device, PD or CQ (ASan+UBSan in CI, asserts off).
#include "fixture.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

using namespace policy_test;

namespace {

// One of everything on mock0, in use: a UD QP that has sent through an AH from a
// registered region to a peer on mock1, with its completion left unpolled.
struct everything {
  std::optional<device<B>> dev;
  std::optional<protection_domain<B>> pd;
  std::optional<completion_queue<B>> cq;
  std::optional<queue_pair<B, ud, signal_all, qp_state::rts>> qp;
  std::optional<memory_region<B, rw_access>> mr;
  std::optional<address_handle<B>> ah;

  everything(mock::fabric& fab, queue_pair<B, ud, signal_all, qp_state::rts>& peer_qp, const local_buffer& peer_rx) {
    dev.emplace(fab, "mock0");
    pd.emplace(dev->create_pd());
    cq.emplace(dev->create_cq(64));
    qp.emplace(pd->create_qp<ud>(*cq, qp_cap{8, 8}).activate());
    mr.emplace(pd->allocate<rw_access>(256));
    ah.emplace(pd->create_ah(peer_qp.local_endpoint()));
    REQUIRE(peer_qp.post_recv(peer_rx, 1).ok());
    REQUIRE(qp->send(ah->to(peer_qp.qp_num()), mr->local(0, 64), 2).ok());
  }
};

}  // namespace

TEST_CASE("device, PD, CQ, QP, MR and AH destroyed in every one of the 720 orders") {
  mock::fabric fab;
  side peer(fab, "mock1");
  auto peer_qp = peer.pd.create_qp<ud>(peer.cq, qp_cap{8, 8}).activate();
  auto peer_rx = peer.pd.allocate<rw_access>(256);
  std::array<int, 6> order{0, 1, 2, 3, 4, 5};
  int runs = 0;
  do {
    everything e(fab, peer_qp, peer_rx.local());
    const std::array<std::function<void()>, 6> destroy{
        [&] { e.dev.reset(); }, [&] { e.pd.reset(); }, [&] { e.cq.reset(); },
        [&] { e.qp.reset(); },  [&] { e.mr.reset(); }, [&] { e.ah.reset(); }};
    for (int i : order) destroy[static_cast<std::size_t>(i)]();
    ++runs;
    REQUIRE(collect(peer.cq, 1).size() == 1);  // the peer received it and still works
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(runs == 720);
}

namespace {

// One of everything on mock0 around a shared receive queue: an RC QP on the SRQ,
// connected to a peer on mock1, that has taken one of the SRQ's two receives (its
// completion left unpolled).
struct srq_everything {
  std::optional<device<B>> dev;
  std::optional<protection_domain<B>> pd;
  std::optional<completion_queue<B>> cq;
  std::optional<shared_receive_queue<B>> srq;
  std::optional<queue_pair<B, on_srq<rc>, signal_all, qp_state::rts>> qp;
  std::optional<memory_region<B, rw_access>> mr;
  queue_pair<B, rc, signal_all, qp_state::rts> peer_qp;

  srq_everything(mock::fabric& fab, side& peer, const local_buffer& peer_tx) {
    dev.emplace(fab, "mock0");
    pd.emplace(dev->create_pd());
    cq.emplace(dev->create_cq(64));
    srq.emplace(pd->create_srq({.max_wr = 8, .max_sge = 1}));
    mr.emplace(pd->allocate<rw_access>(256));
    auto qi = pd->create_qp<rc>(*cq, *srq, qp_cap{8, 0});
    auto pi = peer.pd.create_qp<rc>(peer.cq, qp_cap{8, 0});
    const auto ep = qi.local_endpoint();
    qp.emplace(std::move(qi).connect(pi.local_endpoint()));
    peer_qp = std::move(pi).connect(ep);
    REQUIRE(srq->post_recv(mr->local(0, 64), 1).ok());
    REQUIRE(srq->post_recv(mr->local(64, 64), 2).ok());
    REQUIRE(peer_qp.send(peer_tx, 3).ok());
  }
};

}  // namespace

TEST_CASE("device, PD, CQ, SRQ, QP on it and MR destroyed in every one of the 720 orders") {
  mock::fabric fab;
  side peer(fab, "mock1");
  auto tx = peer.pd.allocate<rw_access>(64);
  std::array<int, 6> order{0, 1, 2, 3, 4, 5};
  int runs = 0;
  do {
    srq_everything e(fab, peer, tx.local(0, 16));
    REQUIRE(collect(peer.cq, 1).size() == 1);  // the SEND completed: the SRQ's receive took it
    const std::array<std::function<void()>, 6> destroy{
        [&] { e.dev.reset(); }, [&] { e.pd.reset(); }, [&] { e.cq.reset(); },
        [&] { e.srq.reset(); }, [&] { e.qp.reset(); }, [&] { e.mr.reset(); }};
    for (int i : order) destroy[static_cast<std::size_t>(i)]();
    ++runs;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(runs == 720);
  CHECK(peer.cq.reserved() == 0);
}

TEST_CASE("a struct that declares its queue pair before its completion queue destroys cleanly") {
  mock::fabric fab;
  side y(fab, "mock1");
  struct conn {
    explicit conn(mock::fabric& f) : dev(f, "mock0") {}
    queue_pair<B, rc, signal_all, qp_state::rts> qp;  // destroyed last: after the CQ and PD handles
    device<B> dev;
    protection_domain<B> pd = dev.create_pd();
    completion_queue<B> cq = dev.create_cq(64);
    memory_region<B, rw_access> mr = pd.allocate<rw_access>(64);
  };
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  {
    conn c(fab);
    auto init = c.pd.create_qp<rc>(c.cq, qp_cap{8, 8});
    auto ep = init.local_endpoint();
    c.qp = std::move(init).connect(peer.local_endpoint());
    REQUIRE(c.qp.post_recv(c.mr.local(), 1).ok());
    (void)ep;
  }
  CHECK(y.cq.attached() == 1);
}

TEST_CASE("a registered pool destroyed while slices are out: the slices stay valid") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto pool = x.pd.create_pool<rw_access>(64, 4);
  auto s1 = pool.acquire();
  auto s2 = pool.acquire();
  { auto gone = std::move(pool); }
  CHECK_FALSE(pool);
  std::memset(s1.data(), 7, s1.size());
  CHECK(s1.local().length == 64);
  CHECK(s2.lkey() == s1.lkey());
  s1.reset();
  s2 = {};  // the last slice frees the registration
  CHECK_FALSE(pool.acquire());
}

TEST_CASE("a completion queue handle destroyed first: its queue pairs are refused cq_gone, nothing goes wrong") {
  mock::fabric fab;
  side y(fab, "mock1");
  device<B> dev(fab, "mock0");
  auto pd = dev.create_pd();
  std::optional<completion_queue<B>> cq(dev.create_cq(64));
  auto mr = pd.allocate<rw_access>(64);
  auto peer = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  auto qp = pd.create_qp<rc>(*cq, qp_cap{8, 8}).connect(peer.local_endpoint());
  REQUIRE(qp.write(mr.local(), remote_region<>::unchecked(0, 0, 0), 1).ok());
  cq.reset();
  // The CQ lives as long as the QP, but nobody polls it: no credit would come back, and
  // no completion be seen. Posts are refused from now on (they ran until the credits
  // were out, then sq_full for ever, advising a poll nobody could make: audit 37).
  CHECK(qp.write(mr.local(), remote_region<>::unchecked(0, 0, 0), 2).status == post_status::cq_gone);
  CHECK(qp.post_recv(mr.local(), 3).status == post_status::cq_gone);
}

TEST_CASE("a queue pair reset with receives outstanding: its retired QP goes in every order too") {
  mock::fabric fab;
  std::array<int, 4> order{0, 1, 2, 3};
  int runs = 0;
  do {
    std::optional<device<B>> dev;
    dev.emplace(fab, "mock0");
    std::optional<protection_domain<B>> pd(dev->create_pd());
    std::optional<completion_queue<B>> cq(dev->create_cq(16));
    auto mr = pd->allocate<rw_access>(64);
    auto first = pd->create_qp<rc>(*cq, qp_cap{4, 4});
    REQUIRE(first.post_recv(mr.local(0, 8), 1).ok());
    REQUIRE(first.post_recv(mr.local(8, 8), 2).ok());
    std::optional<queue_pair<B, rc>> qp(std::move(first).reset());  // the old QP is kept, in ERR
    REQUIRE(cq->flushing() == 2);
    const std::array<std::function<void()>, 4> destroy{
        [&] { dev.reset(); }, [&] { pd.reset(); }, [&] { cq.reset(); }, [&] { qp.reset(); }};
    for (int i : order) destroy[static_cast<std::size_t>(i)]();
    ++runs;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(runs == 24);
}
