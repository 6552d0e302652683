// The cost of the policy layer over hand-written verbs calls.
//
// One bandwidth loop, written by hand and on the policy layer: 64-byte RDMA WRITEs on
// RC, 32 posts per iteration, reaping only when the send queue has no free slot, as
// perftest's ib_write_bw does. Every signaling policy (signal_all, signal_every<16>,
// signal_manual) × polling policy (busy_poll, event_driven, adaptive) × posting (one WR
// per post_send, or the 32 chained in one post list).
//
// The hand-written loop (`raw`) is what a careful verbs programmer writes, as perftest
// does: it counts the SQ slots its WRs hold and never posts into a full SQ (a post
// into a full SQ fails with ENOMEM on a NIC), signals by its own counter (every WR;
// every 16th; or, for `manual`, only the WR that takes the last free slot, so the SQ
// can never fill with unsignaled WRs), checks post_send's return and every
// completion's status, and frees the slots a signaled completion covers (1, 16 or the
// SQ depth). It does not reserve a wr_id bit, route completions by QP or look at
// event channels: on these backends a reap always finds a completion, so the polling
// policies differ only in code that does not run, and one raw loop per signaling and
// posting serves as the reference for all three polling policies.
//
// Both loops are templates over the backend, so the same code runs on the mock (whose
// engine dominates the cost) and on bench/null_backend.hpp (whose post/poll do nearly
// nothing, so what remains is the layer's own cost).
//
// Modes:
//   overhead [Google Benchmark flags]       timed runs of every variant × backend
//   overhead --variant=V --backend=B --iters=N
//                                           exactly N iterations of one loop, no timing
//                                           machinery (for callgrind; see run_overhead.sh)
//   overhead --list                         the variant names
// Variant names: raw/<signaling>/<posting> and policy/<signaling>/<polling>/<posting>,
// signaling all|every16|manual, polling busy|event|adaptive, posting single|list.
#include "null_backend.hpp"

#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using namespace rdmakit;
using mock_backend = backends::mock;
using null_backend = rdmakit_bench::null_backend;

constexpr std::uint32_t sq_depth = 64;
constexpr std::uint32_t batch = 32;  // posts per iteration
constexpr std::uint32_t every = 16;  // signal_every<every>
constexpr std::uint32_t msg_bytes = 64;
constexpr int poll_batch = 16;
constexpr auto rw = access::local_write | access::remote_write | access::remote_read;

using signalings = std::tuple<signal_all, signal_every<every>, signal_manual>;
using pollings = std::tuple<busy_poll<poll_batch>, event_driven<poll_batch>, adaptive<1024, poll_batch>>;

template <class S>
constexpr std::string_view signaling_key = std::is_same_v<S, signal_all> ? "all" : std::is_same_v<S, signal_manual> ? "manual" : "every16";
template <class P>
constexpr std::string_view polling_key = P::name == "busy_poll" ? "busy" : P::name == "event_driven" ? "event" : "adaptive";
/// How a loop posts: one WR per post_send built each time (`single`), the 32 chained
/// and built each time (`list`), or built once and posted again and again with only
/// the flags whose signaling changes rewritten, as perftest posts: one WR
/// (`prepared`: the policy layer's queue_pair::prepare) or the list of 32
/// (`prepared_list`: a send_batch with reuse()).
enum class posting { single, list, prepared, prepared_list };
constexpr std::string_view posting_key(posting p) {
  switch (p) {
    case posting::single: return "single";
    case posting::list: return "list";
    case posting::prepared: return "prepared";
    case posting::prepared_list: return "prepared_list";
  }
  return "";
}

/// Two RC queue pairs connected to each other (a on the first device, b on the
/// second, or both on the only one), a 4 KiB source region and a 4 KiB target.
template <class B, class S, class P>
struct env {
  std::optional<mock::fabric> fab;
  device<B> dx, dy;
  protection_domain<B> pdx, pdy;
  completion_queue<B, P> cqx, cqy;
  memory_region<B, rw> src, dst;
  queue_pair<B, rc, S, qp_state::rts> a, b;

