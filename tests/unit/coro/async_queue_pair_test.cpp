#include "fixture.hpp"

#include <cstring>
#include <span>
#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

using namespace coro_test;

TEST_CASE("async_queue_pair: SEND/RECV echo and RDMA READ, each awaited with its own completion") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  std::memcpy(mb.data() + 2048, "remote value", 12);

  auto server = [&]() -> task<int> {
    int served = 0;
    for (;;) {
      wr_result<B> r = co_await c.y().recv(mb.local(0, 64));
      REQUIRE(r.ok());
      CHECK(r.completion().is_recv());
      if (r.completion().byte_len() == 0) co_return served;
      ++served;
      CHECK((co_await c.y().send(mb.local(0, r.completion().byte_len()))).ok());
    }
  };
  auto client = [&]() -> task<int> {
    int echoed = 0;
    for (int i = 0; i < 8; ++i) {
      auto reply = c.x().recv(ma.local(64, 64));  // posted now, before the echo can come
      std::memcpy(ma.data(), &i, sizeof i);
      wr_result<B> s = co_await c.x().send(ma.local(0, sizeof i));
      REQUIRE(s.ok());
      CHECK(s.completion().opcode() == wc_opcode::send);
      wr_result<B> r = co_await reply;
      if (r.ok() && std::memcmp(ma.data() + 64, &i, sizeof i) == 0) ++echoed;
    }
    wr_result<B> rd = co_await c.x().read(ma.local(1024, 12), mb.remote().sub(2048, 12));
    CHECK(rd.ok());
    CHECK(std::memcmp(ma.data() + 1024, "remote value", 12) == 0);
    CHECK((co_await c.x().send(ma.local(0, 0))).ok());  // 0 bytes: the server stops
    co_return echoed;
  };
  // A coroutine lambda's captures live in the closure: keep it alive while it runs.
  auto serve = [&]() -> task<void> { CHECK(co_await server() == 8); };
  loop.spawn(serve());
  CHECK(loop.run(client()) == 8);
  loop.run();
}

TEST_CASE("async_queue_pair: WRs beyond the send queue's credits wait for them and all complete, in order") {
  rig<rc, signal_every<2>> r(4);  // 4 send credits; every awaited WR is signaled anyway
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  auto writer = [&]() -> task<int> {
    int ok = 0;
    // 8 writes made at once: 4 are posted, 4 wait for credits.
    auto w0 = c.x().write(ma.local(0, 8), mb.remote().sub(0, 8));
    auto w1 = c.x().write(ma.local(8, 8), mb.remote().sub(8, 8));
    auto w2 = c.x().write(ma.local(16, 8), mb.remote().sub(16, 8));
    auto w3 = c.x().write(ma.local(24, 8), mb.remote().sub(24, 8));
    auto w4 = c.x().write(ma.local(32, 8), mb.remote().sub(32, 8));
    auto w5 = c.x().write(ma.local(40, 8), mb.remote().sub(40, 8));
    auto w6 = c.x().write(ma.local(48, 8), mb.remote().sub(48, 8));
    auto w7 = c.x().write(ma.local(56, 8), mb.remote().sub(56, 8));
    CHECK(c.x().qp().send_credits() == 0);
    for (auto* a : {&w0, &w1, &w2, &w3, &w4, &w5, &w6, &w7}) {
      wr_result<B> r = co_await *a;
      ok += r.ok();
    }
    co_return ok;
  };
  for (int i = 0; i < 64; ++i) ma.data()[i] = static_cast<std::byte>(i + 1);
  CHECK(loop.run(writer()) == 8);
  CHECK(std::memcmp(ma.data(), mb.data(), 64) == 0);
  CHECK(c.x().qp().send_credits() == 4);
}

namespace {
// A gathered SEND made in a helper: its scatter/gather list lives in the helper's frame.
auto send_gathered(rts_qp<>& qp, local_buffer a, local_buffer b) {
  std::array<local_buffer, 2> sgl{a, b};
  return qp.post(op::send<std::span<const local_buffer>>{std::span<const local_buffer>(sgl)});
}
[[gnu::noinline]] void overwrite_stack() {
  volatile unsigned char junk[1024];
  for (auto& j : junk) j = 0x5c;
}
}  // namespace

// A WR that waits for send credits is posted later, by the awaitable; for a gathered
// operation it kept only the caller's span, which nothing backed then (ASan:
// stack-use-after-return; without, a garbled SGE list posted, or refused as > 2 GiB).
TEST_CASE("async_queue_pair: a gathered SEND that waits for credits keeps its scatter/gather list") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  const qp_cap caps{.max_send_wr = 1, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 1};
  async_queue_pair<B, rc> ia(a.cq, a.pd.create_qp<rc>(a.cq.queue(), caps));
  async_queue_pair<B, rc> ib(b.cq, b.pd.create_qp<rc>(b.cq.queue(), caps));
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto x = std::move(ia).connect(eb);
  auto y = std::move(ib).connect(ea);
  auto ma = a.pd.allocate<rw>(4096), mb = b.pd.allocate<rw>(4096);
  std::memcpy(ma.data(), "HEAD", 4);
  std::memcpy(ma.data() + 64, "BODY", 4);
  auto r0 = y.recv(mb.local(0, 64));
  auto r1 = y.recv(mb.local(64, 64));
  auto w0 = send_gathered(x, ma.local(0, 4), ma.local(64, 4));  // takes the one credit
  auto w1 = send_gathered(x, ma.local(0, 4), ma.local(64, 4));  // waits for it
  overwrite_stack();
  auto run = [&]() -> task<void> {
    CHECK((co_await std::move(w0)).ok());
    CHECK((co_await std::move(w1)).ok());
    CHECK((co_await std::move(r0).within(1s)).ok());
    CHECK((co_await std::move(r1).within(1s)).ok());
  };
  loop.run(run());
  CHECK(std::memcmp(mb.data(), "HEADBODY", 8) == 0);
  CHECK(std::memcmp(mb.data() + 64, "HEADBODY", 8) == 0);
}

