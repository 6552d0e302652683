// Random use of the coroutine layer on the mock: coroutines on one event_loop await
// SENDs, WRITEs, READs and receives on two connected pairs of async queue pairs (with
// and without within(), awaited at once, later, again after a timeout, or dropped),
// sleep, and destroy and re-create the pairs while others await them, under a random
// device profile, wire latency and injected faults. What must hold whatever the order:
// every coroutine finishes (a wait on a destroyed queue pair resumes cancelled, a
// bounded one times out), each result is one the documentation lists, and nothing else
// escapes a task. Under CI's ASan+UBSan (built with clang, which awaits in place where
// GCC moves the awaitable) any use of freed memory fails the run too.
#include "fixture.hpp"

#include <random>
#include <vector>

using namespace coro_test;

namespace {
template <signaling S>
class random_run {
 public:
  explicit random_run(unsigned seed)
      : rnd_(seed), bed_(config_(seed)), a_(bed_.open(0), loop_), b_(bed_.open(1), loop_),
        ma_(a_.pd.allocate<rw>(1 << 14)), mb_(b_.pd.allocate<rw>(1 << 14)) {
    if (pick_(3) == 0)
      bed_.fab.inject({.kind = static_cast<mock::fault_kind>(pick_(4)), .count = 0, .probability = 0.1, .delay = 20us});
  }

  void run(int workers, int steps) {
    for (auto& p : pairs_) make_(p);
    for (int w = 0; w < workers; ++w) loop_.spawn(worker_(steps));
    loop_.run();  // returns once every worker finished: none may hang
    CHECK(loop_.tasks() == 0);
    CHECK(finished_ == workers);
  }

 private:
  using qp = rts_qp<rc, S>;
  struct pair {
    std::optional<qp> x, y;
  };

  static mock::fabric_config config_(unsigned seed) {
    std::minstd_rand r(seed);
    mock::fabric_config cfg;
    cfg.seed = seed;
    if (r() % 2) cfg.profile = mock::device_profile::rxe;
    if (r() % 2) cfg.latency = std::chrono::microseconds(r() % 5);
    return cfg;
  }
  unsigned pick_(unsigned n) { return static_cast<unsigned>(rnd_() % n); }

  void make_(pair& p) {
    const std::uint32_t depth = 4 + pick_(8);
    try {
      async_queue_pair<B, rc, S> ix(a_.cq, a_.pd.template create_qp<rc, S>(a_.cq.queue(), qp_cap{depth, depth}));
      async_queue_pair<B, rc, S> iy(b_.cq, b_.pd.template create_qp<rc, S>(b_.cq.queue(), qp_cap{depth, depth}));
      const endpoint ex = ix.local_endpoint(), ey = iy.local_endpoint();
      p.x.emplace(std::move(ix).connect(ey));
      p.y.emplace(std::move(iy).connect(ex));
    } catch (const usage_error&) {
      // The CQs have no room for another pair's reservations: a documented refusal.
      p.x.reset();
      p.y.reset();
    }
  }

  // What a result may be: a completion (its status), a refused post, a timeout, or a
  // cancellation by the queue pair's destruction.
  static void check_result(const wr_result<B>& r) {
    switch (r.outcome()) {
      case wr_outcome::completed: CHECK(r.ok() == (r.status() == wc_status::success)); break;
      case wr_outcome::not_posted: CHECK_FALSE(r.post().ok()); break;
      case wr_outcome::timed_out: CHECK_FALSE(r.ok()); break;
      case wr_outcome::cancelled: CHECK(r.status() == wc_status::wr_flush_err); break;
      default: FAIL("an outcome wr_outcome does not list: " << static_cast<int>(r.outcome()));
    }
  }

  using region = memory_region<B, rw>;
  local_buffer source_(region& r) { return r.local(pick_(1024), pick_(256)); }
  auto target_(region& r) { return r.remote().sub(pick_(1024), 256); }
  local_buffer landing_(region& r) { return r.local(4096 + pick_(1024), 512); }
  std::chrono::microseconds bound_() { return std::chrono::microseconds(1 + pick_(2000)); }

