#pragma once
/// Work requests as typed values. Each operation is a small aggregate that knows its
/// opcode, the right it needs on the remote region, the transports it is valid on and
/// how to fill the descriptor:
///
///     post_result r = qp.post(op::write{src, dst}, wr_id);  // one WR
///     bool added = batch.add(op::read{dst, remote}, wr_id);  // the same value in a post list
///
/// queue_pair::post and send_batch::add take any of them through one path each, so
/// single posts and post lists cannot drift. The local side is one `local_buffer` or a
/// scatter/gather list (`std::span<const local_buffer>`). Argument order is the same
/// for all: local side, then the remote side (region or UD destination), then operands.
/// A remote region without the needed right does not compile (at construction); an
/// operation the transport lacks does not compile when posted, with a sentence saying
/// why (its `rule`: one per kind of operation); `can_post<QP, Op>` says the same to
/// generic code.
#include <rdmakit/address_handle.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/transport.hpp>
#include <rdmakit/types.hpp>

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

// Trivial on purpose (no initializers): each operation sets the fields its opcode
// reads, and post lists keep arrays of these without zeroing them.
template <class B>
struct send_desc {
  using backend = B;
  std::uint64_t wr_id;
  opcode op;
  send_flags flags;
  typename B::sge* sg;
  int num_sge;
  std::uint32_t total;
  std::uint32_t imm;  // host order; imm opcodes
  std::uint64_t raddr;  // RDMA and atomics
  std::uint32_t rkey;  // also BIND_MW's new rkey, and the rkey LOCAL_INV and SEND_WITH_INV invalidate
  std::uint64_t compare_add;  // atomics; BIND_MW's length
  std::uint64_t swap;
  typename B::ah ah;  // UD
  std::uint32_t rqpn;
  std::uint32_t qkey;
  const void* ext;  // BIND_MW: the operation (memory_window.hpp), alive while the WR is built
};

// What a BIND_MW operation gives set_op_fields through send_desc::ext.
template <class B>
struct mw_bind_args {
  typename B::mw mw;
  typename B::mr mr;
  access rights;
};

// The opcode-specific fields of a native WR (immediate, remote address, atomic
// operands, UD destination); set_send sets the common ones and leaves these alone.
template <class B, class T>
RDMAKIT_ALWAYS_INLINE void set_op_fields(typename B::send_wr& w, const send_desc<B>& d) noexcept {
  switch (d.op) {
    case opcode::send_with_imm: B::set_imm(w, net_to_host32(d.imm)); break;
    case opcode::rdma_write_with_imm:
      B::set_imm(w, net_to_host32(d.imm));
      B::set_rdma(w, d.raddr, d.rkey);
      break;
    case opcode::rdma_write:
    case opcode::rdma_read: B::set_rdma(w, d.raddr, d.rkey); break;
    case opcode::atomic_cmp_and_swp:
    case opcode::atomic_fetch_and_add: B::set_atomic(w, d.raddr, d.rkey, d.compare_add, d.swap); break;
    case opcode::send: break;
    case opcode::send_with_inv:
    case opcode::local_inv:
      if constexpr (mw_backend<B>) B::set_invalidate(w, d.rkey);
      break;
    case opcode::bind_mw:
      if constexpr (mw_backend<B>) {
        const auto* b = static_cast<const mw_bind_args<B>*>(d.ext);
        B::set_bind_mw(w, b->mw, d.rkey, b->mr, d.raddr, d.compare_add, b->rights);
      }
      break;
  }
  if constexpr (T::needs_ah) B::set_ud(w, d.ah, d.rqpn, d.qkey);
}

template <class L>
concept local_side = std::same_as<L, local_buffer> || std::same_as<L, std::span<const local_buffer>>;
/// An operation whose local side is a scatter/gather list: a span of the caller's buffers,
/// read when the WR is posted.
template <class Op>
concept gathers = requires { requires std::same_as<decltype(Op::local), std::span<const local_buffer>>; };