// The retries of WRs waiting for credits were queued on the loop behind the coroutine
// their completion resumed, which then posted WRs it made afterwards with the credits
// they were waiting for: the peer received 0 1 2 3 8 9 4 5 6 7.
TEST_CASE("async_queue_pair: WRs made after others that wait for credits are posted after them") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  async_queue_pair<B, rc> ia(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{4, 4}));  // 4 send credits
  async_queue_pair<B, rc> ib(b.cq, b.pd.create_qp<rc>(b.cq.queue(), qp_cap{16, 16}));
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto x = std::move(ia).connect(eb);
  auto y = std::move(ib).connect(ea);
  auto ma = a.pd.allocate<rw>(4096);
  auto mb = b.pd.allocate<rw>(4096);
  using recv_wait = decltype(y.recv(mb.local(0, 64)));
  std::vector<recv_wait> receives;
  for (std::uint32_t i = 0; i < 10; ++i) receives.push_back(y.recv(mb.local(64 * i, 64)));
  std::vector<int> order;
  auto receiver = [&]() -> task<void> {
    for (std::uint32_t i = 0; i < 10; ++i) {
      wr_result<B> r = co_await std::move(receives[i]).within(5s);
      int v = -1;
      if (r.ok()) std::memcpy(&v, mb.data() + 64 * i, sizeof v);
      order.push_back(v);
    }
  };
  auto sender = [&]() -> task<void> {
    for (int i = 0; i < 10; ++i) std::memcpy(ma.data() + 8 * i, &i, sizeof i);
    using send_wait = decltype(x.send(ma.local(0, 4)));
    std::vector<send_wait> sends;
    sends.reserve(10);
    for (std::uint32_t i = 0; i < 8; ++i) sends.push_back(x.send(ma.local(8 * i, 4)));  // 4 wait for credits
    CHECK((co_await std::move(sends[0])).ok());
    sends.push_back(x.send(ma.local(64, 4)));  // made after the 4 waiting ones
    sends.push_back(x.send(ma.local(72, 4)));
    for (std::size_t i = 1; i < sends.size(); ++i) CHECK((co_await std::move(sends[i])).ok());
  };
  loop.spawn(receiver());
  loop.run(sender());
  loop.run();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("async_queue_pair: a queue pair that goes to ERR resumes every awaiting coroutine with its flush status") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  auto run = [&]() -> task<void> {
    auto r1 = c.x().recv(ma.local(0, 64));
    auto r2 = c.x().recv(ma.local(64, 64));
    auto bad = remote_region<access::remote_write>::unchecked(mb.remote().addr(), mb.remote().rkey() + 7, 64);
    wr_result<B> w = co_await c.x().write(ma.local(128, 64), bad);
    CHECK(w.status() == wc_status::rem_access_err);
    // The wr_id is the async layer's, not one the caller gave: the text leaves it out.
    CHECK(w.message().find("on send of QP 0x") != std::string::npos);
    CHECK(w.message().find("wr_id") == std::string::npos);
    wr_result<B> f1 = co_await r1;
    wr_result<B> f2 = co_await r2;
    CHECK(f1.outcome() == wr_outcome::completed);
    CHECK(f1.status() == wc_status::wr_flush_err);
    CHECK(f2.status() == wc_status::wr_flush_err);
    // Once in ERR, a post is refused at once with the reason.
    wr_result<B> refused = co_await c.x().send(ma.local(0, 8));
    CHECK(refused.outcome() == wr_outcome::not_posted);
    CHECK(refused.post().status == post_status::qp_error);
    CHECK(refused.message().find("not posted") == 0);
  };
  loop.run(run());
}

TEST_CASE("async_queue_pair: destroyed while coroutines await it, they resume cancelled (WR_FLUSH_ERR), never hang") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  std::optional<rts_qp<>> victim(std::move(c.x()));
  auto waiter = [&]() -> task<wr_result<B>> { co_return co_await victim->recv(ma.local(0, 64)); };
  auto killer = [&]() -> task<void> {
    co_await loop.sleep_for(1ms);
    victim.reset();
  };
  loop.spawn(killer());
  wr_result<B> got = loop.run(waiter());
  CHECK(got.outcome() == wr_outcome::cancelled);
  CHECK(got.status() == wc_status::wr_flush_err);
  CHECK_FALSE(got.ok());
  CHECK_THROWS_AS((void)got.completion(), usage_error);
  loop.run();
  // Its receive's flush, should the device report one, is dropped: next() never sees it.
  CHECK(c.a.cq.pending() == 0);
}

TEST_CASE("async_queue_pair: within(timeout) ends the wait; the queue pair keeps working") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  auto run = [&]() -> task<void> {
    wr_result<B> r = co_await c.y().recv(mb.local(0, 64)).within(20ms);
    CHECK(r.outcome() == wr_outcome::timed_out);
    CHECK(r.status() == wc_status::general_err);
    // The abandoned receive is still posted: the next SEND lands in it, unseen; the
    // one after goes to the receive awaited now.
    auto next = c.y().recv(mb.local(64, 64));
    CHECK((co_await c.x().send(ma.local(0, 8))).ok());
    CHECK((co_await c.x().send(ma.local(8, 8))).ok());
    wr_result<B> got = co_await std::move(next).within(1s);
    CHECK(got.ok());
  };
  loop.run(run());
  CHECK(c.b.cq.pending() == 0);
}

