#pragma once
// The ibverbs backend's setup verbs for devices, ports, GIDs, asynchronous events,
// protection domains, memory regions, address handles, completion channels and CQs:
// each checks what it can first and throws verbs_error naming the verb, the errno,
// what was wrong and what to do.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/ibverbs/convert.hpp>
#include <rdmakit/backends/ibverbs/inline_probe.hpp>
#include <rdmakit/backends/ibverbs/setup_verbs.hpp>
#include <rdmakit/backends/ibverbs/support.hpp>
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

RDMAKIT_DECL std::vector<std::string> device_names() {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    const int err = list_errno();
    if (err == ENOSYS) return {};
    throw verbs_error("ibv_get_device_list", err,
                      err == EPERM || err == EACCES
                          ? "no permission to read the RDMA devices (/sys/class/infiniband_verbs, "
                            "/dev/infiniband)"
                          : "listing RDMA devices");
  }
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return out;
}

RDMAKIT_DECL ibv_context* open_device(std::string_view dev_name) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const std::string wanted = dev_name.empty() ? std::string("(first device)") : std::string(dev_name);
  if (!list) {
    const int err = list_errno();
    if (err != ENOSYS)
      throw verbs_error("ibv_get_device_list", err, cat("listing RDMA devices to open ", wanted));
    n = 0;
  }
  ibv_device* found = nullptr;
  std::string present;
  for (int i = 0; i < n; ++i) {
    const char* dn = ibv_get_device_name(list[i]);
    if (!present.empty()) present += ", ";
    present += dn;
    if (!found && (dev_name.empty() || dev_name == dn)) found = list[i];
  }
  if (!found) {
    if (list) ibv_free_device_list(list);
    if (n == 0)
      throw verbs_error("ibv_open_device", ENODEV,
                        cat("cannot open ", wanted,
                            ": no RDMA devices found: is the rdma_rxe/mlx5 module loaded? see `rdma link` "
                            "(soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)"));
    throw verbs_error("ibv_open_device", ENODEV,
                      cat("no RDMA device named '", wanted, "'; devices present: ", present,
                          " (an empty name opens the first)"));
  }
  errno = 0;
  ibv_context* ctx = ibv_open_device(found);
  const int err = ctx ? 0 : null_errno();
  ibv_free_device_list(list);
  if (!ctx)
    throw verbs_error("ibv_open_device", err,
                      cat("opening ", wanted,
                          err == EPERM || err == EACCES ? ": no permission on /dev/infiniband/uverbs*" : ""));
  if (int e = set_nonblocking(ctx->async_fd)) {
    ibv_close_device(ctx);
    throw verbs_error("fcntl", e, cat("making the async event fd of ", wanted, " non-blocking"));
  }
  return ctx;
}

RDMAKIT_DECL device_attr query_device(ibv_context* ctx) {
  const ibv_device_attr a = query_raw(ctx);
  device_attr o;
  o.max_mr_size = a.max_mr_size;
  o.max_qp = nonneg(a.max_qp);
  o.max_qp_wr = nonneg(a.max_qp_wr);
  o.max_sge = nonneg(a.max_sge);
  o.max_cq = nonneg(a.max_cq);
  o.max_cqe = nonneg(a.max_cqe);
  o.max_mr = nonneg(a.max_mr);
  o.max_pd = nonneg(a.max_pd);
  o.max_ah = nonneg(a.max_ah);
  o.max_qp_rd_atom = nonneg(a.max_qp_rd_atom);
  o.max_qp_init_rd_atom = nonneg(a.max_qp_init_rd_atom);
  o.max_inline_data = probe_max_inline(ctx, IBV_QPT_RC);
  o.atomics = a.atomic_cap != IBV_ATOMIC_NONE;
  o.phys_port_cnt = a.phys_port_cnt;
  o.num_comp_vectors = nonneg(ctx->num_comp_vectors);
  o.max_srq = nonneg(a.max_srq);
  o.max_srq_wr = nonneg(a.max_srq_wr);
  o.max_srq_sge = nonneg(a.max_srq_sge);
  return o;
}

