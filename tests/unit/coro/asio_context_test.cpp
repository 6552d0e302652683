#include "fixture.hpp"

#include <rdmakit/asio_context.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace coro_test;

namespace {
// Two sides whose async objects run on an asio_context.
struct asio_pair {
  explicit asio_pair(mock::fabric& fab, asio_context& rdma)
      : da(fab, "mock0"), db(fab, "mock1"), pa(da.create_pd()), pb(db.create_pd()),
        ca(rdma, da.create_cq<event_driven<>>(64)), cb(rdma, db.create_cq<event_driven<>>(64)),
        qa(make_(ca, pa, cb, pb)) {}
  device<B> da, db;
  protection_domain<B> pa, pb;
  acq ca, cb;
  std::pair<rts_qp<>, rts_qp<>> qa;

 private:
  static std::pair<rts_qp<>, rts_qp<>> make_(acq& ca, protection_domain<B>& pa, acq& cb, protection_domain<B>& pb) {
    async_queue_pair<B, rc> x(ca, pa.create_qp<rc>(ca.queue(), qp_cap{16, 16}));
    async_queue_pair<B, rc> y(cb, pb.create_qp<rc>(cb.queue(), qp_cap{16, 16}));
    const endpoint ex = x.local_endpoint(), ey = y.local_endpoint();
    return {std::move(x).connect(ey), std::move(y).connect(ex)};
  }
};

task<int> write_then_read(rts_qp<>& qp, memory_region<B, rw>& local, remote_region<access::remote_write | access::remote_read> remote) {
  std::memcpy(local.data(), "over asio", 9);
  wr_result<B> w = co_await qp.write(local.local(0, 9), remote.sub(0, 9));
  wr_result<B> r = co_await qp.read(local.local(64, 9), remote.sub(0, 9));
  co_return w.ok() && r.ok() && std::memcmp(local.data() + 64, "over asio", 9) == 0 ? 9 : -1;
}

}  // namespace

// asio 1.22 offers asio::awaitable to GCC, and to clang only with libc++'s
// <experimental/coroutine>: clang with libstdc++ (Debian's clang++) has no asio coroutines.
// The callback cases below run everywhere.
#if defined(ASIO_HAS_CO_AWAIT)
namespace {
task<int> fails_after(rts_qp<>& qp, memory_region<B, rw>& local) {
  (void)co_await qp.recv(local.local(0, 8)).within(1ms);
  throw std::runtime_error("rdma task failed");
}
}  // namespace

TEST_CASE("asio_context: an asio coroutine awaits RDMA work on its own io_context, beside an asio timer") {
  mock::fabric fab;
  ::asio::io_context io;
  asio_context rdma(io);
  asio_pair p(fab, rdma);
  auto la = p.pa.allocate<rw>(4096);
  auto lb = p.pb.allocate<rw>(4096);
  int got = 0;
  bool timer_fired = false;
  bool caught = false;
  auto app = [&]() -> ::asio::awaitable<void> {
    ::asio::steady_timer t(io, 2ms);
    got = co_await asio_spawn(rdma, write_then_read(p.qa.first, la, lb.remote()), ::asio::use_awaitable);
    co_await t.async_wait(::asio::use_awaitable);
    timer_fired = true;
    try {
      (void)co_await asio_spawn(rdma, fails_after(p.qa.first, la), ::asio::use_awaitable);
    } catch (const std::runtime_error& e) {
      caught = std::string(e.what()) == "rdma task failed";
    }
  };
  ::asio::co_spawn(io, app(), ::asio::detached);
  io.run();
  CHECK(got == 9);
  CHECK(timer_fired);
  CHECK(caught);
  CHECK(rdma.tasks() == 0);
}
#endif

TEST_CASE("asio_context: a plain callback as the completion token; destroying the context ends unfinished tasks") {
  mock::fabric fab;
  ::asio::io_context io;
  int result = 0;
  {
    asio_context rdma(io);
    asio_pair p(fab, rdma);
    auto la = p.pa.allocate<rw>(4096);
    auto lb = p.pb.allocate<rw>(4096);
    asio_spawn(rdma, write_then_read(p.qa.first, la, lb.remote()),
               [&](std::exception_ptr e, int v) { result = e ? -2 : v; });
    io.run();
    CHECK(result == 9);
    // A task that waits for a receive nobody sends: the context goes first.
    auto waits = [](rts_qp<>& qp, memory_region<B, rw>& m) -> task<void> { (void)co_await qp.recv(m.local(0, 8)); };
    asio_spawn(rdma, waits(p.qa.second, lb), [](std::exception_ptr) {});
    io.restart();
    io.run_for(5ms);
    CHECK(rdma.tasks() == 1);
  }
  io.restart();
  io.run();  // nothing left that refers to the destroyed context
}

