#pragma once
/// The `verbs_backend` concept: what the typed layer needs from a verbs
/// implementation, as six small concepts (device, memory, queue, posting, polling,
/// event) over the handle types. Every operation is a static function of the backend.
///
/// Conventions:
///  - Handles are trivially copyable; a value-initialized handle (`H{}`) is "none".
///  - Setup operations throw `verbs_error` naming the verb and the errno.
///  - Data path operations (post, poll, arm, ack) are noexcept and return an errno
///    (0 on success) or a count.
///  - Work requests, SGEs and completions are the backend's native types; the typed
///    layer fills them through the `set_*` functions and reads completions through
///    the `get_*` accessors, so a native backend posts with no translation copy.
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
template <class H>
concept backend_handle = std::is_trivially_copyable_v<H> && std::default_initializable<H> &&
                         std::equality_comparable<H>;
}

/// What a native send WR asks for, read back by B::describe_send when the device
/// refused it, so the error can name the broken rule (SGE count, inline size, atomic
/// length or alignment) without the data path keeping a copy of the request.
struct send_wr_facts {
  opcode op = opcode::send;             ///< the WR's opcode
  send_flags flags = send_flags::none;  ///< its flags (inline, signaled, fence...)
  int num_sge = 0;                      ///< how many SGEs it carries
  std::uint64_t length = 0;             ///< the SGE lengths added up
  std::uint64_t remote_addr = 0;        ///< RDMA and atomic operations; 0 otherwise
};

/// The handle and native types: handles are trivially copyable, `H{}` is "none".
template <class B>
concept backend_types =
    detail::backend_handle<typename B::context> && detail::backend_handle<typename B::pd> &&
    detail::backend_handle<typename B::mr> && detail::backend_handle<typename B::cq> &&
    detail::backend_handle<typename B::channel> && detail::backend_handle<typename B::qp> &&
    detail::backend_handle<typename B::ah> && std::default_initializable<typename B::sge> &&
    std::default_initializable<typename B::send_wr> &&
    std::default_initializable<typename B::recv_wr> && std::default_initializable<typename B::wc> &&
    requires { { B::name } -> std::convertible_to<std::string_view>; };

/// Devices, ports and GIDs.
template <class B>
concept device_backend =
    backend_types<B> && requires(std::string_view name, typename B::context ctx, std::uint8_t port, int index) {
      { B::device_names() } -> std::same_as<std::vector<std::string>>;
      { B::open_device(name) } -> std::same_as<typename B::context>;
      { B::close_device(ctx) } noexcept;
      { B::device_name(ctx) } -> std::same_as<std::string>;
      { B::query_device(ctx) } -> std::same_as<device_attr>;
      { B::query_port(ctx, port) } -> std::same_as<port_attr>;
      { B::query_gid(ctx, port, index) } -> std::same_as<gid_entry>;
    };

/// Protection domains, memory regions, address handles.
template <class B>
concept memory_backend =
    backend_types<B> && requires(typename B::context ctx, typename B::pd pd, typename B::mr mr, typename B::ah ah,
                                 void* addr, std::size_t len, access acc, const ah_attr& av) {
      { B::alloc_pd(ctx) } -> std::same_as<typename B::pd>;
      { B::dealloc_pd(pd) } noexcept -> std::same_as<int>;
      { B::reg_mr(pd, addr, len, acc) } -> std::same_as<typename B::mr>;
      { B::dereg_mr(mr) } noexcept -> std::same_as<int>;
      { B::mr_lkey(mr) } noexcept -> std::same_as<std::uint32_t>;
      { B::mr_rkey(mr) } noexcept -> std::same_as<std::uint32_t>;
      { B::create_ah(pd, av) } -> std::same_as<typename B::ah>;
      { B::destroy_ah(ah) } noexcept -> std::same_as<int>;
    };

