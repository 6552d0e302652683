#pragma once
// The ibverbs backend's queue-pair setup verbs: creation checked against the device
// limits (a refused inline size explained by a probe), and modify_qp whose failures
// name the transition and the mask and say what the IB spec expects there.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/ibverbs/convert.hpp>
#include <rdmakit/backends/ibverbs/inline_probe.hpp>
#include <rdmakit/backends/ibverbs/setup_verbs.hpp>
#include <rdmakit/backends/ibverbs/support.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

RDMAKIT_DECL ibv_qp* create_qp(ibv_pd* p, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq, qp_type type,
                               qp_cap& caps, bool sq_sig_all) {
  if (!p || !send_cq || !recv_cq)
    throw verbs_error("ibv_create_qp", EINVAL, "the PD, send CQ and receive CQ must all be given");
  ibv_context* ctx = p->context;
  const ibv_device_attr lim = query_raw(ctx);
  const std::string what = cat(to_string(type), " QP on ", ctx_name(ctx), srq ? " (on an SRQ)" : "");
  auto over = [&](const char* field, std::uint32_t asked, const char* limit, long long max) {
    if (static_cast<long long>(asked) > max)
      throw verbs_error("ibv_create_qp", EINVAL,
                        cat(what, ": ", field, "=", asked, " exceeds the device limit ", limit, "=", max,
                            "; ask for at most that"));
  };
  over("max_send_wr", caps.max_send_wr, "max_qp_wr", lim.max_qp_wr);
  if (srq) {  // receives come from the SRQ: the QP has no receive queue of its own
    caps.max_recv_wr = 0;
    caps.max_recv_sge = 0;
  }
  over("max_recv_wr", caps.max_recv_wr, "max_qp_wr", lim.max_qp_wr);
  over("max_send_sge", caps.max_send_sge, "max_sge", lim.max_sge);
  over("max_recv_sge", caps.max_recv_sge, "max_sge", lim.max_sge);

  ibv_qp_init_attr ia = init_attr(send_cq, recv_cq, srq, type, sq_sig_all, caps);
  errno = 0;
  ibv_qp* q = ibv_create_qp(p, &ia);
  if (!q) {
    const int err = null_errno();
    std::string why = cat(what, " with ", caps_string(caps));
    const std::uint32_t inline_limit =
        err == EINVAL && caps.max_inline_data > 0
            ? probe_max_inline(ctx, static_cast<ibv_qp_type>(type))
            : caps.max_inline_data;
    if (caps.max_inline_data > inline_limit)
      throw verbs_error("ibv_create_qp", err,
                        cat(what, ": max_inline_data=", caps.max_inline_data,
                            " exceeds the device limit max_inline_data (probed)=", inline_limit,
                            "; ask for at most that"));
    if (err == ENOMEM)
      append(why, ": out of QP resources, or ", memlock_hint());
    else if (err == EINVAL)
      append(why, ": the provider refused these capacities (device limits: max_qp_wr=", lim.max_qp_wr,
             " max_sge=", lim.max_sge, "; the usable WR/SGE counts can be lower when both are large)");
    else if (err == EOPNOTSUPP)
      why += ": the device does not support this QP type";
    throw verbs_error("ibv_create_qp", err, why);
  }
  caps = from_ibv(ia.cap);
  return q;
}

RDMAKIT_DECL qp_state query_qp_state(ibv_qp* q) {
  ibv_qp_attr a;
  ibv_qp_init_attr ia;
  std::memset(&a, 0, sizeof a);
  std::memset(&ia, 0, sizeof ia);
  if (int err = rc_errno(ibv_query_qp(q, &a, IBV_QP_STATE, &ia)))
    throw verbs_error("ibv_query_qp", err, cat("QP ", rdmakit::detail::hex(q->qp_num)));
  return static_cast<qp_state>(a.qp_state);
}

inline verbs_error modify_error(ibv_qp* q, const qp_attr& attr, qp_attr_mask mask, int err) {
  namespace d = rdmakit::ibverbs::detail;
  const auto type = static_cast<qp_type>(q->qp_type);
  qp_state from = static_cast<qp_state>(q->state);
  if (has_all(mask, qp_attr_mask::cur_state)) {
    from = attr.cur_state;
  } else {
    try {
      from = query_qp_state(q);
    } catch (const verbs_error&) {
    }
  }
  const qp_state to = has_all(mask, qp_attr_mask::state) ? attr.state : from;
  std::string why = cat(to_string(type), " QP ", rdmakit::detail::hex(q->qp_num), " on ", ctx_name(q->context), ": ", to_string(from),
                        "->", to_string(to), " with mask ", to_string(mask), ": ");
  const std::string mask_problem = explain_mask(type, from, to, mask);
  std::string value_problem;
  if (has_all(mask, qp_attr_mask::av)) {
    ibv_port_attr pa;
    std::memset(&pa, 0, sizeof pa);
    const std::uint8_t port = attr.av.port_num;
    if (ibv_query_port(q->context, port, &pa) == 0) {
      if (pa.link_layer == IBV_LINK_LAYER_ETHERNET && !attr.av.is_global)
        value_problem += "; RoCE (Ethernet link layer) needs av.is_global with grh.sgid_index "
                         "(see choose_gid) and grh.dgid = the peer's GID";
      if (has_all(mask, qp_attr_mask::path_mtu) &&
          static_cast<int>(attr.path_mtu) > static_cast<int>(pa.max_mtu))
        append(value_problem, "; path_mtu ", mtu_bytes(attr.path_mtu), " is above the port's max_mtu ",
               mtu_bytes(static_cast<mtu>(pa.max_mtu)));
    } else {
      append(value_problem, "; av.port_num ", port, " is not a port of this device");
    }
  }
  if (!mask_problem.empty()) append(why, mask_problem, value_problem);
  else if (!value_problem.empty()) why += value_problem.substr(2);
  else why += value_hint;
  return verbs_error("ibv_modify_qp", err, why);
}

RDMAKIT_DECL void modify_qp(ibv_qp* q, const qp_attr& attr, qp_attr_mask mask) {
  namespace d = rdmakit::ibverbs::detail;
  if (has_any(mask, unsupported_mask))
    throw verbs_error("ibv_modify_qp", EINVAL,
                      cat(to_string(mask & unsupported_mask),
                          " not supported: rdmakit::qp_attr has no alternate path, migration state or "
                          "capability fields"));
  ibv_qp_attr a = to_ibv(attr);
  errno = 0;
  if (int err = rc_errno(ibv_modify_qp(q, &a, static_cast<int>(to_underlying(mask)))))
    throw modify_error(q, attr, mask, err);
}

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