// Destroying the context destroyed every task at once, the one running the destructor
// too: its frame went while it ran, and its driver read the dead context (ASan).
TEST_CASE("asio_context: destroyed from inside one of its tasks, that task runs on until it waits or finishes") {
  mock::fabric fab;
  ::asio::io_context io;
  auto rdma = std::make_unique<asio_context>(io);
  asio_pair p(fab, *rdma);
  auto lb = p.pb.allocate<rw>(4096);
  // Waits for a receive nobody sends: destroyed with the context.
  bool waiter_done = false;
  auto waits = [](rts_qp<>& qp, memory_region<B, rw>& m) -> task<void> { (void)co_await qp.recv(m.local(0, 8)); };
  asio_spawn(*rdma, waits(p.qa.second, lb), [&](std::exception_ptr) { waiter_done = true; });
  bool went_on = false;
  int result = 0;
  SUBCASE("the task finishes: its handler gets its value") {
    auto killer = [&]() -> task<int> {
      rdma.reset();
      went_on = true;
      co_return 5;
    };
    asio_spawn(*rdma, killer(), [&](std::exception_ptr e, int v) { result = e ? -1 : v; });
    io.run();
    CHECK(result == 5);
  }
  SUBCASE("the task waits again: it is destroyed then, its handler not called") {
    auto killer = [&](rts_qp<>& qp, memory_region<B, rw>& m) -> task<int> {
      rdma.reset();
      went_on = true;
      (void)co_await qp.recv(m.local(64, 8));
      co_return 5;
    };
    asio_spawn(*rdma, killer(p.qa.first, lb), [&](std::exception_ptr e, int v) { result = e ? -1 : v; });
    io.run();
    CHECK(result == 0);
  }
  CHECK(went_on);
  CHECK_FALSE(rdma);
  CHECK_FALSE(waiter_done);
}

// The async objects kept the scheduler, and with it the asio descriptors and timers it
// had made on the io_context: destroyed after the io_context, they reached its freed
// reactor (ASan: heap-use-after-free in stream_descriptor::cancel). They now let go of
// asio with the asio_context, so they may outlive both; awaiting them then is refused.
TEST_CASE("asio_context: async objects outlive the asio_context and the io_context") {
  mock::fabric fab;
  std::optional<asio_pair> p;
  std::optional<device_events<B>> events;
  device<B> dev(fab, "mock0");
  {
    ::asio::io_context io;
    asio_context rdma(io);
    p.emplace(fab, rdma);
    events.emplace(rdma, dev);
    auto la = p->pa.allocate<rw>(4096);
    auto lb = p->pb.allocate<rw>(4096);
    int result = 0;
    asio_spawn(rdma, write_then_read(p->qa.first, la, lb.remote()), [&](std::exception_ptr e, int v) { result = e ? -2 : v; });
    // A task waiting with a deadline when the context goes: its timer is armed on the io_context.
    auto waits = [](rts_qp<>& qp, memory_region<B, rw>& m) -> task<void> { (void)co_await qp.recv(m.local(0, 8)).within(1h); };
    asio_spawn(rdma, waits(p->qa.second, lb), [](std::exception_ptr) {});
    io.run_for(20ms);
    CHECK(result == 9);
    CHECK(rdma.tasks() == 1);
  }  // the asio_context, then the io_context
  event_loop other;
  auto late = [&]() -> task<void> { (void)co_await p->ca.next(1ms); };
  CHECK_THROWS_WITH_AS(other.run(late()), doctest::Contains("was destroyed"), usage_error);
  events.reset();
  p.reset();  // the queue pairs and completion queues, after the io_context
}