RDMAKIT_DECL port_attr query_port(ibv_context* ctx, std::uint8_t port) {
  ibv_port_attr a;
  std::memset(&a, 0, sizeof a);
  if (int err = rc_errno(ibv_query_port(ctx, port, &a)))
    throw verbs_error("ibv_query_port", err,
                      cat("port ", port, " of ", ctx_name(ctx),
                          err == EINVAL ? ": no such port (ports are numbered from 1)" : ""));
  port_attr o;
  o.state = static_cast<port_state>(a.state);
  o.max_mtu = static_cast<mtu>(a.max_mtu);
  o.active_mtu = static_cast<mtu>(a.active_mtu);
  o.gid_tbl_len = nonneg(a.gid_tbl_len);
  o.max_msg_sz = a.max_msg_sz;
  o.lid = a.lid;
  o.layer = static_cast<link_layer>(a.link_layer);
  return o;
}

RDMAKIT_DECL gid_entry query_gid(ibv_context* ctx, std::uint8_t port, int index) {
  gid_entry o;
  o.index = static_cast<std::uint32_t>(index < 0 ? 0 : index);
  if (index < 0)
    throw verbs_error("ibv_query_gid_ex", EINVAL, cat("negative GID index ", index));
  ibv_gid_entry e;
  std::memset(&e, 0, sizeof e);
  errno = 0;
  const int err = rc_errno(
      ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(index), &e, 0));
  if (err == ENODATA) return o;
  if (err) {
    std::string why = cat("GID index ", index, " of ", ctx_name(ctx), " port ", port);
    if (err == EINVAL) {
      ibv_port_attr pa;
      std::memset(&pa, 0, sizeof pa);
      if (ibv_query_port(ctx, port, &pa) == 0)
        append(why, ": the port's GID table has ", pa.gid_tbl_len, " entries");
      else
        why += ": no such port";
    }
    throw verbs_error("ibv_query_gid_ex", err, why);
  }
  std::memcpy(o.value.raw.data(), e.gid.raw, sizeof e.gid.raw);
  o.type = static_cast<gid_type>(e.gid_type);
  o.valid = !o.value.is_zero();
  return o;
}

RDMAKIT_DECL int get_async_event(ibv_context* ctx, std::chrono::milliseconds timeout, async_event& out) noexcept {
  return wait_then(ctx->async_fd, timeout, [&]() noexcept -> int {
    ibv_async_event ev;
    errno = 0;
    if (ibv_get_async_event(ctx, &ev) != 0) return errno != 0 ? errno : EIO;
    out = async_event{};
    out.type = static_cast<async_event_type>(ev.event_type);
    switch (ev.event_type) {
      case IBV_EVENT_CQ_ERR: out.object = ev.element.cq; break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        out.object = ev.element.qp;
        out.qp_num = ev.element.qp ? ev.element.qp->qp_num : 0;
        break;
      case IBV_EVENT_SRQ_ERR:
      case IBV_EVENT_SRQ_LIMIT_REACHED: out.object = ev.element.srq; break;
      case IBV_EVENT_WQ_FATAL: out.object = ev.element.wq; break;
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
      case IBV_EVENT_GID_CHANGE: out.port_num = static_cast<std::uint8_t>(ev.element.port_num); break;
      case IBV_EVENT_DEVICE_FATAL: break;
      default: break;  // newer event types: type only
    }
    ibv_ack_async_event(&ev);
    return 0;
  });
}

RDMAKIT_DECL ibv_pd* alloc_pd(ibv_context* ctx) {
  errno = 0;
  ibv_pd* p = ibv_alloc_pd(ctx);
  if (!p) throw verbs_error("ibv_alloc_pd", null_errno(), cat("on ", ctx_name(ctx)));
  return p;
}

