#pragma once
/// Vocabulary shared by every backend. Enumerator values are the libibverbs ABI
/// values (frozen by rdma-core), so the ibverbs backend converts with a cast and
/// the mock speaks the same numbers; the ibverbs backend static_asserts each one.
#include <rdmakit/config.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
template <class E>
concept flag_enum = std::is_enum_v<E> && requires { E::rdmakit_flag_enum_marker; };
}  // namespace detail

/// Bitwise operators for the flag enums below (access, send_flags, wc_flags, qp_attr_mask).
template <detail::flag_enum E>
constexpr E operator|(E a, E b) noexcept {
  using U = std::underlying_type_t<E>;
  return static_cast<E>(static_cast<U>(a) | static_cast<U>(b));
}
/// The bits set in both.
template <detail::flag_enum E>
constexpr E operator&(E a, E b) noexcept {
  using U = std::underlying_type_t<E>;
  return static_cast<E>(static_cast<U>(a) & static_cast<U>(b));
}
/// Every bit not set in `a`: `m & ~bit` clears a bit.
template <detail::flag_enum E>
constexpr E operator~(E a) noexcept {
  using U = std::underlying_type_t<E>;
  return static_cast<E>(~static_cast<U>(a));
}
/// Sets the bits of `b` in `a`.
template <detail::flag_enum E>
constexpr E& operator|=(E& a, E b) noexcept { return a = a | b; }
/// Keeps only the bits of `a` that are set in `b`.
template <detail::flag_enum E>
constexpr E& operator&=(E& a, E b) noexcept { return a = a & b; }
/// True when every bit of `wanted` is set in `have`.
template <detail::flag_enum E>
constexpr bool has_all(E have, E wanted) noexcept { return (have & wanted) == wanted; }
/// True when any bit of `wanted` is set in `have`.
template <detail::flag_enum E>
constexpr bool has_any(E have, E wanted) noexcept {
  return static_cast<std::underlying_type_t<E>>(have & wanted) != 0;
}
/// The flags' integer value, e.g. for the native verbs' flag fields.
template <detail::flag_enum E>
constexpr auto to_underlying(E e) noexcept { return static_cast<std::underlying_type_t<E>>(e); }

/// Memory region access rights (IBV_ACCESS_*). After `using namespace rdmakit;` at
/// global scope, write `rdmakit::access`: POSIX declares a function `::access`.
enum class access : std::uint32_t {
  none = 0,
  local_write = 1u << 0,
  remote_write = 1u << 1,
  remote_read = 1u << 2,
  remote_atomic = 1u << 3,
  mw_bind = 1u << 4,  ///< memory windows may be bound to the region (IBV_ACCESS_MW_BIND)
  rdmakit_flag_enum_marker = 0,
};

/// Send work request flags (IBV_SEND_*).
enum class send_flags : std::uint32_t {
  none = 0,
  fence = 1u << 0,
  signaled = 1u << 1,
  solicited = 1u << 2,
  inline_data = 1u << 3,
  /// rdmakit's own, never given to the device: the WR does not go inline unless it also
  /// asks inline_data (qp_options::auto_inline off for this post). Passed as a constant,
  /// it takes the post's inline test out at compile time (docs/signaling.md).
  no_auto_inline = 1u << 31,
  rdmakit_flag_enum_marker = 0,
};

/// Work completion flags (IBV_WC_GRH, IBV_WC_WITH_IMM).
enum class wc_flags : std::uint32_t {
  none = 0,
  grh = 1u << 0,
  with_imm = 1u << 1,
  with_inv = 1u << 3,  ///< a SEND with invalidate: the completion names the rkey it invalidated
  rdmakit_flag_enum_marker = 0,
};

/// Send opcodes (IBV_WR_*).
enum class opcode : std::uint32_t {
  rdma_write = 0,
  rdma_write_with_imm = 1,
  send = 2,
  send_with_imm = 3,
  rdma_read = 4,
  atomic_cmp_and_swp = 5,
  atomic_fetch_and_add = 6,
  local_inv = 7,      ///< invalidates a type 2 memory window (no data moves)
  bind_mw = 8,        ///< binds a type 2 memory window to part of a region
  send_with_inv = 9,  ///< SEND that also invalidates the peer's type 2 window named by an rkey
};

