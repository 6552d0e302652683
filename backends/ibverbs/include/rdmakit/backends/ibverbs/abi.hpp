#pragma once
// rdmakit's enumerators carry the libibverbs ABI values, so the backend converts
// with plain casts. Every value it casts is checked here; a mismatch is a compile error.
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

template <class E>
constexpr auto value_of(E e) noexcept {
  return static_cast<std::underlying_type_t<E>>(e);
}
// Compares an rdmakit enumerator with an IBV_ constant, whatever the two types are.
#define RDMAKIT_IBV_SAME(rdmakit_value, ibv_value)                                       \
  static_assert(static_cast<unsigned long long>(::rdmakit::ibverbs::detail::value_of(   \
                    rdmakit_value)) == static_cast<unsigned long long>(ibv_value),      \
                #rdmakit_value " must equal " #ibv_value)

// Work completion status.
RDMAKIT_IBV_SAME(wc_status::success, IBV_WC_SUCCESS);
RDMAKIT_IBV_SAME(wc_status::loc_len_err, IBV_WC_LOC_LEN_ERR);
RDMAKIT_IBV_SAME(wc_status::loc_qp_op_err, IBV_WC_LOC_QP_OP_ERR);
RDMAKIT_IBV_SAME(wc_status::loc_eec_op_err, IBV_WC_LOC_EEC_OP_ERR);
RDMAKIT_IBV_SAME(wc_status::loc_prot_err, IBV_WC_LOC_PROT_ERR);
RDMAKIT_IBV_SAME(wc_status::wr_flush_err, IBV_WC_WR_FLUSH_ERR);
RDMAKIT_IBV_SAME(wc_status::mw_bind_err, IBV_WC_MW_BIND_ERR);
RDMAKIT_IBV_SAME(wc_status::bad_resp_err, IBV_WC_BAD_RESP_ERR);
RDMAKIT_IBV_SAME(wc_status::loc_access_err, IBV_WC_LOC_ACCESS_ERR);
RDMAKIT_IBV_SAME(wc_status::rem_inv_req_err, IBV_WC_REM_INV_REQ_ERR);
RDMAKIT_IBV_SAME(wc_status::rem_access_err, IBV_WC_REM_ACCESS_ERR);
RDMAKIT_IBV_SAME(wc_status::rem_op_err, IBV_WC_REM_OP_ERR);
RDMAKIT_IBV_SAME(wc_status::retry_exc_err, IBV_WC_RETRY_EXC_ERR);
RDMAKIT_IBV_SAME(wc_status::rnr_retry_exc_err, IBV_WC_RNR_RETRY_EXC_ERR);
RDMAKIT_IBV_SAME(wc_status::loc_rdd_viol_err, IBV_WC_LOC_RDD_VIOL_ERR);
RDMAKIT_IBV_SAME(wc_status::rem_inv_rd_req_err, IBV_WC_REM_INV_RD_REQ_ERR);
RDMAKIT_IBV_SAME(wc_status::rem_abort_err, IBV_WC_REM_ABORT_ERR);
RDMAKIT_IBV_SAME(wc_status::inv_eecn_err, IBV_WC_INV_EECN_ERR);
RDMAKIT_IBV_SAME(wc_status::inv_eec_state_err, IBV_WC_INV_EEC_STATE_ERR);
RDMAKIT_IBV_SAME(wc_status::fatal_err, IBV_WC_FATAL_ERR);
RDMAKIT_IBV_SAME(wc_status::resp_timeout_err, IBV_WC_RESP_TIMEOUT_ERR);
RDMAKIT_IBV_SAME(wc_status::general_err, IBV_WC_GENERAL_ERR);

// Completion opcodes.
RDMAKIT_IBV_SAME(wc_opcode::send, IBV_WC_SEND);
RDMAKIT_IBV_SAME(wc_opcode::rdma_write, IBV_WC_RDMA_WRITE);
RDMAKIT_IBV_SAME(wc_opcode::rdma_read, IBV_WC_RDMA_READ);
RDMAKIT_IBV_SAME(wc_opcode::comp_swap, IBV_WC_COMP_SWAP);
RDMAKIT_IBV_SAME(wc_opcode::fetch_add, IBV_WC_FETCH_ADD);
RDMAKIT_IBV_SAME(wc_opcode::bind_mw, IBV_WC_BIND_MW);
RDMAKIT_IBV_SAME(wc_opcode::local_inv, IBV_WC_LOCAL_INV);
RDMAKIT_IBV_SAME(wc_opcode::recv, IBV_WC_RECV);
RDMAKIT_IBV_SAME(wc_opcode::recv_rdma_with_imm, IBV_WC_RECV_RDMA_WITH_IMM);

// Send opcodes.
RDMAKIT_IBV_SAME(opcode::rdma_write, IBV_WR_RDMA_WRITE);
RDMAKIT_IBV_SAME(opcode::rdma_write_with_imm, IBV_WR_RDMA_WRITE_WITH_IMM);
RDMAKIT_IBV_SAME(opcode::send, IBV_WR_SEND);
RDMAKIT_IBV_SAME(opcode::send_with_imm, IBV_WR_SEND_WITH_IMM);
RDMAKIT_IBV_SAME(opcode::rdma_read, IBV_WR_RDMA_READ);
RDMAKIT_IBV_SAME(opcode::atomic_cmp_and_swp, IBV_WR_ATOMIC_CMP_AND_SWP);
RDMAKIT_IBV_SAME(opcode::atomic_fetch_and_add, IBV_WR_ATOMIC_FETCH_AND_ADD);
RDMAKIT_IBV_SAME(opcode::local_inv, IBV_WR_LOCAL_INV);
RDMAKIT_IBV_SAME(opcode::bind_mw, IBV_WR_BIND_MW);
RDMAKIT_IBV_SAME(opcode::send_with_inv, IBV_WR_SEND_WITH_INV);
RDMAKIT_IBV_SAME(mw_type::type1, IBV_MW_TYPE_1);
RDMAKIT_IBV_SAME(mw_type::type2, IBV_MW_TYPE_2);

// Send flags and completion flags.
RDMAKIT_IBV_SAME(send_flags::fence, IBV_SEND_FENCE);
RDMAKIT_IBV_SAME(send_flags::signaled, IBV_SEND_SIGNALED);
RDMAKIT_IBV_SAME(send_flags::solicited, IBV_SEND_SOLICITED);
RDMAKIT_IBV_SAME(send_flags::inline_data, IBV_SEND_INLINE);
RDMAKIT_IBV_SAME(wc_flags::grh, IBV_WC_GRH);
RDMAKIT_IBV_SAME(wc_flags::with_imm, IBV_WC_WITH_IMM);
RDMAKIT_IBV_SAME(wc_flags::with_inv, IBV_WC_WITH_INV);

// Access flags.
RDMAKIT_IBV_SAME(access::local_write, IBV_ACCESS_LOCAL_WRITE);
RDMAKIT_IBV_SAME(access::remote_write, IBV_ACCESS_REMOTE_WRITE);
RDMAKIT_IBV_SAME(access::remote_read, IBV_ACCESS_REMOTE_READ);
RDMAKIT_IBV_SAME(access::remote_atomic, IBV_ACCESS_REMOTE_ATOMIC);
RDMAKIT_IBV_SAME(access::mw_bind, IBV_ACCESS_MW_BIND);

// QP states and types.
RDMAKIT_IBV_SAME(qp_state::reset, IBV_QPS_RESET);
RDMAKIT_IBV_SAME(qp_state::init, IBV_QPS_INIT);
RDMAKIT_IBV_SAME(qp_state::rtr, IBV_QPS_RTR);
RDMAKIT_IBV_SAME(qp_state::rts, IBV_QPS_RTS);
RDMAKIT_IBV_SAME(qp_state::sqd, IBV_QPS_SQD);
RDMAKIT_IBV_SAME(qp_state::sqe, IBV_QPS_SQE);
RDMAKIT_IBV_SAME(qp_state::err, IBV_QPS_ERR);
RDMAKIT_IBV_SAME(qp_type::rc, IBV_QPT_RC);
RDMAKIT_IBV_SAME(qp_type::uc, IBV_QPT_UC);
RDMAKIT_IBV_SAME(qp_type::ud, IBV_QPT_UD);

// modify_qp attribute mask, every bit.
RDMAKIT_IBV_SAME(qp_attr_mask::state, IBV_QP_STATE);
RDMAKIT_IBV_SAME(qp_attr_mask::cur_state, IBV_QP_CUR_STATE);
RDMAKIT_IBV_SAME(qp_attr_mask::en_sqd_async_notify, IBV_QP_EN_SQD_ASYNC_NOTIFY);
RDMAKIT_IBV_SAME(qp_attr_mask::access_flags, IBV_QP_ACCESS_FLAGS);
RDMAKIT_IBV_SAME(qp_attr_mask::pkey_index, IBV_QP_PKEY_INDEX);
RDMAKIT_IBV_SAME(qp_attr_mask::port, IBV_QP_PORT);
RDMAKIT_IBV_SAME(qp_attr_mask::qkey, IBV_QP_QKEY);
RDMAKIT_IBV_SAME(qp_attr_mask::av, IBV_QP_AV);
RDMAKIT_IBV_SAME(qp_attr_mask::path_mtu, IBV_QP_PATH_MTU);
RDMAKIT_IBV_SAME(qp_attr_mask::timeout, IBV_QP_TIMEOUT);
RDMAKIT_IBV_SAME(qp_attr_mask::retry_cnt, IBV_QP_RETRY_CNT);
RDMAKIT_IBV_SAME(qp_attr_mask::rnr_retry, IBV_QP_RNR_RETRY);
RDMAKIT_IBV_SAME(qp_attr_mask::rq_psn, IBV_QP_RQ_PSN);
RDMAKIT_IBV_SAME(qp_attr_mask::max_qp_rd_atomic, IBV_QP_MAX_QP_RD_ATOMIC);
RDMAKIT_IBV_SAME(qp_attr_mask::alt_path, IBV_QP_ALT_PATH);
RDMAKIT_IBV_SAME(qp_attr_mask::min_rnr_timer, IBV_QP_MIN_RNR_TIMER);
RDMAKIT_IBV_SAME(qp_attr_mask::sq_psn, IBV_QP_SQ_PSN);
RDMAKIT_IBV_SAME(qp_attr_mask::max_dest_rd_atomic, IBV_QP_MAX_DEST_RD_ATOMIC);
RDMAKIT_IBV_SAME(qp_attr_mask::path_mig_state, IBV_QP_PATH_MIG_STATE);
RDMAKIT_IBV_SAME(qp_attr_mask::cap, IBV_QP_CAP);
RDMAKIT_IBV_SAME(qp_attr_mask::dest_qpn, IBV_QP_DEST_QPN);

// MTU, port state, link layer, GID type.
RDMAKIT_IBV_SAME(mtu::mtu_256, IBV_MTU_256);
RDMAKIT_IBV_SAME(mtu::mtu_512, IBV_MTU_512);
RDMAKIT_IBV_SAME(mtu::mtu_1024, IBV_MTU_1024);
RDMAKIT_IBV_SAME(mtu::mtu_2048, IBV_MTU_2048);
RDMAKIT_IBV_SAME(mtu::mtu_4096, IBV_MTU_4096);
RDMAKIT_IBV_SAME(port_state::nop, IBV_PORT_NOP);
RDMAKIT_IBV_SAME(port_state::down, IBV_PORT_DOWN);
RDMAKIT_IBV_SAME(port_state::init, IBV_PORT_INIT);
RDMAKIT_IBV_SAME(port_state::armed, IBV_PORT_ARMED);
RDMAKIT_IBV_SAME(port_state::active, IBV_PORT_ACTIVE);
RDMAKIT_IBV_SAME(port_state::active_defer, IBV_PORT_ACTIVE_DEFER);
RDMAKIT_IBV_SAME(link_layer::unspecified, IBV_LINK_LAYER_UNSPECIFIED);
RDMAKIT_IBV_SAME(link_layer::infiniband, IBV_LINK_LAYER_INFINIBAND);
RDMAKIT_IBV_SAME(link_layer::ethernet, IBV_LINK_LAYER_ETHERNET);
RDMAKIT_IBV_SAME(gid_type::ib, IBV_GID_TYPE_IB);
RDMAKIT_IBV_SAME(gid_type::roce_v1, IBV_GID_TYPE_ROCE_V1);
RDMAKIT_IBV_SAME(gid_type::roce_v2, IBV_GID_TYPE_ROCE_V2);

// Asynchronous events.
RDMAKIT_IBV_SAME(async_event_type::cq_err, IBV_EVENT_CQ_ERR);
RDMAKIT_IBV_SAME(async_event_type::qp_fatal, IBV_EVENT_QP_FATAL);
RDMAKIT_IBV_SAME(async_event_type::qp_req_err, IBV_EVENT_QP_REQ_ERR);
RDMAKIT_IBV_SAME(async_event_type::qp_access_err, IBV_EVENT_QP_ACCESS_ERR);
RDMAKIT_IBV_SAME(async_event_type::comm_est, IBV_EVENT_COMM_EST);
RDMAKIT_IBV_SAME(async_event_type::sq_drained, IBV_EVENT_SQ_DRAINED);
RDMAKIT_IBV_SAME(async_event_type::path_mig, IBV_EVENT_PATH_MIG);
RDMAKIT_IBV_SAME(async_event_type::path_mig_err, IBV_EVENT_PATH_MIG_ERR);
RDMAKIT_IBV_SAME(async_event_type::device_fatal, IBV_EVENT_DEVICE_FATAL);
RDMAKIT_IBV_SAME(async_event_type::port_active, IBV_EVENT_PORT_ACTIVE);
RDMAKIT_IBV_SAME(async_event_type::port_err, IBV_EVENT_PORT_ERR);
RDMAKIT_IBV_SAME(async_event_type::lid_change, IBV_EVENT_LID_CHANGE);
RDMAKIT_IBV_SAME(async_event_type::pkey_change, IBV_EVENT_PKEY_CHANGE);
RDMAKIT_IBV_SAME(async_event_type::sm_change, IBV_EVENT_SM_CHANGE);
RDMAKIT_IBV_SAME(async_event_type::srq_err, IBV_EVENT_SRQ_ERR);
RDMAKIT_IBV_SAME(async_event_type::srq_limit_reached, IBV_EVENT_SRQ_LIMIT_REACHED);
RDMAKIT_IBV_SAME(async_event_type::qp_last_wqe_reached, IBV_EVENT_QP_LAST_WQE_REACHED);
RDMAKIT_IBV_SAME(async_event_type::client_reregister, IBV_EVENT_CLIENT_REREGISTER);
RDMAKIT_IBV_SAME(async_event_type::gid_change, IBV_EVENT_GID_CHANGE);

#undef RDMAKIT_IBV_SAME

// rdmakit::sge promises ibv_sge's layout; rdmakit::gid is the 16 raw bytes of ibv_gid.
static_assert(sizeof(::rdmakit::sge) == sizeof(ibv_sge));
static_assert(offsetof(::rdmakit::sge, addr) == offsetof(ibv_sge, addr));
static_assert(offsetof(::rdmakit::sge, length) == offsetof(ibv_sge, length));
static_assert(offsetof(::rdmakit::sge, lkey) == offsetof(ibv_sge, lkey));
static_assert(sizeof(::rdmakit::gid::raw) == sizeof(ibv_gid::raw));

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
