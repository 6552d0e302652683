// The policy grid on the mock: operation × transport × signaling × polling × message
// size, every policy combination a separate template instantiation, registered with
// rdmakit::bench::register_grid (<rdmakit/benchmark.hpp>).
//
//   operations  write (RC, UC), send/recv (RC, UC, UD), read (RC), fetch_add (RC, 8 B)
//   signaling   signal_all, signal_every<16>, signal_manual (the caller asks for no
//               signal: the credit ledger signals only the WR that takes the last free
//               SQ slot, i.e. one completion per SQ depth)
//   polling     busy_poll<16>, event_driven<16, 16>, adaptive<1024, 16, 16> on the
//               sender's CQ (the receiver's is drained, and waited on only when its
//               receive queue holds no receive for the next SEND)
//   sizes       8 B, 64 B, 4 KiB, 64 KiB (a runtime argument: one code path per
//               policy combination serves every size, as in perftest); UD stops at
//               4 KiB (a UD message must fit the path MTU, 4096 here); atomics are 8 B
//
// Each iteration posts a window of 64 WRs (the SQ depth) through the queue pair,
// waiting on the sender's CQ with the polling policy whenever the ledger has no send
// credit left (bench::loopback::post), like a bandwidth test that keeps the send queue
// full. Send/recv iterations first reap the receiver's CQ and refill its receive queue
// (64 receives), and post() gives each SEND a receive no message on the way will take,
// waiting on the receiver's CQ when there is none, so no message ever meets an empty
// receive queue. Counters: bytes/s (SetBytesProcessed) and msg/s, per second of wall-clock
// time (register_grid's UseRealTime).
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/benchmark.hpp>

#include <cstdint>
#include <type_traits>

namespace {

using namespace rdmakit;
using B = backends::mock;
using bench::list;

constexpr std::uint32_t sq_depth = 64;
constexpr std::uint32_t window = 64;    // WRs posted per iteration
constexpr std::uint32_t rq_depth = 64;  // receives kept posted for send/recv

// ---- the axes: operations (each says where it applies and how it posts), policies ----

struct op_write {
  static constexpr const char* name = "write";
  template <class T>
  static constexpr bool on = T::supports_write;
  static auto post(auto& lp, std::uint64_t id) { return lp.post(op::write{lp.a.msg, lp.b.remote}, id); }
};
struct op_send {
  static constexpr const char* name = "send";
  template <class T>
  static constexpr bool on = true;
  static auto post(auto& lp, std::uint64_t id) { return lp.send(id); }
};
struct op_read {
  static constexpr const char* name = "read";
  template <class T>
  static constexpr bool on = T::supports_read;
  static auto post(auto& lp, std::uint64_t id) { return lp.post(op::read{lp.a.msg, lp.b.remote}, id); }
};
struct op_atomic {
  static constexpr const char* name = "fetch_add";
  template <class T>
  static constexpr bool on = T::supports_atomic;
  static auto post(auto& lp, std::uint64_t id) { return lp.post(op::fetch_add{lp.a.msg, lp.b.remote, 1}, id); }
};

using transports = list<rc, uc, ud>;
using signalings = list<signal_all, signal_every<16>, signal_manual>;
using pollings = list<busy_poll<16>, event_driven<16, 16>, adaptive<1024, 16, 16>>;

template <class Op, class T>
constexpr std::int64_t max_size = std::is_same_v<Op, op_atomic> ? 8 : T::connected ? 65536 : 4096;

// ---- one configuration ---------------------------------------------------------------

mock::fabric_config grid_fabric() {
  mock::fabric_config c;
  for (const char* n : {"mock0", "mock1"}) {
    mock::device_config d;
    d.name = n;
    d.ports[0].active_mtu = mtu::mtu_4096;  // UD up to 4 KiB; RC/UC 64 KiB in 16 packets
    c.devices.push_back(d);
  }
  return c;
}

// The loop, for the combinations the operation exists on (the others are not registered).
template <class Op>
constexpr auto loop = []<class T, class S, class P>(bench::config<T, S, P> cfg, benchmark::State& state)
  requires Op::template on<T>
{
  constexpr bool is_send = std::is_same_v<Op, op_send>;
  const auto size = static_cast<std::uint32_t>(state.range(0));
  mock::fabric fab(grid_fabric());
  bench::loopback lp(cfg, device<B>(fab, "mock0"), device<B>(fab, "mock1"), size, {.caps = {sq_depth, rq_depth}});

  if constexpr (is_send) lp.refill();
  std::uint64_t id = 0;
  for (auto _ : state) {
    if constexpr (is_send) lp.refill();
    for (std::uint32_t w = 0; w < window; ++w)
      if (!Op::post(lp, id++)) break;
  }
  lp.finish(state);  // waits for the last window; a failure or timeout marks the run

  const auto msgs = static_cast<double>(state.iterations()) * window;
  state.SetBytesProcessed(static_cast<std::int64_t>(msgs * size));
  state.counters["msg/s"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
  if constexpr (is_send) state.counters["recv"] = static_cast<double>(lp.received);
};

template <class... Ops>
void register_all(list<Ops...>) {
  (bench::register_grid<transports, signalings, pollings>(Ops::name, loop<Ops>)
       .each([](auto cfg, benchmark::internal::Benchmark* b) {
         for (std::int64_t size : {8, 64, 4096, 65536})
           if (size <= max_size<Ops, typename decltype(cfg)::transport_policy>) b->Arg(size);
       }),
   ...);
}

}  // namespace

int main(int argc, char** argv) {
  register_all(list<op_write, op_send, op_read, op_atomic>{});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