// A receive awaited with a timeout that passed was left posted and its awaitable spent:
// the message that came next landed in it unseen. Awaited again, the same awaitable now
// waits for its WR: the message is not lost.
TEST_CASE_FIXTURE(rig<>, "async_queue_pair: a wait that timed out, awaited again, gets its WR's completion") {
  auto run = [&]() -> task<void> {
    auto incoming = c.y().recv(mb.local(0, 64));
    CHECK((co_await incoming.within(20ms)).outcome() == wr_outcome::timed_out);
    CHECK((co_await incoming.within(1ms)).outcome() == wr_outcome::timed_out);  // again
    CHECK_FALSE(incoming.ready());
    std::memcpy(ma.data(), "late one", 8);
    CHECK((co_await c.x().send(ma.local(0, 8))).ok());
    wr_result<B> got = co_await incoming.within(1s);
    REQUIRE(got.ok());
    CHECK(got.completion().byte_len() == 8);
    CHECK(std::memcmp(mb.data(), "late one", 8) == 0);
    // Taken: a WR's completion is awaited once.
    CHECK((co_await usage_error_of_await(incoming)).find("awaited already") != std::string::npos);

    // The same for one moved after its timeout, and unbounded the second time.
    auto second = c.y().recv(mb.local(64, 64));
    CHECK((co_await second.within(1ms)).outcome() == wr_outcome::timed_out);
    CHECK((co_await c.x().send(ma.local(0, 8))).ok());
    auto moved = std::move(second);
    CHECK((co_await moved).ok());

    // The bound is the one await's: an unbounded await after it (in place, or of the
    // awaitable moved to) waits past it, for a message sent later. The bound stayed with
    // the awaitable, so these timed out after 1 ms too (found by an audit).
    auto late_send = [&]() -> task<void> {
      co_await loop.sleep_for(30ms);
      CHECK((co_await c.x().send(ma.local(0, 8))).ok());
    };
    auto third = c.y().recv(mb.local(128, 64));
    CHECK((co_await third.within(1ms)).outcome() == wr_outcome::timed_out);
    loop.spawn(late_send());
    CHECK((co_await third).ok());
    auto fourth = c.y().recv(mb.local(192, 64));
    CHECK((co_await fourth.within(1ms)).outcome() == wr_outcome::timed_out);
    auto fourth_moved = std::move(fourth);
    loop.spawn(late_send());
    CHECK((co_await fourth_moved).ok());
  };
  loop.run(run());
  CHECK(c.b.cq.pending() == 0);
}

// A WR that waited for credits and timed out goes on waiting for them: awaited again, it
// is posted when credits come back and completes (it was never posted: the message meant
// for it found no receive). The rig's queue pairs have 16 receive slots.
TEST_CASE_FIXTURE(rig<>, "async_queue_pair: a WR waiting for credits that timed out is posted later and awaited again") {
  auto run = [&]() -> task<void> {
    std::vector<decltype(c.y().recv(mb.local(0, 64)))> recvs;
    for (std::uint32_t i = 0; i < 16; ++i) recvs.push_back(c.y().recv(mb.local(i * 64, 64)));
    auto extra = c.y().recv(mb.local(16 * 64, 64));  // no receive credit left: it waits
    CHECK((co_await extra.within(1ms)).outcome() == wr_outcome::timed_out);
    std::vector<decltype(c.x().send(ma.local(0, 8)))> sends;
    for (int i = 0; i < 17; ++i) sends.push_back(c.x().send(ma.local(0, 8)));
    for (auto& s : sends) CHECK((co_await s.within(5s)).ok());
    for (auto& rv : recvs) CHECK((co_await rv.within(5s)).ok());
    CHECK((co_await extra.within(5s)).ok());
  };
  loop.run(run());
}

// The temporary of co_await qp.recv(buf).within(d) destroyed while its WR still waits
// for credits takes the WR with it: it was never on the device, so it is withdrawn, and
// the next message goes to the next receive posted, not to the withdrawn buffer.
TEST_CASE_FIXTURE(rig<>, "async_queue_pair: a temporary that timed out waiting for credits withdraws its WR") {
  auto run = [&]() -> task<void> {
    std::vector<decltype(c.y().recv(mb.local(0, 64)))> recvs;
    for (std::uint32_t i = 0; i < 16; ++i) recvs.push_back(c.y().recv(mb.local(i * 64, 64)));
    std::memset(mb.data() + 16 * 64, 0, 64);
    CHECK((co_await c.y().recv(mb.local(16 * 64, 64)).within(1ms)).outcome() == wr_outcome::timed_out);
    for (int i = 0; i < 16; ++i) CHECK((co_await c.x().send(ma.local(0, 8)).within(5s)).ok());
    for (auto& rv : recvs) CHECK((co_await rv.within(5s)).ok());
    auto next = c.y().recv(mb.local(17 * 64, 64));
    std::memcpy(ma.data(), "the 17th", 8);
    CHECK((co_await c.x().send(ma.local(0, 8)).within(5s)).ok());
    CHECK((co_await next.within(5s)).ok());
    CHECK(std::memcmp(mb.data() + 17 * 64, "the 17th", 8) == 0);
    CHECK(std::all_of(mb.data() + 16 * 64, mb.data() + 17 * 64, [](std::byte b) { return b == std::byte{0}; }));
  };
  loop.run(run());
}

// Destroyed by other code while a coroutine awaited it in place (`co_await w`, as
// coroutines.md shows), an awaitable disarmed its timer and unlinked the resumption: the
// coroutine waited for ever, its timeout too. It is resumed now, and its co_await throws.
TEST_CASE_FIXTURE(rig<>, "async_queue_pair: an awaitable destroyed while a coroutine awaits it in place refuses the wait") {
  std::optional<decltype(c.y().recv(mb.local(0, 64)))> w;
  w.emplace(c.y().recv(mb.local(0, 64)));
  CHECK(destroyed_while_awaited(loop, w, [](auto& w) -> task<void> { (void)co_await w->within(50ms); }));
}