/// True for the operations that take a receive at the other end (SEND, SEND with
/// immediate or invalidate, WRITE with immediate): the peer must have one posted.
constexpr bool takes_receive(opcode c) noexcept {
  return c == opcode::send || c == opcode::send_with_imm || c == opcode::send_with_inv ||
         c == opcode::rdma_write_with_imm;
}

/// Memory window types (IBV_MW_TYPE_*): type 1 is bound by a verbs call, type 2 by a
/// work request and only usable through the QP that bound it.
enum class mw_type : std::uint32_t { type1 = 1, type2 = 2 };

/// Completion opcodes (IBV_WC_*).
enum class wc_opcode : std::uint32_t {
  send = 0,
  rdma_write = 1,
  rdma_read = 2,
  comp_swap = 3,
  fetch_add = 4,
  bind_mw = 5,
  local_inv = 6,
  recv = 128,
  recv_rdma_with_imm = 129,
};

/// Work completion status (IBV_WC_*). `to_string` gives ibv_wc_status_str's wording.
enum class wc_status : std::uint32_t {
  success = 0,
  loc_len_err,
  loc_qp_op_err,
  loc_eec_op_err,
  loc_prot_err,
  wr_flush_err,
  mw_bind_err,
  bad_resp_err,
  loc_access_err,
  rem_inv_req_err,
  rem_access_err,
  rem_op_err,
  retry_exc_err,
  rnr_retry_exc_err,
  loc_rdd_viol_err,
  rem_inv_rd_req_err,
  rem_abort_err,
  inv_eecn_err,
  inv_eec_state_err,
  fatal_err,
  resp_timeout_err,
  general_err,
};

/// QP states (IBV_QPS_*).
enum class qp_state : std::uint32_t { reset = 0, init, rtr, rts, sqd, sqe, err };

/// QP transport types (IBV_QPT_*).
enum class qp_type : std::uint32_t { rc = 2, uc = 3, ud = 4 };

/// Attribute mask bits for modify_qp (IBV_QP_*).
enum class qp_attr_mask : std::uint32_t {
  none = 0,
  state = 1u << 0,
  cur_state = 1u << 1,
  en_sqd_async_notify = 1u << 2,
  access_flags = 1u << 3,
  pkey_index = 1u << 4,
  port = 1u << 5,
  qkey = 1u << 6,
  av = 1u << 7,
  path_mtu = 1u << 8,
  timeout = 1u << 9,
  retry_cnt = 1u << 10,
  rnr_retry = 1u << 11,
  rq_psn = 1u << 12,
  max_qp_rd_atomic = 1u << 13,
  alt_path = 1u << 14,
  min_rnr_timer = 1u << 15,
  sq_psn = 1u << 16,
  max_dest_rd_atomic = 1u << 17,
  path_mig_state = 1u << 18,
  cap = 1u << 19,
  dest_qpn = 1u << 20,
  rdmakit_flag_enum_marker = 0,
};

/// Path MTU (IBV_MTU_*).
enum class mtu : std::uint32_t { mtu_256 = 1, mtu_512, mtu_1024, mtu_2048, mtu_4096 };

/// Bytes for an MTU enumerator (0 for an invalid value).
constexpr std::uint32_t mtu_bytes(mtu m) noexcept {
  auto v = static_cast<std::uint32_t>(m);
  return v >= 1 && v <= 5 ? 128u << v : 0u;
}
/// The MTU enumerator for 256/512/1024/2048/4096 bytes; false for anything else.
constexpr bool mtu_from_bytes(std::uint32_t bytes, mtu& out) noexcept {
  for (std::uint32_t v = 1; v <= 5; ++v)
    if ((128u << v) == bytes) {
      out = static_cast<mtu>(v);
      return true;
    }
  return false;
}