// What each kind of operation needs of the transport: `allowed_on<T>` for generic code,
// `check<T>()` for the one-line compile error where it is posted.
struct connected_send_rule {
  template <class T>
  static constexpr bool allowed_on = !T::needs_ah;
  template <class T>
  static constexpr void check() noexcept {
    static_assert(!T::needs_ah, "UD sends name their destination: op::ud_send{buffer, ah.to(remote_qpn)}");
  }
};
struct ud_send_rule {
  template <class T>
  static constexpr bool allowed_on = bool(T::needs_ah);
  template <class T>
  static constexpr void check() noexcept {
    static_assert(T::needs_ah,
                  "only UD sends take a destination: an RC/UC queue pair sends to the peer it is connected to");
  }
};
struct write_rule {
  template <class T>
  static constexpr bool allowed_on = bool(T::supports_write);
  template <class T>
  static constexpr void check() noexcept {
    static_assert(T::supports_write, "RDMA WRITE needs an RC or UC queue pair: UD has no WRITE");
  }
};
struct read_rule {
  template <class T>
  static constexpr bool allowed_on = bool(T::supports_read);
  template <class T>
  static constexpr void check() noexcept {
    static_assert(T::supports_read, "RDMA READ needs an RC queue pair: UC and UD have no READ");
  }
};
struct atomic_rule {
  template <class T>
  static constexpr bool allowed_on = bool(T::supports_atomic);
  template <class T>
  static constexpr void check() noexcept {
    static_assert(T::supports_atomic,
                  "atomics (compare-and-swap, fetch-and-add) need an RC queue pair: UC and UD have none");
  }
};

template <class D, access A>
RDMAKIT_ALWAYS_INLINE void fill_remote(D& d, const remote_region<A>& r) noexcept {
  d.raddr = r.addr();
  d.rkey = r.rkey();
}

template <class D, class B>
RDMAKIT_ALWAYS_INLINE void fill_destination(D& d, const ud_address<B>& to) noexcept {
  // (The post checks to.live() first: the handle read here is the live one's.)
  d.ah = ud_address_access::ticket(to).record->handle();
  d.rqpn = to.qpn();
  d.qkey = to.qkey();
}

}  // namespace detail

namespace op {

/// SEND to the connected peer (RC, UC).
template <detail::local_side L = local_buffer>
struct send {
  /// The buffer or scatter/gather list sent.
  L local;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::send;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::connected_send_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D&) const noexcept {}
};

/// SEND with 32-bit immediate data (host order; the receiver's completion has it).
template <detail::local_side L = local_buffer>
struct send_imm {
  /// The buffer or scatter/gather list sent.
  L local;
  /// Immediate data, host order; the peer's completion has it (completion::imm()).
  std::uint32_t imm;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::send_with_imm;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::connected_send_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept { d.imm = imm; }
};

/// UD: SEND to `to` (an address handle, remote QPN and Q_Key).
template <class B, detail::local_side L = local_buffer>
struct ud_send {
  /// The buffer or scatter/gather list sent.
  L local;
  /// The destination: address handle, remote QPN and Q_Key (ah.to(qpn)).
  ud_address<B> to;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::send;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::ud_send_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_destination(d, to);
  }
};

/// UD: SEND with immediate data to `to`.
template <class B, detail::local_side L = local_buffer>
struct ud_send_imm {
  /// The buffer or scatter/gather list sent.
  L local;
  /// The destination: address handle, remote QPN and Q_Key (ah.to(qpn)).
  ud_address<B> to;
  /// Immediate data, host order; the peer's completion has it (completion::imm()).
  std::uint32_t imm;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::send_with_imm;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::ud_send_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_destination(d, to);
    d.imm = imm;
  }
};

/// RDMA WRITE of the local side to `remote` (RC, UC).
template <access A, detail::local_side L = local_buffer>
struct write {
  static_assert(has_all(A, access::remote_write),
                "write: the remote region was not registered with access::remote_write");
  /// The buffer or scatter/gather list sent.
  L local;
  /// The region written; needs access::remote_write.
  remote_region<A> remote;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::rdma_write;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::write_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_remote(d, remote);
  }
};

/// RDMA WRITE with immediate data: also consumes a receive at the peer.
template <access A, detail::local_side L = local_buffer>
struct write_imm {
  static_assert(has_all(A, access::remote_write),
                "write_imm: the remote region was not registered with access::remote_write");
  /// The buffer or scatter/gather list sent.
  L local;
  /// The region written; needs access::remote_write.
  remote_region<A> remote;
  /// Immediate data, host order; the peer's completion has it (completion::imm()).
  std::uint32_t imm;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::rdma_write_with_imm;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::write_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_remote(d, remote);
    d.imm = imm;
  }
};

/// RDMA READ of `remote` into the local side (RC only; the local side needs LOCAL_WRITE).
template <access A, detail::local_side L = local_buffer>
struct read {
  static_assert(has_all(A, access::remote_read),
                "read: the remote region was not registered with access::remote_read");
  /// The buffer or scatter/gather list the data lands in; needs access::local_write.
  L local;
  /// The region read; needs access::remote_read.
  remote_region<A> remote;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::rdma_read;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::read_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_remote(d, remote);
  }
};

