#pragma once
/// The libibverbs (rdma-core) backend: thin and zero-copy. Handles are the native
/// pointers, work requests and completions are ibv_send_wr / ibv_recv_wr / ibv_wc,
/// the `set_*` functions write straight into them and the data path calls the
/// ibv_ inline functions directly. Setup verbs throw verbs_error naming the verb,
/// the errno, what was wrong and what to do. This is the only rdmakit header that
/// includes <infiniband/verbs.h>.
#include <rdmakit/backend.hpp>
#include <rdmakit/backends/ibverbs/abi.hpp>
#include <rdmakit/backends/ibverbs/inline_probe.hpp>
#include <rdmakit/backends/ibverbs/convert.hpp>
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

[[noreturn]] inline void fail(const char* verb, int err, const std::string& detail) {
  throw verbs_error(verb, err, detail);
}

inline std::string ctx_name(const ibv_context* ctx) {
  const char* n = ctx && ctx->device ? ibv_get_device_name(ctx->device) : nullptr;
  return n ? n : "(unknown device)";
}

inline int set_nonblocking(int fd) noexcept {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return errno;
  if (flags & O_NONBLOCK) return 0;
  return ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ? errno : 0;
}

/// Waits up to `timeout` (negative or over a year: forever) for `fd` to be readable,
/// then calls `take()` (which returns 0 or an errno). EAGAIN from `take` (another
/// reader won the race) waits again. Returns 0, ETIMEDOUT or an errno.
template <class Take>
int wait_then(int fd, std::chrono::milliseconds timeout, Take take) noexcept {
  using clock = std::chrono::steady_clock;
  const bool forever = timeout.count() < 0 || timeout > std::chrono::hours(24 * 366);
  const auto deadline = clock::now() + (forever ? std::chrono::milliseconds{0} : timeout);
  for (;;) {
    int wait_ms = -1;
    if (!forever) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      wait_ms = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : static_cast<int>(left);
    }
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) {
      if (!forever && clock::now() >= deadline) return ETIMEDOUT;
      continue;
    }
    const int r = take();
    if (r != EAGAIN && r != EWOULDBLOCK) return r;
    if (!forever && clock::now() >= deadline) return ETIMEDOUT;
  }
}

inline ibv_device_attr query_raw(ibv_context* ctx) {
  ibv_device_attr a;
  std::memset(&a, 0, sizeof a);
  if (int err = rc_errno(ibv_query_device(ctx, &a)))
    fail("ibv_query_device", err, "querying " + ctx_name(ctx));
  return a;
}

inline const char* memlock_hint() noexcept {
  return "the locked-memory limit may be too low: check `ulimit -l` (raise memlock in "
         "/etc/security/limits.conf or run the container with --ulimit memlock=-1)";
}

inline std::string caps_string(const qp_cap& c) {
  return "max_send_wr=" + std::to_string(c.max_send_wr) + " max_recv_wr=" + std::to_string(c.max_recv_wr) +
         " max_send_sge=" + std::to_string(c.max_send_sge) + " max_recv_sge=" +
         std::to_string(c.max_recv_sge) + " max_inline_data=" + std::to_string(c.max_inline_data);
}

}  // namespace ibverbs::detail

namespace backends {

/// The rdma-core backend. Satisfies verbs_backend; see the file comment.
struct ibverbs {
  using context = ibv_context*;
  using pd = ibv_pd*;
  using mr = ibv_mr*;
  using cq = ibv_cq*;
  using channel = ibv_comp_channel*;
  using qp = ibv_qp*;
  using ah = ibv_ah*;
  using sge = ibv_sge;
  using send_wr = ibv_send_wr;
  using recv_wr = ibv_recv_wr;
  using wc = ibv_wc;

  static constexpr std::string_view name = "ibverbs";

  // ---------------------------------------------------------------- devices

