#include "fixture.hpp"

#include <map>
#include <random>
#include <set>
#include <tuple>

using namespace policy_test;

// ---- the ledger alone, against a model of the strict slot rule ----------------------

namespace {
// A model HCA send queue: WRs complete at once; an unsignaled WR's slot is freed only
// when a later signaled WR's completion is polled.
struct strict_sq {
  std::uint32_t depth;
  std::vector<bool> held;  // signaled flag of each WR holding a slot, oldest first
  std::vector<std::size_t> cqes;  // index (in `held`) of signaled WRs not polled yet
  bool post(bool signaled) {
    if (held.size() >= depth) return false;  // ENOMEM
    held.push_back(signaled);
    if (signaled) cqes.push_back(held.size() - 1);
    return true;
  }
  bool poll() {
    if (cqes.empty()) return false;
    std::size_t upto = cqes.front();
    cqes.erase(cqes.begin());
    held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(upto + 1));
    for (auto& c : cqes) c -= upto + 1;
    return true;
  }
};

// A policy of the unsignaled run (signal(wanted, run)): the ledger keeps the run for it.
struct signal_every_third_run {
  static constexpr std::string_view name = "every_third_run";
  static constexpr std::uint32_t min_sq_depth = 3;
  static constexpr bool signal(bool wanted, std::uint32_t run) noexcept { return wanted || run >= 2; }
};

// A policy of positions that is not signal_every (audit 29, F2): the first WR of every
// four, with an `interval` of its own. Its lists must follow its signal_at too, not
// signal_every<4>'s multiples of four (mixed with single posts, they left the send queue
// full of unsignaled WRs, and under bounded_run nothing signals the last slot).
struct first_of_four {
  static constexpr std::string_view name = "first_of_four";
  static constexpr std::uint32_t min_sq_depth = 4;
  static constexpr std::uint32_t interval = 4;
  static constexpr bool signal_at(bool wanted, std::uint64_t position) noexcept { return wanted || position % 4 == 1; }
  static constexpr bool bounded_run = true;
};

template <class S>
void model_run(std::uint32_t depth, unsigned seed) {
  detail::sq_credits credits = detail::sq_credits::for_policy<S>(depth);
  strict_sq hca{depth, {}, {}};
  std::mt19937 rng(seed);
  for (int step = 0; step < 20000; ++step) {
    if (credits.available() == 0) {
      // Full: a signaled WR is among those held, so a poll can always make room.
      REQUIRE(!hca.cqes.empty());
    }
    if (rng() % 3 != 0 && credits.available() != 0) {
      bool sig = credits.must_signal<S>(rng() % 5 == 0);
      REQUIRE(hca.post(sig));  // never ENOMEM
      credits.commit<S>(sig);
    } else if (rng() % 4 == 0 && credits.available() != 0) {
      // A post list, planned then applied as queue_pair::post(batch) does.
      const auto n = 1 + rng() % credits.available();
      auto plan = credits.start();
      bool unasked = false;
      if constexpr (detail::plans_unasked<S>) unasked = rng() % 2;
      if (unasked) {  // no WR asked for a signal: the policy's own positions only
        std::vector<bool> sig(n);
        if constexpr (detail::plans_unasked<S>)
          detail::sq_credits::plan_unasked<S>(plan, n, [&](std::uint32_t i) { sig[i] = true; });
        for (std::uint32_t i = 0; i < n; ++i) REQUIRE(hca.post(sig[i]));
      } else {
        for (std::uint32_t i = 0; i < n; ++i) REQUIRE(hca.post(plan.template next<S>(rng() % 5 == 0)));
      }
      credits.template apply<S>(plan);
    } else if (rng() % 5 == 0 && credits.available() != 0) {
      // A post the device refuses: committed, then taken back (queue_pair's post path).
      const auto held = credits.held(), run = credits.unsignaled_run(), pending = credits.pending_signaled();
      const bool next = credits.must_signal<S>(false);
      credits.commit<S>(credits.must_signal<S>(rng() % 2 == 0));
      credits.uncommit<S>();
      REQUIRE(credits.held() == held);
      REQUIRE(credits.unsignaled_run() == run);
      REQUIRE(credits.pending_signaled() == pending);
      REQUIRE(credits.must_signal<S>(false) == next);
    } else if (rng() % 2 == 0) {
      // A batch of completions at once, as a poll of several returns them.
      std::uint32_t k = 0;
      for (const auto want = 1 + rng() % 4; k < want && hca.poll();) ++k;
      // Now and then one more than the model had (a spurious one), only when none is left.
      const std::uint32_t spurious = hca.cqes.empty() && rng() % 8 == 0 ? 1 : 0;
      if (k + spurious != 0) credits.on_signaled_completions(k + spurious);
    } else if (hca.poll()) {
      credits.on_signaled_completion();
    }
    REQUIRE(credits.held() == hca.held.size());
    REQUIRE(credits.pending_signaled() == hca.cqes.size());
    REQUIRE(credits.template completion_due<S>() == !hca.cqes.empty());  // the refused list's inline test
    if constexpr (detail::bounded_run<S>) {
      // queue_pair's one compare for a list refused under such a policy: one of up to
      // depth - (min_sq_depth - 1) WRs refused for credits finds a completion due.
      const std::uint32_t longest = depth - (S::min_sq_depth - 1);
      if (!credits.admits(longest)) REQUIRE(!hca.cqes.empty());
    }
    std::uint32_t run = 0;  // the model's unsignaled WRs after the last signaled one
    for (auto it = hca.held.rbegin(); it != hca.held.rend() && !*it; ++it) ++run;
    REQUIRE(credits.unsignaled_run() == run);
    if constexpr (requires { S::interval; }) REQUIRE(credits.unsignaled_run() < S::interval);
  }
}
}  // namespace

