#pragma once
/// The libibverbs (rdma-core) backend: thin and zero-copy. Handles are the native
/// pointers, work requests and completions are ibv_send_wr / ibv_recv_wr / ibv_wc,
/// the `set_*` functions write straight into them and the data path calls the
/// ibv_ inline functions directly. Setup verbs throw verbs_error naming the verb,
/// the errno, what was wrong and what to do (their bodies are in ibverbs/device_verbs.hpp
/// and ibverbs/qp_verbs.hpp). The headers of this backend are the only rdmakit headers
/// that include <infiniband/verbs.h>.
///
/// With RDMAKIT_SEPARATE_COMPILATION the setup verbs are only declared here
/// (ibverbs/setup_verbs.hpp) and compiled once, where
/// <rdmakit/backends/ibverbs/src.hpp> is included.
#include <rdmakit/backend.hpp>
#include <rdmakit/backends/ibverbs/abi.hpp>
#include <rdmakit/backends/ibverbs/setup_verbs.hpp>
#include <rdmakit/backends/ibverbs/support.hpp>
#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/backends/ibverbs/device_verbs.hpp>
#include <rdmakit/backends/ibverbs/qp_verbs.hpp>
#include <rdmakit/backends/ibverbs/srq_verbs.hpp>
#endif
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/gid_choice.hpp>
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

namespace backends {

/// The rdma-core backend. Satisfies verbs_backend; see the file comment.
struct ibverbs {
  using context = ibv_context*;       ///< an opened device
  using pd = ibv_pd*;                 ///< a protection domain
  using mr = ibv_mr*;                 ///< a memory region
  using cq = ibv_cq*;                 ///< a completion queue
  using channel = ibv_comp_channel*;  ///< a completion channel
  using qp = ibv_qp*;                 ///< a queue pair
  using ah = ibv_ah*;                 ///< an address handle
  using mw = ibv_mw*;                 ///< a memory window
  using srq = ibv_srq*;               ///< a shared receive queue
  using sge = ibv_sge;                ///< a scatter/gather entry
  using send_wr = ibv_send_wr;        ///< a send work request
  using recv_wr = ibv_recv_wr;        ///< a receive work request
  using wc = ibv_wc;                  ///< a work completion

  /// The backend's name, as errors print it.
  static constexpr std::string_view name = "ibverbs";

  // ---------------------------------------------------------------- devices

  /// Names of the RDMA devices present; empty when there are none or the kernel has
  /// no RDMA support. Throws only for other failures (EPERM, ENOMEM).
  static std::vector<std::string> device_names() { return rdmakit::ibverbs::detail::device_names(); }

  /// Opens a device by name; an empty name opens the first one. Unknown names throw
  /// ENODEV listing the devices that exist.
  static context open_device(std::string_view dev_name) {
    return rdmakit::ibverbs::detail::open_device(dev_name);
  }

  /// ibv_close_device: closes a device opened by open_device; a none handle is ignored.
  static void close_device(context ctx) noexcept {
    if (!ctx) return;
    ibv_close_device(ctx);
  }

  /// ibv_get_device_name: the device's name, as device_names() lists it.
  static std::string device_name(context ctx) { return rdmakit::ibverbs::detail::ctx_name(ctx); }
  /// What names the device behind `ctx`, the same for every context open on it:
  /// libibverbs keeps one ibv_device per device while a context of it is open.
  static const void* device_identity(context ctx) noexcept { return ctx ? ctx->device : nullptr; }

  /// ibv_query_device, plus max_inline_data for RC QPs, probed on each call (the typed
  /// layer calls this once per device open and keeps the result).
  static device_attr query_device(context ctx) { return rdmakit::ibverbs::detail::query_device(ctx); }

  /// ibv_query_port: the attributes of port `port` (1-based).
  static port_attr query_port(context ctx, std::uint8_t port) {
    return rdmakit::ibverbs::detail::query_port(ctx, port);
  }

  /// One GID table entry with its type (ibv_query_gid_ex). An empty slot (ENODATA or
  /// an all-zero GID) is `valid = false`, not an error.
  static gid_entry query_gid(context ctx, std::uint8_t port, int index) {
    return rdmakit::ibverbs::detail::query_gid(ctx, port, index);
  }