// As event_loop_test's sleep: the WR's awaitable destroyed while the statement of its
// co_await goes on waiting (an RPC-style `co_await reply_to(co_await w)`).
TEST_CASE_FIXTURE(rig<>, "async_queue_pair: an awaitable destroyed after its co_await returned, in the same statement, is not touched again") {
  std::optional<decltype(c.y().recv(mb.local(0, 64)))> w;
  w.emplace(c.y().recv(mb.local(0, 64)));
  auto then_sleep = [&](wr_outcome o) -> task<wr_outcome> {
    co_await loop.sleep_for(20ms);
    co_return o;
  };
  wr_outcome got = wr_outcome::completed;
  auto waiter = [&]() -> task<void> { got = co_await then_sleep((co_await w->within(1ms)).outcome()); };
  loop.spawn(waiter());
  loop.spawn(destroy_after(loop, w, 10ms));
  CHECK(run_within(loop, 2s));
  CHECK(got == wr_outcome::timed_out);
}

// A completion and the deadline in one turn of the loop (within(0ns) on the mock): the
// timeout handler ran after the completion had queued the resumption, resumed the
// coroutine itself and left that resumption queued, so the coroutine was resumed a
// second time later, in whatever it awaited next (here it cut the sleep short).
// within(milliseconds::max()), "no practical limit", overflowed converting to
// steady_clock::duration and timed out at once.
TEST_CASE("async_queue_pair: within() a duration past the clock's range waits for the completion") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  auto later = [&]() -> task<void> {
    co_await loop.sleep_for(20ms);
    CHECK((co_await c.x().send(ma.local(0, 8))).ok());
  };
  auto run = [&]() -> task<void> {
    wr_result<B> got = co_await c.y().recv(mb.local(0, 64)).within(std::chrono::milliseconds::max());
    CHECK(got.ok());
  };
  loop.spawn(later());
  loop.run(run());
  loop.run();
}

TEST_CASE("async_queue_pair: a completion and its deadline in one turn resume the coroutine once") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  std::chrono::steady_clock::duration slept{};
  auto run = [&]() -> task<void> {
    auto w = c.x().write(ma.local(0, 8), mb.remote().sub(0, 8)).within(0ns);
    wr_result<B> first = co_await w;
    CHECK((first.ok() || first.outcome() == wr_outcome::timed_out));
    const auto t0 = std::chrono::steady_clock::now();
    co_await loop.sleep_for(100ms);
    slept = std::chrono::steady_clock::now() - t0;
  };
  loop.run(run());
  CHECK(slept >= 100ms);
}

TEST_CASE("async_queue_pair: an awaiter dropped without being awaited does not leave its completion behind") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  auto run = [&]() -> task<void> {
    { auto dropped = c.x().write(ma.local(0, 8), mb.remote().sub(0, 8)); }
    CHECK((co_await c.x().write(ma.local(8, 8), mb.remote().sub(8, 8))).ok());
  };
  loop.run(run());
  CHECK(c.a.cq.pending() == 0);
  CHECK(c.x().qp().send_credits() == 16);
}

// A WR's awaitable that was moved from (by `auto w2 = std::move(w)`, by `.within()`,
// or by GCC 12 moving a co_await operand into the frame) had no queue pair and no
// result: awaiting it suspended the coroutine for ever.
TEST_CASE("async_queue_pair: awaiting a WR's moved-from awaitable is refused with usage_error, not a hang") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  auto run = [&]() -> task<void> {
    auto w = c.y().recv(mb.local(0, 64));
    auto moved = std::move(w);
    CHECK((co_await usage_error_of_await(w)).find("moved from or awaited") != std::string::npos);
    auto timed = c.y().recv(mb.local(64, 64));
    CHECK((co_await std::move(timed).within(1ms)).outcome() == wr_outcome::timed_out);
    CHECK_THROWS_AS((void)co_await timed, usage_error);  // within() moved it
    CHECK((co_await c.x().send(ma.local(0, 8))).ok());
    CHECK((co_await std::move(moved).within(5s)).ok());  // the moved-to one got the message
  };
  loop.run(run());
}

// A send on a receive-only queue pair (max_send_wr = 0) waited for send credits that
// never come: a hang without a timeout.
TEST_CASE("async_queue_pair: a WR on a queue without slots (max_send_wr or max_recv_wr 0) fails at once") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  auto m = a.pd.allocate<rw>(64);
  async_queue_pair<B, rc> ia(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{0, 4}));
  async_queue_pair<B, rc> ib(b.cq, b.pd.create_qp<rc>(b.cq.queue(), qp_cap{4, 0}));
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto x = std::move(ia).connect(eb);
  auto y = std::move(ib).connect(ea);
  std::vector<post_status> seen;
  auto go = [&]() -> task<void> {
    seen.push_back((co_await x.send(m.local(0, 8))).post().status);
    seen.push_back((co_await y.recv(m.local(0, 8))).post().status);
  };
  loop.spawn(go());
  REQUIRE(run_within(loop, 2s));
  CHECK(seen == std::vector<post_status>{post_status::list_too_long, post_status::list_too_long});
}

TEST_CASE("async_queue_pair: refuses a queue pair made on other completion queues") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop);
  auto plain = a.dev.create_cq<event_driven<>>(64);
  acq other(loop, a.dev.create_cq<event_driven<>>(64));
  CHECK_THROWS_WITH_AS(async_queue_pair(other, a.pd.create_qp<rc>(plain, qp_cap{4, 4})),
                       doctest::Contains("was not created on these completion queues"), usage_error);
}

