// The mock HCA's message rate (issue 12): 64-byte RDMA WRITEs through the policy layer,
// against a ceiling measured in the same binary, and the cost per WR as the number of
// queue pairs on one CQ grows.
//
//   write/<T>/<S>    RC or UC, signal_every<16> or signal_all: a bench::loopback pair on
//                    two mock devices, a window of 64 WRs (the SQ depth) per iteration,
//                    busy_poll<16> on the sender's CQ whenever the ledger has no credit.
//   ceiling/spsc     a single-producer/single-consumer ring of 64 slots: the producer
//                    copies a 64-byte descriptor and 64 bytes of payload into a slot, the
//                    consumer copies both out (the payload into the "remote" buffer), one
//                    window of 64 per iteration, both on this thread as the mock runs
//                    requester and responder on the posting thread. What moving a 64-byte
//                    message costs at the least, without any verbs rule.
//   scale/<T>/<N>    N connected pairs (1, 64, 1024) whose sending QPs share one send
//                    CQ, posts round-robin over the pairs, 64 per iteration; flat per-WR
//                    cost means the mock does no per-QP scan or lookup on the data path.
//
// Counters: msg/s (per CPU second) and s/msg (its inverse).
//
// Driver mode, exactly N windows of one loop without the timing machinery (callgrind):
//   mock_rate --driver=write_uc|write_rc|write_rc_all|ceiling|scale_rc|scale_uc [--qps=N] --iters=N
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/benchmark.hpp>

#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace rdmakit;
using B = backends::mock;

constexpr std::uint32_t sq_depth = 64;   // and the window: WRs posted per iteration
constexpr std::uint32_t msg_bytes = 64;
using poll_policy = busy_poll<16>;
constexpr auto buf_access = access::local_write | access::remote_write;

// Two devices; the scale loop needs CQs beyond rxe's 32767 entries (1024 QPs × 65).
mock::fabric_config rate_fabric() {
  mock::fabric_config c;
  for (const char* n : {"mock0", "mock1"}) {
    mock::device_config d;
    d.name = n;
    d.limits.max_cqe = 1u << 20;
    c.devices.push_back(d);
  }
  return c;
}

void count_messages(benchmark::State& state, double msgs) {
  state.counters["msg/s"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
  state.counters["s/msg"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ---- (a) one pair through the policy layer ------------------------------------------

template <class T, class S>
struct write_loop {
  mock::fabric fab{rate_fabric()};
  bench::loopback<B, T, S, poll_policy> lp{device<B>(fab, "mock0"), device<B>(fab, "mock1"), msg_bytes,
                                           {.caps = {sq_depth, 1}}};
  std::uint64_t id = 0;

  void run_once() {
    for (std::uint32_t w = 0; w < sq_depth; ++w)
      if (!lp.post(op::write{lp.a.msg, lp.b.remote}, id++)) break;
  }
  bool finish(benchmark::State& st) { return lp.finish(st); }
  // Driver mode: waits for the outstanding signaled WRs as loopback::finish does.
  bool finish() {
    while (sq_depth - lp.a.qp.send_credits() > lp.a.qp.unsignaled_run())
      if (!lp.a.cq.wait([](const completion<B>&) {})) return false;
    return lp.failures == 0;
  }
};

// ---- (b) the ceiling: an SPSC ring moving 64-byte descriptors and payloads -----------

struct descriptor {  // what a WQE carries, padded to 64 bytes
  std::uint64_t wr_id;
  std::uint64_t local_addr;
  std::uint64_t remote_addr;
  std::uint32_t length;
  std::uint32_t lkey;
  std::uint32_t rkey;
  std::uint32_t flags;
  std::uint8_t pad[24];
};
static_assert(sizeof(descriptor) == 64);

class spsc_ring {
 public:
  static constexpr std::uint64_t slots = sq_depth;  // a power of two

  bool push(const descriptor& d, const void* payload) noexcept {
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) == slots) return false;
    slot& s = ring_[t & (slots - 1)];
    std::memcpy(&s.desc, &d, sizeof d);
    std::memcpy(s.payload, payload, msg_bytes);
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }
  bool pop(descriptor& d, void* payload) noexcept {
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) return false;
    const slot& s = ring_[h & (slots - 1)];
    std::memcpy(&d, &s.desc, sizeof d);
    std::memcpy(payload, s.payload, msg_bytes);
    head_.store(h + 1, std::memory_order_release);
    return true;
  }

 private:
  struct alignas(64) slot {
    descriptor desc;
    std::uint8_t payload[msg_bytes];
  };
  std::array<slot, slots> ring_{};
  alignas(64) std::atomic<std::uint64_t> head_{0};  // written by the consumer
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // written by the producer
};