// Work the mock keeps pending with no task left (a SEND retried for ever against a peer
// without receives, rnr_retry 7) kept io_context::run() polling the mock's clock for
// ever after the last task had finished: the progress handler was posted again whenever
// the mock had work, task or not. It is posted only while a task runs, as the waits are.
TEST_CASE("asio_context: io_context::run() returns when its tasks are done, whatever the mock still has pending") {
  mock::fabric fab;
  ::asio::io_context io;
  asio_context rdma(io);
  device<B> da(fab, "mock0"), db(fab, "mock1");
  auto pa = da.create_pd(), pb = db.create_pd();
  acq ca(rdma, da.create_cq<event_driven<>>(64)), cb(rdma, db.create_cq<event_driven<>>(64));
  async_queue_pair<B, rc> x(ca, pa.create_qp<rc>(ca.queue(), qp_cap{16, 16}));
  async_queue_pair<B, rc> y(cb, pb.create_qp<rc>(cb.queue(), qp_cap{16, 16}));
  connect_options forever;
  forever.rnr_retry = 7;
  const endpoint ex = x.local_endpoint(), ey = y.local_endpoint();
  auto sender = std::move(x).connect(ey, forever);
  auto receiver = std::move(y).connect(ex, forever);
  auto m = pa.allocate<rw>(4096);
  auto sends = [](rts_qp<>& qp, memory_region<B, rw>& m) -> task<int> {
    const wr_result<B> r = co_await qp.send(m.local(0, 8)).within(20ms);
    co_return r.outcome() == wr_outcome::timed_out ? 1 : -1;
  };
  int result = 0;
  asio_spawn(rdma, sends(sender, m), [&](std::exception_ptr e, int v) { result = e ? -2 : v; });
  io.run_for(2s);  // returns at once when run() would; else after 2 s of polling
  CHECK(result == 1);
  CHECK(rdma.tasks() == 0);
  CHECK(io.stopped());
}

