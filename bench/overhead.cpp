// The cost of the policy layer over hand-written verbs calls.
//
// One loop, written twice: 64-byte RDMA WRITEs on RC, one WR per post_send, every 16th
// signaled, a batch of 32 posts per iteration, then busy-poll until every signaled WR of
// the batch has completed. `raw` builds the native WRs with B::set_* and keeps its own
// selective-signaling counter, as a verbs program would; `policy` posts with
// queue_pair::write (signal_every<16>) and reaps with completion_queue::wait
// (busy_poll<16>). Two more pairs show other spellings: `policy_poll` reaps with
// completion_queue::poll instead of wait; `raw_list` / `policy_batch` post the 32 WRs as
// one chained list (one doorbell) instead of one by one.
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

namespace {

using namespace rdmakit;
using mock_backend = backends::mock;
using null_backend = rdmakit_bench::null_backend;

constexpr std::uint32_t sq_depth = 64;
constexpr std::uint32_t batch = 32;       // posts per iteration
constexpr std::uint32_t every = 16;       // one signaled WR per `every`
constexpr std::uint32_t msg_bytes = 64;
constexpr int poll_batch = 16;
using sig_policy = signal_every<every>;
using poll_policy = busy_poll<poll_batch>;
constexpr auto rw = access::local_write | access::remote_write | access::remote_read;

/// Two RC queue pairs connected to each other (a on the first device, b on the
/// second, or both on the only one), a 4 KiB source region and a 4 KiB target.
template <class B>
struct env {
  std::optional<mock::fabric> fab;
  device<B> dx, dy;
  protection_domain<B> pdx, pdy;
  completion_queue<B, poll_policy> cqx, cqy;
  memory_region<B, rw> src, dst;
  queue_pair<B, rc, sig_policy, qp_state::rts> a, b;

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
    cqx = dx.template create_cq<poll_policy>(256);
    cqy = dy.template create_cq<poll_policy>(256);
    src = pdx.template allocate<rw>(4096);
    dst = pdy.template allocate<rw>(4096);
    const qp_cap caps{sq_depth, 4};
    auto x = pdx.template create_qp<rc, sig_policy>(cqx, caps);
    auto y = pdy.template create_qp<rc, sig_policy>(cqy, caps);
    auto ex = x.local_endpoint();
    a = std::move(x).connect(y.local_endpoint());
    b = std::move(y).connect(ex);
  }
};

// ---- the hand-written loops ------------------------------------------------------------

template <class B>
struct raw_loop {
  static constexpr const char* name = "raw";
  typename B::qp qp;
  typename B::cq cq;
  std::uint64_t laddr;
  std::uint32_t lkey;
  std::uint64_t raddr;
  std::uint32_t rkey;
  std::uint32_t unsignaled = 0;   // WRs since the last signaled one
  std::uint32_t outstanding = 0;  // signaled WRs not polled yet
  std::uint64_t next_id = 0;
  std::uint64_t errors = 0;

  explicit raw_loop(env<B>& e)
      : qp(e.a.native()), cq(e.cqx.native()), laddr(e.src.local().addr), lkey(e.src.lkey()),
        raddr(e.dst.remote().addr()), rkey(e.dst.remote().rkey()) {}

  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i) {
      typename B::sge s;
      B::set_sge(s, laddr, msg_bytes, lkey);
      const bool sig = ++unsignaled == every;
      if (sig) unsignaled = 0;
      typename B::send_wr w;
      B::set_send(w, next_id++, opcode::rdma_write, sig ? send_flags::signaled : send_flags::none, &s, 1);
      B::set_rdma(w, raddr, rkey);
      typename B::send_wr* bad = nullptr;
      if (B::post_send(qp, &w, &bad) != 0) {
        ++errors;
        continue;
      }
      outstanding += sig;
    }
    reap();
  }

  RDMAKIT_ALWAYS_INLINE void reap() noexcept {
    typename B::wc wcs[poll_batch];
    while (outstanding != 0) {
      int n = B::poll_cq(cq, poll_batch, wcs);
      if (n < 0) {
        ++errors;
        return;
      }
      for (int k = 0; k < n; ++k)
        if (B::get_status(wcs[k]) != wc_status::success) ++errors;
      outstanding -= static_cast<std::uint32_t>(n);
    }
  }
};

/// The same, with the batch posted as one chained list (one post_send call).
template <class B>
struct raw_list_loop : raw_loop<B> {
  static constexpr const char* name = "raw_list";
  using raw_loop<B>::raw_loop;

  [[gnu::noinline]] void run_once() noexcept {
    typename B::sge s[batch];
    typename B::send_wr w[batch];
    std::uint32_t sigs = 0;
    for (std::uint32_t i = 0; i < batch; ++i) {
      B::set_sge(s[i], this->laddr, msg_bytes, this->lkey);
      const bool sig = ++this->unsignaled == every;
      if (sig) this->unsignaled = 0;
      sigs += sig;
      B::set_send(w[i], this->next_id++, opcode::rdma_write, sig ? send_flags::signaled : send_flags::none,
                  &s[i], 1);
      B::set_rdma(w[i], this->raddr, this->rkey);
      if (i) B::set_next(w[i - 1], &w[i]);
    }
    typename B::send_wr* bad = nullptr;
    if (B::post_send(this->qp, w, &bad) != 0)
      ++this->errors;
    else
      this->outstanding += sigs;
    this->reap();
  }
};

// ---- the policy-layer loops -------------------------------------------------------------