/// A port's logical state (IBV_PORT_*); only active ports carry traffic.
enum class port_state : std::uint32_t { nop = 0, down, init, armed, active, active_defer };
/// What a port runs on (IBV_LINK_LAYER_*): InfiniBand addresses by LID, Ethernet (RoCE) by GID.
enum class link_layer : std::uint8_t { unspecified = 0, infiniband, ethernet };
/// GID types (IBV_GID_TYPE_*): IB, RoCE v1, RoCE v2.
enum class gid_type : std::uint32_t { ib = 0, roce_v1, roce_v2 };

/// Asynchronous event types (IBV_EVENT_*).
enum class async_event_type : std::uint32_t {
  cq_err = 0,
  qp_fatal,
  qp_req_err,
  qp_access_err,
  comm_est,
  sq_drained,
  path_mig,
  path_mig_err,
  device_fatal,
  port_active,
  port_err,
  lid_change,
  pkey_change,
  sm_change,
  srq_err,
  srq_limit_reached,
  qp_last_wqe_reached,
  client_reregister,
  gid_change,
};

/// 24-bit packet sequence numbers.
inline constexpr std::uint32_t psn_mask = 0xFFFFFFu;
/// Bytes of the Global Routing Header that precede every UD receive.
inline constexpr std::uint32_t grh_bytes = 40;
/// The IB well-known Q_Key-free default pkey index and the conventional UD Q_Key.
inline constexpr std::uint32_t default_qkey = 0x11111111u;

/// A 128-bit GID in network byte order.
struct gid {
  std::array<std::uint8_t, 16> raw{};  ///< the 16 bytes, most significant first

  friend constexpr bool operator==(const gid&, const gid&) = default;
  /// True for the all-zero GID: an empty GID table slot, or no GID on InfiniBand.
  constexpr bool is_zero() const noexcept {
    for (auto b : raw)
      if (b) return false;
    return true;
  }
  /// `::ffff:a.b.c.d`: the RoCEv2 GID of an IPv4 address.
  constexpr bool is_ipv4_mapped() const noexcept {
    for (std::size_t i = 0; i < 10; ++i)
      if (raw[i]) return false;
    return raw[10] == 0xff && raw[11] == 0xff;
  }
  /// `fe80::/10`: a link-local GID (InfiniBand, RoCE v1 from the MAC).
  constexpr bool is_link_local() const noexcept { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }
  /// `ff00::/8`: a multicast group's GID, never a port's own.
  constexpr bool is_multicast() const noexcept { return raw[0] == 0xff; }
  /// The IPv4-mapped GID of `a.b.c.d`, as RoCE v2 gives an interface's IPv4 address.
  static constexpr gid from_ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept {
    gid g;
    g.raw[10] = g.raw[11] = 0xff;
    g.raw[12] = a;
    g.raw[13] = b;
    g.raw[14] = c;
    g.raw[15] = d;
    return g;
  }
  /// Colon-separated hex, as `ibv_devinfo -v` prints GIDs.
  std::string to_string() const;
  /// Parses the `to_string` form or the 32-hex-digit wire form of ibv_*_pingpong
  /// ("fe80000000000000..."). False on malformed text.
  static bool parse(std::string_view text, gid& out) noexcept;
};

/// GRH part of an address vector.
struct global_route {
  gid dgid{};                      ///< destination GID
  std::uint32_t flow_label = 0;    ///< 20 bits; 0 lets the fabric pick the path
  std::uint8_t sgid_index = 0;     ///< local GID table index to send from
  std::uint8_t hop_limit = 1;      ///< routers decrement it; 1 stays in the subnet
  std::uint8_t traffic_class = 0;  ///< DSCP/ECN on RoCE v2, traffic class on InfiniBand
};

