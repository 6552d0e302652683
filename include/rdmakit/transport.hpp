#pragma once
/// Transport policies: `rc`, `uc`, `ud`. Each is a tag type holding the facts of its
/// transport as `static constexpr` members (the QP type, the opcodes it allows, whether
/// sends name an address handle, the receive offset: the 40-byte GRH of UD, the
/// modify_qp attribute masks of each connection step, docs/semantics.md#modify-masks)
/// and the behaviour queue_pair asks of it: the RESET→INIT attributes and its own
/// fields of INIT→RTR and RTR→RTS. A new transport is a new type with the same members;
/// queue_pair never names rc, uc or ud.
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/qp_transitions.hpp>
#include <rdmakit/qp_options.hpp>
#include <rdmakit/types.hpp>

#include <concepts>
#include <cstdint>
#include <string_view>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
inline constexpr qp_attr_mask rc_uc_init_mask =
    qp_attr_mask::state | qp_attr_mask::pkey_index | qp_attr_mask::port | qp_attr_mask::access_flags;

// RESET→INIT fields every transport sets.
inline qp_attr base_init_attr(const qp_options& o) noexcept {
  qp_attr a;
  a.state = qp_state::init;
  a.pkey_index = o.pkey_index;
  a.port_num = o.port;
  return a;
}
}  // namespace detail

/// Reliable Connected: every opcode, acknowledged, in order.
struct rc {
  /// The verbs QP type created (IBV_QPT_*).
  static constexpr qp_type type = qp_type::rc;
  /// The transport's name, as errors and benchmark reports print it.
  static constexpr std::string_view name = "RC";
  /// Whether the queue pair is connected to one peer (RC, UC) or sends to any (UD).
  static constexpr bool connected = true;
  /// Whether RDMA WRITE (op::write, op::write_imm) compiles on it.
  static constexpr bool supports_write = true;
  /// Whether RDMA READ (op::read) compiles on it.
  static constexpr bool supports_read = true;
  /// Whether atomics (op::fetch_add, op::compare_swap) compile on it.
  static constexpr bool supports_atomic = true;
  /// Whether each send names its destination (op::ud_send) instead of going to the connected peer.
  static constexpr bool needs_ah = false;
  /// Bytes reserved at the start of every receive buffer (none on connected QPs).
  static constexpr std::uint32_t recv_offset = 0;
  /// RESET→INIT: PKEY_INDEX, PORT, ACCESS_FLAGS.
  static constexpr qp_attr_mask init_mask = detail::rc_uc_init_mask;
  /// INIT→RTR: AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER.
  static constexpr qp_attr_mask rtr_mask = qp_attr_mask::state | qp_attr_mask::av |
                                           qp_attr_mask::path_mtu | qp_attr_mask::dest_qpn |
                                           qp_attr_mask::rq_psn | qp_attr_mask::max_dest_rd_atomic |
                                           qp_attr_mask::min_rnr_timer;
  /// RTR→RTS: TIMEOUT, RETRY_CNT, RNR_RETRY, SQ_PSN, MAX_QP_RD_ATOMIC.
  static constexpr qp_attr_mask rts_mask = qp_attr_mask::state | qp_attr_mask::timeout |
                                           qp_attr_mask::retry_cnt | qp_attr_mask::rnr_retry |
                                           qp_attr_mask::sq_psn | qp_attr_mask::max_qp_rd_atomic;

  /// RESET→INIT attributes from the creation options: port, P_Key index, remote access.
  static qp_attr init_attr(const qp_options& o) noexcept {
    qp_attr a = detail::base_init_attr(o);
    a.access_flags = o.remote_access;
    return a;
  }
  /// INIT→RTR beyond the path (which queue_pair sets): the responder's resources.
  static void rtr_attr(qp_attr& a, const connect_options& o, const device_attr& dev) noexcept {
    a.max_dest_rd_atomic = static_cast<std::uint8_t>(std::min<std::uint32_t>(o.max_dest_rd_atomic, dev.max_qp_rd_atom));
    a.min_rnr_timer = o.min_rnr_timer;
  }
  /// RTR→RTS beyond the SQ PSN: the requester's timers and outstanding READs/atomics.
  static void rts_attr(qp_attr& a, const connect_options& o, const device_attr& dev) noexcept {
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = static_cast<std::uint8_t>(std::min<std::uint32_t>(o.max_rd_atomic, dev.max_qp_init_rd_atom));
  }
};