struct ceiling_loop {
  spsc_ring ring;
  alignas(64) std::uint8_t src[msg_bytes] = {1};
  alignas(64) std::uint8_t dst[msg_bytes] = {};
  std::uint64_t id = 0, moved = 0, sum = 0;

  [[gnu::noinline]] void run_once() {
    descriptor d{};
    d.local_addr = reinterpret_cast<std::uintptr_t>(src);
    d.remote_addr = reinterpret_cast<std::uintptr_t>(dst);
    d.length = msg_bytes;
    for (std::uint32_t w = 0; w < sq_depth; ++w) {
      d.wr_id = id++;
      benchmark::DoNotOptimize(d);
      if (!ring.push(d, src)) break;
    }
    descriptor got;
    while (ring.pop(got, dst)) {
      sum += got.wr_id;
      ++moved;
    }
    benchmark::ClobberMemory();
  }
  bool finish() { return moved == id; }
};

// ---- (c) scale: N pairs, sending QPs on one shared CQ ---------------------------------

template <class T>
struct scale_loop {
  using S = signal_every<16>;
  using qp_t = queue_pair<B, T, S, qp_state::rts>;
  mock::fabric fab{rate_fabric()};
  device<B> da{fab, "mock0"}, db{fab, "mock1"};
  protection_domain<B> pda = da.create_pd(), pdb = db.create_pd();
  completion_queue<B, poll_policy> cqa, cqb;
  memory_region<B, buf_access> src, dst;
  std::vector<qp_t> qa, qb;
  std::size_t next = 0;
  std::uint64_t id = 0, failures = 0;

  explicit scale_loop(std::size_t n) {
    const qp_cap caps{sq_depth, 1};
    const int entries = static_cast<int>(n * (caps.max_send_wr + caps.max_recv_wr));
    cqa = da.create_cq<poll_policy>(entries);
    cqb = db.create_cq<poll_policy>(entries);
    src = rdmakit::allocate<buf_access>(pda, msg_bytes);
    dst = rdmakit::allocate<buf_access>(pdb, msg_bytes);
    qa.reserve(n);
    qb.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto x = rdmakit::create_qp<T, S>(pda, cqa, caps);
      auto y = rdmakit::create_qp<T, S>(pdb, cqb, caps);
      const endpoint ex = x.local_endpoint();
      qa.push_back(std::move(x).connect(y.local_endpoint()));
      qb.push_back(std::move(y).connect(ex));
    }
  }

  bool reap() {
    const wait_result r = cqa.wait([this](const completion<B>& c) { failures += !c.ok(); });
    if (!r) ++failures;
    return bool(r);
  }

  void run_once() {
    const auto local = src.local(0, msg_bytes);
    const auto remote = dst.remote().sub(0, msg_bytes);
    for (std::uint32_t w = 0; w < sq_depth; ++w) {
      qp_t& q = qa[next];
      next = next + 1 == qa.size() ? 0 : next + 1;
      while (q.send_credits() == 0)
        if (!reap()) return;
      if (!q.write(local, remote, id++)) ++failures;
    }
  }

  bool finish() {
    for (auto& q : qa)
      while (sq_depth - q.send_credits() > q.unsignaled_run())
        if (!reap()) return false;
    (void)cqb.drain([](const completion<B>&) {});
    return failures == 0;
  }
  bool finish(benchmark::State& st) {
    if (finish()) return true;
    st.SkipWithError(("scale: " + std::to_string(failures) + " failed post(s), completion(s) or wait(s)").c_str());
    return false;
  }
};