// As on event_loop (async_completion_queue_test): a CQ replaced through queue() was
// reported once, and the task awaiting its next() waited on for nothing.
TEST_CASE("asio_context: a CQ replaced through queue() ends io_context::run() with usage_error; next() resumes with it") {
  mock::fabric fab;
  ::asio::io_context io;
  asio_context rdma(io);
  device<B> d(fab, "mock0");
  std::optional<acq> c(std::in_place, rdma, d.create_cq<event_driven<>>(64));
  c->queue() = d.create_cq<event_driven<>>(128);
  auto waits = [&]() -> task<int> {
    (void)co_await c->next(10s);
    co_return 1;
  };
  std::string waited;
  asio_spawn(rdma, waits(), [&](std::exception_ptr e, int) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const usage_error& u) {
      waited = u.what();
    }
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(io.run(), doctest::Contains("queue()"), usage_error);
  // The task's resumption may come after the failure ended that run: the next run has it.
  for (int run = 0; run < 3 && waited.empty(); ++run) {
    io.restart();
    CHECK_THROWS_WITH_AS(io.run(), doctest::Contains("queue()"), usage_error);
  }
  CHECK(waited.find("queue()") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  c.reset();
  int result = 0;
  auto seven = []() -> task<int> { co_return 7; };
  asio_spawn(rdma, seven(), [&](std::exception_ptr e, int v) { result = e ? -1 : v; });
  io.restart();
  io.run();
  CHECK(result == 7);
}

// io_context::run() on two threads ran this context's handlers, and the tasks they
// resume, on both at once: heap-use-after-free in a queue pair's slots, races (TSan) and
// completions lost, with no error. The first thread that runs one of its handlers owns
// it; one another thread picks up goes back to the io_context, for the owner, and that
// thread's run() ends with usage_error.
TEST_CASE("asio_context: a second thread running its io_context gets usage_error; the owner runs every task") {
  ::asio::io_context io;
  asio_context rdma(io);
  int done = 0, completed = 0;
  auto counts = [&]() -> task<void> {
    ++done;
    co_return;
  };
  auto completes = [&](std::exception_ptr e) { completed += e ? 100 : 1; };
  asio_spawn(rdma, counts(), completes);
  io.poll();  // this thread runs the first handler: it owns the context now
  REQUIRE(done == 1);
  io.restart();
  asio_spawn(rdma, counts(), completes);  // its handler is the only one ready
  std::string refused;
  std::thread([&] {
    try {
      io.run_one();
    } catch (const usage_error& e) {
      refused = e.what();
    }
  }).join();
  CHECK_MESSAGE(refused.find("io_context is run by a second thread") != std::string::npos, refused);
  CHECK(done == 1);  // not run there
  io.run();  // handed back: the owner runs it
  CHECK(done == 2);
  CHECK(completed == 2);
  // asio_spawn from another thread than the owner is refused before anything is done.
  std::thread([&] {
    CHECK_THROWS_WITH_AS(asio_spawn(rdma, counts(), completes), doctest::Contains("asio_spawn: called on a second thread"),
                         usage_error);
  }).join();
  CHECK(rdma.tasks() == 0);
  // So is an async object made on it there: it would watch its descriptor meanwhile.
  mock::fabric fab;
  device<B> d(fab, "mock0");
  std::thread([&] {
    CHECK_THROWS_WITH_AS(acq(rdma, d.create_cq<event_driven<>>(8)),
                         doctest::Contains("an async object made on it): called on a second thread"), usage_error);
  }).join();
}

// io_context::run() from inside one of the context's tasks, or from an on() handler it
// ran, waited for ever: the waits stay armed while a task runs, and the completion the
// outer code waited for was behind it (found by an audit; event_loop refuses its run()
// there). The first of the context's handlers such a run reaches goes back to the
// io_context, and the run ends with usage_error.
TEST_CASE("asio_context: io_context::run() from one of its tasks or on() handlers is refused, saying why") {
  mock::fabric fab;
  ::asio::io_context io;
  asio_context rdma(io);
  asio_pair p(fab, rdma);
  auto mem = p.pa.allocate<rw>(256);
  auto peer = p.pb.allocate<rw>(256);
  std::vector<std::string> errors;
  int written = 0;
  auto writes = [&]() -> task<void> {
    if ((co_await p.qa.first.write(mem.local(0, 8), peer.remote().sub(0, 8))).ok()) ++written;
  };
  auto ignore = [](std::exception_ptr) {};
  SUBCASE("from a task") {
    auto reenters = [&]() -> task<void> {
      errors.push_back(refusal([&] { io.run(); }));
      co_return;
    };
    asio_spawn(rdma, writes(), ignore);
    asio_spawn(rdma, reenters(), ignore);
    io.run();  // here: the coroutine runs in `reenters`, which the subcase's end destroys
  }
  SUBCASE("from an on() handler") {
    auto ia = p.pa.create_qp<rc>(p.ca.queue(), qp_cap{4, 4});
    auto ib = p.pb.create_qp<rc>(p.cb.queue(), qp_cap{4, 4});
    const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
    auto qa = std::move(ia).connect(eb);
    auto qb = std::move(ib).connect(ea);
    p.ca.queue().on(qa, [&](const completion<B>&) { errors.push_back(refusal([&] { io.run(); })); });
    REQUIRE(qa.write(mem.local(8, 8), peer.remote().sub(8, 8), 1).ok());
    asio_spawn(rdma, writes(), ignore);
    io.run();
  }
  io.run();
  REQUIRE(errors.size() == 1);
  CHECK_MESSAGE(errors[0].find("run (run(), poll(), run_one()...) from inside one of its tasks or completion handlers") !=
                    std::string::npos,
                errors[0]);
  CHECK(written == 1);
  CHECK(rdma.tasks() == 0);
}

// Before any thread ran one of its handlers, two threads calling asio_spawn at once both
// passed the thread check and pushed onto its task list together (a data race under TSan,
// found by an audit). One is inside at a time now; the other is refused.
TEST_CASE("asio_context: asio_spawn on two threads at once, before an owner: one at a time, the other refused") {
  ::asio::io_context io;
  asio_context rdma(io);
  constexpr int per_thread = 2000;
  std::atomic<int> ran{0}, refused{0}, completed{0};
  auto counts = [&]() -> task<void> {
    ++ran;
    co_return;
  };
  auto spawner = [&] {
    for (int i = 0; i < per_thread; ++i) {
      try {
        asio_spawn(rdma, counts(), [&](std::exception_ptr) { ++completed; });
      } catch (const usage_error&) {
        ++refused;
      }
    }
  };
  std::thread other(spawner);
  spawner();
  other.join();
  io.run();
  CHECK(ran + refused == 2 * per_thread);
  CHECK(completed == ran);
  CHECK(rdma.tasks() == 0);
}

// asio_spawn on one thread while another already runs the io_context, before an owner
// (the common "start the io thread, then spawn from main"): the spawn posted the task's
// start before the coroutine had reached its first suspension, so the io thread could
// resume a frame the spawning thread was still writing (a data race under TSan on every
// run, found by an audit), and now and then the start was taken before the frame
// suspended, which left the task waiting for ever. The io thread waits for the spawn's
// frame to be suspended now.
TEST_CASE("asio_context: asio_spawn while another thread runs the io_context, before an owner: the task runs once") {
  constexpr int rounds = 200;
  int finished = 0;
  for (int i = 0; i < rounds; ++i) {
    ::asio::io_context io;
    auto guard = ::asio::make_work_guard(io);
    asio_context rdma(io);
    std::atomic<int> got{0};
    std::thread runner([&] {
      while (got.load() == 0 && !io.stopped()) io.poll();
    });
    asio_spawn(rdma, []() -> task<int> { co_return 7; }(), [&](std::exception_ptr e, int v) { got = e ? -1 : v; });
    for (int spin = 0; spin < 2000 && got.load() == 0; ++spin) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (got.load() == 0) io.stop();  // the task never ran: let the runner go
    runner.join();
    finished += got.load() == 7;
    if (got.load() != 7) break;
  }
  CHECK(finished == rounds);
}