TEST_CASE("sq_credits matches a strict HCA model and never overflows it") {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    model_run<signal_all>(4, seed);
    model_run<signal_every<1>>(5, seed);
    model_run<signal_every<3>>(8, seed);
    model_run<signal_every<8>>(8, seed);
    model_run<signal_every<2>>(3, seed);   // N a power of two: its own signals are not recorded
    model_run<signal_every<4>>(6, seed);
    model_run<signal_every<16>>(20, seed);
    model_run<signal_every<5>>(7, seed);  // depth not a multiple of N
    model_run<signal_manual>(6, seed);
    model_run<signal_manual>(1, seed);
    model_run<signal_every_third_run>(6, seed);  // a policy of the run since the last signal
    model_run<first_of_four>(8, seed);           // a policy of positions with an interval, not signal_every
  }
}

TEST_CASE("signal_every<N> signals the N-th WR only: a full SQ always holds a signaled one") {
  auto c = detail::sq_credits::for_policy<signal_every<4>>(6);
  std::vector<bool> sig;
  for (int i = 0; i < 6; ++i) {
    bool s = c.must_signal<signal_every<4>>(false);
    c.commit<signal_every<4>>(s);
    sig.push_back(s);
  }
  // No last-slot signal: at most 3 WRs in a row go unsignaled and the SQ holds 6.
  CHECK(sig == std::vector<bool>{false, false, false, true, false, false});
  CHECK(c.available() == 0);
  c.on_signaled_completion();
  CHECK(c.available() == 4);
  c.on_signaled_completion();  // a spurious one changes nothing
  CHECK(c.available() == 4);
  for (int i = 0; i < 2; ++i) c.commit<signal_every<4>>(c.must_signal<signal_every<4>>(false));
  CHECK(c.unsignaled_run() == 0);  // the 8th WR was signaled
  c.on_signaled_completion();
  CHECK(c.available() == 6);
}

TEST_CASE("signal_all keeps no run: each completion frees one slot, a spurious one none") {
  auto c = detail::sq_credits::for_policy<signal_all>(3);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(c.must_signal<signal_all>(false));
    c.commit<signal_all>(true);
  }
  CHECK(c.available() == 0);
  CHECK(c.pending_signaled() == 3);
  c.on_signaled_completion();
  CHECK(c.available() == 1);
  c.on_signaled_completion();
  c.on_signaled_completion();
  c.on_signaled_completion();  // spurious
  CHECK(c.available() == 3);
  CHECK(c.pending_signaled() == 0);
}

TEST_CASE("a batch of completions frees what the same completions one by one would") {
  SUBCASE("signal_all: k slots, spurious ones none") {
    auto c = detail::sq_credits::for_policy<signal_all>(4);
    for (int i = 0; i < 3; ++i) c.commit<signal_all>(true);
    c.on_signaled_completions(2);
    CHECK(c.available() == 3);
    c.on_signaled_completions(5);  // one real, four spurious
    CHECK(c.available() == 4);
  }
  SUBCASE("signal_every<2>: each completion its run, oldest first") {
    auto c = detail::sq_credits::for_policy<signal_every<2>>(8);
    auto one = detail::sq_credits::for_policy<signal_every<2>>(8);
    for (int i = 0; i < 7; ++i) {
      const bool sig = c.must_signal<signal_every<2>>(false);
      c.commit<signal_every<2>>(sig);
      one.commit<signal_every<2>>(one.must_signal<signal_every<2>>(false));
    }
    REQUIRE(c.pending_signaled() == 3);
    c.on_signaled_completions(2);
    one.on_signaled_completion();
    one.on_signaled_completion();
    CHECK(c.available() == one.available());
    CHECK(c.available() == 5);
    c.on_signaled_completions(3);  // one real, two spurious
    CHECK(c.available() == 7);     // the unsignaled 7th WR still holds its slot
    CHECK(c.pending_signaled() == 0);
  }
}

