#pragma once
// The ibverbs backend's setup verbs, declared: backends::ibverbs forwards to them. Their
// bodies (ibverbs/device_verbs.hpp, ibverbs/qp_verbs.hpp) are inline in header-only
// builds; with RDMAKIT_SEPARATE_COMPILATION they are compiled once, where
// <rdmakit/backends/ibverbs/src.hpp> is included, and no other translation unit sees them.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

// Devices, ports, GIDs, asynchronous events (device_verbs.hpp).
RDMAKIT_DECL std::vector<std::string> device_names();
RDMAKIT_DECL ibv_context* open_device(std::string_view dev_name);
RDMAKIT_DECL device_attr query_device(ibv_context* ctx);
RDMAKIT_DECL port_attr query_port(ibv_context* ctx, std::uint8_t port);
RDMAKIT_DECL gid_entry query_gid(ibv_context* ctx, std::uint8_t port, int index);
RDMAKIT_DECL int get_async_event(ibv_context* ctx, std::chrono::milliseconds timeout, async_event& out) noexcept;
// PDs, MRs, AHs, completion channels, CQs (device_verbs.hpp).
RDMAKIT_DECL ibv_pd* alloc_pd(ibv_context* ctx);
RDMAKIT_DECL ibv_mr* reg_mr(ibv_pd* p, void* addr, std::size_t length, access flags);
RDMAKIT_DECL ibv_mw* alloc_mw(ibv_pd* p, mw_type type);
RDMAKIT_DECL ibv_ah* create_ah(ibv_pd* p, const ah_attr& attr);
RDMAKIT_DECL ibv_comp_channel* create_comp_channel(ibv_context* ctx);
RDMAKIT_DECL ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* ch, int comp_vector);
// Queue pairs (qp_verbs.hpp).
RDMAKIT_DECL ibv_qp* create_qp(ibv_pd* p, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq, qp_type type,
                               qp_cap& caps, bool sq_sig_all);
RDMAKIT_DECL qp_state query_qp_state(ibv_qp* q);
RDMAKIT_DECL void modify_qp(ibv_qp* q, const qp_attr& attr, qp_attr_mask mask);
// Shared receive queues (srq_verbs.hpp).
RDMAKIT_DECL ibv_srq* create_srq(ibv_pd* p, srq_attr& attr);
RDMAKIT_DECL srq_attr query_srq(ibv_srq* s);

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
