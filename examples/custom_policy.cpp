// User-defined policies. queue_pair and completion_queue take any type that satisfies
// the `signaling` / `polling` concepts, so your own policies plug in with the library
// unchanged:
//  - signal_quarter<Depth>: four completions per send-queue depth (every Depth/4-th WR,
//    or any WR posted with send_flags::signaled); min_sq_depth = Depth, so create_qp
//    refuses a send queue too small for the policy instead of letting it wedge.
//  - spin_then_yield<Spins>: busy-polls, and after Spins empty polls yields the core to
//    other threads between polls; gives up at the timeout.
#include "example_backend.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <thread>

using namespace rdmakit;
using rdmakit_examples::B;

template <std::uint32_t Depth>
struct signal_quarter {
  static_assert(Depth >= 4 && Depth % 4 == 0, "signal_quarter<Depth>: Depth is a multiple of 4");
  static constexpr std::string_view name = "signal_quarter";
  static constexpr std::uint32_t min_sq_depth = Depth;
  // wanted: the caller passed send_flags::signaled; run: unsignaled WRs since the last
  // signaled one. (The library also signals the WR that takes the last free slot.)
  static constexpr bool signal(bool wanted, std::uint32_t run) noexcept { return wanted || run + 1 >= Depth / 4; }
};

template <unsigned Spins>
struct spin_then_yield {
  static constexpr std::string_view name = "spin_then_yield";
  static constexpr int batch = 8;                // completions per poll_cq
  static constexpr bool needs_channel = false;   // no completion channel: never sleeps on events
  static constexpr unsigned ack_batch = 1;
  // ops.poll() returns the completions delivered (or -errno); return that, 0 on timeout.
  template <class Ops>
  static int wait(Ops& ops, std::chrono::milliseconds timeout) noexcept(noexcept(ops.poll())) {
    // A timeout past a year is "no limit": now() + milliseconds::max() would overflow.
    const auto deadline = timeout > std::chrono::hours(24 * 365) ? std::chrono::steady_clock::time_point::max()
                                                                  : std::chrono::steady_clock::now() + timeout;
    for (unsigned i = 0;; ++i) {
      if (int n = ops.poll(); n != 0) return n;
      if (i >= Spins) {
        if (std::chrono::steady_clock::now() >= deadline) return 0;
        std::this_thread::yield();
      }
    }
  }
};

static_assert(signaling<signal_quarter<32>>, "signal_quarter must satisfy rdmakit::signaling");
static_assert(polling<spin_then_yield<64>>, "spin_then_yield must satisfy rdmakit::polling");

int main(int argc, char** argv) try {
  constexpr std::uint32_t depth = 32, writes = 64;
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& dev0 = devices.first;
  auto& dev1 = devices.second;
  auto pd0 = dev0.create_pd();
  auto pd1 = dev1.create_pd();
  auto cq0 = dev0.create_cq<spin_then_yield<64>>(128);  // the custom polling policy
  auto cq1 = dev1.create_cq(128);
  auto src = pd0.allocate<access::local_write>(writes * 8);
  auto dst = pd1.allocate<access::local_write | access::remote_write>(writes * 8);

  // The policy's min_sq_depth is enforced at creation: 16 < 32 is refused.
  bool refused = false;
  try {
    (void)pd0.create_qp<rc, signal_quarter<depth>>(cq0, qp_cap{16, 16});
  } catch (const usage_error& e) {
    refused = true;
    std::printf("as expected: %s\n", e.what());
  }

  auto a0 = pd0.create_qp<rc, signal_quarter<depth>>(cq0, qp_cap{depth, 16});
  auto b0 = pd1.create_qp<rc>(cq1, qp_cap{16, 16});
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);
  auto b = std::move(b0).connect(ea);

  int signaled = 0, failed = 0;
  auto count = [&](const completion<B>& c) { c.ok() ? ++signaled : ++failed; };
  for (std::uint32_t i = 0; i < writes; ++i) {
    post_result r = a.post(op::write{src.local(i * 8, 8), dst.remote().sub(i * 8, 8)}, i);
    for (int tries = 0; r.status == post_status::sq_full && tries < 100; ++tries) {
      (void)cq0.wait(count, std::chrono::milliseconds{100});  // frees the slots
      r = a.post(op::write{src.local(i * 8, 8), dst.remote().sub(i * 8, 8)}, i);
    }
    if (!r.ok()) return std::printf("post %u failed: %s\n", i, to_string(r.status)), 1;
  }
  for (int tries = 0; signaled + failed < static_cast<int>(writes / (depth / 4)) && tries < 100; ++tries)
    (void)cq0.wait(count, std::chrono::milliseconds{100});

  std::printf("%s + %s: %u writes, %d signaled completions (expected %u), %d failed\n",
              decltype(a)::signaling_policy::name.data(), decltype(cq0)::polling_policy::name.data(), writes,
              signaled, writes / (depth / 4), failed);
  return refused && signaled == static_cast<int>(writes / (depth / 4)) && failed == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
