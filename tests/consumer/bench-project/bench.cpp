// RDMA WRITE bandwidth on the mock HCA: 2 transports × 2 signaling × 2 polling policies.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/benchmark.hpp>
using namespace rdmakit;

static const auto grid = bench::register_grid<bench::list<rc, uc>, bench::list<signal_all, signal_every<16>>,
                                              bench::list<busy_poll<16>, adaptive<>>>(
    "write", [](auto cfg, benchmark::State& st) {
      bench::loopback lp(cfg, device<backends::mock>("mock0"), st.range(0));
      for (auto _ : st) if (!lp.post(op::write{lp.a.msg, lp.b.remote})) break;
      lp.finish(st);
      st.SetBytesProcessed(st.iterations() * st.range(0));
    }).Arg(64).Arg(4096);
BENCHMARK_MAIN();
