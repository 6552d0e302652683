#pragma once
/// The mock backend's type: handles, native work requests and completions, and the
/// declarations of its verbs (defined in mock/verbs.hpp). Include
/// <rdmakit/backends/mock.hpp>, which brings both. The mock backend: an in-process HCA that follows docs/semantics.md (the
/// spec behaviour; where rxe differs the mock can be told so, see fabric_config).
/// Progress is driven by post and poll calls on a simulated clock, deterministic for a
/// seed, and safe when the two ends of a connection run on two threads.
#include <rdmakit/backend.hpp>
#include <rdmakit/cm_backend.hpp>
#include <rdmakit/backends/mock/fabric.hpp>
#include <rdmakit/detail/chrono.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {
class context_obj;
class pd_obj;
class mr_obj;
class cq_obj;
class channel_obj;
class qp_obj;
class ah_obj;
class mw_obj;
class srq_obj;
class cm_channel_obj;
class cm_id_obj;
}  // namespace mock::detail

namespace backends {

/// The mock backend: `device<backends::mock>` and the rest of the typed layer run on a
/// simulated HCA (see the file comment). Satisfies verbs_backend. Handles point to the
/// engine's objects (rdmakit::mock::detail); tests reach the fabric through mock::fabric.
struct mock {
  using context = rdmakit::mock::detail::context_obj*;  ///< an opened device
  using pd = rdmakit::mock::detail::pd_obj*;            ///< a protection domain
  using mr = rdmakit::mock::detail::mr_obj*;            ///< a memory region
  using cq = rdmakit::mock::detail::cq_obj*;            ///< a completion queue
  using channel = rdmakit::mock::detail::channel_obj*;  ///< a completion channel
  using qp = rdmakit::mock::detail::qp_obj*;            ///< a queue pair
  using ah = rdmakit::mock::detail::ah_obj*;            ///< an address handle
  using mw = rdmakit::mock::detail::mw_obj*;            ///< a memory window
  using srq = rdmakit::mock::detail::srq_obj*;          ///< a shared receive queue
  using cm_channel = rdmakit::mock::detail::cm_channel_obj*;  ///< a connection-manager event channel
  using cm_id = rdmakit::mock::detail::cm_id_obj*;            ///< a connection-manager id
  using sge = rdmakit::sge;                             ///< the same layout as ibv_sge

  /// Mirrors ibv_send_wr.
  struct send_wr {
    std::uint64_t wr_id = 0;              ///< returned in the completion
    send_wr* next = nullptr;              ///< the next WR of a post list, or null
    sge* sg_list = nullptr;               ///< the local side
    int num_sge = 0;                      ///< entries in sg_list
    opcode op = opcode::send;             ///< what to do
    send_flags flags = send_flags::none;  ///< signaled, inline, fence, solicited
    std::uint32_t imm_data = 0;           ///< network byte order (the *_with_imm opcodes)
    std::uint32_t invalidate_rkey = 0;    ///< LOCAL_INV, SEND_WITH_INV: the rkey invalidated
    /// BIND_MW (type 2): the window, its new rkey, and the region part it grants.
    struct {
      mw window = nullptr;
      std::uint32_t rkey = 0;
      mr region = nullptr;
      std::uint64_t addr = 0;
      std::uint64_t length = 0;
      access rights = access::none;
    } bind_mw;
    /// RDMA WRITE and READ: the remote address and its rkey.
    struct {
      std::uint64_t remote_addr = 0;
      std::uint32_t rkey = 0;
    } rdma;
    /// Atomics: the remote address, the operands and the rkey.
    struct {
      std::uint64_t remote_addr = 0;
      std::uint64_t compare_add = 0;
      std::uint64_t swap = 0;
      std::uint32_t rkey = 0;
    } atomic;
    /// UD sends: the address handle, the remote QPN and the Q_Key.
    struct {
      ah address = nullptr;
      std::uint32_t remote_qpn = 0;
      std::uint32_t remote_qkey = 0;
    } ud;
  };

  /// Mirrors ibv_recv_wr.
  struct recv_wr {
    std::uint64_t wr_id = 0;  ///< returned in the completion
    recv_wr* next = nullptr;  ///< the next WR of a list, or null
    sge* sg_list = nullptr;   ///< where the message lands
    int num_sge = 0;          ///< entries in sg_list
  };

