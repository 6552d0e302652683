// A downstream Google Benchmark program on the mock HCA: SEND/RECV round trips between
// two connected RC queue pairs, per message size; a failed post or completion stops the
// benchmark with an error instead of timing it.
#include <benchmark/benchmark.h>
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <cstdint>

namespace {

using namespace rdmakit;
using B = backends::mock;

void send_recv(benchmark::State& state) {
  const auto size = static_cast<std::uint32_t>(state.range(0));
  mock::fabric fab;
  device<B> dev(fab, "mock0");
  auto pd = dev.create_pd();
  auto cq = dev.create_cq(16);
  auto src = pd.allocate<access::local_write>(size);
  auto dst = pd.allocate<access::local_write>(size);
  auto a0 = pd.create_qp<rc>(cq, qp_cap{4, 4});
  auto b0 = pd.create_qp<rc>(cq, qp_cap{4, 4});
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);
  auto b = std::move(b0).connect(ea);
  for (auto _ : state) {
    if (!b.post_recv(dst.local(), 1).ok() || !a.send(src.local(), 2).ok()) {
      state.SkipWithError("post refused");
      break;
    }
    int ok = 0, bad = 0;
    while (ok + bad < 2 && cq.wait([&](const completion<B>& c) { c.ok() ? ++ok : ++bad; })) {
    }
    if (ok != 2) {
      state.SkipWithError("a completion failed or never came");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * size);
}
BENCHMARK(send_recv)->Arg(64)->Arg(4096);

}  // namespace

BENCHMARK_MAIN();