  /// Waits up to `timeout` (negative or milliseconds::max(): forever) for an
  /// asynchronous event, fills `out` and acknowledges it. Returns 0, ETIMEDOUT or an errno.
  static int get_async_event(context ctx, std::chrono::milliseconds timeout, async_event& out) noexcept {
    return rdmakit::ibverbs::detail::get_async_event(ctx, timeout, out);
  }

  // ------------------------------------------- protection domains, memory, AHs

  /// ibv_alloc_pd: allocates a protection domain on the device.
  static pd alloc_pd(context ctx) { return rdmakit::ibverbs::detail::alloc_pd(ctx); }
  /// ibv_dealloc_pd: frees a protection domain; returns 0 or an errno (EBUSY while objects use it).
  static int dealloc_pd(pd p) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_dealloc_pd(p)); }

  /// ibv_reg_mr: registers `length` bytes at `addr` with the rights `flags`.
  static mr reg_mr(pd p, void* addr, std::size_t length, access flags) {
    return rdmakit::ibverbs::detail::reg_mr(p, addr, length, flags);
  }
  /// ibv_dereg_mr: deregisters a region; returns 0 or an errno.
  static int dereg_mr(mr m) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_dereg_mr(m)); }
  /// The region's local key, which SGEs on it carry.
  static std::uint32_t mr_lkey(mr m) noexcept { return m->lkey; }
  /// The region's remote key, which peers' RDMA operations on it carry.
  static std::uint32_t mr_rkey(mr m) noexcept { return m->rkey; }

  // Memory windows (mw_backend).
  /// ibv_alloc_mw: allocates an unbound window of type `t` in the PD.
  static mw alloc_mw(pd p, mw_type t) { return rdmakit::ibverbs::detail::alloc_mw(p, t); }
  /// ibv_dealloc_mw: frees a window (a bound one stops granting access); returns 0 or an errno.
  static int dealloc_mw(mw w) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_dealloc_mw(w)); }
  /// The window's rkey as libibverbs keeps it (type 1: updated by each ibv_bind_mw).
  static std::uint32_t mw_rkey(mw w) noexcept { return w->rkey; }
  /// Type 2: records the rkey a posted BIND_MW gives the window. libibverbs leaves
  /// ibv_mw::rkey to the application, and the next BIND_MW names the window by it (rxe
  /// refuses a bind naming another rkey than the window's: MW_BIND_ERR).
  static void set_mw_rkey(mw w, std::uint32_t rkey) noexcept { w->rkey = rkey; }
  /// ibv_bind_mw (type 1): a zero length unbinds. `m` is needed even then (providers
  /// read its lkey): a null region is EINVAL here. Returns 0 or an errno.
  static int bind_mw(qp q, mw w, mr m, std::uint64_t addr, std::uint64_t length, access rights, std::uint64_t wr_id,
                     send_flags flags) noexcept {
    if (!m) return EINVAL;
    ibv_mw_bind b{};
    b.wr_id = wr_id;
    b.send_flags = to_underlying(flags);
    b.bind_info.mr = m;
    b.bind_info.addr = addr;
    b.bind_info.length = length;
    b.bind_info.mw_access_flags = to_underlying(rights);
    return ibv_bind_mw(q, w, &b);
  }
  /// Fills a type 2 BIND_MW WR (opcode bind_mw).
  static void set_bind_mw(send_wr& wr, mw w, std::uint32_t rkey, mr m, std::uint64_t addr, std::uint64_t length,
                          access rights) noexcept {
    wr.imm_data = 0;  // rxe's provider refuses a BIND_MW whose imm_data is not 0
    wr.bind_mw.mw = w;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = m;
    wr.bind_mw.bind_info.addr = addr;
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = to_underlying(rights);
  }
  /// The rkey a LOCAL_INV or SEND_WITH_INV invalidates.
  static void set_invalidate(send_wr& wr, std::uint32_t rkey) noexcept { wr.invalidate_rkey = rkey; }
  /// The rkey a received SEND_WITH_INV invalidated (host order).
  static std::uint32_t get_invalidated_rkey(const wc& w) noexcept { return w.invalidated_rkey; }

  /// ibv_create_ah: creates an address handle for UD sends to the address vector `attr`.
  static ah create_ah(pd p, const ah_attr& attr) { return rdmakit::ibverbs::detail::create_ah(p, attr); }
  /// ibv_destroy_ah: destroys an address handle; returns 0 or an errno.
  static int destroy_ah(ah a) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_ah(a)); }

  // ------------------------------------------------ completion queues, channels

  /// Creates a completion channel whose fd is non-blocking (get_cq_event waits with poll(2)).
  static channel create_comp_channel(context ctx) {
    return rdmakit::ibverbs::detail::create_comp_channel(ctx);
  }
  /// ibv_destroy_comp_channel: destroys a completion channel; returns 0 or an errno
  /// (EBUSY while a CQ uses it).
  static int destroy_comp_channel(channel ch) noexcept {
    return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_comp_channel(ch));
  }

  /// Checks `cqe` and `comp_vector` against the device first; the granted size
  /// (often rounded up) is cq_capacity().
  static cq create_cq(context ctx, int cqe, channel ch, int comp_vector) {
    return rdmakit::ibverbs::detail::create_cq(ctx, cqe, ch, comp_vector);
  }
  /// The entries create_cq granted (at least those asked for).
  static int cq_capacity(cq c) noexcept { return c->cqe; }
  /// ibv_destroy_cq: destroys a CQ; returns 0 or an errno (EBUSY while a QP uses it).
  static int destroy_cq(cq c) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_cq(c)); }

  /// ibv_poll_cq: moves up to `n` completions into `out`; returns how many, or a
  /// negative value on failure.
  static int poll_cq(cq c, int n, wc* out) noexcept { return ibv_poll_cq(c, n, out); }
  /// ibv_req_notify_cq: arms the CQ: its next completion (solicited only, if asked)
  /// raises an event on its channel. Returns 0 or an errno.
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
  /// ibv_ack_cq_events: acknowledges `n` events of the CQ; all must be acknowledged
  /// before it is destroyed.
  static void ack_cq_events(cq c, unsigned n) noexcept { ibv_ack_cq_events(c, n); }
  /// The channel's file descriptor, readable while a CQ event is waiting (fd_event_backend).
  static int channel_fd(channel ch) noexcept { return ch ? ch->fd : -1; }
  /// The device's asynchronous event descriptor, readable while an event is waiting.
  static int async_fd(context ctx) noexcept { return ctx ? ctx->async_fd : -1; }

  // ------------------------------------------------------------------ queue pairs

  /// Checks `caps` against the device limits (max_qp_wr, max_sge), creates the QP and
  /// writes the granted caps back. A refused inline size is explained by probing the
  /// limit for this QP type then, on the failure path only.
  static qp create_qp(pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps, bool sq_sig_all) {
    return rdmakit::ibverbs::detail::create_qp(p, send_cq, recv_cq, nullptr, type, caps, sq_sig_all);
  }
  /// ibv_destroy_qp: destroys a queue pair; returns 0 or an errno.
  static int destroy_qp(qp q) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_qp(q)); }
  /// The queue pair's number.
  static std::uint32_t qp_num(qp q) noexcept { return q->qp_num; }

  /// Translates `attr` (the fields named by `mask`) and calls ibv_modify_qp. Failures
  /// name the transition and the mask and say which bits the spec expects there.
  /// ALT_PATH, PATH_MIG_STATE and CAP are refused: rdmakit::qp_attr has no fields for them.
  static void modify_qp(qp q, const qp_attr& attr, qp_attr_mask mask) {
    rdmakit::ibverbs::detail::modify_qp(q, attr, mask);
  }

  /// ibv_query_qp: the state the device reports for the queue pair.
  static qp_state query_qp_state(qp q) { return rdmakit::ibverbs::detail::query_qp_state(q); }

  /// `bad_wr` may be null (then the first failing WR is not reported).
  static int post_send(qp q, send_wr* wr, send_wr** bad_wr) noexcept {
    send_wr* ignored = nullptr;
    return ibv_post_send(q, wr, bad_wr ? bad_wr : &ignored);
  }
  /// ibv_post_recv: posts the receive WR list starting at `wr`. Returns 0 or an errno;
  /// on failure `*bad_wr` is the first WR not posted.
  static int post_recv(qp q, recv_wr* wr, recv_wr** bad_wr) noexcept {
    recv_wr* ignored = nullptr;
    return ibv_post_recv(q, wr, bad_wr ? bad_wr : &ignored);
  }

  // ------------------------------------------------------ shared receive queues

  /// ibv_create_srq, checked against max_srq_wr/max_srq_sge first; writes the granted
  /// max_wr/max_sge back and arms attr.limit (ibv_modify_srq) when it is not 0.
  static srq create_srq(pd p, srq_attr& attr) { return rdmakit::ibverbs::detail::create_srq(p, attr); }
  /// ibv_destroy_srq: returns 0 or an errno (EBUSY while a QP uses it).
  static int destroy_srq(srq s) noexcept { return rdmakit::ibverbs::detail::rc_errno(ibv_destroy_srq(s)); }
  /// ibv_post_srq_recv: posts the receive WR list starting at `wr`. Returns 0 or an
  /// errno; on failure `*bad_wr` is the first WR not posted.
  static int post_srq_recv(srq s, recv_wr* wr, recv_wr** bad_wr) noexcept {
    recv_wr* ignored = nullptr;
    return ibv_post_srq_recv(s, wr, bad_wr ? bad_wr : &ignored);
  }
  /// ibv_modify_srq with IBV_SRQ_LIMIT: arms the limit event (0 disarms).
  static int arm_srq_limit(srq s, std::uint32_t limit) noexcept {
    ibv_srq_attr a;
    std::memset(&a, 0, sizeof a);
    a.srq_limit = limit;
    return rdmakit::ibverbs::detail::rc_errno(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT));
  }
  /// ibv_query_srq: max_wr, max_sge and the armed limit (0 once the event fired).
  static srq_attr query_srq(srq s) { return rdmakit::ibverbs::detail::query_srq(s); }
  /// create_qp whose receives come from `s`: caps.max_recv_* are written back as granted.
  static qp create_qp_on_srq(pd p, cq send_cq, cq recv_cq, srq s, qp_type type, qp_cap& caps, bool sq_sig_all) {
    return rdmakit::ibverbs::detail::create_qp(p, send_cq, recv_cq, s, type, caps, sq_sig_all);
  }

  // ------------------------------------------- building native work requests

  /// Fills a scatter/gather entry: address, length, local key.
  static void set_sge(sge& s, std::uint64_t addr, std::uint32_t length, std::uint32_t lkey) noexcept {
    s.addr = addr;
    s.length = length;
    s.lkey = lkey;
  }
  /// Sets what every send WR has (wr_id, opcode, flags, SGE list; next = null) and leaves
  /// the opcode-specific fields alone.
  static void set_send(send_wr& w, std::uint64_t wr_id, opcode op, send_flags fl, sge* list, int n) noexcept {
    w.wr_id = wr_id;
    w.next = nullptr;
    w.sg_list = list;
    w.num_sge = n;
    w.opcode = static_cast<ibv_wr_opcode>(op);
    w.send_flags = to_underlying(fl);
  }
  /// Links `next` after `w` in a post list.
  static void set_next(send_wr& w, send_wr* next) noexcept { w.next = next; }
  /// Replaces the flags alone.
  static void set_send_flags(send_wr& w, send_flags fl) noexcept { w.send_flags = to_underlying(fl); }
  /// Replaces the wr_id alone.
  static void set_wr_id(send_wr& w, std::uint64_t wr_id) noexcept { w.wr_id = wr_id; }
  /// Sets the immediate data (network byte order).
  static void set_imm(send_wr& w, std::uint32_t imm_be) noexcept { w.imm_data = imm_be; }
  /// Sets the remote address and rkey of an RDMA WRITE or READ.
  static void set_rdma(send_wr& w, std::uint64_t raddr, std::uint32_t rkey) noexcept {
    w.wr.rdma.remote_addr = raddr;
    w.wr.rdma.rkey = rkey;
  }
  /// Sets the remote address, rkey and operands of an atomic (compare or add, then swap).
  static void set_atomic(send_wr& w, std::uint64_t raddr, std::uint32_t rkey, std::uint64_t compare_add,
                         std::uint64_t swap) noexcept {
    w.wr.atomic.remote_addr = raddr;
    w.wr.atomic.rkey = rkey;
    w.wr.atomic.compare_add = compare_add;
    w.wr.atomic.swap = swap;
  }
  /// Sets a UD send's destination: address handle, remote QPN and Q_Key.
  static void set_ud(send_wr& w, ah a, std::uint32_t remote_qpn, std::uint32_t qkey) noexcept {
    w.wr.ud.ah = a;
    w.wr.ud.remote_qpn = remote_qpn;
    w.wr.ud.remote_qkey = qkey;
  }
  /// Fills a receive WR: wr_id and SGE list; next = null.
  static void set_recv(recv_wr& w, std::uint64_t wr_id, sge* list, int n) noexcept {
    w.wr_id = wr_id;
    w.next = nullptr;
    w.sg_list = list;
    w.num_sge = n;
  }
  /// Links `next` after `w` in a receive list.
  static void set_next(recv_wr& w, recv_wr* next) noexcept { w.next = next; }
  /// What a refused send WR asked for, so the error can name the rule it broke.
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

  /// The wr_id of the WR that completed.
  static std::uint64_t get_wr_id(const wc& w) noexcept { return w.wr_id; }
  /// The completion's status.
  static wc_status get_status(const wc& w) noexcept { return static_cast<wc_status>(w.status); }
  /// What completed (meaningful on success only).
  static wc_opcode get_opcode(const wc& w) noexcept { return static_cast<wc_opcode>(w.opcode); }
  /// Bytes transferred (on UD receives, including the 40-byte GRH).
  static std::uint32_t get_byte_len(const wc& w) noexcept { return w.byte_len; }
  /// The number of the local queue pair the WR was posted on.
  static std::uint32_t get_qp_num(const wc& w) noexcept { return w.qp_num; }
  /// The sending queue pair (UD receives).
  static std::uint32_t get_src_qp(const wc& w) noexcept { return w.src_qp; }
  /// The sender's LID (UD receives on InfiniBand; 0 on RoCE).
  static std::uint16_t get_slid(const wc& w) noexcept { return w.slid; }
  /// The sender's service level (UD receives on InfiniBand; 0 on RoCE).
  static std::uint8_t get_sl(const wc& w) noexcept { return w.sl; }
  /// GRH, WITH_IMM and WITH_INV only (other IBV_WC_* bits, e.g. IP_CSUM_OK, are masked off).
  static wc_flags get_wc_flags(const wc& w) noexcept {
    return static_cast<wc_flags>(w.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV));
  }
  /// The immediate data, network byte order.
  static std::uint32_t get_imm(const wc& w) noexcept { return w.imm_data; }
  /// The device's own error code, for its vendor's documentation.
  static std::uint32_t get_vendor_err(const wc& w) noexcept { return w.vendor_err; }
};