RDMAKIT_DECL ibv_mw* alloc_mw(ibv_pd* p, mw_type type) {
  errno = 0;
  ibv_mw* w = ibv_alloc_mw(p, type == mw_type::type1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
  if (w) return w;
  const int err = null_errno();
  throw verbs_error("ibv_alloc_mw", err,
                    cat(type == mw_type::type1 ? "type 1" : "type 2", " window on ", ctx_name(p->context),
                        err == EOPNOTSUPP || err == ENOSYS ? ": the device has no memory windows of that type" : ""));
}

RDMAKIT_DECL ibv_mr* reg_mr(ibv_pd* p, void* addr, std::size_t length, access flags) {
  errno = 0;
  // The flags as they are (unsigned): current rdma-core's ibv_reg_mr is a macro taking unsigned int.
  ibv_mr* m = ibv_reg_mr(p, addr, length, to_underlying(flags));
  if (m) return m;
  const int err = null_errno();
  std::string why = cat(length, " bytes at ", ::rdmakit::detail::hex(reinterpret_cast<std::uintptr_t>(addr)),
                        " with ", to_string(flags), " on ", ctx_name(p->context));
  if (err == EINVAL && has_any(flags, access::remote_write | access::remote_atomic) &&
      !has_all(flags, access::local_write))
    why += ": REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE as well";
  else if (err == ENOMEM || err == EPERM || err == EAGAIN)
    append(why, ": ", memlock_hint());
  else if (err == EFAULT)
    why += ": the address range is not mapped in this process";
  else if (err == EINVAL)
    append(why, ": the length or access flags are not accepted by the device (max_mr_size ",
           query_raw(p->context).max_mr_size, ")");
  throw verbs_error("ibv_reg_mr", err, why);
}

RDMAKIT_DECL ibv_ah* create_ah(ibv_pd* p, const ah_attr& attr) {
  ibv_ah_attr a = to_ibv(attr);
  errno = 0;
  ibv_ah* h = ibv_create_ah(p, &a);
  if (h) return h;
  const int err = null_errno();
  std::string why = cat("port ", attr.port_num, " of ", ctx_name(p->context));
  if (!attr.is_global) {
    ibv_port_attr pa;
    std::memset(&pa, 0, sizeof pa);
    if (ibv_query_port(p->context, attr.port_num, &pa) == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET)
      why += ": RoCE needs a GRH: set is_global and grh.sgid_index (see choose_gid) and grh.dgid";
  } else {
    append(why, ", sgid_index ", attr.grh.sgid_index, ", dgid ", attr.grh.dgid.to_string(),
           ": check that the GID index exists and the destination is reachable");
  }
  throw verbs_error("ibv_create_ah", err, why);
}

RDMAKIT_DECL ibv_comp_channel* create_comp_channel(ibv_context* ctx) {
  errno = 0;
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  if (!ch)
    throw verbs_error("ibv_create_comp_channel", null_errno(), cat("on ", ctx_name(ctx)));
  if (int e = set_nonblocking(ch->fd)) {
    ibv_destroy_comp_channel(ch);
    throw verbs_error("fcntl", e, cat("making a completion channel fd of ", ctx_name(ctx), " non-blocking"));
  }
  return ch;
}

RDMAKIT_DECL ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* ch, int comp_vector) {
  const ibv_device_attr lim = query_raw(ctx);
  const std::string where = cat(" on ", ctx_name(ctx));
  if (cqe < 1 || cqe > lim.max_cqe)
    throw verbs_error("ibv_create_cq", EINVAL,
                      cat("cqe=", cqe, " is outside 1..max_cqe=", lim.max_cqe, where,
                          "; use several CQs or fewer outstanding WRs per CQ"));
  if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors)
    throw verbs_error("ibv_create_cq", EINVAL,
                      cat("comp_vector=", comp_vector, " is outside 0..", ctx->num_comp_vectors - 1,
                          " (num_comp_vectors)", where));
  errno = 0;
  ibv_cq* c = ibv_create_cq(ctx, cqe, nullptr, ch, comp_vector);
  if (!c) {
    const int err = null_errno();
    throw verbs_error("ibv_create_cq", err,
                      cat("cqe=", cqe, where, err == ENOMEM ? ": " : "", err == ENOMEM ? memlock_hint() : ""));
  }
  return c;
}

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