/// Completion queues, completion channels and queue pairs: creation and state.
template <class B>
concept queue_backend =
    backend_types<B> && requires(typename B::context ctx, typename B::pd pd, typename B::cq cq,
                                 typename B::channel ch, typename B::qp qp, int n, qp_type t, qp_cap& caps,
                                 const qp_attr& attr, qp_attr_mask mask) {
      { B::create_comp_channel(ctx) } -> std::same_as<typename B::channel>;
      { B::destroy_comp_channel(ch) } noexcept -> std::same_as<int>;
      { B::create_cq(ctx, n, ch, n) } -> std::same_as<typename B::cq>;  // (ctx, cqe, channel or {}, vector)
      { B::cq_capacity(cq) } noexcept -> std::same_as<int>;             // what create granted
      { B::destroy_cq(cq) } noexcept -> std::same_as<int>;
      { B::create_qp(pd, cq, cq, t, caps, true) } -> std::same_as<typename B::qp>;  // last: sq_sig_all
      { B::destroy_qp(qp) } noexcept -> std::same_as<int>;
      { B::qp_num(qp) } noexcept -> std::same_as<std::uint32_t>;
      { B::modify_qp(qp, attr, mask) };
      { B::query_qp_state(qp) } -> std::same_as<qp_state>;
    };

/// Building and posting native work requests.
template <class B>
concept posting_backend =
    backend_types<B> &&
    requires(typename B::qp qp, typename B::sge& s, typename B::send_wr& swr, typename B::recv_wr& rwr,
             const typename B::send_wr& cswr, typename B::send_wr** bad_swr, typename B::recv_wr** bad_rwr,
             typename B::sge* list, typename B::ah ah, std::uint64_t u64, std::uint32_t u32, int n, opcode op,
             send_flags fl) {
      { B::post_send(qp, &swr, bad_swr) } noexcept -> std::same_as<int>;
      { B::post_recv(qp, &rwr, bad_rwr) } noexcept -> std::same_as<int>;
      { B::set_sge(s, u64, u32, u32) } noexcept;  // addr, length, lkey
      // set_send writes only wr_id, next (null), sg_list, num_sge, opcode and flags: post
      // lists set the opcode-specific fields first and rely on set_send keeping them.
      { B::set_send(swr, u64, op, fl, list, n) } noexcept;
      { B::set_next(swr, &swr) } noexcept;
      { B::set_send_flags(swr, fl) } noexcept;              // replaces the flags only
      { B::set_imm(swr, u32) } noexcept;                    // immediate, network byte order
      { B::set_rdma(swr, u64, u32) } noexcept;              // remote addr, rkey
      { B::set_atomic(swr, u64, u32, u64, u64) } noexcept;  // remote addr, rkey, compare/add, swap
      { B::set_ud(swr, ah, u32, u32) } noexcept;            // AH, remote QPN, Q_Key
      { B::set_recv(rwr, u64, list, n) } noexcept;          // wr_id, sg list; next = null
      { B::set_next(rwr, &rwr) } noexcept;
      // Read back on the failure path only, to name the rule a refused WR broke.
      { B::describe_send(cswr) } noexcept -> std::same_as<send_wr_facts>;
    };

/// Polling a CQ and reading completions.
template <class B>
concept polling_backend =
    backend_types<B> && requires(typename B::cq cq, int n, typename B::wc* wcs, const typename B::wc& w) {
      { B::poll_cq(cq, n, wcs) } noexcept -> std::same_as<int>;
      { B::get_wr_id(w) } noexcept -> std::same_as<std::uint64_t>;
      { B::get_status(w) } noexcept -> std::same_as<wc_status>;
      { B::get_opcode(w) } noexcept -> std::same_as<wc_opcode>;
      { B::get_byte_len(w) } noexcept -> std::same_as<std::uint32_t>;
      { B::get_qp_num(w) } noexcept -> std::same_as<std::uint32_t>;
      { B::get_src_qp(w) } noexcept -> std::same_as<std::uint32_t>;
      { B::get_slid(w) } noexcept -> std::same_as<std::uint16_t>;
      { B::get_sl(w) } noexcept -> std::same_as<std::uint8_t>;
      { B::get_wc_flags(w) } noexcept -> std::same_as<wc_flags>;
      { B::get_imm(w) } noexcept -> std::same_as<std::uint32_t>;  // network byte order
      { B::get_vendor_err(w) } noexcept -> std::same_as<std::uint32_t>;
    };

/// Completion events (arm, wait, acknowledge) and asynchronous device events. Waits
/// return 0, ETIMEDOUT or an errno; a negative timeout waits forever.
template <class B>
concept event_backend =
    backend_types<B> && requires(typename B::context ctx, typename B::cq cq, typename B::channel ch,
                                 typename B::cq& out_cq, async_event& ev) {
      { B::req_notify_cq(cq, true) } noexcept -> std::same_as<int>;
      { B::get_cq_event(ch, std::chrono::milliseconds{}, out_cq) } noexcept -> std::same_as<int>;
      { B::ack_cq_events(cq, 1u) } noexcept;
      { B::get_async_event(ctx, std::chrono::milliseconds{}, ev) } noexcept -> std::same_as<int>;
    };

