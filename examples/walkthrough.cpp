// The seed walkthrough on the policy layer: a 1 MiB buffer registered for local write
// + remote read/write, a 1024-entry CQ, two RC queue pairs (128 WRs, 2 SGEs) connected
// by exchanging their endpoints (QPN, LID, GID, PSN, MTU), a 1 MiB SEND, then an RDMA
// WRITE with a wrong rkey that fails with REM_ACCESS_ERR.
// Runs on the mock by default; `walkthrough ibverbs [device]` uses real verbs (rxe or a NIC).
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>
#if defined(RDMAKIT_HAVE_IBVERBS) && RDMAKIT_HAVE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#endif

#include <cstdio>
#include <cstring>
#include <string>

using namespace rdmakit;

namespace {

template <class B>
int run(const std::string& device_name) {
  constexpr auto acc = access::local_write | access::remote_read | access::remote_write;
  constexpr std::size_t mib = 1 << 20;
  device<B> dev(device_name);
  auto pd = dev.create_pd();
  auto cq = dev.create_cq(1024);
  auto src = allocate<acc>(pd, mib);  // generic code: no pd.template allocate<acc>(mib)
  auto dst = allocate<acc>(pd, mib);
  for (std::size_t i = 0; i < mib; ++i) src.data()[i] = static_cast<std::byte>(i * 7);

  const qp_cap caps{.max_send_wr = 128, .max_recv_wr = 128, .max_send_sge = 2, .max_recv_sge = 2};
  auto a0 = create_qp<rc>(pd, cq, caps);
  auto b0 = create_qp<rc>(pd, cq, caps);
  const endpoint ea = a0.local_endpoint(), eb = b0.local_endpoint();
  auto a = std::move(a0).connect(eb);  // RESET→INIT→RTR→RTS with RC's exact masks
  auto b = std::move(b0).connect(ea);
  std::printf("%s: QP %#x <-> QP %#x, GID %s (index %d, chosen automatically)\n", dev.name().c_str(), ea.qpn,
              eb.qpn, ea.gid.to_string().c_str(), a.gid_index());

  int ok = 0;
  auto show = [&](const completion<B>& c) {
    if (c.ok())  // an error completion carries only wr_id, status and qp_num
      std::printf("  wr_id=%llu %s: %u bytes\n", static_cast<unsigned long long>(c.wr_id()),
                  to_string(c.opcode()), c.byte_len());
    else
      std::printf("  wr_id=%llu: %s\n", static_cast<unsigned long long>(c.wr_id()), c.status_message().c_str());
    ok += c.ok();
  };
  if (!b.post_recv(dst.local(), 1).ok() || !a.send(src.local(), 2).ok()) return 1;
  cq.wait_for(2, show);  // bounded (1 s by default): a lost completion cannot hang it
  const bool same = std::memcmp(src.data(), dst.data(), mib) == 0;
  std::printf("1 MiB SEND: %s, bytes %s\n", ok == 2 ? "SUCCESS" : "FAILED", same ? "match" : "DIFFER");

  // A descriptor with a wrong rkey: only unchecked() can build one (peers' descriptors come that way).
  auto wrong = remote_region<>::unchecked(dst.remote().addr(), dst.remote().rkey() ^ 0x5a5a, mib);
  if (!a.write(src.local(), wrong, 3).ok()) return 1;
  wc_status st = wc_status::success;
  cq.wait_for(1, [&](const completion<B>& c) { show(c), st = c.status(); });
  std::printf("RDMA WRITE with a wrong rkey: %s\n", st == wc_status::rem_access_err ? "REM_ACCESS_ERR, as expected"
                                                                                     : "UNEXPECTED");
  return ok == 2 && same && st == wc_status::rem_access_err ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string backend = argc > 1 ? argv[1] : "mock";
  // device<mock>("mock0") opens from rdmakit::mock::default_fabric(); own fabrics are passed.
  if (backend == "mock") return run<backends::mock>("mock0");
#if defined(RDMAKIT_HAVE_IBVERBS) && RDMAKIT_HAVE_IBVERBS
  if (backend == "ibverbs") return run<backends::ibverbs>(argc > 2 ? argv[2] : "");
#endif
  std::fprintf(stderr, "usage: %s [mock | ibverbs [device]]\n", argv[0]);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