/// Address vector (ibv_ah_attr).
struct ah_attr {
  global_route grh{};              ///< used when is_global is set
  std::uint16_t dlid = 0;          ///< destination LID (InfiniBand); unused on RoCE
  std::uint8_t sl = 0;             ///< service level
  std::uint8_t src_path_bits = 0;  ///< low LID bits of the source port (LMC); 0 normally
  std::uint8_t static_rate = 0;    ///< injection rate limit (IBV_RATE_*); 0: no limit
  bool is_global = false;          ///< whether packets carry a GRH (always on RoCE)
  std::uint8_t port_num = 1;       ///< the local port the packets leave from
};

/// Queue capacities requested at create time; the create call writes back what it granted.
struct qp_cap {
  std::uint32_t max_send_wr = 0;  ///< send queue depth: send WRs outstanding at once
  std::uint32_t max_recv_wr = 0;  ///< receive queue depth
  std::uint32_t max_send_sge = 1;  ///< scatter/gather entries per send WR
  std::uint32_t max_recv_sge = 1;  ///< scatter/gather entries per receive WR
  std::uint32_t max_inline_data = 0;  ///< largest send whose data the WR itself carries (send_flags::inline_data)
};

/// Attributes for modify_qp (the ibv_qp_attr fields rdmakit uses). Only the fields
/// named by the mask are read.
struct qp_attr {
  qp_state state = qp_state::reset;  ///< the state to move to (qp_attr_mask::state)
  qp_state cur_state = qp_state::reset;  ///< the state the caller believes the QP is in (qp_attr_mask::cur_state)
  mtu path_mtu = mtu::mtu_1024;  ///< RTR: largest packet payload on the path
  std::uint32_t qkey = 0;  ///< UD: the Q_Key the QP accepts
  std::uint32_t rq_psn = 0;  ///< RTR: the first PSN expected from the peer
  std::uint32_t sq_psn = 0;  ///< RTS: the first PSN sent
  std::uint32_t dest_qp_num = 0;  ///< RTR (RC, UC): the peer's queue pair number
  access access_flags = access::none;  ///< what peers may do through this QP (remote_* bits)
  ah_attr av{};  ///< RTR (RC, UC): the address vector of the peer
  std::uint16_t pkey_index = 0;  ///< P_Key table entry
  bool en_sqd_async_notify = false;  ///< SQD: raise an event when the send queue drained
  std::uint8_t max_rd_atomic = 0;  ///< RTS (RC): READs/atomics outstanding as requester
  std::uint8_t max_dest_rd_atomic = 0;  ///< RTR (RC): READs/atomics accepted outstanding as responder
  std::uint8_t min_rnr_timer = 0;  ///< RTR (RC): the RNR NAK delay the peer is asked to wait
  std::uint8_t port_num = 1;  ///< INIT: the local port
  std::uint8_t timeout = 0;  ///< RTS (RC): ACK timeout, 4.096 µs · 2^timeout
  std::uint8_t retry_cnt = 0;  ///< RTS (RC): retries after a timeout (7: forever)
  std::uint8_t rnr_retry = 0;  ///< RTS (RC): retries after an RNR NAK (7: forever)
};

/// Device capabilities the library checks requests against.
struct device_attr {
  std::uint64_t max_mr_size = 0;          ///< largest region one registration may cover
  std::uint32_t max_qp = 0;               ///< queue pairs the device supports
  std::uint32_t max_qp_wr = 0;            ///< largest queue depth, send or receive
  std::uint32_t max_sge = 0;              ///< scatter/gather entries per WR
  std::uint32_t max_cq = 0;               ///< completion queues the device supports
  std::uint32_t max_cqe = 0;              ///< largest CQ, in entries
  std::uint32_t max_mr = 0;               ///< memory regions the device supports
  std::uint32_t max_pd = 0;               ///< protection domains the device supports
  std::uint32_t max_ah = 0;               ///< address handles the device supports
  std::uint32_t max_qp_rd_atom = 0;       ///< outstanding READ/atomic as responder
  std::uint32_t max_qp_init_rd_atom = 0;  ///< outstanding READ/atomic as requester
  std::uint32_t max_inline_data = 0;      ///< largest inline send the device grants (probed)
  bool atomics = false;                   ///< atomic_cap != IBV_ATOMIC_NONE
  std::uint8_t phys_port_cnt = 0;         ///< number of physical ports (numbered from 1)
  std::uint32_t num_comp_vectors = 1;     ///< completion vectors: create_cq's comp_vector is below it
  std::uint32_t max_srq = 0;              ///< shared receive queues the device supports (0: none)
  std::uint32_t max_srq_wr = 0;           ///< largest shared receive queue, in WRs
  std::uint32_t max_srq_sge = 0;          ///< scatter/gather entries per shared receive WR
};