  task<void> worker_(int steps) {
    // WRs made now and awaited later, or dropped unawaited.
    std::vector<decltype(std::declval<qp&>().recv(local_buffer{}))> receives;
    std::vector<decltype(std::declval<qp&>().write(local_buffer{}, std::declval<region&>().remote()))> writes;
    for (int step = 0; step < steps; ++step) {
      pair& p = pairs_[pick_(2)];
      const unsigned op = pick_(100);
      if (op < 45) {
        if (!p.x) continue;
        const bool from_x = pick_(2);
        qp& q = from_x ? *p.x : *p.y;
        region &mine = from_x ? ma_ : mb_, &theirs = from_x ? mb_ : ma_;
        // Each wait bounded: a SEND's receiver may never post a receive (RNR for ever), a
        // receive may never get a message. The queue pair may be destroyed meanwhile (q
        // is not used after the co_await).
        switch (pick_(4)) {
          case 0: check_result(co_await q.send(source_(mine)).within(bound_())); break;
          case 1: check_result(co_await q.write(source_(mine), target_(theirs)).within(bound_())); break;
          case 2: check_result(co_await q.read(source_(mine), target_(theirs)).within(bound_())); break;
          default: check_result(co_await q.recv(landing_(mine)).within(bound_())); break;
        }
      } else if (op < 60) {
        if (!p.x) continue;
        const bool from_x = pick_(2);
        qp& q = from_x ? *p.x : *p.y;
        if (pick_(2))
          receives.push_back(q.recv(landing_(from_x ? ma_ : mb_)));
        else
          writes.push_back(q.write(source_(from_x ? ma_ : mb_), (from_x ? mb_ : ma_).remote()));
      } else if (op < 72) {
        // Awaited later (its queue pair may be gone by now), or dropped unawaited. Or
        // awaited in place: one that times out stays in the list, to be awaited again.
        if (!receives.empty() && pick_(3) == 0) {
          const wr_result<B> r = co_await receives.back().within(bound_());
          check_result(r);
          if (r.outcome() != wr_outcome::timed_out) receives.pop_back();
        } else if (!receives.empty() && pick_(2)) {
          auto w = std::move(receives.back());
          receives.pop_back();
          if (pick_(2)) check_result(co_await std::move(w).within(bound_()));
        } else if (!writes.empty()) {
          auto w = std::move(writes.back());
          writes.pop_back();
          if (pick_(2)) check_result(co_await std::move(w).within(bound_()));
        }
      } else if (op < 84) {
        co_await loop_.sleep_for(std::chrono::microseconds(pick_(200)));
      } else if (op < 90) {
        // Destroyed while other coroutines may await it: they resume cancelled.
        (pick_(2) ? p.x : p.y).reset();
        p.x.reset();
        p.y.reset();
      } else if (op < 97) {
        // A pair destroyed is made again; one in ERR (RNR, a fault) is given up first.
        if (p.x && (p.x->qp().in_error() || p.y->qp().in_error())) {
          p.x.reset();
          p.y.reset();
        }
        if (!p.x) make_(p);
      } else {
        auto& cq = pick_(2) ? a_.cq : b_.cq;
        // Completions of queue pairs used directly: there are none here.
        CHECK_FALSE(co_await cq.next(std::chrono::microseconds(pick_(100))));
      }
    }
    ++finished_;
  }

  std::minstd_rand rnd_;
  testbed bed_;
  event_loop loop_;
  side a_, b_;
  memory_region<B, rw> ma_, mb_;
  std::vector<pair> pairs_ = std::vector<pair>(2);
  int finished_ = 0;
};
}  // namespace

TEST_CASE_TEMPLATE("random use of the coroutine layer: every coroutine finishes, every result is a listed one", S,
                   signal_all, signal_every<4>, signal_manual) {
  for (unsigned seed = 1; seed <= 10; ++seed) {
    CAPTURE(seed);
    random_run<S>(seed).run(4, 400);
  }
}
