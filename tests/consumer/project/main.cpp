// A downstream program on the mock HCA: a fabric, one device, two connected RC queue
// pairs, a SEND matched by a RECV, then an RDMA WRITE; each completion checked by wr_id
// and status, and the bytes compared. Where found, the ibverbs and rdmacm components are
// linked and called. Built by tests/consumer/run.sh as a Meson
// subproject user, against an install (Meson and plain pkg-config) and with CMake.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>
#if CONSUMER_HAVE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#endif
#if CONSUMER_HAVE_RDMACM
#include <rdmakit/backends/rdmacm.hpp>
#endif

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>

int main() try {
  using namespace rdmakit;
  using B = backends::mock;
  constexpr auto acc = access::local_write | access::remote_write;

  mock::fabric fab;
  device<B> dev(fab, "mock0");
  auto pd = dev.create_pd();
  auto cq = dev.create_cq(16);
  auto src = pd.allocate<acc>(4096);
  auto dst = pd.allocate<acc>(4096);
  auto a0 = pd.create_qp<rc>(cq, qp_cap{4, 4});
  auto b0 = pd.create_qp<rc>(cq, qp_cap{4, 4});
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);
  auto b = std::move(b0).connect(ea);

  unsigned done = 0;  // bit i: wr_id i completed successfully
  auto take = [&](const completion<B>& c) {
    if (c.ok()) done |= 1u << c.wr_id();
    else std::fprintf(stderr, "wr_id %llu: %s\n", static_cast<unsigned long long>(c.wr_id()), c.status_message().c_str());
  };
  std::memcpy(src.data(), "sent by SEND", 13);
  if (!b.post_recv(dst.local(), 1).ok() || !a.send(src.local(), 2).ok()) return 1;
  while (done != 0b110 && cq.wait(take)) {
  }
  const bool sent = done == 0b110 && std::memcmp(dst.data(), "sent by SEND", 13) == 0;
  std::memcpy(src.data(), "put by WRITE", 13);
  if (!a.write(src.local(), dst.remote(), 3).ok()) return 1;
  while (done != 0b1110 && cq.wait(take)) {
  }
  const bool written = done == 0b1110 && std::memcmp(dst.data(), "put by WRITE", 13) == 0;
  std::printf("rdmakit %s, %s: SEND/RECV %s, RDMA WRITE %s\n", RDMAKIT_VERSION_STRING, dev.name().c_str(),
              sent ? "ok" : "FAILED", written ? "ok" : "FAILED");
#if CONSUMER_HAVE_IBVERBS
  std::printf("ibverbs backend: built, %zu RDMA devices\n", backends::ibverbs::device_names().size());
#else
  std::printf("ibverbs backend: not built\n");
#endif
#if CONSUMER_HAVE_RDMACM
  // Linked: librdmacm's rdma_get_devices is called (no device here is fine).
  try {
    (void)rdmakit::device<backends::rdmacm>("");
  } catch (const std::exception&) {
  }
  std::printf("rdmacm backend: built\n");
#else
  std::printf("rdmacm backend: not built\n");
#endif
  return sent && written ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