  /// Mirrors ibv_wc.
  struct wc {
    std::uint64_t wr_id = 0;                ///< the wr_id of the WR that completed
    wc_status status = wc_status::success;  ///< success, or why the WR failed
    wc_opcode opcode = wc_opcode::send;     ///< what completed (on success)
    std::uint32_t vendor_err = 0;           ///< the simulated device's own code
    std::uint32_t byte_len = 0;             ///< bytes transferred (UD receives: GRH included)
    std::uint32_t imm_data = 0;             ///< network byte order (wc_flags::with_imm); with_inv: the rkey, host order
    std::uint32_t qp_num = 0;               ///< the local queue pair
    std::uint32_t src_qp = 0;               ///< the sending queue pair (UD receives)
    wc_flags flags = wc_flags::none;        ///< with_imm, grh
    std::uint16_t pkey_index = 0;           ///< as in ibv_wc
    std::uint16_t slid = 0;                 ///< the sender's LID (UD receives on InfiniBand)
    std::uint8_t sl = 0;                    ///< the sender's service level (UD receives on InfiniBand)
    std::uint8_t dlid_path_bits = 0;        ///< as in ibv_wc
  };

  /// The backend's name, as errors print it.
  static constexpr std::string_view name = "mock";

  // Devices. The name-only forms use rdmakit::mock::default_fabric() and nothing else;
  // a fabric you construct is used only when passed (device<mock> dev(fab, "mock0")).
  /// Names of the devices of default_fabric().
  static std::vector<std::string> device_names();
  /// Names of the devices of `fab`.
  static std::vector<std::string> device_names(rdmakit::mock::fabric& fab);
  /// Names of the devices of the fabric whose state `st` is (fabric::shared_state()).
  static std::vector<std::string> device_names(rdmakit::detail::shared_owner<rdmakit::mock::detail::fabric_state> st);
  /// Opens a device by name; an empty name opens the first one.
  static context open_device(std::string_view dev_name);
  /// Opens a device of `fab`.
  static context open_device(rdmakit::mock::fabric& fab, std::string_view dev_name);
  /// Opens a device of the fabric whose state `st` is; the device keeps that state alive.
  static context open_device(rdmakit::detail::shared_owner<rdmakit::mock::detail::fabric_state> st, std::string_view dev_name);
  /// Closes a device opened by open_device; a none handle is ignored.
  static void close_device(context ctx) noexcept;
  /// The device's name, as device_names() lists it.
  static std::string device_name(context ctx);
  /// What names the device behind `ctx`, the same for every context open on it (the
  /// device's record in its fabric, fixed once the fabric is built).
  static const void* device_identity(context ctx) noexcept;
  /// The device's capabilities, which the typed layer checks requests against.
  static device_attr query_device(context ctx);
  /// The attributes of port `port` (1-based).
  static port_attr query_port(context ctx, std::uint8_t port);
  /// Entry `index` of port `port`'s GID table; an empty slot is `valid = false`.
  static gid_entry query_gid(context ctx, std::uint8_t port, int index);
  /// Waits up to `timeout` for an asynchronous event, fills `out` and acknowledges it.
  /// Returns 0, ETIMEDOUT or an errno.
  static int get_async_event(context ctx, std::chrono::milliseconds timeout, async_event& out) noexcept;

  /// Allocates a protection domain on the device.
  static pd alloc_pd(context ctx);
  /// Frees a protection domain; returns 0 or an errno (EBUSY while objects use it).
  static int dealloc_pd(pd p) noexcept;
  /// Registers `length` bytes at `addr` with the rights `flags`.
  static mr reg_mr(pd p, void* addr, std::size_t length, access flags);
  /// Deregisters a region; returns 0 or an errno.
  static int dereg_mr(mr m) noexcept;
  /// The region's local key, which SGEs on it carry.
  static std::uint32_t mr_lkey(mr m) noexcept;
  /// The region's remote key, which peers' RDMA operations on it carry.
  static std::uint32_t mr_rkey(mr m) noexcept;
  /// Creates an address handle for UD sends to the address vector `attr`.
  static ah create_ah(pd p, const ah_attr& attr);