/// Unreliable Connected: SEND and RDMA WRITE, no acknowledgements, no READ or atomics.
struct uc {
  /// The verbs QP type created (IBV_QPT_*).
  static constexpr qp_type type = qp_type::uc;
  /// The transport's name, as errors and benchmark reports print it.
  static constexpr std::string_view name = "UC";
  /// Whether the queue pair is connected to one peer (RC, UC) or sends to any (UD).
  static constexpr bool connected = true;
  /// Whether RDMA WRITE (op::write, op::write_imm) compiles on it.
  static constexpr bool supports_write = true;
  /// Whether RDMA READ (op::read) compiles on it.
  static constexpr bool supports_read = false;
  /// Whether atomics (op::fetch_add, op::compare_swap) compile on it.
  static constexpr bool supports_atomic = false;
  /// Whether each send names its destination (op::ud_send) instead of going to the connected peer.
  static constexpr bool needs_ah = false;
  /// Bytes reserved at the start of every receive buffer (none on connected QPs).
  static constexpr std::uint32_t recv_offset = 0;
  /// RESET→INIT: PKEY_INDEX, PORT, ACCESS_FLAGS.
  static constexpr qp_attr_mask init_mask = detail::rc_uc_init_mask;
  /// INIT→RTR: AV, PATH_MTU, DEST_QPN, RQ_PSN.
  static constexpr qp_attr_mask rtr_mask = qp_attr_mask::state | qp_attr_mask::av |
                                           qp_attr_mask::path_mtu | qp_attr_mask::dest_qpn |
                                           qp_attr_mask::rq_psn;
  /// RTR→RTS: SQ_PSN.
  static constexpr qp_attr_mask rts_mask = qp_attr_mask::state | qp_attr_mask::sq_psn;

  /// RESET→INIT attributes from the creation options: port, P_Key index, remote access
  /// (remote_write only: UC has no READ or atomics).
  static qp_attr init_attr(const qp_options& o) noexcept {
    qp_attr a = detail::base_init_attr(o);
    a.access_flags = o.remote_access & access::remote_write;  // UC has no READ or atomics
    return a;
  }
  /// INIT→RTR beyond the path: nothing, UC has no responder resources.
  static void rtr_attr(qp_attr&, const connect_options&, const device_attr&) noexcept {}
  /// RTR→RTS beyond the SQ PSN: nothing, UC has no retries or READs.
  static void rts_attr(qp_attr&, const connect_options&, const device_attr&) noexcept {}
};

/// Unreliable Datagram: SEND only, each send names an address handle, every receive
/// starts with a 40-byte GRH area.
struct ud {
  /// The verbs QP type created (IBV_QPT_*).
  static constexpr qp_type type = qp_type::ud;
  /// The transport's name, as errors and benchmark reports print it.
  static constexpr std::string_view name = "UD";
  /// Whether the queue pair is connected to one peer (RC, UC) or sends to any (UD).
  static constexpr bool connected = false;
  /// Whether RDMA WRITE (op::write, op::write_imm) compiles on it.
  static constexpr bool supports_write = false;
  /// Whether RDMA READ (op::read) compiles on it.
  static constexpr bool supports_read = false;
  /// Whether atomics (op::fetch_add, op::compare_swap) compile on it.
  static constexpr bool supports_atomic = false;
  /// Whether each send names its destination (op::ud_send) instead of going to the connected peer.
  static constexpr bool needs_ah = true;
  /// Bytes reserved at the start of every receive buffer: the GRH area, 40 bytes.
  static constexpr std::uint32_t recv_offset = grh_bytes;
  /// RESET→INIT: PKEY_INDEX, PORT, QKEY.
  static constexpr qp_attr_mask init_mask =
      qp_attr_mask::state | qp_attr_mask::pkey_index | qp_attr_mask::port | qp_attr_mask::qkey;
  /// INIT→RTR: nothing but the state.
  static constexpr qp_attr_mask rtr_mask = qp_attr_mask::state;
  /// RTR→RTS: SQ_PSN.
  static constexpr qp_attr_mask rts_mask = qp_attr_mask::state | qp_attr_mask::sq_psn;