/// A shared receive queue's attributes (ibv_srq_attr): what create_srq asks for and
/// grants, what query_srq reports.
struct srq_attr {
  std::uint32_t max_wr = 0;   ///< receives the SRQ holds at once
  std::uint32_t max_sge = 1;  ///< scatter/gather entries per receive
  /// The low watermark: when a receive taken leaves fewer than this posted, the device
  /// raises SRQ_LIMIT_REACHED once and disarms it (0: not armed).
  std::uint32_t limit = 0;
};

/// One port's attributes (ibv_port_attr, the fields rdmakit uses).
struct port_attr {
  port_state state = port_state::nop;          ///< only active ports carry traffic
  mtu max_mtu = mtu::mtu_1024;                 ///< largest MTU the port supports
  mtu active_mtu = mtu::mtu_1024;              ///< the MTU in use; connections use at most this
  std::uint32_t gid_tbl_len = 0;               ///< entries in the port's GID table
  std::uint32_t max_msg_sz = 0;                ///< largest message the port sends
  std::uint16_t lid = 0;                       ///< the port's LID (InfiniBand; 0 on RoCE)
  link_layer layer = link_layer::unspecified;  ///< InfiniBand or Ethernet (RoCE)
};

/// One GID table entry with its type. `valid` is false for an empty slot.
struct gid_entry {
  gid value{};                   ///< the GID
  std::uint32_t index = 0;       ///< its index in the port's GID table (qp_options::gid_index)
  gid_type type = gid_type::ib;  ///< IB, RoCE v1 or RoCE v2
  bool valid = false;            ///< false for an empty slot
};

/// An asynchronous event, already acknowledged by the backend.
struct async_event {
  async_event_type type = async_event_type::cq_err;  ///< what happened
  std::uint32_t qp_num = 0;    ///< for QP events
  std::uint8_t port_num = 0;   ///< for port events
  const void* object = nullptr;  ///< backend handle of the CQ/QP/SRQ concerned (identity only)
};

/// One scatter/gather element; the same layout as ibv_sge.
struct sge {
  std::uint64_t addr = 0;    ///< the first byte
  std::uint32_t length = 0;  ///< bytes from addr
  std::uint32_t lkey = 0;    ///< local key of the region the bytes are in
};

/// The status in words ("remote access error"), as ibv_wc_status_str says it.
const char* to_string(wc_status s) noexcept;
/// The opcode's name ("RDMA_WRITE").
const char* to_string(opcode o) noexcept;
/// The completion opcode's name ("RECV_RDMA_WITH_IMM").
const char* to_string(wc_opcode o) noexcept;
/// The state's name ("RTS").
const char* to_string(qp_state s) noexcept;
/// The transport's name ("RC").
const char* to_string(qp_type t) noexcept;
/// The event's name ("QP_FATAL").
const char* to_string(async_event_type t) noexcept;
/// "InfiniBand", "Ethernet" or "unspecified".
const char* to_string(link_layer l) noexcept;
/// The port state's verbs name ("PORT_ACTIVE").
const char* to_string(port_state s) noexcept;
/// Names of the bits set in a mask, '|'-separated ("STATE|PKEY_INDEX").
std::string to_string(qp_attr_mask m);
/// Names of the rights set ("LOCAL_WRITE|REMOTE_READ"), "none" for none.
std::string to_string(access a);

RDMAKIT_END_NAMESPACE

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/types_impl.hpp>
#endif
