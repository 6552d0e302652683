// Positive control: everything the compile-fail cases forbid has a legal spelling that
// compiles. If this file stops compiling, the cases prove nothing.
#include <cases.hpp>

void f() {
  auto& r = region();
  auto rc_q = pd().create_qp<rc, signal_every<16>>(cq(), static_caps<32, 32>{});
  (void)rc_q.post_recv(r.local(), 1);
  auto live = std::move(rc_q).connect(endpoint{});
  (void)live.send(r.local(), 1);
  (void)live.send_imm(r.local(), 7, 1);
  (void)live.write(r.local(), r.remote(), 1);
  (void)live.write_imm(r.local(), r.remote(), 7, 1);
  (void)live.read(r.local(), r.remote(), 1);
  (void)live.compare_swap(r.local(0, 8), r.remote(), 1, 2, 3);
  (void)live.fetch_add(r.local(0, 8), r.remote(), 1, 2);
  auto b = live.make_batch<8, 2>();
  b.send(r.local(), 1);
  b.write(r.local(), r.remote(), 2);
  b.read(r.local(), r.remote(), 3);
  b.fetch_add(r.local(0, 8), r.remote(), 1, 4);
  (void)live.post(b);

  auto& uc_q = connected<uc>();
  (void)uc_q.send(r.local(), 1);
  (void)uc_q.write(r.local(), r.remote(), 1);
  (void)uc_q.write_imm(r.local(), r.remote(), 9, 1);

  auto ud_q = std::move(fresh<ud>()).activate();
  (void)ud_q.send(ah().to(7), r.local(), 1);
  (void)ud_q.send_imm(ah().to(7), r.local(), 5, 1);

  auto peer = remote_region<>::unchecked(0x1000, 42, 64);
  (void)live.write(r.local(), peer, 1);
  (void)r.rkey();

  // With options, on a backend without SRQs: the SRQ overloads must stay out of the way.
  auto with_opts = pd().create_qp<rc>(cq(), qp_cap{8, 8}, qp_options{});
  auto free_opts = create_qp<rc>(pd(), cq(), qp_cap{8, 8}, qp_options{});
}

// Shared receive queues over the SRQ archetype: receives go to the SRQ, sends to the QP.
using BS = rdmakit::archetype_srq_backend;
protection_domain<BS>& srq_pd();
completion_queue<BS>& srq_cq();
void g() {
  auto srq = srq_pd().create_srq({.max_wr = 64, .max_sge = 1, .limit = 8});
  auto r = srq_pd().allocate<all_rights>(4096);
  (void)srq.post_recv(r.local(), 1);
  const local_buffer bufs[] = {r.local(0, 64), r.local(64, 64)};
  (void)srq.post_recvs(bufs, 2);
  srq.arm_limit(4);
  (void)srq.limit();
  auto q = srq_pd().create_qp<rc, signal_every<16>>(srq_cq(), srq, qp_cap{32, 0});
  auto live = std::move(q).connect(endpoint{});
  (void)live.send(r.local(), 3);
  auto u = create_qp<ud>(srq_pd(), srq_cq(), srq, qp_cap{8, 0}).activate();
  (void)u.qp_num();
  auto fresh_q = std::move(live).reset();
}