template <class B>
struct policy_loop {
  static constexpr const char* name = "policy";
  queue_pair<B, rc, sig_policy, qp_state::rts> qp;  // owned, as raw_loop holds its handles by value
  completion_queue<B, poll_policy>& cq;
  local_buffer src;
  remote_region<access::remote_write | access::remote_read> dst;
  std::uint64_t next_id = 0;
  std::uint64_t errors = 0;

  explicit policy_loop(env<B>& e)
      : qp(std::move(e.a)), cq(e.cqx), src(e.src.local(0, msg_bytes)), dst(e.dst.remote().sub(0, msg_bytes)) {}

  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i)
      if (!qp.write(src, dst, next_id++).ok()) ++errors;
    reap();
  }

  RDMAKIT_ALWAYS_INLINE void reap() noexcept {
    while (qp.send_credits() != sq_depth) {
      const auto r = cq.wait([this](const completion<B>& c) {
        if (!c.ok()) ++errors;
      });
      if (r.failed()) {
        ++errors;
        return;
      }
    }
  }
};

/// Reaps with completion_queue::poll (one batch per call) instead of wait.
template <class B>
struct policy_poll_loop : policy_loop<B> {
  static constexpr const char* name = "policy_poll";
  using policy_loop<B>::policy_loop;

  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i)
      if (!this->qp.write(this->src, this->dst, this->next_id++).ok()) ++this->errors;
    while (this->qp.send_credits() != sq_depth) {
      int n = this->cq.poll([this](const completion<B>& c) {
        if (!c.ok()) ++this->errors;
      });
      if (n < 0) {
        ++this->errors;
        return;
      }
    }
  }
};

/// Posts the batch as one send_batch (one post_send call), reaps with wait.
template <class B>
struct policy_batch_loop : policy_loop<B> {
  static constexpr const char* name = "policy_batch";
  using policy_loop<B>::policy_loop;

  [[gnu::noinline]] void run_once() noexcept {
    auto list = decltype(this->qp)::template make_batch<batch>();
    for (std::uint32_t i = 0; i < batch; ++i) (void)list.write(this->src, this->dst, this->next_id++);
    if (!this->qp.post(list).ok()) ++this->errors;
    this->reap();
  }
};

// ---- Google Benchmark mode ---------------------------------------------------------------

template <template <class> class Loop, class B>
void bm_overhead(benchmark::State& state) {
  env<B> e;
  Loop<B> loop(e);
  for (auto _ : state) loop.run_once();
  if (loop.errors) state.SkipWithError("a post or a completion failed");
  const auto posts = static_cast<double>(state.iterations()) * batch;
  state.SetItemsProcessed(static_cast<std::int64_t>(posts));
  state.counters["ns/post"] =
      benchmark::Counter(posts, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

template <template <class> class Loop>
void register_variant() {
  const std::string v = Loop<null_backend>::name;
  benchmark::RegisterBenchmark(("overhead/null/" + v).c_str(), &bm_overhead<Loop, null_backend>);
  benchmark::RegisterBenchmark(("overhead/mock/" + v).c_str(), &bm_overhead<Loop, mock_backend>);
}

// ---- driver mode: exactly N iterations ----------------------------------------------------

template <template <class> class Loop, class B>
int drive(std::uint64_t iters) {
  env<B> e;
  Loop<B> loop(e);
  for (std::uint64_t i = 0; i < iters; ++i) loop.run_once();
  std::printf("%s %s iters=%llu posts=%llu errors=%llu\n", Loop<B>::name, std::string(B::name).c_str(),
              static_cast<unsigned long long>(iters), static_cast<unsigned long long>(iters * batch),
              static_cast<unsigned long long>(loop.errors));
  return loop.errors ? 1 : 0;
}

template <template <class> class Loop>
int drive_backend(std::string_view backend, std::uint64_t iters) {
  if (backend == "null") return drive<Loop, null_backend>(iters);
  if (backend == "mock") return drive<Loop, mock_backend>(iters);
  std::fprintf(stderr, "unknown backend '%.*s' (mock, null)\n", static_cast<int>(backend.size()), backend.data());
  return 2;
}

int driver_main(std::string_view variant, std::string_view backend, std::uint64_t iters) {
  if (variant == "raw") return drive_backend<raw_loop>(backend, iters);
  if (variant == "policy") return drive_backend<policy_loop>(backend, iters);
  if (variant == "policy_poll") return drive_backend<policy_poll_loop>(backend, iters);
  if (variant == "raw_list") return drive_backend<raw_list_loop>(backend, iters);
  if (variant == "policy_batch") return drive_backend<policy_batch_loop>(backend, iters);
  std::fprintf(stderr, "unknown variant '%.*s' (raw, policy, policy_poll, raw_list, policy_batch)\n",
               static_cast<int>(variant.size()), variant.data());
  return 2;
}

bool take(std::string_view arg, std::string_view key, std::string_view& out) {
  if (arg.substr(0, key.size()) != key) return false;
  out = arg.substr(key.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string_view variant, backend = "null", iters_s;
  bool driver = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    const bool v = take(a, "--variant=", variant);
    const bool b = take(a, "--backend=", backend);
    const bool n = take(a, "--iters=", iters_s);
    driver = driver || v || b || n;
  }
  if (driver) {
    if (variant.empty() || iters_s.empty()) {
      std::fprintf(stderr, "usage: %s --variant=raw|policy|policy_poll|raw_list|policy_batch "
                           "--backend=null|mock --iters=N\n", argv[0]);
      return 2;
    }
    return driver_main(variant, backend, std::strtoull(std::string(iters_s).c_str(), nullptr, 10));
  }
  register_variant<raw_loop>();
  register_variant<policy_loop>();
  register_variant<policy_poll_loop>();
  register_variant<raw_list_loop>();
  register_variant<policy_batch_loop>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