  env() {
    if constexpr (std::is_same_v<B, mock_backend>) {
      fab.emplace();  // the mock's devices come from this fabric, explicitly
      auto names = B::device_names(*fab);
      dx = device<B>(*fab, names.at(0));
      dy = device<B>(*fab, names.size() > 1 ? names[1] : names[0]);
    } else {
      auto names = B::device_names();
      dx = device<B>(names.at(0));
      dy = device<B>(names.size() > 1 ? names[1] : names[0]);
    }
    pdx = dx.create_pd();
    pdy = dy.create_pd();
    cqx = dx.template create_cq<P>(256);
    cqy = dy.template create_cq<P>(256);
    src = allocate<rw>(pdx, 4096);
    dst = allocate<rw>(pdy, 4096);
    const qp_cap caps{.max_send_wr = sq_depth, .max_recv_wr = 4};
    auto x = create_qp<rc, S>(pdx, cqx, caps);
    auto y = create_qp<rc, S>(pdy, cqy, caps);
    auto ex = x.local_endpoint();
    a = std::move(x).connect(y.local_endpoint());
    b = std::move(y).connect(ex);
  }
};

// ---- the hand-written loop ---------------------------------------------------------------

template <class B, class S, posting Post>
struct raw_loop {
  static constexpr bool List = Post == posting::list;
  typename B::qp qp;
  typename B::cq cq;
  std::uint64_t laddr;
  std::uint32_t lkey;
  std::uint64_t raddr;
  std::uint32_t rkey;
  // The SQ depth the device granted, read at setup as perftest reads its -t (tx_depth):
  // a runtime value, as it is for the policy layer.
  std::uint32_t depth;
  std::uint32_t held = 0;  // SQ slots held: posted WRs not covered by a polled completion
  std::uint32_t run = 0;   // every16: WRs since the last signaled one
  // wr_ids count posts in 32 bits (a ring slot, an index), in both loops: the layer's
  // test of the wr_id bit it keeps is then decided at compile time (see bench/README).
  std::uint32_t next_id = 0;
  std::uint64_t errors = 0;

  // The slots one signaled completion gives back (the WR and the unsignaled ones before it).
  std::uint32_t freed_per_completion() const noexcept {
    return std::is_same_v<S, signal_all> ? 1 : std::is_same_v<S, signal_manual> ? depth : every;
  }

  // posting::prepared: the one WR, built at construction (wr_id 0, as perftest's WRs
  // carry their QP's index); a post rewrites only its flags.
  typename B::sge prepared_sge;
  typename B::send_wr prepared_wr;
  // posting::prepared_list: the 32 WRs chained at construction (wr_ids 0..31), signaled
  // where the policy puts its signals when they never move (all: every WR; every16:
  // WRs 15 and 31, as 32 is a multiple of 16 and every list starts a run); manual's
  // last-slot WR moves with the credits, so a post rewrites the flags of the WR that
  // had it and of the one that takes it.
  typename B::sge list_sges[batch];
  typename B::send_wr list_wrs[batch];
  std::uint32_t list_signaled = batch;  // manual: the WR signaled last time (batch: none)
  static_assert(batch % every == 0, "the prepared list keeps its every16 signals in place");

  template <class P>
  explicit raw_loop(env<B, S, P>& e)
      : qp(e.a.native()), cq(e.cqx.native()), laddr(e.src.local().addr), lkey(e.src.lkey()),
        raddr(e.dst.remote().addr()), rkey(e.dst.remote().rkey()), depth(e.a.caps().max_send_wr) {
    B::set_sge(prepared_sge, laddr, msg_bytes, lkey);
    B::set_send(prepared_wr, 0, opcode::rdma_write, send_flags::none, &prepared_sge, 1);
    B::set_rdma(prepared_wr, raddr, rkey);
    for (std::uint32_t i = 0; i < batch; ++i) {
      B::set_sge(list_sges[i], laddr, msg_bytes, lkey);
      const bool sig = std::is_same_v<S, signal_all> || (!std::is_same_v<S, signal_manual> && i % every == every - 1);
      B::set_send(list_wrs[i], i, opcode::rdma_write, sig ? send_flags::signaled : send_flags::none, &list_sges[i], 1);
      B::set_rdma(list_wrs[i], raddr, rkey);
      if (i) B::set_next(list_wrs[i - 1], &list_wrs[i]);
    }
  }
  raw_loop(const raw_loop&) = delete;  // prepared_wr points at prepared_sge