TEST_CASE("signal_manual honours the caller and still closes the queue") {
  auto c = detail::sq_credits::for_policy<signal_manual>(3);
  CHECK_FALSE(c.must_signal<signal_manual>(false));
  c.commit<signal_manual>(false);
  CHECK(c.must_signal<signal_manual>(true));
  c.commit<signal_manual>(true);
  CHECK(c.must_signal<signal_manual>(false));  // last slot
  CHECK(signal_all::signal(false, 0));
  CHECK_FALSE(signal_every<16>::signal_at(false, 15));
  CHECK(signal_every<16>::signal_at(false, 16));
  CHECK(signal_every<16>::signal_at(false, 32));
  CHECK(signal_every<16>::signal_at(true, 1));
  CHECK_FALSE(signal_every<3>::signal_at(false, 4));
  CHECK(signal_every<3>::signal_at(false, 6));
  CHECK_FALSE(signal_manual::signal(false, 1000));
  CHECK(signal_every<16>::min_sq_depth == 16);
  static_assert(signaling<signal_all> && signaling<signal_every<2>> && signaling<signal_manual>);
}

TEST_CASE("signal keys name N, the position modulo N and the list's end, and nothing else") {
  // Two keys are equal exactly when the three are (send_batch keeps a list's flags by its
  // key), and none is send_batch's own: no_signal_key (all ones) or signal_manual's last
  // slot key (bit 63 and the end).
  struct named {
    std::uint64_t n, r, end;
    bool operator==(const named&) const = default;
  };
  std::vector<std::pair<std::uint64_t, named>> keys;
  auto add_keys = [&]<std::uint32_t N>(signal_every<N>) {
    for (std::uint64_t end : {std::uint64_t{8}, std::uint64_t{112}, std::uint64_t{152 * 64}, std::uint64_t{0xfffffff8}})
      for (std::uint64_t posted = 0; posted < 2 * N + 3; ++posted)
        for (std::uint64_t high : {std::uint64_t{0}, std::uint64_t{N} << 40})
          keys.push_back({detail::sq_credits::signal_key<signal_every<N>>(posted + high, end), named{N, posted % N, end}});
  };
  add_keys(signal_every<2>{}), add_keys(signal_every<3>{}), add_keys(signal_every<4>{}), add_keys(signal_every<5>{});
  add_keys(signal_every<8>{}), add_keys(signal_every<16>{}), add_keys(signal_every<64>{});
  add_keys(signal_every<128>{}), add_keys(signal_every<256>{}), add_keys(signal_every<1000>{});
  std::map<std::uint64_t, named> by_key;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, std::uint64_t> by_name;
  std::size_t collisions = 0, theirs = 0;
  for (const auto& [k, w] : keys) {
    if (auto [at, fresh] = by_key.emplace(k, w); !fresh && !(at->second == w)) ++collisions;  // two names, one key
    if (auto [at, fresh] = by_name.emplace(std::tuple{w.n, w.r, w.end}, k); !fresh && at->second != k) ++collisions;
    if (k == ~std::uint64_t{0} || (k >> 63 == 1 && (k & 7) == 0 && ((k >> 32) & 0x7fffffff) == 0)) ++theirs;
  }
  CHECK(collisions == 0);
  CHECK(theirs == 0);
  // The same N, position modulo N and end, whatever else the position holds: one key.
  CHECK(detail::sq_credits::signal_key<signal_every<16>>(5, 112) ==
        detail::sq_credits::signal_key<signal_every<16>>(5 + (16ull << 30), 112));
}

// ---- the same promise against the strict mock, through the queue pair -----------------

TEST_CASE("the strict mock really refuses an SQ full of unsignaled WRs (control)") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto mr = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  int err = 0;
  for (int i = 0; i < 5 && err == 0; ++i) {
    B::sge s;
    B::set_sge(s, reinterpret_cast<std::uint64_t>(mr.data()), 8, mr.lkey());
    B::send_wr w;
    B::set_send(w, static_cast<std::uint64_t>(i), opcode::rdma_write, send_flags::none, &s, 1);
    B::set_rdma(w, dst.remote().addr(), dst.remote().rkey());
    B::send_wr* bad = nullptr;
    err = B::post_send(p.a.native(), &w, &bad);
  }
  CHECK(err == ENOMEM);
}