// A queue pair with receives posted on it directly was taken on: their completions came
// to the async queue pair with wr_ids that were not its tokens, and were dropped (a
// message vanished), or, when a wr_id matched a token, resumed that awaiter with the
// other receive's completion (and buffer).
TEST_CASE("async_queue_pair: refuses a queue pair with work requests posted on it directly") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop);
  auto m = a.pd.allocate<rw>(256);
  auto qp = a.pd.create_qp<rc>(a.cq.queue(), qp_cap{4, 4});
  REQUIRE(qp.post_recv(m.local(0, 64), std::uint64_t{1} << 32).ok());
  CHECK_THROWS_WITH_AS(async_queue_pair(a.cq, std::move(qp)), doctest::Contains("posted on it directly"),
                       usage_error);
  // The refusal says "poll those completions first": that needs the queue pair, which
  // the constructor took by value and destroyed with its receive.
  REQUIRE(qp);
  auto fresh = std::move(qp).reset();  // the old QP goes to ERR: its receive comes back as a flush
  std::uint64_t id = 0;
  wc_status status{};
  CHECK(a.cq.queue().poll([&](const completion<B>& c) { id = c.wr_id(), status = c.status(); }) == 1);
  CHECK(id == std::uint64_t{1} << 32);
  CHECK(status == wc_status::wr_flush_err);
}

// queue().on(aqp.qp(), f) compiled (on() took the const queue pair qp() gives) and
// replaced the async queue pair's own handler: its awaiters never resumed.
TEST_CASE("async_queue_pair: a handler set on its CQ for an async queue pair's QP is a usage_error, not a hang") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  int stolen = 0;
  CHECK_THROWS_WITH_AS(c.a.cq.queue().on(c.x().qp(), [&](const completion<B>&) { ++stolen; }),
                       doctest::Contains("belongs to an async_queue_pair"), usage_error);
  auto run = [&]() -> task<void> {
    wr_result<B> w = co_await c.x().write(ma.local(0, 8), mb.remote().sub(0, 8)).within(2s);
    CHECK(w.outcome() == wr_outcome::completed);
    CHECK(w.ok());
  };
  loop.run(run());
  CHECK(stolen == 0);
}

TEST_CASE("async_queue_pair: UD datagrams awaited on both sides") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  auto ua = std::move(async_queue_pair(a.cq, a.pd.create_qp<ud>(a.cq.queue(), qp_cap{8, 8}))).activate();
  auto ub = std::move(async_queue_pair(b.cq, b.pd.create_qp<ud>(b.cq.queue(), qp_cap{8, 8}))).activate();
  auto ma = a.pd.allocate<access::local_write>(4096);
  auto mb = b.pd.allocate<access::local_write>(4096);
  auto ah = a.pd.create_ah(ub.local_endpoint());
  auto run = [&]() -> task<void> {
    auto incoming = ub.recv(mb.local(0, 40 + 64));
    std::memcpy(ma.data(), "datagram", 8);
    CHECK((co_await ua.send(ah.to(ub.qp_num()), ma.local(0, 8))).ok());
    wr_result<B> r = co_await incoming;
    REQUIRE(r.ok());
    CHECK(r.completion().payload_len() == 8);
    CHECK(std::memcmp(mb.data() + 40, "datagram", 8) == 0);
  };
  loop.run(run());
}

// On libibverbs the address held the native handle: the provider read the freed handle
// (rxe: a null one for an empty address, a crash). Runs on rxe in the guest too.
TEST_CASE("async_queue_pair: a UD send through a destroyed handle's address, or an empty one, is not posted") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  auto ua = std::move(async_queue_pair(a.cq, a.pd.create_qp<ud>(a.cq.queue(), qp_cap{8, 8}))).activate();
  auto ub = std::move(async_queue_pair(b.cq, b.pd.create_qp<ud>(b.cq.queue(), qp_cap{8, 8}))).activate();
  auto ma = a.pd.allocate<access::local_write>(4096);
  auto mb = b.pd.allocate<access::local_write>(4096);
  std::optional<address_handle<B>> ah;
  ah.emplace(a.pd.create_ah(ub.local_endpoint()));
  const ud_address<B> stale = ah->to(ub.local_endpoint());
  ah.reset();
  auto run = [&]() -> task<void> {
    auto incoming = ub.recv(mb.local(0, 40 + 64)).within(200ms);
    for (const ud_address<B>& to : {stale, ud_address<B>{}}) {
      wr_result<B> w = co_await ua.send(to, ma.local(0, 8));
      CHECK(w.outcome() == wr_outcome::not_posted);
      CHECK(w.post().status == post_status::stale_address);
    }
    CHECK((co_await incoming).outcome() == wr_outcome::timed_out);  // nothing was sent
  };
  loop.run(run());
}

// Its event_loop destroyed, a WR awaited by a task of another loop never completed: its
// completion reached a CQ only the destroyed loop drained.
TEST_CASE("async_queue_pair: a WR awaited after its event_loop was destroyed is a usage_error, not a hang") {
  testbed bed;
  auto loop = std::make_unique<event_loop>();
  auto c = std::make_unique<connected<>>(bed, *loop);
  auto m = c->a.pd.allocate<rw>(64);
  auto r = c->b.pd.allocate<rw>(64);
  loop.reset();
  event_loop other;
  auto writes = [&]() -> task<void> { (void)co_await c->x().write(m.local(0, 8), r.remote().sub(0, 8)).within(50ms); };
  CHECK_THROWS_WITH_AS(other.run(writes()), doctest::Contains("was destroyed"), usage_error);
}

// A task of one loop awaiting a WR of a queue pair made on another: that loop resumed it
// in its own turn, and the task, destroying its own loop there, freed its running frame
// (its loop saw none of its work running). Refused at the await now.
TEST_CASE("async_queue_pair: a WR awaited by a task of another event_loop is a usage_error") {
  rig<> r;
  auto other = std::make_unique<event_loop>();
  bool went_on = false;
  auto writes = [&]() -> task<void> {
    (void)co_await r.c.x().write(r.ma.local(0, 8), r.mb.remote().sub(0, 8));
    other.reset();  // its own loop, from a turn of the loop that resumed it
    went_on = true;
  };
  other->spawn(writes());
  CHECK_THROWS_WITH_AS(other->poll(), doctest::Contains("another event_loop"), usage_error);
  for (int i = 0; i < 5; ++i) r.loop.poll();
  CHECK_FALSE(went_on);
  // The write was posted (await_suspend comes after the post): the queue pair goes on.
  auto again = [&]() -> task<bool> { co_return (co_await r.c.x().write(r.ma.local(0, 8), r.mb.remote().sub(0, 8))).ok(); };
  CHECK(r.loop.run(again()));
}