  /// RESET→INIT attributes from the creation options: port, P_Key index, Q_Key.
  static qp_attr init_attr(const qp_options& o) noexcept {
    qp_attr a = detail::base_init_attr(o);
    a.qkey = o.qkey;
    return a;
  }
  /// INIT→RTR: nothing, a UD queue pair has no path or peer.
  static void rtr_attr(qp_attr&, const connect_options&, const device_attr&) noexcept {}
  /// RTR→RTS beyond the SQ PSN: nothing, UD has no retries or READs.
  static void rts_attr(qp_attr&, const connect_options&, const device_attr&) noexcept {}
};

/// A transport policy: one of rc, uc, ud, or a type with the same facts and behaviour.
template <class T>
concept transport = requires(const qp_options& qo, const connect_options& co, qp_attr& a, const device_attr& d) {
  { T::init_attr(qo) } noexcept -> std::same_as<qp_attr>;
  { T::rtr_attr(a, co, d) } noexcept;
  { T::rts_attr(a, co, d) } noexcept;
  { T::type } -> std::convertible_to<qp_type>;
  { T::name } -> std::convertible_to<std::string_view>;
  { T::connected } -> std::convertible_to<bool>;
  { T::supports_write } -> std::convertible_to<bool>;
  { T::supports_read } -> std::convertible_to<bool>;
  { T::supports_atomic } -> std::convertible_to<bool>;
  { T::needs_ah } -> std::convertible_to<bool>;
  { T::recv_offset } -> std::convertible_to<std::uint32_t>;
  { T::init_mask } -> std::convertible_to<qp_attr_mask>;
  { T::rtr_mask } -> std::convertible_to<qp_attr_mask>;
  { T::rts_mask } -> std::convertible_to<qp_attr_mask>;
};

/// Whether transport T may post opcode `op` (docs/semantics.md#opcodes).
template <transport T>
constexpr bool allows(opcode op) noexcept {
  switch (op) {
    case opcode::send:
    case opcode::send_with_imm: return true;
    case opcode::rdma_write:
    case opcode::rdma_write_with_imm: return T::supports_write;
    case opcode::rdma_read: return T::supports_read;
    case opcode::atomic_cmp_and_swp:
    case opcode::atomic_fetch_and_add: return T::supports_atomic;
    case opcode::send_with_inv: return T::supports_read;  // RC only: the IBA has no UC SEND_WITH_INV
    case opcode::bind_mw:
    case opcode::local_inv: return bool(T::connected);  // memory windows: RC and UC
  }
  return false;
}

/// Whether transport T initiates READs or atomics, whose depth (max_rd_atomic) must then
/// not be 0: rxe takes one posted at 0 and never runs it (connect() refuses that).
template <transport T>
inline constexpr bool initiates_reads = T::supports_read || T::supports_atomic;

static_assert(transport<rc> && transport<uc> && transport<ud>);

/// Transport T on a shared receive queue: what protection_domain::create_qp(cq, srq, caps)
/// makes. The same transport with no receive queue of its own, so its queue pairs have
/// no post_recv (it does not compile: receives go to the shared_receive_queue).
template <transport T>
struct on_srq : T {
  /// The transport itself (what protection_domain::create_qp is asked for).
  using base = T;
  /// Receives come from a shared_receive_queue.
  static constexpr bool shared_receives = true;
};

namespace detail {
/// Whether T's queue pairs take their receives from a shared receive queue.
template <class T>
inline constexpr bool shares_receives = requires { requires T::shared_receives; };
}  // namespace detail

static_assert(transport<on_srq<rc>> && detail::shares_receives<on_srq<ud>> && !detail::shares_receives<rc>);

namespace detail {
/// Each connection step applies exactly the spec's required attributes (plus STATE).
template <transport T>
constexpr bool masks_follow_spec() {
  using s = qp_state;
  return T::init_mask == (qp_attr_mask::state | rule_for(s::reset, s::init, T::type).required) &&
         T::rtr_mask == (qp_attr_mask::state | rule_for(s::init, s::rtr, T::type).required) &&
         T::rts_mask == (qp_attr_mask::state | rule_for(s::rtr, s::rts, T::type).required);
}
}  // namespace detail
static_assert(detail::masks_follow_spec<rc>() && detail::masks_follow_spec<uc>() &&
              detail::masks_follow_spec<ud>());

RDMAKIT_END_NAMESPACE
