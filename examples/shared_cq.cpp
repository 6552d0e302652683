// Many queue pairs on one shared completion queue: 16 RC connections between two
// devices, every client QP on one CQ and every server QP on another. Each server QP
// gets its own handler with cq.on(qp, handler); cq.dispatch_wait() polls the shared CQ
// and routes each completion (by its QP number) to that QP's handler.
#include "example_backend.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace rdmakit;
using rdmakit_examples::B;
using connected_qp = queue_pair<B, rc, signal_all, qp_state::rts>;

// The text message k on connection i carries: "qp 07 msg 3" (fits in 16 bytes with its NUL).
std::string label(std::uint32_t i, std::uint64_t k) {
  return "qp " + std::string(i < 10 ? "0" : "") + std::to_string(i) + " msg " + std::to_string(k);
}

int main(int argc, char** argv) try {
  constexpr std::uint32_t qps = 16, per_qp = 4, msg = 16;
  const qp_cap caps{8, 8};
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& dev0 = devices.first;
  auto& dev1 = devices.second;
  auto pd0 = dev0.create_pd();
  auto pd1 = dev1.create_pd();
  // A shared CQ must hold every attached QP's send + receive depth: 16 × (8 + 8).
  auto client_cq = dev0.create_cq(qps * 16);
  auto server_cq = dev1.create_cq(qps * 16);
  auto tx = pd0.allocate<access::local_write>(qps * per_qp * msg);
  auto rx = pd1.allocate<access::local_write>(qps * per_qp * msg);

  std::vector<connected_qp> clients, servers;
  for (std::uint32_t i = 0; i < qps; ++i) {
    auto c = pd0.create_qp<rc>(client_cq, caps);
    auto s = pd1.create_qp<rc>(server_cq, caps);
    const endpoint ce = c.local_endpoint(), se = s.local_endpoint();
    clients.push_back(std::move(c).connect(se));
    servers.push_back(std::move(s).connect(ce));
  }

  // One handler per server QP: it knows which connection it serves (i) and checks that
  // every message it gets was sent on that connection.
  std::uint32_t received[qps] = {}, wrong = 0;
  for (std::uint32_t i = 0; i < qps; ++i) {
    for (std::uint32_t k = 0; k < per_qp; ++k) {
      const std::uint32_t slot = i * per_qp + k;
      if (!servers[i].post_recv(rx.local(slot * msg, msg), slot).ok()) return std::puts("post_recv failed"), 1;
    }
    server_cq.on(servers[i], [&, i](const completion<B>& c) {
      const char* text = reinterpret_cast<const char*>(rx.data() + c.wr_id() * msg);
      if (c.ok() && label(i, c.wr_id() % per_qp) == text) ++received[i];
      else ++wrong;
    });
  }

  // Every client QP sends per_qp messages naming itself.
  for (std::uint32_t i = 0; i < qps; ++i)
    for (std::uint32_t k = 0; k < per_qp; ++k) {
      const std::uint32_t slot = i * per_qp + k;
      const std::string text = label(i, k);
      std::memcpy(tx.data() + slot * msg, text.c_str(), text.size() + 1);
      if (!clients[i].post(op::send{tx.local(slot * msg, msg)}, slot).ok()) return std::puts("post failed"), 1;
    }

  // Send completions have no handler here: dispatch(fallback) hands them to the fallback.
  std::uint32_t sent = 0;
  for (int tries = 0; sent < qps * per_qp && tries < 100; ++tries) {
    client_cq.dispatch([&](const completion<B>& c) { sent += c.ok(); });
  }
  std::uint32_t total = 0;
  for (int tries = 0; total < qps * per_qp && tries < 100; ++tries) {
    (void)server_cq.dispatch_wait(std::chrono::milliseconds{100});  // runs the handlers
    total = 0;
    for (const std::uint32_t n : received) total += n;
  }

  for (std::uint32_t i = 0; i < qps; ++i)
    if (received[i] != per_qp) std::printf("  QP %u got %u of %u\n", i, received[i], per_qp);
  std::printf("%u QPs on one CQ: %u sent, %u received by their own handlers, %u wrong, %llu unrouted\n", qps,
              sent, total, wrong, static_cast<unsigned long long>(server_cq.unrouted()));
  return sent == qps * per_qp && total == qps * per_qp && wrong == 0 && server_cq.unrouted() == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
