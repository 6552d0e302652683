#pragma once
/// Work requests built once and posted many times, as perftest posts them:
///
///     auto w = qp.prepare(op::write{src, dst}, wr_id);   // the native WR, built here
///     for (...) r = qp.post(w);                           // only the send flags change
///
/// A bandwidth or latency loop posts the same WR over and over. `queue_pair::post(op,
/// wr_id)` builds it anew each time (the SGE, the opcode fields, the inline decision);
/// a prepared send is built by `prepare` and a `post(w)` writes only its send flags (under
/// signal_manual, only when that post is signaled). The credits, the signaling policy and
/// the refusals are the queue pair's, exactly as for `post(op, wr_id)`.
///
/// The inline decision is taken at prepare time against the preparing queue pair's
/// max_inline_data. Posting the WR on another queue pair of the same type is allowed;
/// if it went inline and that queue pair takes less, the device refuses it
/// (post_status::backend_error, post_rule::inline_size).
///
/// Not for UD: a UD WR names an address handle that a long-lived prepared WR could
/// outlive (ud_address does not own it). Not for BIND_MW or LOCAL_INV, which are
/// one-off by nature.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/qp_parts.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>
#include <rdmakit/types.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

RDMAKIT_BEGIN_NAMESPACE

template <verbs_backend B, transport T, signaling S, qp_state State>
class queue_pair;

/// One send-queue WR built once by `queue_pair::prepare` and posted any number of
/// times by `queue_pair::post(w)` (rdmakit/prepared_send.hpp). Up to Sges SGEs.
/// SignalEach: the WR is built signaled, as prepare() of a queue pair whose policy
/// signals every WR (signal_all) makes it, so that posting it there writes no flag.
/// Neither copyable nor movable: the WR points at its own SGEs. It lives where
/// prepare() made it (`auto w = qp.prepare(...)`, or a member initialized from it).
/// It names its buffers as the local_buffer views it was made from do: their regions
/// must outlive its posts (docs/memory.md, Buffer lifetime; inline data is read at post).
template <verbs_backend B, transport T, std::size_t Sges = 1, bool SignalEach = false>
class prepared_send {
  static_assert(Sges >= 1, "prepared_send needs Sges >= 1");
  static_assert(!T::needs_ah,
                "a UD send cannot be prepared: its address handle is not owned by the WR; post it with "
                "qp.post(op::ud_send{buf, ah.to(qpn)}, wr_id) or a send_batch");

 public:
  prepared_send(const prepared_send&) = delete;
  prepared_send& operator=(const prepared_send&) = delete;

  /// The wr_id the WR carries (prepare's, or the last post(w, wr_id)'s).
  std::uint64_t wr_id() const noexcept { return wr_id_; }
  /// True when the WR goes inline (decided at prepare time).
  bool is_inline() const noexcept { return has_any(base_, send_flags::inline_data); }
  /// True when the WR takes a receive at the other end (takes_receive: a SEND).
  bool needs_receive() const noexcept { return takes_receive(B::describe_send(wr_).op); }

 private:
  template <verbs_backend, transport, signaling, qp_state>
  friend class queue_pair;

  // Built by queue_pair::prepare, in place (guaranteed copy elision).
  template <class Op>
  prepared_send(const Op& o, std::span<const local_buffer> sgl, std::uint64_t wr_id, send_flags flags,
                std::uint32_t inline_limit) noexcept
      : wr_id_(wr_id),
        wanted_(has_any(flags, send_flags::signaled)),
        quiet_above_(wanted_ ? flags_unknown : 1) {
    detail::send_desc<B> d{};
    d.wr_id = wr_id;
    d.op = Op::code;
    d.flags = flags;
    o.fill(d);
    std::uint32_t total = 0;
    for (std::size_t i = 0; i < sgl.size(); ++i) {
      B::set_sge(sges_[i], sgl[i].addr, sgl[i].length, sgl[i].lkey);
      total += sgl[i].length;
    }
    base_ = detail::device_flags(flags);
    if (detail::may_auto_inline(Op::code, flags) && total <= inline_limit) base_ |= send_flags::inline_data;
    constexpr send_flags built = SignalEach ? send_flags::signaled : send_flags::none;
    B::set_send(wr_, wr_id, Op::code, base_ | built, sges_, static_cast<int>(sgl.size()));
    detail::set_op_fields<B, T>(wr_, d);
  }

  typename B::send_wr wr_;
  typename B::sge sges_[Sges];
  std::uint64_t wr_id_;
  send_flags base_ = send_flags::none;  // the flags of every post, without signaled
  bool wanted_;                          // send_flags::signaled was asked: every post is signaled
  // signal_manual posts it with no other test and no flag written while more free slots
  // than this are left: 1 (the last free slot is signaled) while the WR holds base_,
  // none (flags_unknown) when a signal was asked or a post of another queue pair may
  // have left it signaled (queue_pair::post).
  std::int64_t quiet_above_;
  static constexpr std::int64_t flags_unknown = std::numeric_limits<std::int64_t>::max();
};

RDMAKIT_END_NAMESPACE
