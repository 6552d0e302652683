// The seed walkthrough on raw backend calls: PD, a 1 MiB buffer registered for local
// write + remote read/write, a 1024-entry CQ, two RC QPs (128 WRs, 2 SGEs) brought to
// RTS against each other by exchanging QPN/LID/GID/PSN, a 1 MiB SEND, then an RDMA
// WRITE with a wrong rkey that must fail with REM_ACCESS_ERR.
// Runs on the mock by default; `walkthrough ibverbs [device] [gid-index]` uses real verbs.
#include <rdmakit/backends/mock.hpp>
#if RDMAKIT_HAVE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace rdmakit;

namespace {

struct endpoint_info {
  std::uint32_t qpn;
  std::uint16_t lid;
  gid g;
  std::uint32_t psn;
};

template <class B>
void to_rts(typename B::qp q, const endpoint_info& peer, int gid_index) {
  using m = qp_attr_mask;
  qp_attr a;
  a.state = qp_state::init;
  a.port_num = 1;
  a.access_flags = access::local_write | access::remote_write | access::remote_read;
  B::modify_qp(q, a, m::state | m::pkey_index | m::port | m::access_flags);
  a.state = qp_state::rtr;
  a.path_mtu = mtu::mtu_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.av.is_global = true;
  a.av.dlid = peer.lid;
  a.av.grh.dgid = peer.g;
  a.av.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
  a.av.grh.hop_limit = 1;
  B::modify_qp(q, a, m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic | m::min_rnr_timer);
  a.state = qp_state::rts;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0x1234;  // our own PSN, which the peer took as its rq_psn
  a.max_rd_atomic = 1;
  B::modify_qp(q, a, m::state | m::timeout | m::retry_cnt | m::rnr_retry | m::sq_psn | m::max_qp_rd_atomic);
}

template <class B>
typename B::wc wait_one(typename B::cq cq) {
  typename B::wc wc{};
  for (int tries = 0; tries < 5'000'000; ++tries)
    if (B::poll_cq(cq, 1, &wc) == 1) return wc;
  std::fprintf(stderr, "no completion after 5M polls\n");
  std::exit(2);
}

template <class B>
int run(const std::string& device, int gid_index) {
  auto ctx = B::open_device(device);
  auto pd = B::alloc_pd(ctx);
  constexpr std::size_t size = 1 << 20;
  std::vector<char> src(size), dst(size, 0);
  for (std::size_t i = 0; i < size; ++i) src[i] = static_cast<char>(i * 7);
  const auto acc = access::local_write | access::remote_read | access::remote_write;
  auto src_mr = B::reg_mr(pd, src.data(), size, acc);
  auto dst_mr = B::reg_mr(pd, dst.data(), size, acc);
  auto cq = B::create_cq(ctx, 1024, {}, 0);
  qp_cap caps{128, 128, 2, 2, 0};
  auto a = B::create_qp(pd, cq, cq, qp_type::rc, caps, true);
  auto b = B::create_qp(pd, cq, cq, qp_type::rc, caps, true);
  auto port = B::query_port(ctx, 1);
  gid g = B::query_gid(ctx, 1, gid_index).value;
  endpoint_info ea{B::qp_num(a), port.lid, g, 0x1234}, eb{B::qp_num(b), port.lid, g, 0x1234};
  to_rts<B>(a, eb, gid_index);
  to_rts<B>(b, ea, gid_index);
  std::printf("%s device %s: QP %#x <-> QP %#x via GID %s\n", std::string(B::name).c_str(),
              B::device_name(ctx).c_str(), ea.qpn, eb.qpn, g.to_string().c_str());

  typename B::sge rs, ss;
  B::set_sge(rs, reinterpret_cast<std::uint64_t>(dst.data()), size, B::mr_lkey(dst_mr));
  B::set_sge(ss, reinterpret_cast<std::uint64_t>(src.data()), size, B::mr_lkey(src_mr));
  typename B::recv_wr rwr;
  typename B::recv_wr* bad_r = nullptr;
  B::set_recv(rwr, 1, &rs, 1);
  if (int e = B::post_recv(b, &rwr, &bad_r)) throw verbs_error("ibv_post_recv", e);
  typename B::send_wr swr;
  typename B::send_wr* bad_s = nullptr;
  B::set_send(swr, 2, opcode::send, send_flags::signaled, &ss, 1);
  if (int e = B::post_send(a, &swr, &bad_s)) throw verbs_error("ibv_post_send", e);
  int ok = 0;
  for (int i = 0; i < 2; ++i) {
    auto wc = wait_one<B>(cq);
    std::printf("  completion wr_id=%llu %s %s, %u bytes\n", static_cast<unsigned long long>(B::get_wr_id(wc)),
                to_string(B::get_opcode(wc)), to_string(B::get_status(wc)), B::get_byte_len(wc));
    ok += B::get_status(wc) == wc_status::success;
  }
  const bool same = std::memcmp(src.data(), dst.data(), size) == 0;
  std::printf("1 MiB SEND: %s, bytes %s\n", ok == 2 ? "SUCCESS" : "FAILED", same ? "match" : "DIFFER");

  B::set_send(swr, 3, opcode::rdma_write, send_flags::signaled, &ss, 1);
  B::set_rdma(swr, reinterpret_cast<std::uint64_t>(dst.data()), B::mr_rkey(dst_mr) ^ 0x5a5a);
  if (int e = B::post_send(a, &swr, &bad_s)) throw verbs_error("ibv_post_send", e);
  auto wc = wait_one<B>(cq);
  const bool rejected = B::get_status(wc) == wc_status::rem_access_err;
  std::printf("RDMA WRITE with a wrong rkey: %s (%s)\n", to_string(B::get_status(wc)),
              rejected ? "as expected" : "UNEXPECTED");
  // Drain the rest (the responder's QP went to ERR too), then clean up.
  while (B::poll_cq(cq, 1, &wc) > 0) {
  }
  B::destroy_qp(a);
  B::destroy_qp(b);
  B::destroy_cq(cq);
  B::dereg_mr(src_mr);
  B::dereg_mr(dst_mr);
  B::dealloc_pd(pd);
  B::close_device(ctx);
  return ok == 2 && same && rejected ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string backend = argc > 1 ? argv[1] : "mock";
  if (backend == "mock") return run<backends::mock>("mock0", 1);
#if RDMAKIT_HAVE_IBVERBS
  if (backend == "ibverbs") return run<backends::ibverbs>(argc > 2 ? argv[2] : "", argc > 3 ? std::atoi(argv[3]) : 1);
#endif
  std::fprintf(stderr, "usage: %s [mock | ibverbs [device] [gid-index]]\n", argv[0]);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