namespace {
template <class T_, class S_>
struct combo {
  using T = T_;
  using S = S_;
};

template <class T, class S>
void property_run(unsigned seed, mock::slot_release slots = mock::slot_release::on_signaled_poll,
                  std::chrono::nanoseconds latency = std::chrono::nanoseconds{0}) {
  mock::fabric_config cfg;
  cfg.slots = slots;
  cfg.latency = latency;
  cfg.seed = seed;
  mock::fabric fab(cfg);
  side x(fab, "mock0", 64), y(fab, "mock1", 64);
  constexpr std::uint32_t depth = 8;
  auto p = make_pair<T, S>(x.pd, x.cq, y.pd, y.cq, qp_cap{depth, 8});
  auto src = x.pd.allocate<rw_access>(4096);
  auto dst = y.pd.allocate<rw_access>(4096);
  auto ah = x.pd.create_ah(p.b.local_endpoint());

  auto post_one = [&](std::uint64_t id, send_flags f) {
    if constexpr (T::needs_ah)
      return p.a.send(ah.to(p.b.qp_num()), src.local(0, 16), id, f);
    else
      return p.a.write(src.local(0, 16), dst.remote(), id, f);
  };
  auto add_one = [&](auto& batch, std::uint64_t id, send_flags f) {
    if constexpr (T::needs_ah)
      return batch.send(ah.to(p.b.qp_num()), src.local(0, 16), id, f);
    else
      return batch.write(src.local(0, 16), dst.remote(), id, f);
  };

  std::mt19937 rng(seed);
  std::uint64_t next_id = 1;
  std::uint64_t last_seen = 0;
  std::set<std::uint64_t> wanted;  // WRs posted with send_flags::signaled
  std::size_t posted = 0, completions = 0, refusals = 0;
  auto poll = [&] {
    return x.cq.poll([&](const completion<B>& c) {
      REQUIRE(c.status() == wc_status::success);
      REQUIRE(c.is_send());
      REQUIRE(c.wr_id() > last_seen);  // SQ order, each WR at most once
      REQUIRE(c.wr_id() < next_id);
      last_seen = c.wr_id();
      wanted.erase(c.wr_id());
      ++completions;
    });
  };

  for (int step = 0; step < 3000; ++step) {
    const unsigned r = rng() % 10;
    if (r < 6) {
      const std::uint32_t k = 1 + rng() % 3;
      const std::uint32_t before = p.a.send_credits();
      post_result res;
      std::vector<std::uint64_t> ids;
      std::vector<bool> want;
      for (std::uint32_t i = 0; i < k; ++i) {
        ids.push_back(next_id + i);
        want.push_back(rng() % 6 == 0);
      }
      if (k == 1) {
        res = post_one(ids[0], want[0] ? send_flags::signaled : send_flags::none);
      } else {
        auto b = p.a.template make_batch<3>();
        for (std::uint32_t i = 0; i < k; ++i)
          REQUIRE(add_one(b, ids[i], want[i] ? send_flags::signaled : send_flags::none));
        res = p.a.post(b);
      }
      // Refused only for lack of credits, never by the device; no_completion_due when the
      // slots are held by unsignaled WRs alone (a list: a single WR takes the last slot signaled).
      if (res.status == post_status::sq_full || res.status == post_status::no_completion_due) {
        REQUIRE(before < k);
        if (res.status == post_status::no_completion_due) REQUIRE(k > 1);
        ++refusals;
        continue;
      }
      INFO(res.message());
      REQUIRE(res.ok());
      REQUIRE(res.posted == k);
      for (std::uint32_t i = 0; i < k; ++i)
        if (want[i]) wanted.insert(ids[i]);
      next_id += k;
      posted += k;
    } else {
      REQUIRE(poll() >= 0);
    }
    REQUIRE(p.a.send_credits() <= depth);
    if constexpr (requires { S::interval; }) REQUIRE(p.a.unsignaled_run() < S::interval);
  }
  // Close the last run with a signaled WR, then every slot must come back.
  for (int i = 0; i < 1000 && p.a.send_credits() == 0; ++i) (void)poll();
  REQUIRE(post_one(next_id++, send_flags::signaled).ok());
  for (int i = 0; i < 1000 && p.a.send_credits() < depth; ++i) (void)poll();
  CHECK(p.a.send_credits() == depth);
  CHECK(wanted.empty());  // every WR we asked to signal completed
  CHECK(last_seen == next_id - 1);
  CHECK(posted > 1000);
  if constexpr (std::is_same_v<S, signal_all>) CHECK(completions == posted + 1);
  async_event ev;
  CHECK(B::get_async_event(x.dev.native(), std::chrono::milliseconds{0}, ev) != 0);  // no CQ_ERR
  (void)refusals;
}
}  // namespace