/// Everything the typed layer uses. A failure names the part that is missing.
template <class B>
concept verbs_backend = device_backend<B> && memory_backend<B> && queue_backend<B> && posting_backend<B> &&
                        polling_backend<B> && event_backend<B>;

/// Optional: completion channels and asynchronous events as file descriptors, so one
/// thread can wait for many of them (and for sockets) with epoll. A descriptor is
/// readable while get_cq_event / get_async_event would return an event at once. The
/// event loop of <rdmakit/event_loop.hpp> needs it.
template <class B>
concept fd_event_backend = verbs_backend<B> && requires(typename B::channel ch, typename B::context ctx) {
  { B::channel_fd(ch) } noexcept -> std::same_as<int>;
  { B::async_fd(ctx) } noexcept -> std::same_as<int>;
};
/// Optional: rewriting the wr_id of a WR already built, so a prepared send
/// (<rdmakit/prepared_send.hpp>) can be posted with a new wr_id without being rebuilt.
template <class B>
concept wr_id_backend = verbs_backend<B> && requires(typename B::send_wr& w, std::uint64_t id) {
  { B::set_wr_id(w, id) } noexcept;
};
/// Optional: memory windows (IBV_MW_*). A window is a handle of its own whose rkey
/// grants a subset of a region's bytes and rights. Type 1 windows are bound by a verbs
/// call that still takes a send-queue slot (`bind_mw`, completing as BIND_MW); type 2
/// windows by a send WR (`set_bind_mw`), invalidated by a LOCAL_INV WR or by the peer's
/// SEND_WITH_INV. The typed layer's memory_window needs this; other backends need not.
template <class B>
concept mw_backend =
    verbs_backend<B> && detail::backend_handle<typename B::mw> &&
    requires(typename B::pd pd, typename B::mw mw, typename B::mr mr, typename B::qp qp, typename B::send_wr& swr,
             mw_type t, std::uint64_t u64, std::uint32_t u32, access acc, send_flags fl, const typename B::wc& w) {
      { B::alloc_mw(pd, t) } -> std::same_as<typename B::mw>;
      { B::dealloc_mw(mw) } noexcept -> std::same_as<int>;
      { B::mw_rkey(mw) } noexcept -> std::same_as<std::uint32_t>;  // type 1: the rkey of the last bind call
      // Type 2: records the rkey a posted BIND_MW gives the window (ibv_mw::rkey, which
      // nothing else updates): the next BIND_MW names the window by it.
      { B::set_mw_rkey(mw, u32) } noexcept;
      // Type 1 bind (ibv_bind_mw): qp, mw, region, addr, length, rights, wr_id, flags. A
      // zero length unbinds (the region is still needed). Returns 0 or an errno; the
      // window's rkey changes at once.
      { B::bind_mw(qp, mw, mr, u64, u64, acc, u64, fl) } noexcept -> std::same_as<int>;
      // Type 2 bind WR (opcode bind_mw): mw, the rkey it gets, region, addr, length, rights.
      { B::set_bind_mw(swr, mw, u32, mr, u64, u64, acc) } noexcept;
      { B::set_invalidate(swr, u32) } noexcept;  // LOCAL_INV and SEND_WITH_INV: the rkey invalidated
      // A receive with wc_flags::with_inv: the rkey the peer's SEND_WITH_INV invalidated.
      { B::get_invalidated_rkey(w) } noexcept -> std::same_as<std::uint32_t>;
    };

/// Checks each part of verbs_backend for B with its own static_assert, so a backend
/// that misses something is told which part: a model asserts
/// `static_assert(models_verbs_backend<B>());` right after its definition.
template <class B>
consteval bool models_verbs_backend() {
  static_assert(device_backend<B>, "not a device_backend: devices, ports, GIDs");
  static_assert(memory_backend<B>, "not a memory_backend: PDs, MRs, AHs");
  static_assert(queue_backend<B>, "not a queue_backend: CQs, completion channels, QPs and their states");
  static_assert(posting_backend<B>, "not a posting_backend: building and posting native WRs");
  static_assert(polling_backend<B>, "not a polling_backend: polling CQs and reading completions");
  static_assert(event_backend<B>, "not an event_backend: completion events, asynchronous events");
  return verbs_backend<B>;
}

