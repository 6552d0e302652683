// An echo server and its client written as coroutines over SEND/RECV. Both run on one
// event_loop, which sleeps in epoll on the completion channels between completions:
// every `co_await` resumes with the completion of the very work request it posted. A
// receive is posted when its awaitable is made, so the client posts the one for the
// echo before it sends. The server stops on an empty message; every wait is bounded.
#include "example_backend.hpp"

#include <rdmakit/async_queue_pair.hpp>
#include <rdmakit/event_loop.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

using namespace rdmakit;
using rdmakit_examples::B;
using namespace std::chrono_literals;
using cq_type = async_completion_queue<B, event_driven<>>;
using connected_qp = async_queue_pair<B, rc, signal_all, qp_state::rts>;
using buffer = memory_region<B, access::local_write>;

namespace {
constexpr std::uint32_t slot = 256;

task<int> serve(connected_qp& qp, buffer& mem) {
  for (int served = 0;; ++served) {
    wr_result<B> in = co_await qp.recv(mem.local(0, slot)).within(5s);
    if (!in.ok()) throw std::runtime_error("server: receive " + in.message());
    const std::uint32_t n = in.completion().byte_len();
    if (n == 0) co_return served;  // the client is done
    wr_result<B> out = co_await qp.send(mem.local(0, n));
    if (!out.ok()) throw std::runtime_error("server: send " + out.message());
  }
}

task<int> talk(connected_qp& qp, buffer& mem, int messages) {
  int echoed = 0;
  for (int i = 0; i < messages; ++i) {
    auto reply = qp.recv(mem.local(slot, slot));  // posted now, before the echo can come
    const std::string text = "message " + std::to_string(i);
    std::memcpy(mem.data(), text.data(), text.size());
    wr_result<B> sent = co_await qp.send(mem.local(0, static_cast<std::uint32_t>(text.size())));
    if (!sent.ok()) throw std::runtime_error("client: send " + sent.message());
    wr_result<B> got = co_await std::move(reply).within(5s);
    if (!got.ok()) throw std::runtime_error("client: receive " + got.message());
    echoed += got.completion().byte_len() == text.size() &&
              std::memcmp(mem.data() + slot, text.data(), text.size()) == 0;
  }
  (void)co_await qp.send(mem.local(0, 0));  // tells the server to stop
  co_return echoed;
}
}  // namespace

int main(int argc, char** argv) try {
  constexpr int messages = 100;
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  event_loop loop;
  cq_type client_cq(loop, devices.first.create_cq<event_driven<>>(64));
  cq_type server_cq(loop, devices.second.create_cq<event_driven<>>(64));
  auto cpd = devices.first.create_pd();
  auto spd = devices.second.create_pd();
  buffer cmem = cpd.allocate<access::local_write>(2 * slot);
  buffer smem = spd.allocate<access::local_write>(slot);

  async_queue_pair c0(client_cq, cpd.create_qp<rc>(client_cq.queue(), qp_cap{16, 16}));
  async_queue_pair s0(server_cq, spd.create_qp<rc>(server_cq.queue(), qp_cap{16, 16}));
  const endpoint ce = c0.local_endpoint(), se = s0.local_endpoint();
  connected_qp client = std::move(c0).connect(se);
  connected_qp server = std::move(s0).connect(ce);

  int served = -1;
  auto server_task = [&]() -> task<void> { served = co_await serve(server, smem); };
  loop.spawn(server_task());
  const int echoed = loop.run(talk(client, cmem, messages));
  loop.run();  // until the server has returned
  std::printf("echoed %d of %d messages, server served %d\n", echoed, messages, served);
  return echoed == messages && served == messages ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "coro_echo: %s\n", e.what());
  return 1;
}
