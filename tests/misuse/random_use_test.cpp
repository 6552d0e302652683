// Random use of the public API on the mock: three RC pairs on two shared CQs, with
// posts (single, post lists, prepared WRs, on their own queue pair or another), receives,
// polls, waits, dispatch with per-QP handlers, reset and reconnect, destruction and
// re-creation in any order, under wire latency, device profiles and injected faults.
// A seed is one run. What must hold whatever the order: no completion is delivered
// twice, none carries a wr_id that was never posted, no CQ overflows, and every pair
// left healthy still carries a signaled WRITE each way. Under ASan+UBSan (CI) any read
// of freed memory fails the run too.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <vector>

using namespace rdmakit;
using namespace std::chrono_literals;
using B = backends::mock;

namespace {
constexpr auto rw = access::local_write | access::remote_write | access::remote_read;
// wr_ids of post lists and prepared WRs repeat (a list is posted again and again): tagged
// with this bit, they are left out of the "delivered once" check.
constexpr std::uint64_t reused_id = std::uint64_t{1} << 50;

// A post list or a prepared WR stays where it was made (its WRs point into it): made in
// place from a factory.
template <class T>
struct made_in_place {
  template <class F>
  explicit made_in_place(F make) : value(make()) {}
  T value;
};

template <class S>
class random_run {
 public:
  using rts_qp = queue_pair<B, rc, S, qp_state::rts>;
  using init_qp = queue_pair<B, rc, S, qp_state::init>;

  explicit random_run(unsigned seed) : rnd_(seed), fab_(config_(seed)), da_(fab_, "mock0"), db_(fab_, "mock1") {
    if (pick_(3) == 0)
      fab_.inject({.kind = static_cast<mock::fault_kind>(pick_(4)), .count = 0, .probability = 0.1, .delay = 20us});
  }

  void run(int steps) {
    for (auto& p : pairs_) make_(p);
    for (int step = 0; step < steps; ++step) {
      CAPTURE(step);
      one_step_();
      for (auto* d : {&da_, &db_})
        while (auto ev = d->next_event(0ms)) CHECK(ev->type != async_event_type::cq_err);
    }
    for (int i = 0; i < 100; ++i) {
      (void)ca_.wait(on_completion_, 0ms);
      (void)cb_.wait(on_completion_, 0ms);
    }
    check_pairs_still_work_();
  }

 private:
  struct pair {
    std::optional<rts_qp> a, b;
  };

  unsigned pick_(unsigned n) { return static_cast<unsigned>(rnd_() % n); }

  mock::fabric_config config_(unsigned seed) {
    mock::fabric_config cfg;
    cfg.seed = seed;
    if (pick_(2))
      cfg.profile = mock::device_profile::rxe;
    else if (pick_(2))
      cfg.reuse_qp_numbers = true;
    if (pick_(2)) cfg.latency = std::chrono::microseconds(pick_(5));
    return cfg;
  }

  void make_(pair& p) {
    qp_cap cap{.max_send_wr = 4 + pick_(12), .max_recv_wr = 1 + pick_(8)};
    if constexpr (requires { S::interval; }) cap.max_send_wr = std::max<std::uint32_t>(cap.max_send_wr, S::interval);
    try {
      auto qa = pa_.template create_qp<rc, S>(ca_, cap);
      auto qb = pb_.template create_qp<rc, S>(cb_, cap);
      const endpoint ea = qa.local_endpoint(), eb = qb.local_endpoint();
      p.a.emplace(std::move(qa).connect(eb));
      p.b.emplace(std::move(qb).connect(ea));
    } catch (const usage_error&) {
      // The CQs have no room for another pair's reservations: a documented refusal.
      p.a.reset();
      p.b.reset();
    }
  }

  // One of: post, receive, poll, dispatch, reset, destroy, a list or prepared WR, repair.
  void one_step_() {
    pair& p = pairs_[pick_(3)];
    const unsigned op = pick_(100);
    if (op < 30) {
      if (!p.a) return;
      const bool from_a = pick_(2);
      rts_qp& q = from_a ? *p.a : *p.b;
      auto& mine = from_a ? ma_ : mb_;
      auto& theirs = from_a ? mb_ : ma_;
      const send_flags fl = pick_(4) == 0 ? send_flags::signaled : send_flags::none;
      const std::uint32_t len = pick_(3) == 0 ? 0 : pick_(256);
      const std::uint64_t id = next_id_++;
      (void)(pick_(2) ? q.write(mine.local(pick_(1024), len), theirs.remote().sub(pick_(1024), 256), id, fl)
                     : q.send(mine.local(pick_(1024), len), id, fl));
    } else if (op < 50) {
      if (!p.a) return;
      const bool on_a = pick_(2);
      (void)(on_a ? *p.a : *p.b).post_recv((on_a ? ma_ : mb_).local(4096 + pick_(1024), 512), next_id_++);
    } else if (op < 70) {
      auto& c = pick_(2) ? ca_ : cb_;
      if (pick_(2))
        (void)c.poll(on_completion_);
      else
        (void)c.wait(on_completion_, 0ms);
    } else if (op < 78) {
      const bool on_a = pick_(2);
      auto& c = on_a ? ca_ : cb_;
      if (pick_(2) && p.a) c.on(on_a ? *p.a : *p.b, on_completion_);
      (void)c.dispatch(on_completion_);
    } else if (op < 84) {
      reset_and_reconnect_(p);
    } else if (op < 88) {
      // One side destroyed; then the other, as its peer is gone.
      (pick_(2) ? p.a : p.b).reset();
      p.a.reset();
      p.b.reset();
    } else if (op < 93) {
      reused_wrs_();
    } else if (op < 96) {
      // A pair destroyed is made again, one in ERR (RNR, a fault) reset and reconnected.
      if (!p.a)
        make_(p);
      else if (p.a->in_error() || p.b->in_error())
        reset_and_reconnect_(p);
    } else {
      (void)ca_.drain(on_completion_);
      (void)cb_.drain(on_completion_);
    }
  }