  /// Names of the RDMA devices present; empty when there are none or the kernel has
  /// no RDMA support. Throws only for other failures (EPERM, ENOMEM).
  static std::vector<std::string> device_names() {
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

  /// Opens a device by name; an empty name opens the first one. Unknown names throw
  /// ENODEV listing the devices that exist.
  static context open_device(std::string_view dev_name) {
    int n = 0;
    errno = 0;
    ibv_device** list = ibv_get_device_list(&n);
    const std::string wanted = dev_name.empty() ? std::string("(first device)") : std::string(dev_name);
    if (!list) {
      const int err = list_errno();
      if (err != ENOSYS)
        throw verbs_error("ibv_get_device_list", err, "listing RDMA devices to open " + wanted);
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
                          "cannot open " + wanted +
                              ": no RDMA devices found: is the rdma_rxe/mlx5 module loaded? see `rdma link` "
                              "(soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)");
      throw verbs_error("ibv_open_device", ENODEV,
                        "no RDMA device named '" + wanted + "'; devices present: " + present +
                            " (an empty name opens the first)");
    }
    errno = 0;
    ibv_context* ctx = ibv_open_device(found);
    const int err = ctx ? 0 : rdmakit::ibverbs::detail::null_errno();
    ibv_free_device_list(list);
    if (!ctx)
      throw verbs_error("ibv_open_device", err,
                        "opening " + wanted +
                            (err == EPERM || err == EACCES ? ": no permission on /dev/infiniband/uverbs*"
                                                           : std::string()));
    if (int e = rdmakit::ibverbs::detail::set_nonblocking(ctx->async_fd)) {
      ibv_close_device(ctx);
      throw verbs_error("fcntl", e, "making the async event fd of " + wanted + " non-blocking");
    }
    return ctx;
  }

  static void close_device(context ctx) noexcept {
    if (!ctx) return;
    ibv_close_device(ctx);
  }

  static std::string device_name(context ctx) { return rdmakit::ibverbs::detail::ctx_name(ctx); }

  /// ibv_query_device, plus max_inline_data for RC QPs, probed on each call (the typed
  /// layer calls this once per device open and keeps the result).
  static device_attr query_device(context ctx) {
    const ibv_device_attr a = rdmakit::ibverbs::detail::query_raw(ctx);
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
    o.max_inline_data = rdmakit::ibverbs::detail::probe_max_inline(ctx, IBV_QPT_RC);
    o.atomics = a.atomic_cap != IBV_ATOMIC_NONE;
    o.phys_port_cnt = a.phys_port_cnt;
    return o;
  }

  static port_attr query_port(context ctx, std::uint8_t port) {
    ibv_port_attr a;
    std::memset(&a, 0, sizeof a);
    if (int err = rdmakit::ibverbs::detail::rc_errno(ibv_query_port(ctx, port, &a)))
      throw verbs_error("ibv_query_port", err,
                        "port " + std::to_string(port) + " of " + device_name(ctx) +
                            (err == EINVAL ? ": no such port (ports are numbered from 1)" : std::string()));
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

  /// One GID table entry with its type (ibv_query_gid_ex). An empty slot (ENODATA or
  /// an all-zero GID) is `valid = false`, not an error.
  static gid_entry query_gid(context ctx, std::uint8_t port, int index) {
    gid_entry o;
    o.index = static_cast<std::uint32_t>(index < 0 ? 0 : index);
    if (index < 0)
      throw verbs_error("ibv_query_gid_ex", EINVAL, "negative GID index " + std::to_string(index));
    ibv_gid_entry e;
    std::memset(&e, 0, sizeof e);
    errno = 0;
    const int err = rdmakit::ibverbs::detail::rc_errno(
        ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(index), &e, 0));
    if (err == ENODATA) return o;
    if (err) {
      std::string why = "GID index " + std::to_string(index) + " of " + device_name(ctx) + " port " +
                        std::to_string(port);
      if (err == EINVAL) {
        ibv_port_attr pa;
        std::memset(&pa, 0, sizeof pa);
        if (ibv_query_port(ctx, port, &pa) == 0)
          why += ": the port's GID table has " + std::to_string(pa.gid_tbl_len) + " entries";
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

  /// Waits up to `timeout` (negative or milliseconds::max(): forever) for an
  /// asynchronous event, fills `out` and acknowledges it. Returns 0, ETIMEDOUT or an errno.
  static int get_async_event(context ctx, std::chrono::milliseconds timeout, async_event& out) noexcept {
    return rdmakit::ibverbs::detail::wait_then(ctx->async_fd, timeout, [&]() noexcept -> int {
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

  // ------------------------------------------- protection domains, memory, AHs

  static pd alloc_pd(context ctx) {
    errno = 0;
    ibv_pd* p = ibv_alloc_pd(ctx);
    if (!p) throw verbs_error("ibv_alloc_pd", rdmakit::ibverbs::detail::null_errno(), "on " + device_name(ctx));
    return p;
  }
  static int dealloc_pd(pd p) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_dealloc_pd(p)); }

  static mr reg_mr(pd p, void* addr, std::size_t length, access flags) {
    errno = 0;
    ibv_mr* m = ibv_reg_mr(p, addr, length, static_cast<int>(to_underlying(flags)));
    if (m) return m;
    const int err = rdmakit::ibverbs::detail::null_errno();
    std::string why = std::to_string(length) + " bytes at " + hex(reinterpret_cast<std::uintptr_t>(addr)) +
                      " with " + to_string(flags) + " on " + device_name(p->context);
    if (err == EINVAL && has_any(flags, access::remote_write | access::remote_atomic) &&
        !has_all(flags, access::local_write))
      why += ": REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE as well";
    else if (err == ENOMEM || err == EPERM || err == EAGAIN)
      why += std::string(": ") + rdmakit::ibverbs::detail::memlock_hint();
    else if (err == EFAULT)
      why += ": the address range is not mapped in this process";
    else if (err == EINVAL)
      why += ": the length or access flags are not accepted by the device (max_mr_size " +
             std::to_string(rdmakit::ibverbs::detail::query_raw(p->context).max_mr_size) + ")";
    throw verbs_error("ibv_reg_mr", err, why);
  }
  static int dereg_mr(mr m) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_dereg_mr(m)); }
  static std::uint32_t mr_lkey(mr m) noexcept { return m->lkey; }
  static std::uint32_t mr_rkey(mr m) noexcept { return m->rkey; }

  static ah create_ah(pd p, const ah_attr& attr) {
    ibv_ah_attr a = rdmakit::ibverbs::detail::to_ibv(attr);
    errno = 0;
    ibv_ah* h = ibv_create_ah(p, &a);
    if (h) return h;
    const int err = rdmakit::ibverbs::detail::null_errno();
    std::string why = "port " + std::to_string(attr.port_num) + " of " + device_name(p->context);
    if (!attr.is_global) {
      ibv_port_attr pa;
      std::memset(&pa, 0, sizeof pa);
      if (ibv_query_port(p->context, attr.port_num, &pa) == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET)
        why += ": RoCE needs a GRH: set is_global and grh.sgid_index (see choose_gid) and grh.dgid";
    } else {
      why += ", sgid_index " + std::to_string(attr.grh.sgid_index) + ", dgid " + attr.grh.dgid.to_string() +
             ": check that the GID index exists and the destination is reachable";
    }
    throw verbs_error("ibv_create_ah", err, why);
  }
  static int destroy_ah(ah a) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_ah(a)); }

