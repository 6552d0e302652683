#pragma once
// Two devices, each with an event loop's completion queue, and a pair of async queue
// pairs connected to each other: the coroutine layer's tests start here. The mock's two
// devices of one fabric by default; with RDMAKIT_CORO_IBVERBS (test_coro_ibverbs, run on
// rxe in the guest) the device RDMAKIT_DEVICE names, opened twice, which loops back.
#include <rdmakit/async_completion_queue.hpp>
#include <rdmakit/async_queue_pair.hpp>
#if RDMAKIT_CORO_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#else
#include <rdmakit/backends/mock.hpp>
#endif
#include <rdmakit/device_events.hpp>
#include <rdmakit/event_loop.hpp>
#include <rdmakit/rdmakit.hpp>
#include <rdmakit/task.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace coro_test {
using namespace rdmakit;
using namespace std::chrono_literals;
using rdmakit::access;  // not POSIX access()
#if RDMAKIT_CORO_IBVERBS
using B = backends::ibverbs;
#else
using B = backends::mock;
#endif
using acq = async_completion_queue<B, event_driven<>>;
template <transport T = rc, signaling S = signal_all>
using rts_qp = async_queue_pair<B, T, S, qp_state::rts>;
inline constexpr rdmakit::access rw = access::local_write | access::remote_write | access::remote_read;

/// What `call` was refused with (usage_error's text), or "not refused".
template <class F>
std::string refusal(F call) {
  try {
    call();
    return "not refused";
  } catch (const usage_error& e) {
    return e.what();
  }
}

/// Where the two sides' devices come from.
struct testbed {
#if RDMAKIT_CORO_IBVERBS
  device<B> open(int) const { return device<B>(std::getenv("RDMAKIT_DEVICE")); }
#else
  testbed() = default;
  explicit testbed(mock::fabric_config cfg) : fab(std::move(cfg)) {}
  mock::fabric fab;
  device<B> open(int i) { return device<B>(fab, i == 0 ? "mock0" : "mock1"); }
#endif
};

struct side {
  side(device<B> d, event_loop& loop, int cq_entries = 256)
      : dev(std::move(d)), pd(dev.create_pd()), cq(loop, dev.create_cq<event_driven<>>(cq_entries)) {}
#if !RDMAKIT_CORO_IBVERBS
  side(mock::fabric& fab, const char* name, event_loop& loop, int cq_entries = 256)
      : side(device<B>(fab, name), loop, cq_entries) {}
#endif
  device<B> dev;
  protection_domain<B> pd;
  acq cq;
};

/// Two sides and an RC pair between them (depth `depth` each way).
template <transport T = rc, signaling S = signal_all>
struct connected {
  connected(testbed& bed, event_loop& loop, std::uint32_t depth = 16)
      : a(bed.open(0), loop), b(bed.open(1), loop), qa(make_(a, b, depth)) {}
  side a, b;
  std::pair<rts_qp<T, S>, rts_qp<T, S>> qa;
  rts_qp<T, S>& x() { return qa.first; }
  rts_qp<T, S>& y() { return qa.second; }

 private:
  static std::pair<rts_qp<T, S>, rts_qp<T, S>> make_(side& a, side& b, std::uint32_t depth) {
    async_queue_pair<B, T, S> ia(a.cq, a.pd.template create_qp<T, S>(a.cq.queue(), qp_cap{depth, depth}));
    async_queue_pair<B, T, S> ib(b.cq, b.pd.template create_qp<T, S>(b.cq.queue(), qp_cap{depth, depth}));
    const endpoint ea = ia.local_endpoint(), eb = ib.local_endpoint();
    return {std::move(ia).connect(eb), std::move(ib).connect(ea)};
  }
};

/// A testbed, a loop, a connected pair and a 4 KiB region on each side.
template <transport T = rc, signaling S = signal_all>
struct rig {
  explicit rig(std::uint32_t depth = 16)
      : c(bed, loop, depth), ma(c.a.pd.template allocate<rw>(4096)), mb(c.b.pd.template allocate<rw>(4096)) {}
  testbed bed;
  event_loop loop;
  connected<T, S> c;
  memory_region<B, rw> ma, mb;
};

/// Turns `loop` until its spawned tasks are done or `limit` passed: false then (a test
/// of a wait that would never end fails instead of hanging).
inline bool run_within(event_loop& loop, std::chrono::steady_clock::duration limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (loop.tasks() != 0 && std::chrono::steady_clock::now() < end) loop.poll();
  return loop.tasks() == 0;
}

/// Destroys `held` (an optional or a pointer) after `d`, from a coroutine of `loop`.
template <class Held>
task<void> destroy_after(event_loop& loop, Held& held, std::chrono::milliseconds d) {
  co_await loop.sleep_for(d);
  held.reset();
}

/// A coroutine awaits `*held` in place while another destroys it (after 1 ms): the first
/// must be resumed, its co_await throwing usage_error, not left waiting for ever.
/// `await(held)` is the first coroutine's co_await. True when that is what happened.
template <class Held, class Await>
bool destroyed_while_awaited(event_loop& loop, Held& held, Await await) {
  bool refused = false;
  auto waiter = [&]() -> task<void> {
    try {
      co_await await(held);
    } catch (const usage_error& e) {
      refused = std::string(e.what()).find("was destroyed while it waited") != std::string::npos;
    }
  };
  loop.spawn(waiter());
  loop.spawn(destroy_after(loop, held, 1ms));
  return run_within(loop, 2s) && refused;
}

/// Awaits the awaiter `a` in place, as the standard (and clang) awaits an awaiter that is
/// a glvalue; GCC 12 copies or moves it instead, so its tests would miss what clang does.
template <class Awaiter>
struct in_place {
  Awaiter& a;
  bool await_ready() { return a.await_ready(); }
  auto await_suspend(std::coroutine_handle<> h) { return a.await_suspend(h); }
  decltype(auto) await_resume() { return a.await_resume(); }
};
template <class Awaiter>
in_place(Awaiter&) -> in_place<Awaiter>;

/// The usage_error message of `co_await std::move(a)`; empty when it throws none.
template <class Awaitable>
task<std::string> usage_error_of_await(Awaitable& a) {
  try {
    (void)co_await std::move(a);
  } catch (const usage_error& e) {
    co_return e.what();
  }
  co_return std::string{};
}

}  // namespace coro_test