static_assert(models_verbs_backend<ibverbs>());
static_assert(fd_event_backend<ibverbs>);
static_assert(mw_backend<ibverbs>);
static_assert(wr_id_backend<ibverbs>);
static_assert(srq_backend<ibverbs>);

/// Automatic GID choice for a port of an ibverbs device (the rule is in
/// rdmakit/detail/gid_choice.hpp: on RoCE an IPv4-mapped RoCEv2 GID first, then any
/// RoCEv2, then RoCEv1; on InfiniBand index 0). Throws verbs_error listing the GID
/// table when nothing fits. Callers that know their GID index simply don't call it.
inline int choose_gid(ibv_context* ctx, std::uint8_t port) {
  return rdmakit::detail::choose_gid<ibverbs>(ctx, port);
}

}  // namespace backends
RDMAKIT_END_NAMESPACE

// Separate compilation: the backend's cold instantiations are its src.hpp's
// (detail/backend_instances.hpp says which, and why here or in detail/qp_setup.hpp).
#if defined(RDMAKIT_SEPARATE_COMPILATION) && !defined(RDMAKIT_COMPILING_SOURCES)
#define RDMAKIT_BACKENDS_IBVERBS_INCLUDED
#if defined(RDMAKIT_BACKEND_TEMPLATES_DEFINED)
#include <rdmakit/detail/backend_instances.hpp>
RDMAKIT_BACKEND_INSTANCES(extern, ::rdmakit::backends::ibverbs);
#endif
#endif
