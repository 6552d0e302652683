// The policy grid on the mock: operation × transport × signaling × polling × message
// size, every policy combination a separate template instantiation.
//
//   operations  write (RC, UC), send/recv (RC, UC, UD), read (RC), fetch_add (RC, 8 B)
//   signaling   signal_all, signal_every<16>, signal_manual (the caller asks for no
//               signal: the credit ledger signals only the WR that takes the last free
//               SQ slot, i.e. one completion per SQ depth)
//   polling     busy_poll<16>, event_driven<16, 16>, adaptive<1024, 16, 16> on the
//               sender's CQ (the receiver's CQ is busy-polled)
//   sizes       8 B, 64 B, 4 KiB, 64 KiB (a runtime argument: one code path per
//               policy combination serves every size, as in perftest); UD stops at
//               4 KiB (a UD message must fit the path MTU, 4096 here); atomics are 8 B
//
// Each iteration posts a window of 64 WRs (the SQ depth) through the queue pair,
// waiting on the sender's CQ with the polling policy whenever the ledger has no send
// credit left, like a bandwidth test that keeps the send queue full. Send/recv
// iterations first reap the receiver's CQ and refill its receive queue (64 receives),
// so no message ever meets an empty receive queue. Counters: bytes/s
// (SetBytesProcessed) and msg/s.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace rdmakit;
using B = backends::mock;

constexpr std::uint32_t sq_depth = 64;
constexpr std::uint32_t window = 64;    // WRs posted per iteration
constexpr std::uint32_t rq_depth = 64;  // receives kept posted for send/recv
constexpr auto all_access =
    access::local_write | access::remote_write | access::remote_read | access::remote_atomic;

// ---- the axes ------------------------------------------------------------------------

template <class... Ts>
struct type_list {};

struct op_write {
  static constexpr const char* name = "write";
  template <class T>
  static constexpr bool on = T::supports_write;
};
struct op_send {
  static constexpr const char* name = "send";
  template <class T>
  static constexpr bool on = true;
};
struct op_read {
  static constexpr const char* name = "read";
  template <class T>
  static constexpr bool on = T::supports_read;
};
struct op_atomic {
  static constexpr const char* name = "fetch_add";
  template <class T>
  static constexpr bool on = T::supports_atomic;
};

using ops = type_list<op_write, op_send, op_read, op_atomic>;
using transports = type_list<rc, uc, ud>;
using signalings = type_list<signal_all, signal_every<16>, signal_manual>;
using pollings = type_list<busy_poll<16>, event_driven<16, 16>, adaptive<1024, 16, 16>>;

template <class S>
std::string signaling_name() {
  if constexpr (requires { S::interval; }) return std::string(S::name) + "<" + std::to_string(S::interval) + ">";
  return std::string(S::name);
}

template <class P>
struct polling_name;
template <int N>
struct polling_name<busy_poll<N>> {
  static std::string get() { return "busy_poll<" + std::to_string(N) + ">"; }
};
template <int N, unsigned A>
struct polling_name<event_driven<N, A>> {
  static std::string get() { return "event_driven<" + std::to_string(N) + "," + std::to_string(A) + ">"; }
};
template <unsigned S, int N, unsigned A>
struct polling_name<adaptive<S, N, A>> {
  static std::string get() {
    return "adaptive<" + std::to_string(S) + "," + std::to_string(N) + "," + std::to_string(A) + ">";
  }
};

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