  // Memory windows (mw_backend).
  /// Allocates a memory window of type `t` in the PD (unbound).
  static mw alloc_mw(pd p, mw_type t);
  /// Frees a window; a bound window stops granting access at once. Returns 0 or an errno.
  static int dealloc_mw(mw w) noexcept;
  /// The window's rkey (type 1: as set by the last bind_mw call; type 2: by set_mw_rkey).
  static std::uint32_t mw_rkey(mw w) noexcept;
  /// Type 2: records the rkey a posted BIND_MW gives the window (ibv_mw::rkey = rkey), the
  /// rkey its next BIND_MW names it by.
  static void set_mw_rkey(mw w, std::uint32_t rkey) noexcept;
  /// Type 1 bind: puts a BIND_MW WR on the send queue (as rxe and hardware do) and gives
  /// the window its next rkey now; a zero length unbinds (with a region all the same: a
  /// null one is EINVAL, as providers read its lkey). Returns 0 or an errno.
  static int bind_mw(qp q, mw w, mr m, std::uint64_t addr, std::uint64_t length, access rights,
                     std::uint64_t wr_id, send_flags flags) noexcept;
  /// Fills a type 2 BIND_MW WR.
  static void set_bind_mw(send_wr& wr, mw w, std::uint32_t rkey, mr m, std::uint64_t addr, std::uint64_t length,
                          access rights) noexcept {
    wr.imm_data = 0;  // rxe's provider refuses a BIND_MW whose imm_data is not 0 (mw.bind_wr_imm_data)
    wr.bind_mw = {w, rkey, m, addr, length, rights};
  }
  /// The rkey a LOCAL_INV or SEND_WITH_INV invalidates.
  static void set_invalidate(send_wr& wr, std::uint32_t rkey) noexcept { wr.invalidate_rkey = rkey; }
  /// The rkey a received SEND_WITH_INV invalidated.
  static std::uint32_t get_invalidated_rkey(const wc& w) noexcept { return w.imm_data; }
  /// Destroys an address handle; returns 0 or an errno.
  static int destroy_ah(ah a) noexcept;

  /// Creates a completion channel, which armed CQs notify.
  static channel create_comp_channel(context ctx);
  /// Destroys a completion channel; returns 0 or an errno (EBUSY while a CQ uses it).
  static int destroy_comp_channel(channel ch) noexcept;
  /// Creates a CQ of at least `cqe` entries on completion vector `comp_vector`, notifying `ch`
  /// (none: nobody sleeps on it).
  static cq create_cq(context ctx, int cqe, channel ch, int comp_vector);
  /// The entries create_cq granted (at least those asked for).
  static int cq_capacity(cq c) noexcept;
  /// Destroys a CQ; returns 0 or an errno (EBUSY while a QP uses it).
  static int destroy_cq(cq c) noexcept;
  /// Moves up to `n` completions into `out`; returns how many, or a negative value on failure.
  static int poll_cq(cq c, int n, wc* out) noexcept;
  /// Arms the CQ: its next completion (solicited only, if asked) raises an event on its
  /// channel. Returns 0 or an errno.
  static int req_notify_cq(cq c, bool solicited_only) noexcept;
  /// Waits up to `timeout` for a completion event on `ch` and stores its CQ in `out`.
  /// Returns 0, ETIMEDOUT or an errno.
  static int get_cq_event(channel ch, std::chrono::milliseconds timeout, cq& out) noexcept;
  /// Acknowledges `n` events of the CQ; all must be acknowledged before it is destroyed.
  static void ack_cq_events(cq c, unsigned n) noexcept;
  /// A descriptor readable while `ch` has a CQ event to take (for epoll; fd_event_backend).
  static int channel_fd(channel ch) noexcept;
  /// A descriptor readable while the device has an asynchronous event to take.
  static int async_fd(context ctx) noexcept;
  /// True while simulated work (the wire, retry and RNR timers) is pending, which a
  /// get_cq_event with a zero timeout moves on: an event loop then polls instead of
  /// sleeping, since nothing but a call into the mock advances simulated time.
  static bool progress_pending(channel ch) noexcept;

  /// Creates a queue pair of `type` on a send and a receive CQ. `caps` is what is asked and,
  /// on return, what was granted; `sq_sig_all` signals every send WR.
  static qp create_qp(pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps, bool sq_sig_all);
  /// Destroys a queue pair; returns 0 or an errno.
  static int destroy_qp(qp q) noexcept;
  /// The queue pair's number.
  static std::uint32_t qp_num(qp q) noexcept;
  /// Applies the attributes of `attr` that `mask` names (a state transition); throws verbs_error.
  static void modify_qp(qp q, const qp_attr& attr, qp_attr_mask mask);
  /// The state the device reports for the queue pair.
  static qp_state query_qp_state(qp q);
  /// Posts the send WR list starting at `wr`. Returns 0 or an errno; on failure `*bad_wr`
  /// is the first WR not posted.
  static int post_send(qp q, send_wr* wr, send_wr** bad_wr) noexcept;
  /// Posts the receive WR list starting at `wr`. Returns 0 or an errno; on failure `*bad_wr`
  /// is the first WR not posted.
  static int post_recv(qp q, recv_wr* wr, recv_wr** bad_wr) noexcept;