TEST_CASE_TEMPLATE("random post/poll interleavings never see ENOMEM or a lost completion", C,
                   combo<rc, signal_all>, combo<rc, signal_every<3>>, combo<rc, signal_every<8>>,
                   combo<rc, signal_manual>, combo<uc, signal_all>, combo<uc, signal_every<5>>,
                   combo<uc, signal_manual>, combo<ud, signal_all>, combo<ud, signal_every<4>>,
                   combo<ud, signal_manual>) {
  for (unsigned seed = 1; seed <= 3; ++seed) property_run<typename C::T, typename C::S>(seed);
  // With wire latency WRs are in flight when the SQ fills, not only held by the slot rule.
  for (unsigned seed = 4; seed <= 5; ++seed)
    property_run<typename C::T, typename C::S>(seed, mock::slot_release::on_signaled_poll,
                                               std::chrono::microseconds{2});
}

TEST_CASE("the ledger is also safe when slots come back early (rxe's rule)") {
  property_run<rc, signal_every<3>>(7, mock::slot_release::on_completion);
}

TEST_CASE("signal_every<N> larger than max_send_wr is refused at creation") {
  mock::fabric fab;
  side x(fab, "mock0");
  auto make = [&] { return x.pd.create_qp<rc, signal_every<64>>(x.cq, qp_cap{32, 32}); };
  CHECK_THROWS_AS(make(), usage_error);
  try {
    make();
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("max_send_wr is 32") != std::string::npos);
  }
  CHECK_NOTHROW(x.pd.create_qp<rc, signal_every<32>>(x.cq, qp_cap{32, 32}));
}

namespace {
// A policy of the user's own: every other WR is signaled. The
// ledger (shared by all policies) still signals the WR taking the last free slot.
struct signal_every_other {
  static constexpr std::string_view name = "signal_every_other";
  static constexpr std::uint32_t min_sq_depth = 2;
  static constexpr bool signal(bool wanted, std::uint32_t run) noexcept { return wanted || run >= 1; }
};
static_assert(signaling<signal_every_other>);
}  // namespace

TEST_CASE("a policy of positions with an interval of its own signals its post lists by its signal_at") {
  // Audit 29, F2: lists took signal_every<4>'s multiples of four for first_of_four's
  // positions 1, 5, 9...: a list at position 5 went unsignaled, the send queue filled with
  // unsignaled WRs and every later post was sq_full for ever (bounded_run: no last-slot rule).
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc, first_of_four>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 1});
  for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(p.a.write(mr.local(0, 8), dst.remote().sub(0, 8), i).ok());
  CHECK(collect(x.cq, 1).size() == 1);  // position 1's
  auto list = p.a.make_batch<4>();
  REQUIRE(list.add(op::write{mr.local(0, 8), dst.remote().sub(0, 8)}, 5));
  REQUIRE(p.a.post(list).ok());       // position 5: signaled
  CHECK(collect(x.cq, 1).size() == 1);  // its completion frees positions 2 to 5
  CHECK(p.a.send_credits() == 4);
  CHECK(p.a.unsignaled_run() == 0);
}

TEST_CASE("a signaling policy defined outside the library decides through the shared ledger") {
  auto c = detail::sq_credits::for_policy<signal_every_other>(4);
  CHECK_FALSE(c.must_signal<signal_every_other>(false));
  c.commit<signal_every_other>(false);
  CHECK(c.must_signal<signal_every_other>(false));
  c.commit<signal_every_other>(true);
  CHECK_FALSE(c.must_signal<signal_every_other>(false));
  c.commit<signal_every_other>(false);
  CHECK(c.must_signal<signal_every_other>(false));  // run 1, and the last free slot
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mr = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  auto p = make_pair<rc, signal_every_other>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(p.a.write(mr.local(0, 8), dst.remote(), i).ok());
  CHECK(collect(x.cq, 3).size() == 3);  // WRs 1, 3 and 5
  CHECK(p.a.send_credits() == 8);
  // Too shallow a send queue: the refusal speaks of this policy, not of signal_every.
  auto too_shallow = [&] { return x.pd.create_qp<rc, signal_every_other>(x.cq, qp_cap{1, 1}); };
  CHECK_THROWS_WITH_AS((void)too_shallow(),
                       doctest::Contains("the signaling policy signal_every_other needs min_sq_depth = 2"),
                       usage_error);
}
