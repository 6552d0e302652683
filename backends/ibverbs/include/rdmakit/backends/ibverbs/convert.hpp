#pragma once
// Setup-path helpers of the ibverbs backend: attribute conversions, errno
// normalisation, and the hints that make verbs_error messages actionable.
#include <rdmakit/backends/ibverbs/abi.hpp>
#include <rdmakit/detail/qp_transitions.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

// The message joiner, so that `cat(...)` here does not need ::rdmakit::detail spelled out.
using ::rdmakit::detail::append;
using ::rdmakit::detail::cat;

/// libibverbs reports failures as a positive errno return, as -1 with errno set, or
/// (for a few providers) as -errno. Returns the errno, 0 on success.
inline int rc_errno(int rc) noexcept {
  if (rc == 0) return 0;
  if (rc > 0) return rc;
  if (rc < -1) return -rc;
  return errno != 0 ? errno : EIO;
}
/// For calls that return NULL and set errno.
inline int null_errno() noexcept { return errno != 0 ? errno : ENOMEM; }

inline ibv_ah_attr to_ibv(const ah_attr& a) noexcept {
  ibv_ah_attr o;
  std::memset(&o, 0, sizeof o);
  std::memcpy(o.grh.dgid.raw, a.grh.dgid.raw.data(), sizeof o.grh.dgid.raw);
  o.grh.flow_label = a.grh.flow_label;
  o.grh.sgid_index = a.grh.sgid_index;
  o.grh.hop_limit = a.grh.hop_limit;
  o.grh.traffic_class = a.grh.traffic_class;
  o.dlid = a.dlid;
  o.sl = a.sl;
  o.src_path_bits = a.src_path_bits;
  o.static_rate = a.static_rate;
  o.is_global = a.is_global ? 1 : 0;
  o.port_num = a.port_num;
  return o;
}

inline ibv_qp_attr to_ibv(const qp_attr& a) noexcept {
  ibv_qp_attr o;
  std::memset(&o, 0, sizeof o);
  o.qp_state = static_cast<ibv_qp_state>(a.state);
  o.cur_qp_state = static_cast<ibv_qp_state>(a.cur_state);
  o.path_mtu = static_cast<ibv_mtu>(a.path_mtu);
  o.qkey = a.qkey;
  o.rq_psn = a.rq_psn;
  o.sq_psn = a.sq_psn;
  o.dest_qp_num = a.dest_qp_num;
  o.qp_access_flags = to_underlying(a.access_flags);
  o.ah_attr = to_ibv(a.av);
  o.pkey_index = a.pkey_index;
  o.en_sqd_async_notify = a.en_sqd_async_notify ? 1 : 0;
  o.max_rd_atomic = a.max_rd_atomic;
  o.max_dest_rd_atomic = a.max_dest_rd_atomic;
  o.min_rnr_timer = a.min_rnr_timer;
  o.port_num = a.port_num;
  o.timeout = a.timeout;
  o.retry_cnt = a.retry_cnt;
  o.rnr_retry = a.rnr_retry;
  return o;
}

inline ibv_qp_cap to_ibv(const qp_cap& c) noexcept {
  return ibv_qp_cap{c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

/// The capacities a provider granted (ibv_create_qp, rdma_create_qp write them back).
inline qp_cap from_ibv(const ibv_qp_cap& c) noexcept {
  return qp_cap{c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

/// ibv_qp_init_attr for a QP on these CQs (and SRQ) with these capacities.
inline ibv_qp_init_attr init_attr(ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq, qp_type type, bool sq_sig_all,
                                  const qp_cap& caps) noexcept {
  ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.send_cq = send_cq;
  ia.recv_cq = recv_cq;
  ia.srq = srq;
  ia.qp_type = static_cast<ibv_qp_type>(type);
  ia.sq_sig_all = sq_sig_all ? 1 : 0;
  ia.cap = to_ibv(caps);
  return ia;
}

inline ah_attr from_ibv(const ibv_ah_attr& a) noexcept {
  ah_attr o;
  std::memcpy(o.grh.dgid.raw.data(), a.grh.dgid.raw, sizeof a.grh.dgid.raw);
  o.grh.flow_label = a.grh.flow_label;
  o.grh.sgid_index = a.grh.sgid_index;
  o.grh.hop_limit = a.grh.hop_limit;
  o.grh.traffic_class = a.grh.traffic_class;
  o.dlid = a.dlid;
  o.sl = a.sl;
  o.src_path_bits = a.src_path_bits;
  o.static_rate = a.static_rate;
  o.is_global = a.is_global != 0;
  o.port_num = a.port_num;
  return o;
}

/// The reverse of to_ibv: what a provider or librdmacm (rdma_init_qp_attr) filled in.
inline qp_attr from_ibv(const ibv_qp_attr& a) noexcept {
  qp_attr o;
  o.state = static_cast<qp_state>(a.qp_state);
  o.cur_state = static_cast<qp_state>(a.cur_qp_state);
  o.path_mtu = static_cast<mtu>(a.path_mtu);
  o.qkey = a.qkey;
  o.rq_psn = a.rq_psn;
  o.sq_psn = a.sq_psn;
  o.dest_qp_num = a.dest_qp_num;
  o.access_flags = static_cast<access>(a.qp_access_flags);
  o.av = from_ibv(a.ah_attr);
  o.pkey_index = a.pkey_index;
  o.en_sqd_async_notify = a.en_sqd_async_notify != 0;
  o.max_rd_atomic = a.max_rd_atomic;
  o.max_dest_rd_atomic = a.max_dest_rd_atomic;
  o.min_rnr_timer = a.min_rnr_timer;
  o.port_num = a.port_num;
  o.timeout = a.timeout;
  o.retry_cnt = a.retry_cnt;
  o.rnr_retry = a.rnr_retry;
  return o;
}

/// Mask bits rdmakit::qp_attr has no fields for; modify_qp refuses them.
inline constexpr qp_attr_mask unsupported_mask =
    qp_attr_mask::alt_path | qp_attr_mask::path_mig_state | qp_attr_mask::cap;

/// Why a modify_qp with this mask may have failed, from the transition table; empty
/// when the mask is what the spec asks for.
inline std::string explain_mask(qp_type t, qp_state from, qp_state to, qp_attr_mask mask) {
  const auto r = rdmakit::detail::rule_for(from, to, t);
  if (!r.legal) return cat("this transition is not legal for ", to_string(t), " QPs");
  const qp_attr_mask given = mask & ~qp_attr_mask::state;
  const qp_attr_mask missing = r.required & ~given;
  const qp_attr_mask extra = given & ~(r.required | r.optional);
  std::string out;
  if (missing != qp_attr_mask::none) append(out, "missing required ", to_string(missing));
  if (extra != qp_attr_mask::none) append(out, out.empty() ? "" : "; ", "not allowed here ", to_string(extra));
  return out;
}

/// When the mask is right, one of these values usually is not.
inline constexpr const char* value_hint =
    "the mask matches the spec for this transition, so a value is out of range (path_mtu above "
    "the port's max_mtu, timeout > 31, max_rd_atomic above the device limit, a bad port or "
    "pkey/GID index, or no GRH on RoCE)";

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