template <class Op, class T, class S, class P>
void bm_grid(benchmark::State& state) {
  const auto size = static_cast<std::uint32_t>(state.range(0));
  constexpr bool is_send = std::is_same_v<Op, op_send>;

  // Declaration order is destruction order reversed: QPs and AH go before CQs and PD.
  mock::fabric fab(grid_fabric());
  device<B> dx(fab, "mock0"), dy(fab, "mock1");
  auto pdx = dx.create_pd();
  auto pdy = dy.create_pd();
  auto cqx = dx.create_cq<P>(512);
  auto cqy = dy.create_cq<busy_poll<32>>(512);
  auto lmr = pdx.allocate<all_access>(size + grh_bytes);
  auto rmr = pdy.allocate<all_access>(size + grh_bytes);
  const qp_cap caps{sq_depth, rq_depth};
  auto x = pdx.create_qp<T, S>(cqx, caps);
  auto y = pdy.create_qp<T, S>(cqy, caps);
  auto make_rts = [](auto& self, const auto& peer) {
    if constexpr (T::connected)
      return std::move(self).connect(peer.local_endpoint());
    else
      return std::move(self).activate();
  };
  auto a = make_rts(x, y);
  auto b = make_rts(y, a);
  std::optional<address_handle<B>> ah;
  ud_address<B> to{};
  if constexpr (T::needs_ah) {
    ah.emplace(pdx.create_ah(b.local_endpoint()));
    to = ah->to(b.qp_num());
  }

  const local_buffer local = lmr.local(0, size);
  const auto remote = rmr.remote().sub(0, size);
  std::vector<local_buffer> recv_bufs(rq_depth, rmr.local(0, size + T::recv_offset));

  std::uint64_t errors = 0, timeouts = 0, received = 0;
  auto on_send = [&](const completion<B>& c) { errors += !c.ok(); };
  auto on_recv = [&](const completion<B>& c) {
    errors += !c.ok();
    ++received;
  };
  auto refill = [&] {
    (void)cqy.drain(on_recv);
    const std::uint32_t need = rq_depth - b.posted_recvs();
    if (need != 0 && !b.post_recvs({recv_bufs.data(), need}, 0).ok()) ++errors;
  };
  auto post = [&](std::uint64_t id) -> post_result {
    if constexpr (std::is_same_v<Op, op_write>)
      return a.write(local, remote, id);
    else if constexpr (std::is_same_v<Op, op_read>)
      return a.read(local, remote, id);
    else if constexpr (std::is_same_v<Op, op_atomic>)
      return a.fetch_add(local, remote, 1, id);
    else if constexpr (T::needs_ah)
      return a.send(to, local, id);
    else
      return a.send(local, id);
  };
  auto wait_credit = [&](std::uint32_t want) {
    while (a.send_credits() < want) {
      const auto r = cqx.wait(on_send, std::chrono::milliseconds{1000});
      if (r.failed()) ++errors;
      if (!r && ++timeouts > 3) return false;
    }
    return true;
  };

  if constexpr (is_send) refill();
  std::uint64_t id = 0;
  for (auto _ : state) {
    if constexpr (is_send) refill();
    for (std::uint32_t w = 0; w < window; ++w) {
      if (a.send_credits() == 0 && !wait_credit(1)) break;
      if (!post(id++).ok()) ++errors;
    }
  }
  (void)wait_credit(sq_depth);
  if constexpr (is_send) (void)cqy.drain(on_recv);

  if (errors || timeouts > 3) state.SkipWithError("a post or completion failed, or a wait timed out");
  const auto msgs = static_cast<double>(state.iterations()) * window;
  state.SetBytesProcessed(static_cast<std::int64_t>(msgs * size));
  state.counters["msg/s"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
  if constexpr (is_send) state.counters["recv"] = static_cast<double>(received);
}

// ---- registration: loop over the type lists ----------------------------------------------

template <class Op, class T, class S, class P>
void register_one() {
  const std::string name = std::string(Op::name) + "/" + std::string(T::name) + "/" + signaling_name<S>() + "/" +
                           polling_name<P>::get();
  auto* bm = benchmark::RegisterBenchmark(name.c_str(), &bm_grid<Op, T, S, P>);
  if constexpr (std::is_same_v<Op, op_atomic>)
    bm->Arg(8);
  else if constexpr (std::is_same_v<T, ud>)
    bm->Arg(8)->Arg(64)->Arg(4096);
  else
    bm->Arg(8)->Arg(64)->Arg(4096)->Arg(65536);
}

template <class Op, class T, class S, class... Ps>
void register_pollings(type_list<Ps...>) {
  (register_one<Op, T, S, Ps>(), ...);
}
template <class Op, class T, class... Ss>
void register_signalings(type_list<Ss...>) {
  (register_pollings<Op, T, Ss>(pollings{}), ...);
}
template <class Op, class T>
void register_transport() {
  if constexpr (Op::template on<T>) register_signalings<Op, T>(signalings{});
}
template <class Op, class... Ts>
void register_transports(type_list<Ts...>) {
  (register_transport<Op, Ts>(), ...);
}
template <class... Os>
void register_all(type_list<Os...>) {
  (register_transports<Os>(transports{}), ...);
}

}  // namespace

int main(int argc, char** argv) {
  register_all(ops{});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