  // ------------------------------------------------ completion queues, channels

  /// Creates a completion channel whose fd is non-blocking (get_cq_event waits with poll(2)).
  static channel create_comp_channel(context ctx) {
    errno = 0;
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
    if (!ch)
      throw verbs_error("ibv_create_comp_channel", rdmakit::ibverbs::detail::null_errno(),
                        "on " + device_name(ctx));
    if (int e = rdmakit::ibverbs::detail::set_nonblocking(ch->fd)) {
      ibv_destroy_comp_channel(ch);
      throw verbs_error("fcntl", e, "making a completion channel fd of " + device_name(ctx) + " non-blocking");
    }
    return ch;
  }
  static int destroy_comp_channel(channel ch) noexcept {
    return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_comp_channel(ch));
  }

  /// Checks `cqe` and `comp_vector` against the device first; the granted size
  /// (often rounded up) is cq_capacity().
  static cq create_cq(context ctx, int cqe, channel ch, int comp_vector) {
    const ibv_device_attr lim = rdmakit::ibverbs::detail::query_raw(ctx);
    const std::string where = " on " + device_name(ctx);
    if (cqe < 1 || cqe > lim.max_cqe)
      throw verbs_error("ibv_create_cq", EINVAL,
                        "cqe=" + std::to_string(cqe) + " is outside 1..max_cqe=" + std::to_string(lim.max_cqe) +
                            where + "; use several CQs or fewer outstanding WRs per CQ");
    if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors)
      throw verbs_error("ibv_create_cq", EINVAL,
                        "comp_vector=" + std::to_string(comp_vector) + " is outside 0.." +
                            std::to_string(ctx->num_comp_vectors - 1) + " (num_comp_vectors)" + where);
    errno = 0;
    ibv_cq* c = ibv_create_cq(ctx, cqe, nullptr, ch, comp_vector);
    if (!c) {
      const int err = rdmakit::ibverbs::detail::null_errno();
      throw verbs_error("ibv_create_cq", err,
                        "cqe=" + std::to_string(cqe) + where +
                            (err == ENOMEM ? std::string(": ") + rdmakit::ibverbs::detail::memlock_hint()
                                           : std::string()));
    }
    return c;
  }
  static int cq_capacity(cq c) noexcept { return c->cqe; }
  static int destroy_cq(cq c) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_cq(c)); }

  static int poll_cq(cq c, int n, wc* out) noexcept { return ibv_poll_cq(c, n, out); }
  static int req_notify_cq(cq c, bool solicited_only) noexcept {
    return ibv_req_notify_cq(c, solicited_only ? 1 : 0);
  }
  /// Waits up to `timeout` (negative or milliseconds::max(): forever) for a completion
  /// event on `ch` and stores the CQ it names in `out`. Returns 0, ETIMEDOUT or an errno. Each event
  /// must be acknowledged with ack_cq_events before the CQ is destroyed.
  static int get_cq_event(channel ch, std::chrono::milliseconds timeout, cq& out) noexcept {
    return rdmakit::ibverbs::detail::wait_then(ch->fd, timeout, [&]() noexcept -> int {
      ibv_cq* c = nullptr;
      void* user = nullptr;
      errno = 0;
      if (ibv_get_cq_event(ch, &c, &user) != 0) return errno != 0 ? errno : EIO;
      out = c;
      return 0;
    });
  }
  static void ack_cq_events(cq c, unsigned n) noexcept { ibv_ack_cq_events(c, n); }

  // ------------------------------------------------------------------ queue pairs

  /// Checks `caps` against the device limits (max_qp_wr, max_sge), creates the QP and
  /// writes the granted caps back. A refused inline size is explained by probing the
  /// limit for this QP type then, on the failure path only.
  static qp create_qp(pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps, bool sq_sig_all) {
    if (!p || !send_cq || !recv_cq)
      throw verbs_error("ibv_create_qp", EINVAL, "the PD, send CQ and receive CQ must all be given");
    ibv_context* ctx = p->context;
    const ibv_device_attr lim = rdmakit::ibverbs::detail::query_raw(ctx);
    const std::string what = std::string(to_string(type)) + " QP on " + device_name(ctx);
    auto over = [&](const char* field, std::uint32_t asked, const char* limit, long long max) {
      if (static_cast<long long>(asked) > max)
        throw verbs_error("ibv_create_qp", EINVAL,
                          what + ": " + field + "=" + std::to_string(asked) + " exceeds the device limit " +
                              limit + "=" + std::to_string(max) + "; ask for at most that");
    };
    over("max_send_wr", caps.max_send_wr, "max_qp_wr", lim.max_qp_wr);
    over("max_recv_wr", caps.max_recv_wr, "max_qp_wr", lim.max_qp_wr);
    over("max_send_sge", caps.max_send_sge, "max_sge", lim.max_sge);
    over("max_recv_sge", caps.max_recv_sge, "max_sge", lim.max_sge);

    ibv_qp_init_attr ia;
    std::memset(&ia, 0, sizeof ia);
    ia.send_cq = send_cq;
    ia.recv_cq = recv_cq;
    ia.qp_type = static_cast<ibv_qp_type>(type);
    ia.sq_sig_all = sq_sig_all ? 1 : 0;
    ia.cap.max_send_wr = caps.max_send_wr;
    ia.cap.max_recv_wr = caps.max_recv_wr;
    ia.cap.max_send_sge = caps.max_send_sge;
    ia.cap.max_recv_sge = caps.max_recv_sge;
    ia.cap.max_inline_data = caps.max_inline_data;
    errno = 0;
    ibv_qp* q = ibv_create_qp(p, &ia);
    if (!q) {
      const int err = rdmakit::ibverbs::detail::null_errno();
      std::string why = what + " with " + rdmakit::ibverbs::detail::caps_string(caps);
      const std::uint32_t inline_limit =
          err == EINVAL && caps.max_inline_data > 0
              ? rdmakit::ibverbs::detail::probe_max_inline(ctx, static_cast<ibv_qp_type>(type))
              : caps.max_inline_data;
      if (caps.max_inline_data > inline_limit)
        throw verbs_error("ibv_create_qp", err,
                          what + ": max_inline_data=" + std::to_string(caps.max_inline_data) +
                              " exceeds the device limit max_inline_data (probed)=" +
                              std::to_string(inline_limit) + "; ask for at most that");
      if (err == ENOMEM)
        why += std::string(": out of QP resources, or ") + rdmakit::ibverbs::detail::memlock_hint();
      else if (err == EINVAL)
        why += ": the provider refused these capacities (device limits: max_qp_wr=" +
               std::to_string(lim.max_qp_wr) + " max_sge=" + std::to_string(lim.max_sge) +
               "; the usable WR/SGE counts can be lower when both are large)";
      else if (err == EOPNOTSUPP)
        why += ": the device does not support this QP type";
      throw verbs_error("ibv_create_qp", err, why);
    }
    caps.max_send_wr = ia.cap.max_send_wr;
    caps.max_recv_wr = ia.cap.max_recv_wr;
    caps.max_send_sge = ia.cap.max_send_sge;
    caps.max_recv_sge = ia.cap.max_recv_sge;
    caps.max_inline_data = ia.cap.max_inline_data;
    return q;
  }
  static int destroy_qp(qp q) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_qp(q)); }
  static std::uint32_t qp_num(qp q) noexcept { return q->qp_num; }

  /// Translates `attr` (the fields named by `mask`) and calls ibv_modify_qp. Failures
  /// name the transition and the mask and say which bits the spec expects there.
  /// ALT_PATH, PATH_MIG_STATE and CAP are refused: rdmakit::qp_attr has no fields for them.
  static void modify_qp(qp q, const qp_attr& attr, qp_attr_mask mask) {
    namespace d = rdmakit::ibverbs::detail;
    if (has_any(mask, d::unsupported_mask))
      throw verbs_error("ibv_modify_qp", EINVAL,
                        to_string(mask & d::unsupported_mask) +
                            " not supported: rdmakit::qp_attr has no alternate path, migration state or "
                            "capability fields");
    ibv_qp_attr a = d::to_ibv(attr);
    errno = 0;
    if (int err = d::rc_errno(ibv_modify_qp(q, &a, static_cast<int>(to_underlying(mask)))))
      throw modify_error(q, attr, mask, err);
  }

  static qp_state query_qp_state(qp q) {
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    std::memset(&a, 0, sizeof a);
    std::memset(&ia, 0, sizeof ia);
    if (int err = rdmakit::ibverbs::detail::rc_errno(ibv_query_qp(q, &a, IBV_QP_STATE, &ia)))
      throw verbs_error("ibv_query_qp", err, "QP " + std::to_string(q->qp_num));
    return static_cast<qp_state>(a.qp_state);
  }

  /// `bad_wr` may be null (then the first failing WR is not reported).
  static int post_send(qp q, send_wr* wr, send_wr** bad_wr) noexcept {
    send_wr* ignored = nullptr;
    return ibv_post_send(q, wr, bad_wr ? bad_wr : &ignored);
  }
  static int post_recv(qp q, recv_wr* wr, recv_wr** bad_wr) noexcept {
    recv_wr* ignored = nullptr;
    return ibv_post_recv(q, wr, bad_wr ? bad_wr : &ignored);
  }

  // ------------------------------------------- building native work requests

  static void set_sge(sge& s, std::uint64_t addr, std::uint32_t length, std::uint32_t lkey) noexcept {
    s.addr = addr;
    s.length = length;
    s.lkey = lkey;
  }
  static void set_send(send_wr& w, std::uint64_t wr_id, opcode op, send_flags fl, sge* list, int n) noexcept {
    w.wr_id = wr_id;
    w.next = nullptr;
    w.sg_list = list;
    w.num_sge = n;
    w.opcode = static_cast<ibv_wr_opcode>(op);
    w.send_flags = to_underlying(fl);
  }
  static void set_next(send_wr& w, send_wr* next) noexcept { w.next = next; }
  static void set_imm(send_wr& w, std::uint32_t imm_be) noexcept { w.imm_data = imm_be; }
  static void set_rdma(send_wr& w, std::uint64_t raddr, std::uint32_t rkey) noexcept {
    w.wr.rdma.remote_addr = raddr;
    w.wr.rdma.rkey = rkey;
  }
  static void set_atomic(send_wr& w, std::uint64_t raddr, std::uint32_t rkey, std::uint64_t compare_add,
                         std::uint64_t swap) noexcept {
    w.wr.atomic.remote_addr = raddr;
    w.wr.atomic.rkey = rkey;
    w.wr.atomic.compare_add = compare_add;
    w.wr.atomic.swap = swap;
  }
  static void set_ud(send_wr& w, ah a, std::uint32_t remote_qpn, std::uint32_t qkey) noexcept {
    w.wr.ud.ah = a;
    w.wr.ud.remote_qpn = remote_qpn;
    w.wr.ud.remote_qkey = qkey;
  }
  static void set_recv(recv_wr& w, std::uint64_t wr_id, sge* list, int n) noexcept {
    w.wr_id = wr_id;
    w.next = nullptr;
    w.sg_list = list;
    w.num_sge = n;
  }
  static void set_next(recv_wr& w, recv_wr* next) noexcept { w.next = next; }
  static send_wr_facts describe_send(const send_wr& w) noexcept {
    send_wr_facts f{static_cast<opcode>(w.opcode), static_cast<send_flags>(w.send_flags), w.num_sge, 0, 0};
    for (int i = 0; i < w.num_sge && w.sg_list; ++i) f.length += w.sg_list[i].length;
    if (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
      f.remote_addr = w.wr.atomic.remote_addr;
    else if (w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || w.opcode == IBV_WR_RDMA_READ)
      f.remote_addr = w.wr.rdma.remote_addr;
    return f;
  }

  // ------------------------------------------------------ reading completions

  static std::uint64_t get_wr_id(const wc& w) noexcept { return w.wr_id; }
  static wc_status get_status(const wc& w) noexcept { return static_cast<wc_status>(w.status); }
  static wc_opcode get_opcode(const wc& w) noexcept { return static_cast<wc_opcode>(w.opcode); }
  static std::uint32_t get_byte_len(const wc& w) noexcept { return w.byte_len; }
  static std::uint32_t get_qp_num(const wc& w) noexcept { return w.qp_num; }
  static std::uint32_t get_src_qp(const wc& w) noexcept { return w.src_qp; }
  /// GRH and WITH_IMM only (other IBV_WC_* bits, e.g. IP_CSUM_OK, are masked off).
  static wc_flags get_wc_flags(const wc& w) noexcept {
    return static_cast<wc_flags>(w.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM));
  }
  static std::uint32_t get_imm(const wc& w) noexcept { return w.imm_data; }
  static std::uint32_t get_vendor_err(const wc& w) noexcept { return w.vendor_err; }

 private:
  static std::uint32_t nonneg(int v) noexcept { return v < 0 ? 0u : static_cast<std::uint32_t>(v); }
  static std::string hex(std::uintptr_t v) {
    char buf[2 + 2 * sizeof v + 1];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
  }
  static int list_errno() noexcept { return errno != 0 ? errno : ENODEV; }

  static verbs_error modify_error(qp q, const qp_attr& attr, qp_attr_mask mask, int err) {
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
    std::string why = std::string(to_string(type)) + " QP " + std::to_string(q->qp_num) + " on " +
                      device_name(q->context) + ": " + to_string(from) + "->" + to_string(to) + " with mask " +
                      to_string(mask) + ": ";
    const std::string mask_problem = d::explain_mask(type, from, to, mask);
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
          value_problem += std::string("; path_mtu ") + std::to_string(mtu_bytes(attr.path_mtu)) +
                           " is above the port's max_mtu " +
                           std::to_string(mtu_bytes(static_cast<mtu>(pa.max_mtu)));
      } else {
        value_problem += "; av.port_num " + std::to_string(port) + " is not a port of this device";
      }
    }
    if (!mask_problem.empty()) why += mask_problem + value_problem;
    else if (!value_problem.empty()) why += value_problem.substr(2);
    else why += d::value_hint;
    return verbs_error("ibv_modify_qp", err, why);
  }
};

static_assert(device_backend<ibverbs>);
static_assert(memory_backend<ibverbs>);
static_assert(queue_backend<ibverbs>);
static_assert(posting_backend<ibverbs>);
static_assert(polling_backend<ibverbs>);
static_assert(event_backend<ibverbs>);
static_assert(verbs_backend<ibverbs>);

/// Automatic GID choice for a port of an ibverbs device (the rule is in
/// rdmakit/detail/gid_choice.hpp: on RoCE an IPv4-mapped RoCEv2 GID first, then any
/// RoCEv2, then RoCEv1; on InfiniBand index 0). Throws verbs_error listing the GID
/// table when nothing fits. Callers that know their GID index simply don't call it.
inline int choose_gid(ibv_context* ctx, std::uint8_t port) {
  return rdmakit::detail::choose_gid<ibverbs>(ctx, port);
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
