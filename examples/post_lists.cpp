// Post lists and selective signaling: qp.make_batch<32>() is a list of up to 32 WRs
// that qp.post(batch) hands to the HCA with one doorbell, and signal_every<16> asks for
// a completion on every 16th WR only. An unsignaled WR keeps its send-queue slot until
// a later signaled WR's completion is polled, so the loop polls between lists; the queue
// pair tracks those credits and refuses (sq_full) rather than overflow the queue.
#include "example_backend.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>

using namespace rdmakit;
using rdmakit_examples::B;

int main(int argc, char** argv) try {
  constexpr std::uint32_t lists = 8, per_list = 32, size = 64, total = lists * per_list;
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& dev0 = devices.first;
  auto& dev1 = devices.second;
  auto pd0 = dev0.create_pd();
  auto pd1 = dev1.create_pd();
  auto cq0 = dev0.create_cq(256);
  auto cq1 = dev1.create_cq(256);
  auto src = pd0.allocate<access::local_write>(total * size);
  auto dst = pd1.allocate<access::local_write | access::remote_write>(total * size);
  for (std::size_t i = 0; i < src.size(); ++i) src.data()[i] = static_cast<std::byte>(i % 251);

  // signal_every<16> needs a send queue of at least 16 WRs (create_qp checks it).
  auto a0 = pd0.create_qp<rc, signal_every<16>>(cq0, qp_cap{64, 16});
  auto b0 = pd1.create_qp<rc>(cq1, qp_cap{16, 16});
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);
  auto b = std::move(b0).connect(ea);
  const auto remote = dst.remote();

  int signaled = 0, failed = 0;
  auto count = [&](const completion<B>& c) { c.ok() ? ++signaled : ++failed; };
  auto batch = a.make_batch<32>();
  for (std::uint32_t l = 0; l < lists; ++l) {
    for (std::uint32_t k = 0; k < per_list; ++k) {
      const std::uint32_t i = l * per_list + k, off = i * size;
      if (!batch.add(op::write{src.local(off, size), remote.sub(off, size)}, i)) return 1;  // false: full
    }
    // One doorbell for 32 WRs. sq_full: the slots held by unsignaled WRs are not back
    // yet: poll (which frees them) and try again. The batch is kept until it goes in.
    post_result r = a.post(batch);
    for (int tries = 0; r.status == post_status::sq_full && tries < 100; ++tries) {
      (void)cq0.wait(count, std::chrono::milliseconds{100});
      r = a.post(batch);
    }
    if (!r.ok()) return std::printf("post of list %u failed: %s\n", l, to_string(r.status)), 1;
  }
  // Every 16th WR was signaled: total / 16 completions for `total` writes.
  for (int tries = 0; signaled + failed < static_cast<int>(total / 16) && tries < 100; ++tries)
    (void)cq0.wait(count, std::chrono::milliseconds{100});

  const bool same = std::memcmp(src.data(), dst.data(), src.size()) == 0;
  std::printf("%u writes in %u post lists: %d signaled completions (expected %u), %d failed, bytes %s, "
              "%u send credits free\n", total, lists, signaled, total / 16, failed, same ? "match" : "DIFFER",
              a.send_credits());
  return signaled == static_cast<int>(total / 16) && failed == 0 && same && a.send_credits() == 64 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