#if !RDMAKIT_CORO_IBVERBS
namespace {
// The mock, refusing the next RTR->RTS transitions it is told to.
struct rts_refusing : backends::mock {
  static inline int refuse_rts = 0;
  static void modify_qp(qp q, const qp_attr& a, qp_attr_mask m) {
    if (a.state == qp_state::rts && refuse_rts > 0) {
      --refuse_rts;
      throw verbs_error("ibv_modify_qp", EINVAL, "refused for the test");
    }
    backends::mock::modify_qp(q, a, m);
  }
};
// Two INIT async queue pairs on devices whose RTR->RTS the test refuses.
struct refusing_pair {
  using R = rts_refusing;
  mock::fabric fab;
  event_loop loop;
  device<R> da{fab, "mock0"}, db{fab, "mock1"};
  protection_domain<R> pa = da.create_pd(), pb = db.create_pd();
  async_completion_queue<R, event_driven<>> ca{loop, da.create_cq<event_driven<>>(64)};
  async_completion_queue<R, event_driven<>> cb{loop, db.create_cq<event_driven<>>(64)};
  memory_region<R, rw> ma = pa.allocate<rw>(4096), mb = pb.allocate<rw>(4096);
  async_queue_pair<R, rc> ia{ca, pa.create_qp<rc>(ca.queue(), qp_cap{8, 8})};
  async_queue_pair<R, rc> ib{cb, pb.create_qp<rc>(cb.queue(), qp_cap{8, 8})};
  auto parts() { return std::tie(loop, ma, mb, ia, ib); }
};
}  // namespace

// A refused RTR->RTS with receives posted replaces the queue pair: the old one flushes
// them, and their awaiters resume with the flush (they used to wait for ever, then were
// cancelled); the new one's completions reach its awaiters.
TEST_CASE("async_queue_pair: a connect refused at RTS resumes the awaiters of the receives it flushed") {
  using R = rts_refusing;
  refusing_pair t;
  auto& loop = t.loop;
  auto& ma = t.ma;
  auto& mb = t.mb;
  auto& ia = t.ia;
  auto& ib = t.ib;
  auto flushed = ia.recv(ma.local(0, 64));
  const auto old_qpn = ia.local_endpoint().qpn;
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(ia).connect(ib.local_endpoint()), doctest::Contains("replaced"), verbs_error);
  REQUIRE(ia);  // an INIT queue pair again, a new one
  CHECK(ia.local_endpoint().qpn != old_qpn);
  auto kept = ia.recv(ma.local(64, 64));  // posted on the new queue pair: still there after connect
  auto a = std::move(ia).connect(ib.local_endpoint());
  auto b = std::move(ib).connect(a.local_endpoint());
  auto run = [&]() -> task<void> {
    wr_result<R> r = co_await std::move(flushed).within(5s);
    CHECK(r.status() == wc_status::wr_flush_err);
    CHECK((co_await b.send(mb.local(0, 8))).ok());
    CHECK((co_await std::move(kept).within(5s)).ok());
  };
  loop.run(run());
}

// A refused RTR->RTS whose replacement could not be made (the device full) leaves the
// async queue pair without a queue pair: the receives posted resumed cancelled, but one
// waiting for receive credits waited for ever (no completion would give it any).
TEST_CASE("async_queue_pair: a connect refused at RTS with no replacement resumes the WRs waiting for credits too") {
  using R = rts_refusing;
  mock::fabric_config cfg;
  cfg.devices.push_back(mock::device_config{.name = "mock0"});
  cfg.devices.push_back(mock::device_config{.name = "mock1"});
  cfg.devices[0].limits.max_qp = 1;  // no second queue pair: the replacement fails
  mock::fabric fab(cfg);
  event_loop loop;
  device<R> da(fab, "mock0"), db(fab, "mock1");
  auto pa = da.create_pd(), pb = db.create_pd();
  async_completion_queue<R, event_driven<>> ca(loop, da.create_cq<event_driven<>>(64));
  async_completion_queue<R, event_driven<>> cb(loop, db.create_cq<event_driven<>>(64));
  auto ma = pa.allocate<rw>(4096);
  async_queue_pair<R, rc> ia(ca, pa.create_qp<rc>(ca.queue(), qp_cap{4, 2}));
  async_queue_pair<R, rc> ib(cb, pb.create_qp<rc>(cb.queue(), qp_cap{4, 2}));
  auto r1 = ia.recv(ma.local(0, 64));
  auto r2 = ia.recv(ma.local(64, 64));
  auto r3 = ia.recv(ma.local(128, 64));  // two receive credits: waits for one
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(ia).connect(ib.local_endpoint()), doctest::Contains("could not be replaced"),
                       verbs_error);
  CHECK_FALSE(ia);  // no queue pair left in it
  auto run = [&]() -> task<int> {
    int cancelled = 0;
    for (auto* w : {&r1, &r2, &r3}) cancelled += (co_await std::move(*w).within(2s)).outcome() == wr_outcome::cancelled;
    co_return cancelled;
  };
  CHECK(loop.run(run()) == 3);
}