/// 64-bit fetch-and-add at `remote` (8 bytes, 8-aligned); the old value lands in the
/// local buffer (8 bytes, LOCAL_WRITE). RC only. The old value is in host byte order on
/// rxe and the mock, big-endian on mlx5 devices of a little-endian host (semantics.md §8.1).
template <access A>
struct fetch_add {
  static_assert(has_all(A, access::remote_atomic),
                "fetch_add: the remote region was not registered with access::remote_atomic");
  /// Where the old remote value lands: 8 bytes of a region with local_write.
  local_buffer local;
  /// The 8-byte, 8-aligned target; needs access::remote_atomic.
  remote_region<A> remote;
  /// Added to the remote value.
  std::uint64_t add;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::atomic_fetch_and_add;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::atomic_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_remote(d, remote);
    d.compare_add = add;
    d.swap = 0;
  }
};

/// 64-bit compare-and-swap at `remote`; the old value lands in the local buffer. RC only.
/// Its byte order is fetch_add's (semantics.md §8.1).
template <access A>
struct compare_swap {
  static_assert(has_all(A, access::remote_atomic),
                "compare_swap: the remote region was not registered with access::remote_atomic");
  /// Where the old remote value lands: 8 bytes of a region with local_write.
  local_buffer local;
  /// The 8-byte, 8-aligned target; needs access::remote_atomic.
  remote_region<A> remote;
  /// The remote value is replaced only if it equals this.
  std::uint64_t compare;
  /// The new remote value when the comparison holds.
  std::uint64_t swap;
  /// The opcode the work request carries.
  static constexpr opcode code = opcode::atomic_cmp_and_swp;
  /// What the transport must offer; posting on one without it does not compile, with a sentence why.
  using rule = detail::atomic_rule;
  /// Sets the opcode-specific fields of the descriptor; called by queue_pair::post and send_batch::add.
  template <class D>
  RDMAKIT_ALWAYS_INLINE void fill(D& d) const noexcept {
    detail::fill_remote(d, remote);
    d.compare_add = compare;
    d.swap = swap;
  }
};

// Deduction: `op::write{buf, region}` and `op::write{std::span<const local_buffer>(sgl), region}`.
template <class L>
send(L) -> send<L>;
template <class L>
send_imm(L, std::uint32_t) -> send_imm<L>;
template <class B, class L>
ud_send(L, ud_address<B>) -> ud_send<B, L>;
template <class B, class L>
ud_send_imm(L, ud_address<B>, std::uint32_t) -> ud_send_imm<B, L>;
template <access A, class L>
write(L, remote_region<A>) -> write<A, L>;
template <access A, class L>
write_imm(L, remote_region<A>, std::uint32_t) -> write_imm<A, L>;
template <access A, class L>
read(L, remote_region<A>) -> read<A, L>;
template <access A>
fetch_add(local_buffer, remote_region<A>, std::uint64_t) -> fetch_add<A>;
template <access A>
compare_swap(local_buffer, remote_region<A>, std::uint64_t, std::uint64_t) -> compare_swap<A>;

}  // namespace op

static_assert(detail::gathers<op::send<std::span<const local_buffer>>> && !detail::gathers<op::send<>>);

namespace detail {
/// memory_window's own operations (op::bind_window, op::invalidate_window; set true
/// beside them): only they may carry BIND_MW and LOCAL_INV, whose descriptor fields only
/// they fill, and only memory_window makes them, knowing the window's state.
template <class Op>
inline constexpr bool window_op = false;
template <class Op>
constexpr bool carries_opcode_of_its_own() {
  constexpr opcode c = Op::code;
  return (c != opcode::bind_mw && c != opcode::local_inv) || window_op<Op>;
}
}  // namespace detail

/// A send-queue operation: a type with the facts above (any type with them is one, but
/// for BIND_MW and LOCAL_INV: memory_window's bind() and invalidate() post those).
template <class Op>
concept operation = requires(const Op& o) {
  { Op::code } -> std::convertible_to<opcode>;
  typename Op::rule;
  requires detail::local_side<std::remove_cvref_t<decltype(o.local)>>;
  requires detail::carries_opcode_of_its_own<Op>();
};

/// Whether queue pair type QP can post Op: connected (RTS) and the transport has it.
template <class QP, operation Op>
inline constexpr bool can_post =
    QP::state == qp_state::rts && Op::rule::template allowed_on<typename QP::transport_policy>;

RDMAKIT_END_NAMESPACE