  RDMAKIT_ALWAYS_INLINE bool signal_next(std::uint32_t in_flight) noexcept {
    if constexpr (std::is_same_v<S, signal_all>) {
      return true;
    } else if constexpr (std::is_same_v<S, signal_manual>) {
      return in_flight + 1 == depth;  // the WR taking the last free slot
    } else {
      if (++run != every) return false;
      run = 0;
      return true;
    }
  }

  RDMAKIT_ALWAYS_INLINE void build(typename B::send_wr& w, typename B::sge& s, std::uint32_t in_flight) noexcept {
    B::set_sge(s, laddr, msg_bytes, lkey);
    const bool sig = signal_next(in_flight);
    B::set_send(w, next_id++, opcode::rdma_write, sig ? send_flags::signaled : send_flags::none, &s, 1);
    B::set_rdma(w, raddr, rkey);
  }

  [[gnu::noinline]] void run_once() noexcept {
    if constexpr (Post == posting::prepared_list) {
      while (depth - held < batch)
        if (!reap()) return;
      if constexpr (std::is_same_v<S, signal_manual>) {
        const std::uint32_t last_slot = depth - 1 - held;  // the WR taking the last free slot
        const std::uint32_t now = last_slot < batch ? last_slot : batch;
        if (now != list_signaled) {
          if (list_signaled < batch) B::set_send_flags(list_wrs[list_signaled], send_flags::none);
          if (now < batch) B::set_send_flags(list_wrs[now], send_flags::signaled);
          list_signaled = now;
        }
      }
      typename B::send_wr* bad = nullptr;
      if (B::post_send(qp, list_wrs, &bad) != 0) {
        ++errors;
        return;
      }
      held += batch;
    } else if constexpr (Post == posting::prepared) {
      for (std::uint32_t i = 0; i < batch; ++i) {
        while (held == depth)
          if (!reap()) return;
        B::set_send_flags(prepared_wr, signal_next(held) ? send_flags::signaled : send_flags::none);
        typename B::send_wr* bad = nullptr;
        if (B::post_send(qp, &prepared_wr, &bad) != 0) {
          ++errors;
          return;
        }
        ++held;
      }
    } else if constexpr (List) {
      while (depth - held < batch)
        if (!reap()) return;
      typename B::sge s[batch];
      typename B::send_wr w[batch];
      for (std::uint32_t i = 0; i < batch; ++i) {
        build(w[i], s[i], held + i);
        if (i) B::set_next(w[i - 1], &w[i]);
      }
      typename B::send_wr* bad = nullptr;
      if (B::post_send(qp, w, &bad) != 0) {
        ++errors;
        return;
      }
      held += batch;
    } else {
      for (std::uint32_t i = 0; i < batch; ++i) {
        while (held == depth)
          if (!reap()) return;
        typename B::sge s;
        typename B::send_wr w;
        build(w, s, held);
        typename B::send_wr* bad = nullptr;
        if (B::post_send(qp, &w, &bad) != 0) {
          ++errors;
          return;
        }
        ++held;
      }
    }
  }

  // One poll; false on a failed poll or completion.
  RDMAKIT_ALWAYS_INLINE bool reap() noexcept {
    typename B::wc wcs[poll_batch];
    const int n = B::poll_cq(cq, poll_batch, wcs);
    if (n < 0) return ++errors, false;
    for (int k = 0; k < n; ++k)
      if (B::get_status(wcs[k]) != wc_status::success) return ++errors, false;
    held -= static_cast<std::uint32_t>(n) * freed_per_completion();
    return true;
  }
};

// ---- the policy-layer loop ----------------------------------------------------------------