  void reset_and_reconnect_(pair& p) {
    if (!p.a) return;
    std::optional<init_qp> ia, ib;
    try {
      ia.emplace(std::move(*p.a).reset());
      ib.emplace(std::move(*p.b).reset());
      const endpoint ea = ia->local_endpoint(), eb = ib->local_endpoint();
      p.a.emplace(std::move(*ia).connect(eb));
      p.b.emplace(std::move(*ib).connect(ea));
    } catch (const std::exception&) {
      // Refused (CQ room, say): the handles are then empty or as they were (documented);
      // the pair is given up either way.
      p.a.reset();
      p.b.reset();
    }
  }

  // A post list and a prepared WR, posted on any A-side queue pair (sometimes a B-side
  // one, whose PD is not the regions').
  void reused_wrs_() {
    pair& t = pairs_[pick_(3)];
    if (!t.a) return;
    rts_qp& q = pick_(8) ? *t.a : *t.b;
    if (pick_(2)) {
      if (!list_ || pick_(10) == 0) {
        list_.emplace([] { return rts_qp::template make_batch<8>(); });
        if (pick_(2)) list_->value.reuse();
      }
      auto& list = list_->value;
      for (unsigned i = 0, k = pick_(4); i < k; ++i)
        (void)list.add(op::write{ma_.local(pick_(512), pick_(64)), mb_.remote().sub(pick_(512), 64)}, reused_id | pick_(1000),
                       pick_(6) == 0 ? send_flags::signaled : send_flags::none);
      if (pick_(6) == 0) list.clear();
      (void)q.post(list);
    } else if (!prepared_ || pick_(10) == 0) {
      const local_buffer src = ma_.local(pick_(512), 8 + pick_(64));
      prepared_.emplace([&] { return t.a->prepare(op::write{src, mb_.remote().sub(0, 128)}, reused_id | 7); });
    } else {
      (void)q.post(prepared_->value);
    }
  }

  void check_pairs_still_work_() {
    for (auto& p : pairs_) {
      if (!p.a || !p.b || p.a->in_error() || p.b->in_error()) continue;
      for (const bool from_a : {true, false}) {
        rts_qp& q = from_a ? *p.a : *p.b;
        auto& mine = from_a ? ma_ : mb_;
        auto& theirs = from_a ? mb_ : ma_;
        auto& c = from_a ? ca_ : cb_;
        const std::uint64_t id = next_id_++;
        auto post = [&] { return q.write(mine.local(0, 8), theirs.remote().sub(0, 8), id, send_flags::signaled); };
        post_result r = post();
        for (int i = 0; i < 1000 && r.status == post_status::sq_full; ++i) {
          (void)c.wait(on_completion_, 1ms);
          r = post();
        }
        if (q.in_error()) continue;  // a fault injected on its way took it down
        REQUIRE_MESSAGE(r.ok(), "the last post on a healthy queue pair: " << to_string(r.status));
        for (int i = 0; i < 2000 && !delivered_.count(id); ++i) (void)c.wait(on_completion_, 1ms);
        CHECK_MESSAGE((delivered_.count(id) || q.in_error()), "the last signaled WRITE never completed");
      }
    }
  }

  std::minstd_rand rnd_;
  mock::fabric fab_;
  device<B> da_, db_;
  protection_domain<B> pa_ = da_.create_pd(), pb_ = db_.create_pd();
  // Sometimes too small for all three pairs: a pair that does not fit is refused (usage_error).
  completion_queue<B> ca_ = da_.create_cq(32 + pick_(96)), cb_ = db_.create_cq(32 + pick_(96));
  memory_region<B, rw> ma_ = pa_.template allocate<rw>(1 << 14), mb_ = pb_.template allocate<rw>(1 << 14);
  std::vector<pair> pairs_ = std::vector<pair>(3);
  std::optional<made_in_place<decltype(rts_qp::template make_batch<8>())>> list_;
  std::optional<made_in_place<typename rts_qp::template prepared_type<>>> prepared_;
  std::uint64_t next_id_ = 1;
  std::set<std::uint64_t> delivered_;
  std::function<void(const completion<B>&)> on_completion_ = [this](const completion<B>& c) {
    if (c.wr_id() & reused_id) return;
    CHECK_MESSAGE(c.wr_id() < next_id_, "a completion with a wr_id never posted: " << c.wr_id());
    CHECK_MESSAGE(delivered_.insert(c.wr_id()).second, "wr_id " << c.wr_id() << " delivered twice");
  };
};
}  // namespace

TEST_CASE_TEMPLATE("random use: no completion twice or unposted, no CQ overflow, healthy pairs still work", S,
                   signal_all, signal_every<4>, signal_manual) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    random_run<S>(seed).run(3000);
  }
}
