// The QP pool: pd.create_qp_pool<T, S>(cq, count, caps) creates several queue pairs on
// one CQ at once (the CQ's size is checked for all of them first), connects them to a
// peer pool in one call, and hands them out round-robin with pool.next(). Here four
// RC QPs spread 16 RDMA WRITEs of a 4 KiB buffer over the four connections.
#include "example_backend.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

using namespace rdmakit;
using rdmakit_examples::B;

int main(int argc, char** argv) try {
  constexpr std::size_t pool_size = 4, chunks = 16, chunk = 256;
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& dev0 = devices.first;
  auto& dev1 = devices.second;
  auto pd0 = dev0.create_pd();
  auto pd1 = dev1.create_pd();
  auto cq0 = dev0.create_cq(pool_size * 32);  // each QP: 16 send + 16 receive entries
  auto cq1 = dev1.create_cq(pool_size * 32);
  auto src = pd0.allocate<access::local_write>(chunks * chunk);
  auto dst = pd1.allocate<access::local_write | access::remote_write>(chunks * chunk);
  for (std::size_t i = 0; i < src.size(); ++i) src.data()[i] = static_cast<std::byte>(i * 13 + 1);

  auto local = pd0.create_qp_pool<rc>(cq0, pool_size, qp_cap{16, 16});
  auto peer = pd1.create_qp_pool<rc>(cq1, pool_size, qp_cap{16, 16});
  // Exchange endpoints (in pool order: QP i connects to the peer's QP i), then connect.
  const auto mine = local.local_endpoints(), theirs = peer.local_endpoints();
  auto pool = std::move(local).connect(theirs);
  auto peer_pool = std::move(peer).connect(mine);

  // Round-robin: chunk i goes out on QP i % 4 (pool.next() cycles through the pool).
  const auto remote = dst.remote();
  for (std::size_t i = 0; i < chunks; ++i) {
    auto& qp = pool.next();
    if (!qp.post(op::write{src.local(i * chunk, chunk), remote.sub(i * chunk, chunk)}, i).ok())
      return std::puts("post failed"), 1;
  }

  // One CQ for the whole pool; pool.find(qp_num) says which QP a completion belongs to.
  std::map<std::uint32_t, int> per_qp;
  int done = 0, failed = 0;
  for (int tries = 0; done + failed < static_cast<int>(chunks) && tries < 100; ++tries)
    cq0.wait([&](const completion<B>& c) {
      if (!c.ok() || pool.find(c.qp_num()) == nullptr) return (void)++failed;
      ++per_qp[c.qp_num()];
      ++done;
    }, std::chrono::milliseconds{100});

  for (auto [qpn, n] : per_qp) std::printf("  QP %#x: %d writes\n", qpn, n);
  const bool same = std::memcmp(src.data(), dst.data(), src.size()) == 0;
  const bool spread = per_qp.size() == pool_size;
  std::printf("pool of %zu: %d writes completed, %d failed, bytes %s, %s\n", pool.size(), done, failed,
              same ? "match" : "DIFFER", spread ? "spread over every QP" : "NOT SPREAD");
  return done == static_cast<int>(chunks) && failed == 0 && same && spread && peer_pool.size() == pool_size ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