// A second refusal used to destroy the queue pair the first one replaced, with its
// receive's flush still in the CQ: the awaiter of that receive waited for ever.
TEST_CASE("async_queue_pair: two connects refused at RTS in a row resume the awaiters of both flushed receives") {
  using R = rts_refusing;
  refusing_pair t;
  auto& loop = t.loop;
  auto& ma = t.ma;
  auto& mb = t.mb;
  auto& ia = t.ia;
  auto& ib = t.ib;
  auto first = ia.recv(ma.local(0, 64));
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(ia).connect(ib.local_endpoint()), doctest::Contains("replaced"), verbs_error);
  auto second = ia.recv(ma.local(64, 64));
  R::refuse_rts = 1;
  CHECK_THROWS_WITH_AS((void)std::move(ia).connect(ib.local_endpoint()), doctest::Contains("replaced"), verbs_error);
  auto kept = ia.recv(ma.local(128, 64));
  auto a = std::move(ia).connect(ib.local_endpoint());
  auto b = std::move(ib).connect(a.local_endpoint());
  auto run = [&]() -> task<void> {
    wr_result<R> r1 = co_await std::move(first).within(5s);
    CHECK(r1.status() == wc_status::wr_flush_err);
    wr_result<R> r2 = co_await std::move(second).within(5s);
    CHECK(r2.status() == wc_status::wr_flush_err);
    CHECK((co_await b.send(mb.local(0, 8))).ok());
    CHECK((co_await std::move(kept).within(5s)).ok());
  };
  loop.run(run());
}

// An async_queue_pair on a shared receive queue took the SRQ's receive completions of its
// queue pair for its own: their wr_ids matched no awaiter's token, and they were dropped
// (next() never saw them; one whose wr_id matched a token would have completed that WR's
// awaiter). They go to next() now, also once the queue pair is destroyed with sends
// outstanding (rxe leaves them in the CQ).
TEST_CASE("async_queue_pair: on a shared receive queue, the SRQ's receive completions reach next()") {
  for (const auto profile : {mock::device_profile::spec, mock::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    mock::fabric_config cfg;
    cfg.profile = profile;
    testbed bed(cfg);
    event_loop loop;
    side a(bed.open(0), loop), b(bed.open(1), loop);
    auto srq = b.pd.create_srq({.max_wr = 8, .max_sge = 1});
    auto ma = a.pd.allocate<rw>(256);
    auto mb = b.pd.allocate<rw>(256);
    async_queue_pair<B, rc> ia(a.cq, a.pd.create_qp<rc>(a.cq.queue(), qp_cap{8, 8}));
    async_queue_pair<B, on_srq<rc>> ib(b.cq, b.pd.create_qp<rc>(b.cq.queue(), srq, qp_cap{8, 0}));
    const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
    auto x = std::move(ia).connect(eb);
    std::optional<async_queue_pair<B, on_srq<rc>, signal_all, qp_state::rts>> y(std::move(ib).connect(ea));
    REQUIRE(srq.post_recv(mb.local(0, 64), 77).ok());
    REQUIRE(srq.post_recv(mb.local(64, 64), 78).ok());
    const std::uint32_t yqpn = y->qp_num();
    auto run = [&]() -> task<void> {
      CHECK((co_await x.send(ma.local(0, 8)).within(1s)).ok());
      CHECK((co_await y->write(mb.local(0, 8), ma.remote().sub(0, 8)).within(1s)).ok());  // y's own WR
      std::optional<completion<B>> c = co_await b.cq.next(1s);
      REQUIRE(c);
      CHECK(c->wr_id() == 77);
      CHECK(c->qp_num() == yqpn);
      // The second message arrives (zero latency: as it is posted) and y goes before a
      // drain, a WR of y outstanding: y's number is forgotten, its completions dropped.
      auto never = y->write(mb.local(0, 8), ma.remote().sub(0, 8));
      auto sent = x.send(ma.local(0, 8));
      y.reset();
      CHECK((co_await std::move(sent).within(1s)).ok());
      c = co_await b.cq.next(200ms);
      if (profile == mock::device_profile::rxe) {  // rxe leaves it in the CQ: it is the SRQ's, not y's
        REQUIRE(c);
        CHECK(c->wr_id() == 78);
      }
    };
    loop.run(run());
  }
}
#endif

// A WR's awaitable moved while a coroutine awaited it took the WR along: the moved-to one
// got the completion, and the coroutine waiting on the moved-from one never resumed.
TEST_CASE("async_queue_pair: a WR's awaitable moved while awaited stays with its coroutine; the moved-to one is refused") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  using recv_type = decltype(c.y().recv(mb.local(0, 64)));
  recv_type* waiting = nullptr;
  std::optional<wr_result<B>> got;
  auto first = [&]() -> task<void> {
    auto w = c.y().recv(mb.local(0, 64));
    waiting = &w;
    got.emplace(co_await w);
  };
  std::string refused;
  auto second = [&]() -> task<void> {
    auto sent = c.x().send(ma.local(0, 8));  // posted now: the receive completes
    auto moved = std::move(*waiting);        // while `first` awaits it
    refused = co_await usage_error_of_await(moved);
    CHECK((co_await std::move(sent)).ok());
    co_await loop.sleep_for(20ms);
  };
  loop.spawn(first());
  loop.run(second());
  CHECK(refused.find("moved from or awaited") != std::string::npos);
  REQUIRE(got);
  CHECK(got->ok());
}