/// Shared receive queues (ibv_create_srq and friends). Optional: a backend without them
/// still models verbs_backend, and only `shared_receive_queue<B>` asks for this.
///  - create_srq(pd, attr): attr.max_wr/max_sge asked, written back as granted; a
///    non-zero attr.limit is armed right after creation (as arm_srq_limit would).
///    query_srq(srq).max_wr is the receives the SRQ takes (rxe's is above the write-back).
///  - destroy_srq returns EBUSY while a QP uses the SRQ.
///  - arm_srq_limit(srq, limit) (ibv_modify_srq with IBV_SRQ_LIMIT) returns 0 or an errno.
///  - create_qp_on_srq: as create_qp, receives come from the SRQ; the receive
///    capacities of caps are ignored and written back as granted (0 on most devices).
template <class B>
concept srq_backend =
    verbs_backend<B> && detail::backend_handle<typename B::srq> &&
    requires(typename B::pd pd, typename B::cq cq, typename B::srq srq, typename B::recv_wr& rwr,
             typename B::recv_wr** bad_rwr, qp_type t, qp_cap& caps, srq_attr& attr, std::uint32_t u32) {
      { B::create_srq(pd, attr) } -> std::same_as<typename B::srq>;
      { B::destroy_srq(srq) } noexcept -> std::same_as<int>;
      { B::post_srq_recv(srq, &rwr, bad_rwr) } noexcept -> std::same_as<int>;
      { B::arm_srq_limit(srq, u32) } noexcept -> std::same_as<int>;
      { B::query_srq(srq) } -> std::same_as<srq_attr>;
      { B::create_qp_on_srq(pd, cq, cq, srq, t, caps, true) } -> std::same_as<typename B::qp>;
    };

/// A backend that declares exactly what the concept asks and nothing more. Generic
/// code instantiated with it proves it relies on the concept alone; it is never run.
struct archetype_backend {
  struct context_t;
  struct pd_t;
  struct mr_t;
  struct cq_t;
  struct channel_t;
  struct qp_t;
  struct ah_t;
  /// A device handle (an opaque pointer, as ibv_context* is).
  using context = context_t*;
  /// A protection domain handle.
  using pd = pd_t*;
  /// A memory region handle.
  using mr = mr_t*;
  /// A completion queue handle.
  using cq = cq_t*;
  /// A completion channel handle.
  using channel = channel_t*;
  /// A queue pair handle.
  using qp = qp_t*;
  /// An address handle.
  using ah = ah_t*;
  struct sge {};
  struct send_wr {};
  struct recv_wr {};
  struct wc {};
  /// The backend's name, as errors print it.
  static constexpr std::string_view name = "archetype";

