// What a program built with -O2 -Wall -Wextra -Werror compiles of rdmakit: the policy
// layer's inlined data path (polls, waits, posts) must not warn in the user's
// translation unit. Batches of
// one completion (busy_poll<1>, event_driven<1, 1>) matter: GCC's -Warray-bounds sees
// the poll's four-wide status loop over a one-entry array there.
#include <rdmakit/async_completion_queue.hpp>
#include <rdmakit/async_queue_pair.hpp>
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/event_loop.hpp>
#include <rdmakit/rdmakit.hpp>

using namespace rdmakit;
using B = backends::mock;

void ignore(const completion<B>&) noexcept {}

template <polling P>
int reap_all(device<B>& d, protection_domain<B>& pd) {
  auto cq = d.create_cq<P>(16);
  auto qp = pd.create_qp<rc>(cq, qp_cap{4, 4});
  int seen = 0;
  auto count = [&](const completion<B>& c) { seen += c.ok(); };
  seen += cq.poll(count) + cq.poll();
  seen += cq.wait(count, std::chrono::milliseconds{0}).count();
  // wait_for's erased handler: an object, a const one and a plain function.
  const auto counted = [&seen](const completion<B>& c) noexcept { seen += c.ok(); };
  seen += cq.wait_for(1, count, std::chrono::milliseconds{0}).count();
  seen += cq.wait_for(1, counted, std::chrono::milliseconds{0}).count();
  seen += cq.wait_for(1, ignore, std::chrono::milliseconds{0}).count();
  seen += cq.dispatch(count);
  return seen + static_cast<int>(qp.qp_num());
}

// The posts a bandwidth loop makes: single, prepared, a reused list, receives.
template <signaling S>
int post_all(device<B>& d, protection_domain<B>& pd) {
  auto cq = d.create_cq(64);
  auto a = pd.create_qp<rc, S>(cq, qp_cap{16, 16});
  auto b = pd.create_qp<rc, S>(cq, qp_cap{16, 16});
  auto qa = std::move(a).connect(b.local_endpoint());
  auto qb = std::move(b).connect(qa.local_endpoint());
  auto mr = pd.allocate<access::local_write | access::remote_write>(4096);
  int ok = qb.post_recv(mr.local(0, 64), 1).ok();
  ok += qa.post(op::write{mr.local(0, 64), mr.remote().sub(64, 64)}, 2).ok();
  auto w = qa.prepare(op::write{mr.local(0, 64), mr.remote().sub(128, 64)}, 3);
  ok += qa.post(w).ok();
  auto list = decltype(qa)::template make_batch<8>();
  list.reuse();
  for (std::uint64_t i = 0; i < 8; ++i) ok += list.add(op::write{mr.local(0, 8), mr.remote().sub(256, 8)}, 10 + i);
  while (!qa.can_post(8) && cq.wait().count() > 0) {
  }
  ok += qa.post(list).ok();
  return ok + cq.poll();
}

// The configuration structs as the docs write them, designated and partial:
// -Wextra's -Wmissing-field-initializers warns for a member without its own initializer.
int configured() {
  mock::fabric fab({.seed = 7, .latency = std::chrono::microseconds{2}});
  mock::fabric named({.devices = {{.name = "a", .ports = {{.lid = 0}}}, {.name = "b"}}});
  fab.inject({.kind = mock::fault_kind::drop, .count = 1});
  return static_cast<int>(named.now().count() + fab.now().count());
}

// The coroutine layer as README's snippet and examples/coro_echo.cpp use it (GCC's
// -Wnull-dereference found a variant's get_if and an empty link's null in them).
using async_rc = async_queue_pair<B, rc, signal_all, qp_state::rts>;
using region = memory_region<B, access::local_write>;

task<bool> echo_once(async_rc& qp, region& mem) {
  auto reply = qp.recv(mem.local(64, 64));
  if (!co_await qp.send(mem.local(0, 8))) co_return false;
  const wr_result r = co_await std::move(reply).within(std::chrono::seconds{1});
  co_return r.ok();
}

int coroutines(device<B>& d, protection_domain<B>& pd) {
  event_loop loop;
  async_completion_queue cq(loop, d.create_cq<event_driven<>>(64));
  auto mem = pd.allocate<access::local_write>(4096);
  auto a0 = async_queue_pair(cq, pd.create_qp<rc>(cq.queue(), qp_cap{8, 8}));
  auto b0 = async_queue_pair(cq, pd.create_qp<rc>(cq.queue(), qp_cap{8, 8}));
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);
  auto b = std::move(b0).connect(ea);
  return loop.run(echo_once(a, mem)) + static_cast<int>(b.qp_num());
}

// Memory windows, as README binds them: GCC's -Wnull-dereference saw the mock's UD
// address read in the BIND_MW path of a type 1 bind (an audit).
int windows(device<B>& d, protection_domain<B>& pd) {
  auto cq = d.create_cq(64);
  auto a0 = pd.create_qp<rc>(cq, qp_cap{8, 8});
  auto b0 = pd.create_qp<rc>(cq, qp_cap{8, 8});
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);
  auto b = std::move(b0).connect(ea);
  auto shared = pd.allocate<access::local_write | access::remote_read | access::mw_bind>(4096);
  auto one = pd.alloc_window<access::remote_read, mw_type::type1>();
  auto two = pd.alloc_window<access::remote_read>();
  return one.bind(a, shared, 0, 1024, 1).ok() + two.bind(a, shared, 0, 1024, 2).ok() + static_cast<int>(b.qp_num());
}

int main() {
  mock::fabric fab;
  device<B> d(fab, "mock0");
  auto pd = d.create_pd();
  return reap_all<busy_poll<1>>(d, pd) + reap_all<event_driven<1, 1>>(d, pd) + reap_all<busy_poll<>>(d, pd) +
         reap_all<adaptive<16, 1>>(d, pd) + post_all<signal_all>(d, pd) + post_all<signal_every<4>>(d, pd) +
         post_all<signal_manual>(d, pd) + configured() + coroutines(d, pd) + windows(d, pd);
}