template <class B, class S, class P, posting Post>
struct policy_loop {
  static constexpr bool List = Post == posting::list;
  queue_pair<B, rc, S, qp_state::rts> qp;  // owned, as raw_loop holds its handles by value
  completion_queue<B, P>& cq;
  local_buffer src;
  remote_region<access::remote_write | access::remote_read> dst;
  std::uint32_t next_id = 0;  // as the raw loop's
  std::uint64_t errors = 0;
  // The raw loop's WRs never go inline (its queue pair asks no inline data): this loop
  // says so with a constant flag, which takes the layer's inline test out at compile
  // time. Without it the layer decides per WR built (4 instructions a post).
  static constexpr send_flags flags = send_flags::no_auto_inline;
  // posting::prepared: built once, wr_id 0 as the raw loop's.
  typename queue_pair<B, rc, S, qp_state::rts>::template prepared_type<> prepared;
  // posting::prepared_list: 32 WRs added once (wr_ids 0..31) and posted again and again.
  decltype(decltype(qp)::template make_batch<batch>()) list;

  explicit policy_loop(env<B, S, P>& e)
      : qp(std::move(e.a)), cq(e.cqx), src(e.src.local(0, msg_bytes)), dst(e.dst.remote().sub(0, msg_bytes)),
        prepared(qp.prepare(op::write{src, dst}, 0, flags)), list(decltype(qp)::template make_batch<batch>()) {
    list.reuse();
    for (std::uint32_t i = 0; i < batch; ++i) (void)list.add(op::write{src, dst}, i, flags);
  }

  [[gnu::noinline]] void run_once() noexcept {
    if constexpr (Post == posting::prepared_list) {
      // As the raw loop: wait for the credits of a whole list, then post it.
      while (!qp.can_post(batch))
        if (!reap()) return;
      if (!qp.post(list).ok()) ++errors;
    } else if constexpr (Post == posting::prepared) {
      for (std::uint32_t i = 0; i < batch; ++i) {
        post_result r = qp.post(prepared);
        while (r.status == post_status::sq_full && reap()) r = qp.post(prepared);
        if (!r.ok()) return (void)++errors;
      }
    } else if constexpr (List) {
      // As the raw loop: wait for the credits of a whole list, then build and post it.
      while (!qp.can_post(batch))
        if (!reap()) return;
      auto list = decltype(qp)::template make_batch<batch>();
      for (std::uint32_t i = 0; i < batch; ++i) (void)list.add(op::write{src, dst}, next_id++, flags);
      if (!qp.post(list).ok()) ++errors;
    } else {
      for (std::uint32_t i = 0; i < batch; ++i) {
        const std::uint32_t id = next_id++;
        post_result r = qp.post(op::write{src, dst}, id, flags);
        while (r.status == post_status::sq_full && reap()) r = qp.post(op::write{src, dst}, id, flags);
        if (!r.ok()) return (void)++errors;
      }
    }
  }

  // One wait for the credits only (cq.wait() without a handler); false on a failed or
  // timed-out wait. The layer checks each completion's status itself: a failed one puts
  // the QP in ERR, so the next post returns qp_error and counts as an error here.
  RDMAKIT_ALWAYS_INLINE bool reap() noexcept {
    const auto r = cq.wait();
    if (r.failed() || r.timed_out()) return ++errors, false;
    return true;
  }
};

// ---- the variants -------------------------------------------------------------------------

// One loop on one backend: a driver run and a Google Benchmark function.
struct runner {
  std::uint64_t (*drive)(std::uint64_t iters);  // the failed posts and completions
  void (*measure)(benchmark::State&);
};