  /// Names of the devices this backend can open.
  static std::vector<std::string> device_names();
  /// Opens the device `name` (empty: the first one); throws verbs_error.
  static context open_device(std::string_view);
  /// Closes a device opened by open_device; a none handle is ignored.
  static void close_device(context) noexcept;
  /// The device's name, as device_names() lists it.
  static std::string device_name(context);
  /// The device's capabilities, which the typed layer checks requests against.
  static device_attr query_device(context);
  /// The attributes of port `port` (1-based).
  static port_attr query_port(context, std::uint8_t);
  /// Entry `index` of port `port`'s GID table; an empty slot is `valid = false`.
  static gid_entry query_gid(context, std::uint8_t, int);
  /// Waits up to `timeout` for an asynchronous event, fills `out` and acknowledges it.
  /// Returns 0, ETIMEDOUT or an errno.
  static int get_async_event(context, std::chrono::milliseconds, async_event&) noexcept;
  /// Allocates a protection domain on the device.
  static pd alloc_pd(context);
  /// Frees a protection domain; returns 0 or an errno (EBUSY while objects use it).
  static int dealloc_pd(pd) noexcept;
  /// Registers `length` bytes at `addr` with the rights `flags`.
  static mr reg_mr(pd, void*, std::size_t, access);
  /// Deregisters a region; returns 0 or an errno.
  static int dereg_mr(mr) noexcept;
  /// The region's local key, which SGEs on it carry.
  static std::uint32_t mr_lkey(mr) noexcept;
  /// The region's remote key, which peers' RDMA operations on it carry.
  static std::uint32_t mr_rkey(mr) noexcept;
  /// Creates an address handle for UD sends to the address vector `attr`.
  static ah create_ah(pd, const ah_attr&);
  /// Destroys an address handle; returns 0 or an errno.
  static int destroy_ah(ah) noexcept;
  /// Creates a completion channel, which armed CQs notify.
  static channel create_comp_channel(context);
  /// Destroys a completion channel; returns 0 or an errno (EBUSY while a CQ uses it).
  static int destroy_comp_channel(channel) noexcept;
  /// Creates a CQ of at least `cqe` entries on completion vector `comp_vector`, notifying `ch`
  /// (none: nobody sleeps on it).
  static cq create_cq(context, int, channel, int);
  /// The entries create_cq granted (at least those asked for).
  static int cq_capacity(cq) noexcept;
  /// Destroys a CQ; returns 0 or an errno (EBUSY while a QP uses it).
  static int destroy_cq(cq) noexcept;
  /// Moves up to `n` completions into `out`; returns how many, or a negative value on failure.
  static int poll_cq(cq, int, wc*) noexcept;
  /// Arms the CQ: its next completion (solicited only, if asked) raises an event on its
  /// channel. Returns 0 or an errno.
  static int req_notify_cq(cq, bool) noexcept;
  /// Waits up to `timeout` for a completion event on `ch` and stores its CQ in `out`.
  /// Returns 0, ETIMEDOUT or an errno.
  static int get_cq_event(channel, std::chrono::milliseconds, cq&) noexcept;
  /// Acknowledges `n` events of the CQ; all must be acknowledged before it is destroyed.
  static void ack_cq_events(cq, unsigned) noexcept;
  /// Creates a queue pair of `type` on a send and a receive CQ. `caps` is what is asked and,
  /// on return, what was granted; `sq_sig_all` signals every send WR.
  static qp create_qp(pd, cq, cq, qp_type, qp_cap&, bool);
  /// Destroys a queue pair; returns 0 or an errno.
  static int destroy_qp(qp) noexcept;
  /// The queue pair's number.
  static std::uint32_t qp_num(qp) noexcept;
  /// Applies the attributes of `attr` that `mask` names (a state transition); throws verbs_error.
  static void modify_qp(qp, const qp_attr&, qp_attr_mask);
  /// The state the device reports for the queue pair.
  static qp_state query_qp_state(qp);
  /// Posts the send WR list starting at `wr`. Returns 0 or an errno; on failure `*bad_wr`
  /// is the first WR not posted.
  static int post_send(qp, send_wr*, send_wr**) noexcept;
  /// Posts the receive WR list starting at `wr`. Returns 0 or an errno; on failure `*bad_wr`
  /// is the first WR not posted.
  static int post_recv(qp, recv_wr*, recv_wr**) noexcept;
  /// Fills a scatter/gather entry: address, length, local key.
  static void set_sge(sge&, std::uint64_t, std::uint32_t, std::uint32_t) noexcept;
  /// Sets what every send WR has (wr_id, opcode, flags, SGE list; next = null) and leaves
  /// the opcode-specific fields alone.
  static void set_send(send_wr&, std::uint64_t, opcode, send_flags, sge*, int) noexcept;
  /// Links `next` after `w` in a post list.
  static void set_next(send_wr&, send_wr*) noexcept;
  /// Replaces the flags alone (a post list decides signaling and inline at post time).
  static void set_send_flags(send_wr&, send_flags) noexcept;
  /// Sets the immediate data (network byte order).
  static void set_imm(send_wr&, std::uint32_t) noexcept;
  /// Sets the remote address and rkey of an RDMA WRITE or READ.
  static void set_rdma(send_wr&, std::uint64_t, std::uint32_t) noexcept;
  /// Sets the remote address, rkey and operands of an atomic (compare or add, then swap).
  static void set_atomic(send_wr&, std::uint64_t, std::uint32_t, std::uint64_t, std::uint64_t) noexcept;
  /// Sets a UD send's destination: address handle, remote QPN and Q_Key.
  static void set_ud(send_wr&, ah, std::uint32_t, std::uint32_t) noexcept;
  /// Fills a receive WR: wr_id and SGE list; next = null.
  static void set_recv(recv_wr&, std::uint64_t, sge*, int) noexcept;
  /// Links `next` after `w` in a receive list.
  static void set_next(recv_wr&, recv_wr*) noexcept;
  /// What a refused send WR asked for, so the error can name the rule it broke.
  static send_wr_facts describe_send(const send_wr&) noexcept;
  /// The wr_id of the WR that completed.
  static std::uint64_t get_wr_id(const wc&) noexcept;
  /// The completion's status.
  static wc_status get_status(const wc&) noexcept;
  /// What completed (meaningful on success only).
  static wc_opcode get_opcode(const wc&) noexcept;
  /// Bytes transferred (on UD receives, including the 40-byte GRH).
  static std::uint32_t get_byte_len(const wc&) noexcept;
  /// The number of the local queue pair the WR was posted on.
  static std::uint32_t get_qp_num(const wc&) noexcept;
  /// The sending queue pair (UD receives).
  static std::uint32_t get_src_qp(const wc&) noexcept;
  /// The sender's LID (UD receives on InfiniBand; 0 on RoCE).
  static std::uint16_t get_slid(const wc&) noexcept;
  /// The sender's service level (UD receives on InfiniBand; 0 on RoCE).
  static std::uint8_t get_sl(const wc&) noexcept;
  /// Whether the completion carries immediate data and a GRH.
  static wc_flags get_wc_flags(const wc&) noexcept;
  /// The immediate data, network byte order.
  static std::uint32_t get_imm(const wc&) noexcept;
  /// The device's own error code, for its vendor's documentation.
  static std::uint32_t get_vendor_err(const wc&) noexcept;
};
static_assert(models_verbs_backend<archetype_backend>());

