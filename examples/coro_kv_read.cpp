// A remote key-value table read with RDMA READ from a coroutine. The server registers a
// table of fixed-size slots for remote reads and never touches the data path again; the
// client hashes a key to its slot and awaits the READ that fetches it (several READs in
// flight at once, each resumed by its own completion). Reading past the table fails
// with REM_ACCESS_ERR, which puts the queue pair in error: a receive still awaited is
// flushed (its coroutine resumes with WR_FLUSH_ERR), the next READ is refused at once
// (not posted), and nothing waits forever.
#include "example_backend.hpp"

#include <rdmakit/async_queue_pair.hpp>
#include <rdmakit/event_loop.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace rdmakit;
using rdmakit_examples::B;
using namespace std::chrono_literals;
using cq_type = async_completion_queue<B, event_driven<>>;
using connected_qp = async_queue_pair<B, rc, signal_all, qp_state::rts>;

namespace {
constexpr std::uint32_t slots = 64, slot_size = 32;  // 16-byte key, 16-byte value

std::uint32_t slot_of(const std::string& key) {  // FNV-1a; the table has no collisions here
  std::uint32_t h = 2166136261u;
  for (const char c : key) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h % slots;
}

void put(std::byte* table, const std::string& key, const std::string& value) {
  std::byte* s = table + slot_of(key) * slot_size;
  std::memset(s, 0, slot_size);
  std::memcpy(s, key.data(), std::min<std::size_t>(key.size(), 16));
  std::memcpy(s + 16, value.data(), std::min<std::size_t>(value.size(), 16));
}

task<int> lookups(connected_qp& qp, memory_region<B, access::local_write>& local,
                  remote_region<access::remote_read> table, const std::vector<std::string>& keys) {
  // One READ per key, all posted before the first is awaited.
  std::vector<decltype(qp.read(local.local(0, slot_size), table))> reads;
  reads.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i)
    reads.push_back(qp.read(local.local(static_cast<std::uint32_t>(i * slot_size), slot_size),
                            table.sub(slot_of(keys[i]) * slot_size, slot_size)));
  int found = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    wr_result<B> r = co_await std::move(reads[i]).within(5s);
    if (!r.ok()) throw std::runtime_error("READ of " + keys[i] + ": " + r.message());
    const char* s = reinterpret_cast<const char*>(local.data() + i * slot_size);
    if (std::strncmp(s, keys[i].c_str(), 16) == 0) {
      std::printf("  %-8s -> %.16s\n", keys[i].c_str(), s + 16);
      ++found;
    }
  }
  // A receive waits meanwhile (nothing will be sent): when the queue pair goes to ERR
  // below, it is flushed, and its coroutine resumes with WR_FLUSH_ERR instead of hanging.
  auto idle = qp.recv(local.local(0, slot_size));
  // Past the end of the table: the remote side refuses it, the QP goes to ERR.
  wr_result<B> bad = co_await qp.read(local.local(0, slot_size),
                                      remote_region<access::remote_read>::unchecked(
                                          table.addr() + slots * slot_size, table.rkey(), slot_size));
  std::printf("  read past the table: %s\n", to_string(bad.status()));
  wr_result<B> flushed = co_await std::move(idle).within(5s);
  std::printf("  the waiting receive: %s\n", to_string(flushed.status()));
  wr_result<B> after = co_await qp.read(local.local(0, slot_size), table.sub(0, slot_size));
  std::printf("  then: %s\n", after.message().c_str());
  if (bad.status() != wc_status::rem_access_err || flushed.status() != wc_status::wr_flush_err ||
      after.outcome() != wr_outcome::not_posted)
    co_return -1;
  co_return found;
}
}  // namespace

int main(int argc, char** argv) try {
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  event_loop loop;
  cq_type client_cq(loop, devices.first.create_cq<event_driven<>>(64));
  cq_type server_cq(loop, devices.second.create_cq<event_driven<>>(64));
  auto cpd = devices.first.create_pd();
  auto spd = devices.second.create_pd();
  auto table = spd.allocate<access::local_write | access::remote_read>(slots * slot_size);
  auto local = cpd.allocate<access::local_write>(slots * slot_size);
  const std::vector<std::string> keys{"alpha", "beta", "gamma", "delta"};
  for (const auto& k : keys) put(table.data(), k, "value of " + k);

  async_queue_pair c0(client_cq, cpd.create_qp<rc>(client_cq.queue(), qp_cap{16, 16}));
  async_queue_pair s0(server_cq, spd.create_qp<rc>(server_cq.queue(), qp_cap{16, 16}));
  const endpoint ce = c0.local_endpoint(), se = s0.local_endpoint();
  connected_qp client = std::move(c0).connect(se);
  connected_qp server = std::move(s0).connect(ce);  // passive: the READs never involve its CPU

  const int found = loop.run(lookups(client, local, table.remote(), keys));
  std::printf("found %d of %zu keys\n", found, keys.size());
  return found == static_cast<int>(keys.size()) ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "coro_kv_read: %s\n", e.what());
  return 1;
}