// ---- registration ----------------------------------------------------------------------

template <class Loop>
void timed(benchmark::State& state, Loop& loop) {
  for (auto _ : state) loop.run_once();
  if constexpr (requires { loop.finish(state); })
    loop.finish(state);
  else if (!loop.finish())
    state.SkipWithError("lost messages");
  count_messages(state, static_cast<double>(state.iterations()) * sq_depth);
}

template <class T, class S>
void bm_write(benchmark::State& state) {
  write_loop<T, S> loop;
  timed(state, loop);
}

void bm_ceiling(benchmark::State& state) {
  ceiling_loop loop;
  timed(state, loop);
}

template <class T>
void bm_scale(benchmark::State& state) {
  scale_loop<T> loop(static_cast<std::size_t>(state.range(0)));
  timed(state, loop);
}

// A wait that finds nothing and may not wait (timeout 0): an event loop's check, and
// `device::next_event(0ms)`. It was a timed wait on a passed deadline (tens of µs).
void bm_empty_wait(benchmark::State& state) {
  mock::fabric fab;
  device<B> dev(fab, "mock0");
  auto cq = dev.create_cq<event_driven<>>(16);
  for (auto _ : state) benchmark::DoNotOptimize(cq.wait([](const completion<B>&) {}, std::chrono::milliseconds(0)));
}

void register_all() {
  benchmark::RegisterBenchmark("write/UC/signal_every<16>", bm_write<uc, signal_every<16>>);
  benchmark::RegisterBenchmark("write/RC/signal_every<16>", bm_write<rc, signal_every<16>>);
  benchmark::RegisterBenchmark("write/UC/signal_all", bm_write<uc, signal_all>);
  benchmark::RegisterBenchmark("write/RC/signal_all", bm_write<rc, signal_all>);
  benchmark::RegisterBenchmark("ceiling/spsc", bm_ceiling);
  benchmark::RegisterBenchmark("wait/event_driven/empty_0ms", bm_empty_wait);
  benchmark::RegisterBenchmark("scale/UC/signal_every<16>", bm_scale<uc>)->ArgName("qps")->Arg(1)->Arg(64)->Arg(1024);
  benchmark::RegisterBenchmark("scale/RC/signal_every<16>", bm_scale<rc>)->ArgName("qps")->Arg(1)->Arg(64)->Arg(1024);
}

template <class Loop>
int drive(Loop& loop, std::uint64_t iters) {
  for (std::uint64_t i = 0; i < iters; ++i) loop.run_once();
  if (!loop.finish()) {
    std::fprintf(stderr, "mock_rate: the loop lost messages or failed\n");
    return 1;
  }
  return 0;
}

int driver_main(std::string_view which, std::size_t qps, std::uint64_t iters) {
  if (which == "write_uc") {
    write_loop<uc, signal_every<16>> l;
    return drive(l, iters);
  }
  if (which == "write_rc") {
    write_loop<rc, signal_every<16>> l;
    return drive(l, iters);
  }
  if (which == "write_rc_all") {
    write_loop<rc, signal_all> l;
    return drive(l, iters);
  }
  if (which == "ceiling") {
    ceiling_loop l;
    return drive(l, iters);
  }
  if (which == "scale_rc") {
    scale_loop<rc> l(qps);
    return drive(l, iters);
  }
  if (which == "scale_uc") {
    scale_loop<uc> l(qps);
    return drive(l, iters);
  }
  std::fprintf(stderr, "mock_rate: unknown --driver=%.*s\n", static_cast<int>(which.size()), which.data());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view driver;
  std::size_t qps = 1;
  std::uint64_t iters = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--driver=")) driver = a.substr(9);
    else if (a.starts_with("--qps=")) qps = std::strtoull(argv[i] + 6, nullptr, 10);
    else if (a.starts_with("--iters=")) iters = std::strtoull(argv[i] + 8, nullptr, 10);
  }
  if (!driver.empty()) return driver_main(driver, qps, iters);
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