template <class B, class S, class P, class Loop>
struct run {
  // Exactly `iters` iterations, no timing machinery (callgrind).
  static std::uint64_t drive(std::uint64_t iters) {
    env<B, S, P> e;
    Loop loop(e);
    for (std::uint64_t i = 0; i < iters; ++i) loop.run_once();
    return loop.errors;
  }
  static void measure(benchmark::State& state) {
    env<B, S, P> e;
    Loop loop(e);
    for (auto _ : state) loop.run_once();
    if (loop.errors) state.SkipWithError("a post or a completion failed");
    const auto posts = static_cast<double>(state.iterations()) * batch;
    state.SetItemsProcessed(static_cast<std::int64_t>(posts));
    state.counters["ns/post"] = benchmark::Counter(posts, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  }
  static constexpr runner get{&drive, &measure};
};

struct variant {
  std::string name;       // raw/<signaling>/<posting> or policy/<signaling>/<polling>/<posting>
  std::string reference;  // the raw variant a policy variant is compared with ("" for raw)
  runner null, mock;
};

template <class S, posting List>
void add_raw(std::vector<variant>& out) {
  using P = busy_poll<poll_batch>;  // the raw loop polls by hand; the CQ's policy is unused
  out.push_back({"raw/" + std::string(signaling_key<S>) + "/" + std::string(posting_key(List)), "",
                 run<null_backend, S, P, raw_loop<null_backend, S, List>>::get,
                 run<mock_backend, S, P, raw_loop<mock_backend, S, List>>::get});
}

template <class S, class P, posting List>
void add_policy(std::vector<variant>& out) {
  const std::string sig(signaling_key<S>), post(posting_key(List));
  out.push_back({"policy/" + sig + "/" + std::string(polling_key<P>) + "/" + post, "raw/" + sig + "/" + post,
                 run<null_backend, S, P, policy_loop<null_backend, S, P, List>>::get,
                 run<mock_backend, S, P, policy_loop<mock_backend, S, P, List>>::get});
}

const std::vector<variant>& variants() {
  static const std::vector<variant> all = [] {
    std::vector<variant> v;
    std::apply([&](auto... s) {
      (([&]<class S>(S) {
         add_raw<S, posting::single>(v);
         add_raw<S, posting::list>(v);
         add_raw<S, posting::prepared>(v);
         add_raw<S, posting::prepared_list>(v);
         std::apply([&](auto... p) {
           (([&]<class P>(P) {
              add_policy<S, P, posting::single>(v);
              add_policy<S, P, posting::list>(v);
              add_policy<S, P, posting::prepared>(v);
              add_policy<S, P, posting::prepared_list>(v);
            }(p)), ...);
         }, pollings{});
       }(s)), ...);
    }, signalings{});
    return v;
  }();
  return all;
}

bool take(std::string_view arg, std::string_view key, std::string_view& out) {
  if (arg.substr(0, key.size()) != key) return false;
  out = arg.substr(key.size());
  return true;
}

// `name` one variant, or "all" (each in turn: the smoke test).
int drive_main(std::string_view name, std::string_view backend, std::uint64_t iters) {
  if (backend != "null" && backend != "mock") {
    std::fprintf(stderr, "unknown backend '%.*s' (null, mock)\n", static_cast<int>(backend.size()), backend.data());
    return 2;
  }
  int found = 0, failed = 0;
  for (const auto& v : variants()) {
    if (v.name != name && name != "all") continue;
    ++found;
    const std::uint64_t errors = (backend == "null" ? v.null : v.mock).drive(iters);
    std::printf("%s %.*s iters=%llu posts=%llu errors=%llu\n", v.name.c_str(), static_cast<int>(backend.size()),
                backend.data(), static_cast<unsigned long long>(iters), static_cast<unsigned long long>(iters * batch),
                static_cast<unsigned long long>(errors));
    failed += errors != 0;
  }
  if (found == 0) {
    std::fprintf(stderr, "unknown variant '%.*s' (overhead --list names them)\n", static_cast<int>(name.size()),
                 name.data());
    return 2;
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string_view name, backend = "null", iters_s;
  bool driver = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--list") {
      for (const auto& v : variants()) std::printf("%s %s\n", v.name.c_str(), v.reference.c_str());
      return 0;
    }
    const bool v = take(a, "--variant=", name);
    const bool b = take(a, "--backend=", backend);
    const bool n = take(a, "--iters=", iters_s);
    driver = driver || v || b || n;
  }
  if (driver) {
    if (name.empty() || iters_s.empty()) {
      std::fprintf(stderr, "usage: %s --variant=NAME|all --backend=null|mock --iters=N (--list: the names)\n", argv[0]);
      return 2;
    }
    return drive_main(name, backend, std::strtoull(std::string(iters_s).c_str(), nullptr, 10));
  }
  for (const auto& v : variants()) {
    benchmark::RegisterBenchmark(("overhead/null/" + v.name).c_str(), v.null.measure);
    benchmark::RegisterBenchmark(("overhead/mock/" + v.name).c_str(), v.mock.measure);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
