// An event-driven server: its completion queue uses the event_driven<> polling policy,
// so cq.wait() sleeps on the CQ's completion channel instead of spinning. A std::thread
// serves that CQ while the main thread (the client) posts SENDs; a SEND with a "stop"
// immediate ends the server, and every wait is bounded so nothing can hang.
// Threads: each queue pair and its CQ are used by one thread at a time (the server's by
// the server thread, the client's by main); different QPs/CQs on different threads is fine.
#include "example_backend.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

using namespace rdmakit;
using rdmakit_examples::B;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  constexpr std::uint32_t messages = 32, depth = 64;
  constexpr std::uint32_t stop = 0xffffffffu;  // the immediate that tells the server to quit
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& client_dev = devices.first;
  auto& server_dev = devices.second;
  auto cpd = client_dev.create_pd();
  auto spd = server_dev.create_pd();
  auto client_cq = client_dev.create_cq(2 * depth);                   // busy_poll<> (the default)
  auto server_cq = server_dev.create_cq<event_driven<>>(2 * depth);   // sleeps on a channel
  auto tx = cpd.allocate<access::local_write>(8 * (messages + 1));
  auto rx = spd.allocate<access::local_write>(8 * depth);

  auto c0 = cpd.create_qp<rc>(client_cq, qp_cap{depth, depth});
  auto s0 = spd.create_qp<rc>(server_cq, qp_cap{depth, depth});
  const endpoint ce = c0.local_endpoint(), se = s0.local_endpoint();
  auto client = std::move(c0).connect(se);
  auto server = std::move(s0).connect(ce);
  for (std::uint32_t i = 0; i < depth; ++i)  // receives before the first SEND can arrive
    if (!server.post_recv(rx.local(i * 8, 8), i).ok()) return std::puts("post_recv failed"), 1;

  std::atomic<bool> abort{false};  // lets main stop the server if the client fails
  std::uint32_t served = 0;
  std::uint64_t sum = 0;
  bool stopped = false;
  std::thread server_thread([&] {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!stopped && !abort && std::chrono::steady_clock::now() < deadline) {
      // Sleeps up to 100 ms on the channel; returns as soon as completions arrive.
      server_cq.wait([&](const completion<B>& c) {
        if (!c.ok() || !c.is_recv()) return;
        if (c.has_imm() && c.imm() == stop) return (void)(stopped = true);
        std::uint64_t v;
        std::memcpy(&v, rx.data() + c.wr_id() * 8, 8);
        sum += v;
        ++served;
        (void)server.post_recv(rx.local(c.wr_id() * 8, 8), c.wr_id());  // reuse the buffer
      }, 100ms);
    }
  });

  // The client: SEND the numbers 1..messages, then the stop message.
  std::uint32_t sent = 0;
  for (std::uint32_t i = 1; i <= messages + 1; ++i) {
    const std::uint64_t v = i;
    std::memcpy(tx.data() + i * 8 - 8, &v, 8);
    const auto buf = tx.local(i * 8 - 8, 8);
    const auto r = i <= messages ? client.post(op::send{buf}, i) : client.post(op::send_imm{buf, stop}, i);
    if (!r.ok()) {
      std::printf("post failed: %s\n", to_string(r.status));
      break;
    }
  }
  for (int tries = 0; sent < messages + 1 && tries < 50; ++tries)
    client_cq.wait([&](const completion<B>& c) { sent += c.ok(); }, 100ms);
  if (sent != messages + 1) abort = true;
  server_thread.join();  // clean shutdown: the thread has ended, its CQ can be destroyed

  const std::uint64_t expected = std::uint64_t{messages} * (messages + 1) / 2;
  std::printf("client sent %u, server served %u (sum %llu, expected %llu), %s\n", sent, served,
              static_cast<unsigned long long>(sum), static_cast<unsigned long long>(expected),
              stopped ? "stopped on request" : "DID NOT STOP");
  return stopped && served == messages && sum == expected ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
