// A shared 64-bit counter in one server's memory, bumped by two clients with RDMA
// fetch-and-add (each returns the value it replaced), then reset with compare-and-swap.
// Atomics are RC only; the counter is 8 bytes, 8-aligned, registered with remote_atomic,
// and each old value lands in an 8-byte local buffer registered with local_write (in
// host byte order on the mock and rxe; mlx5 devices on x86 write it big-endian:
// docs/semantics.md §8.1).
#include "example_backend.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

using namespace rdmakit;
using rdmakit_examples::B;
using connected_qp = queue_pair<B, rc, signal_all, qp_state::rts>;

int main(int argc, char** argv) try {
  constexpr int rounds = 100;
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& client_dev = devices.first;
  auto& server_dev = devices.second;
  auto cpd = client_dev.create_pd();
  auto spd = server_dev.create_pd();
  auto ccq = client_dev.create_cq(64);
  auto scq = server_dev.create_cq(64);
  auto counter = spd.allocate<access::local_write | access::remote_atomic>(8);  // starts at 0
  auto results = cpd.allocate<access::local_write>(8 * 2);  // one 8-byte slot per client QP

  // Two client QPs, each connected to its own server QP; both server QPs share the counter.
  auto connect_pair = [&](connected_qp& client, connected_qp& server) {
    auto c = cpd.create_qp<rc>(ccq, qp_cap{8, 8});
    auto s = spd.create_qp<rc>(scq, qp_cap{8, 8});
    const endpoint ce = c.local_endpoint(), se = s.local_endpoint();
    client = std::move(c).connect(se);
    server = std::move(s).connect(ce);
  };
  connected_qp qp[2], peer[2];
  connect_pair(qp[0], peer[0]);
  connect_pair(qp[1], peer[1]);
  const auto target = counter.remote();

  // Posts one atomic on client `who`, waits for it and returns the old value (or ~0).
  auto old_value = [&](std::uint32_t who, const auto& operation) -> std::uint64_t {
    if (!qp[who].post(operation, who).ok()) return ~std::uint64_t{0};
    bool ok = false;
    for (int tries = 0; !ok && tries < 10; ++tries)
      if (!ccq.wait([&](const completion<B>& c) { ok = c.ok(); }, std::chrono::milliseconds{100})) break;
    std::uint64_t v = ~std::uint64_t{0};
    if (ok) std::memcpy(&v, results.data() + who * 8, 8);
    return v;
  };

  // Both clients add 1, taking turns. Every fetch_add sees a different old value.
  std::set<std::uint64_t> seen;
  for (int i = 0; i < rounds; ++i)
    for (std::uint32_t who = 0; who < 2; ++who)
      seen.insert(old_value(who, op::fetch_add{results.local(who * 8, 8), target, 1}));
  std::uint64_t value;
  std::memcpy(&value, counter.data(), 8);
  std::printf("after %d fetch_adds: counter = %llu, %zu distinct old values\n", 2 * rounds,
              static_cast<unsigned long long>(value), seen.size());
  const bool counted = value == 2 * rounds && seen.size() == 2 * rounds && *seen.rbegin() == 2 * rounds - 1;

  // compare_swap writes `swap` only when the counter equals `compare`: a stale guess
  // leaves it alone, the right one resets it to 0. Either way the old value comes back.
  const std::uint64_t stale = old_value(1, op::compare_swap{results.local(8, 8), target, 7, 0});
  const std::uint64_t reset = old_value(0, op::compare_swap{results.local(0, 8), target, 2 * rounds, 0});
  std::memcpy(&value, counter.data(), 8);
  std::printf("compare_swap(7 -> 0) saw %llu (no change); compare_swap(%d -> 0) saw %llu; counter = %llu\n",
              static_cast<unsigned long long>(stale), 2 * rounds, static_cast<unsigned long long>(reset),
              static_cast<unsigned long long>(value));
  return counted && stale == 2 * rounds && reset == 2 * rounds && value == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