  // Shared receive queues (srq_backend).
  /// Creates an SRQ of attr.max_wr receives of attr.max_sge SGEs (granted as asked) and
  /// arms attr.limit when it is not 0. Under the rxe profile it holds its ring's 2^k - 1
  /// receives, as rxe does: query_srq reports that, the write-back max_wr as asked.
  static srq create_srq(pd p, srq_attr& attr);
  /// Destroys an SRQ; EBUSY while a queue pair uses it.
  static int destroy_srq(srq s) noexcept;
  /// Posts the receive WR list starting at `wr` to the SRQ. Returns 0 or an errno (ENOMEM:
  /// full); on failure `*bad_wr` is the first WR not posted.
  static int post_srq_recv(srq s, recv_wr* wr, recv_wr** bad_wr) noexcept;
  /// Arms the limit event (0 disarms). EINVAL above the receives it holds.
  static int arm_srq_limit(srq s, std::uint32_t limit) noexcept;
  /// The SRQ's max_wr, max_sge and armed limit (0 once the event fired).
  static srq_attr query_srq(srq s);
  /// create_qp whose receives come from `s` (its receive capacities granted as 0).
  static qp create_qp_on_srq(pd p, cq send_cq, cq recv_cq, srq s, qp_type type, qp_cap& caps, bool sq_sig_all);