/// The archetype with memory windows: exactly what mw_backend adds, never run.
struct archetype_mw_backend : archetype_backend {
  struct mw_t;
  /// A memory window handle.
  using mw = mw_t*;
  /// Allocates an unbound window of type `t`.
  static mw alloc_mw(pd, mw_type);
  /// Frees a window; returns 0 or an errno.
  static int dealloc_mw(mw) noexcept;
  /// The window's rkey (type 1: as the last bind call set it).
  static std::uint32_t mw_rkey(mw) noexcept;
  /// Type 2: records the rkey a posted BIND_MW gives the window.
  static void set_mw_rkey(mw, std::uint32_t) noexcept;
  /// Type 1 bind: qp, window, region, addr, length, rights, wr_id, flags.
  static int bind_mw(qp, mw, mr, std::uint64_t, std::uint64_t, access, std::uint64_t, send_flags) noexcept;
  /// Fills a type 2 BIND_MW WR: window, new rkey, region, addr, length, rights.
  static void set_bind_mw(send_wr&, mw, std::uint32_t, mr, std::uint64_t, std::uint64_t, access) noexcept;
  /// The rkey a LOCAL_INV or SEND_WITH_INV invalidates.
  static void set_invalidate(send_wr&, std::uint32_t) noexcept;
  /// The rkey a received SEND_WITH_INV invalidated.
  static std::uint32_t get_invalidated_rkey(const wc&) noexcept;
};
static_assert(mw_backend<archetype_mw_backend>);
/// archetype_backend plus exactly what srq_backend asks: generic code over shared
/// receive queues instantiated with it relies on the concept alone; it is never run.
struct archetype_srq_backend : archetype_backend {
  struct srq_t;
  /// A shared receive queue handle.
  using srq = srq_t*;
  /// Creates an SRQ in the PD; `attr` is what is asked and, on return, what was granted.
  static srq create_srq(pd, srq_attr&);
  /// Destroys an SRQ; EBUSY while a QP uses it.
  static int destroy_srq(srq) noexcept;
  /// Posts a receive WR list to the SRQ; returns 0 or an errno, `*bad_wr` the first not posted.
  static int post_srq_recv(srq, recv_wr*, recv_wr**) noexcept;
  /// Arms the SRQ limit event (0 disarms); returns 0 or an errno.
  static int arm_srq_limit(srq, std::uint32_t) noexcept;
  /// The SRQ's granted max_wr, max_sge and its armed limit.
  static srq_attr query_srq(srq);
  /// Creates a queue pair whose receives come from the SRQ.
  static qp create_qp_on_srq(pd, cq, cq, srq, qp_type, qp_cap&, bool);
};
static_assert(models_verbs_backend<archetype_srq_backend>() && srq_backend<archetype_srq_backend>);

RDMAKIT_END_NAMESPACE