// A WR's result went to whoever awaited it: awaited again, the awaiter got the moved-from
// result; awaited by a second coroutine between the completion and the first coroutine's
// resumption, both got it.
TEST_CASE("async_queue_pair: a WR's result is taken once: awaited again, or by a second coroutine, it is refused") {
  rig<> r;
  auto& loop = r.loop;
  auto& c = r.c;
  auto& ma = r.ma;
  auto& mb = r.mb;
  SUBCASE("again by the coroutine that awaited it") {
    auto run = [&]() -> task<void> {
      auto recv = c.y().recv(mb.local(0, 64));
      auto sent = c.x().send(ma.local(0, 8));
      CHECK((co_await in_place{sent}).ok());
      std::string in_place_error;
      try {
        (void)co_await in_place{sent};
      } catch (const usage_error& e) {
        in_place_error = e.what();
      }
      CHECK(in_place_error.find("awaited already") != std::string::npos);
      CHECK((co_await usage_error_of_await(sent)).find("awaited already") != std::string::npos);
      CHECK((co_await std::move(recv)).ok());
    };
    loop.run(run());
  }
#if !RDMAKIT_CORO_IBVERBS  // the mock completes both receives in one poll; a device may not
  SUBCASE("by a second coroutine after it completed, before the first resumed") {
    using recv_type = decltype(c.y().recv(mb.local(0, 64)));
    recv_type* later = nullptr;  // completes second, and its coroutine resumes second
    std::optional<wr_result<B>> got;
    std::string refused;
    auto second = [&]() -> task<void> {
      auto w = c.y().recv(mb.local(0, 64));
      CHECK((co_await w).ok());
      REQUIRE(later);
      REQUIRE(later->ready());  // completed, its coroutine not resumed yet
      REQUIRE_FALSE(got);
      try {
        (void)co_await in_place{*later};
      } catch (const usage_error& e) {
        refused = e.what();
      }
    };
    auto first = [&]() -> task<void> {
      auto w = c.y().recv(mb.local(64, 64));
      later = &w;
      got.emplace(co_await w);
    };
    auto sender = [&]() -> task<void> {
      auto one = c.x().send(ma.local(0, 8));
      auto two = c.x().send(ma.local(8, 8));
      CHECK((co_await std::move(one)).ok());
      CHECK((co_await std::move(two)).ok());
      co_await loop.sleep_for(10ms);
    };
    loop.spawn(second());
    loop.spawn(first());
    loop.run(sender());
    loop.run();
    CHECK(refused.find("awaited already") != std::string::npos);
    REQUIRE(got);
    CHECK(got->ok());
  }
#endif
}

// Not the coroutine layer, but here so that it runs on rxe too (test_coro_ibverbs): a
// device writes a queue pair's flushes after the move to ERR returns (rxe from a kernel
// task), so reset() under selective signaling cannot take a poll finding the CQ empty
// for proof that the old queue pair's flushes all came; it posts a drain marker and
// keeps the old one until the marker is polled. A second reset at once must not let the
// first one go: every WR's flush reaches its handler, the marker none.
TEST_CASE("queue_pair reset() under selective signaling: every flush reaches the old queue pair's handler") {
  testbed bed;
  auto da = bed.open(0), db = bed.open(1);
  auto pa = da.create_pd(), pb = db.create_pd();
  auto cq = da.create_cq(64);
  auto cqb = db.create_cq(16);
  auto mr = pa.allocate<rw>(64);
  auto rmr = pb.allocate<rw>(64);
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    auto xi = pa.create_qp<rc, signal_every<4>>(cq, qp_cap{8, 0});
    auto yi = pb.create_qp<rc>(cqb, qp_cap{8, 8});  // left in INIT: x's WRITEs go unanswered
    auto x = std::move(xi).connect(yi.local_endpoint());
    std::vector<std::uint64_t> ids;
    cq.on(x, [&](const completion<B>& c) {
      CHECK(c.status() == wc_status::wr_flush_err);
      ids.push_back(c.wr_id());
    });
    for (std::uint64_t id = 1; id <= 6; ++id) REQUIRE(x.write(mr.local(0, 8), rmr.remote().sub(0, 8), id).ok());
    auto x2 = std::move(x).reset();  // 4 signaled; 1-3, 5 and 6 not
    (void)cq.dispatch();             // may find nothing yet
    auto x3 = std::move(x2).reset();
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (ids.size() < 6 && std::chrono::steady_clock::now() < until) (void)cq.dispatch();
    CHECK(ids == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6});
    CHECK(cq.unrouted() == 0);
  }
}

// Inline data is read when its WR is posted, and verbs lets the buffer be reused then.
// A WR that waited for credits was posted later, from the buffer as it was by then: five
// SENDs of one staging buffer, rewritten after each was made, arrived as 0 4 4 4 4
// (helper-104's audit). The awaitable of an inline WR keeps a copy of its bytes.
TEST_CASE("async_queue_pair: an inline SEND that waits for credits sends the bytes it was made with") {
  testbed bed;
  event_loop loop;
  side a(bed.open(0), loop), b(bed.open(1), loop);
  const qp_cap caps{1, 8, 1, 1, 64};  // one send credit, 64 bytes inline
  async_queue_pair<B, rc> ia(a.cq, a.pd.create_qp<rc>(a.cq.queue(), caps));
  async_queue_pair<B, rc> ib(b.cq, b.pd.create_qp<rc>(b.cq.queue(), caps));
  const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
  auto x = std::move(ia).connect(eb);
  auto y = std::move(ib).connect(ea);
  REQUIRE(x.qp().caps().max_inline_data >= 4);
  auto ma = a.pd.allocate<rw>(64);
  auto mb = b.pd.allocate<rw>(4096);
  auto exchange = [&]() -> task<std::vector<std::uint32_t>> {
    std::vector<decltype(y.recv(mb.local(0, 4)))> rx;
    for (std::uint32_t i = 0; i < 5; ++i) rx.push_back(y.recv(mb.local(64 * i, 4)));
    std::vector<decltype(x.send(ma.local(0, 4)))> tx;
    for (std::uint32_t i = 0; i < 5; ++i) {
      std::memcpy(ma.data(), &i, 4);  // one staging buffer, rewritten after each is made
      tx.push_back(x.send(ma.local(0, 4), send_flags::inline_data));
    }
    for (auto& t : tx) CHECK((co_await t).ok());
    std::vector<std::uint32_t> out;
    for (std::uint32_t i = 0; i < 5; ++i) {
      CHECK((co_await rx[i]).ok());
      std::uint32_t v = 0;
      std::memcpy(&v, mb.data() + 64 * i, 4);
      out.push_back(v);
    }
    co_return out;
  };
  CHECK(loop.run(exchange()) == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
}