  // The connection manager (cm_backend; mock/cm_verbs.hpp). Addresses are the IPv4
  // addresses of the ports' IPv4-mapped GIDs (mock0 10.0.0.1, mock1 10.0.0.2 by
  // default); events follow librdmacm's sequence and come at once (no wire latency).
  /// An event channel on the fabric of `ctx`.
  static cm_channel cm_create_channel(context ctx);
  /// Destroys an event channel; EBUSY while ids use it.
  static int cm_destroy_channel(cm_channel ch) noexcept;
  /// Readable exactly while the channel has an event queued.
  static int cm_channel_fd(cm_channel ch) noexcept;
  /// A new id whose events go to `ch`.
  static cm_id cm_create_id(cm_channel ch);
  /// Destroys an id (its QP must be gone): a connected peer gets DISCONNECTED, an
  /// unanswered request's sender REJECTED.
  static int cm_destroy_id(cm_id id) noexcept;
  /// Moves the id and its queued events to `ch`.
  static void cm_migrate_id(cm_id id, cm_channel ch);
  /// Binds to `src` unless it is 0.0.0.0 (the port with that address, on any device of
  /// the fabric; EADDRNOTAVAIL if none), else to the channel's device. Then
  /// ADDR_RESOLVED if a port of the fabric has the address `to`, else ADDR_ERROR.
  static void cm_resolve_addr(cm_id id, const cm_address& src, const cm_address& to, std::chrono::milliseconds timeout);
  /// ROUTE_RESOLVED (after ADDR_RESOLVED).
  static void cm_resolve_route(cm_id id, std::chrono::milliseconds timeout);
  /// Binds (0.0.0.0: any port of the fabric; port 0: one is picked) and listens.
  static void cm_listen(cm_id id, const cm_address& addr, int backlog);
  /// The port the id is bound to.
  static std::uint16_t cm_bound_port(cm_id id);
  /// The id's local port and GIDs.
  static cm_route cm_query_route(cm_id id);
  /// The id's QP, in INIT (no remote access yet: connect/accept grant it, as the kernel's CM does).
  static qp cm_create_qp(cm_id id, pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps);
  /// Destroys the id's QP.
  static int cm_destroy_qp(cm_id id) noexcept;
  /// Sends the request: CONNECT_REQUEST to the listener, or REJECTED (status 8) if none;
  /// with a port unplugged at either end, UNREACHABLE (-ETIMEDOUT) after
  /// fabric_config::cm_retry_time, the QP in ERR.
  static void cm_connect(cm_id id, const cm_conn_param& p);
  /// Accepts: both QPs go to RTS, both ids get ESTABLISHED.
  static void cm_accept(cm_id id, const cm_conn_param& p);
  /// rdma_init_qp_attr: the attributes of the id's connection for INIT, RTR or RTS
  /// (cm_user_qp_backend: a QP the application made).
  static void cm_init_qp_attr(cm_id id, qp_state state, qp_attr& attr, qp_attr_mask& mask);
  /// rdma_establish: answers CONNECT_RESPONSE; the passive side gets ESTABLISHED.
  static void cm_establish(cm_id id);
  /// Rejects: the requester gets REJECTED (status 28) with the private data.
  static int cm_reject(cm_id id, const void* data, std::uint8_t len) noexcept;
  /// Disconnects: this id's QP goes to ERR, both ids get DISCONNECTED.
  static int cm_disconnect(cm_id id) noexcept;
  /// Waits (wall clock) for the next event, copies and removes it.
  static int cm_get_event(cm_channel ch, std::chrono::milliseconds timeout,
                          basic_cm_event<cm_id>& out) noexcept;

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
    w.op = op;
    w.flags = fl;
  }
  /// Links `next` after `w` in a post list.
  static void set_next(send_wr& w, send_wr* next) noexcept { w.next = next; }
  /// Replaces the flags alone.
  static void set_send_flags(send_wr& w, send_flags fl) noexcept { w.flags = fl; }
  /// Replaces the wr_id alone.
  static void set_wr_id(send_wr& w, std::uint64_t wr_id) noexcept { w.wr_id = wr_id; }
  /// Sets the immediate data (network byte order).
  static void set_imm(send_wr& w, std::uint32_t imm_be) noexcept { w.imm_data = imm_be; }
  /// Sets the remote address and rkey of an RDMA WRITE or READ.
  static void set_rdma(send_wr& w, std::uint64_t raddr, std::uint32_t rkey) noexcept {
    w.rdma.remote_addr = raddr;
    w.rdma.rkey = rkey;
  }
  /// Sets the remote address, rkey and operands of an atomic (compare or add, then swap).
  static void set_atomic(send_wr& w, std::uint64_t raddr, std::uint32_t rkey, std::uint64_t compare_add,
                         std::uint64_t swap) noexcept {
    w.atomic.remote_addr = raddr;
    w.atomic.rkey = rkey;
    w.atomic.compare_add = compare_add;
    w.atomic.swap = swap;
  }
  /// Sets a UD send's destination: address handle, remote QPN and Q_Key.
  static void set_ud(send_wr& w, ah a, std::uint32_t remote_qpn, std::uint32_t qkey) noexcept {
    w.ud.address = a;
    w.ud.remote_qpn = remote_qpn;
    w.ud.remote_qkey = qkey;
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
    send_wr_facts f{w.op, w.flags, w.num_sge, 0, 0};
    for (int i = 0; i < w.num_sge && w.sg_list; ++i) f.length += w.sg_list[i].length;
    if (w.op == opcode::atomic_cmp_and_swp || w.op == opcode::atomic_fetch_and_add)
      f.remote_addr = w.atomic.remote_addr;
    else if (w.op == opcode::rdma_write || w.op == opcode::rdma_write_with_imm || w.op == opcode::rdma_read)
      f.remote_addr = w.rdma.remote_addr;
    return f;
  }

  /// The wr_id of the WR that completed.
  static std::uint64_t get_wr_id(const wc& w) noexcept { return w.wr_id; }
  /// The completion's status.
  static wc_status get_status(const wc& w) noexcept { return w.status; }
  /// What completed (meaningful on success only).
  static wc_opcode get_opcode(const wc& w) noexcept { return w.opcode; }
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
  /// Whether the completion carries immediate data and a GRH.
  static wc_flags get_wc_flags(const wc& w) noexcept { return w.flags; }
  /// The immediate data, network byte order.
  static std::uint32_t get_imm(const wc& w) noexcept { return w.imm_data; }
  /// The device's own error code, for its vendor's documentation.
  static std::uint32_t get_vendor_err(const wc& w) noexcept { return w.vendor_err; }
};

static_assert(models_verbs_backend<mock>());
static_assert(fd_event_backend<mock>);
static_assert(mw_backend<mock>);
static_assert(wr_id_backend<mock>);
static_assert(srq_backend<mock>);
static_assert(cm_backend<mock>);
static_assert(cm_user_qp_backend<mock>);

}  // namespace backends
RDMAKIT_END_NAMESPACE
