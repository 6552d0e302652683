#pragma once
/// Queue pairs with typestate. `protection_domain::create_qp<T, S>(cq, caps)` returns a
/// `queue_pair<B, T, S, qp_state::init>`: receives may be posted, nothing else.
/// `std::move(qp).connect(peer)` (RC/UC) or `std::move(qp).activate()` (UD) applies
/// exactly the attribute masks of the transport and returns the RTS type, the only one
/// with send/write/read/atomics. Operations the transport lacks, sends before RTS and
/// remote regions without the needed right do not compile, with a message saying why.
///
/// The data path is noexcept and allocation-free: each call builds the native WR on
/// the stack with B::set_*, asks the signaling policy whether to signal it, and calls
/// B::post_send once. A queue pair and the CQ that accounts its credits are used from
/// one thread (or synchronized by the caller).
#include <rdmakit/address_handle.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/operation_calls.hpp>
#include <rdmakit/detail/qp_link.hpp>
#include <rdmakit/detail/qp_parts.hpp>
#include <rdmakit/detail/qp_setup.hpp>
#include <rdmakit/detail/sge_list.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/qp_options.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/prepared_send.hpp>
#include <rdmakit/send_batch.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#define RDMAKIT_DETAIL_SHARED_RECEIVES                                                          \
  "this queue pair takes its receives from a shared receive queue (it was created with "     \
  "pd.create_qp(cq, srq, caps)): post receives to the shared_receive_queue, srq.post_recv(buf, wr_id)"

#define RDMAKIT_DETAIL_NEEDS_RTS                                                              \
  "this queue pair is not connected yet: sends, writes, reads and atomics need RTS; call " \
  "std::move(qp).connect(peer) (UD: std::move(qp).activate()) and post on the queue pair "  \
  "it returns (an INIT queue pair can only post receives)"

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
// False, and dependent: the static_assert of a call made on an lvalue that must be
// made on an rvalue fires only when that call is made.
template <class...>
inline constexpr bool consumed_by_call = false;
}  // namespace detail

/// A queue pair of transport T with signaling policy S, in state State (init or rts).
/// The operations are also member functions (`qp.write(src, dst, wr_id)`, ...: see
/// detail/operation_calls.hpp), each the same as `qp.post(op::write{src, dst}, wr_id)`.
template <verbs_backend B, transport T, signaling S = signal_all, qp_state State = qp_state::init>
class queue_pair : public detail::operation_calls<queue_pair<B, T, S, State>, B> {
  static_assert(State == qp_state::init || State == qp_state::rts,
                "queue_pair's typestate is qp_state::init or qp_state::rts");

 public:
  /// The verbs backend the queue pair was created on.
  using backend = B;
  /// The transport (rc, uc, ud): which operations compile.
  using transport_policy = T;
  /// How send WRs are signaled (signal_all, signal_every<N>, signal_manual).
  using signaling_policy = S;
  /// The state in the type: init until connected, rts after; only rts can post sends.
  static constexpr qp_state state = State;

  /// An empty handle (also what a queue pair is after being moved from).
  queue_pair() = default;
  /// Takes over the queue pair; `other` becomes empty.
  queue_pair(queue_pair&&) noexcept = default;
  /// Releases the queue pair held, then takes over `other`'s; `other` becomes empty.
  queue_pair& operator=(queue_pair&&) noexcept = default;
  ~queue_pair() = default;

  /// Creates the QP and moves it to INIT. Prefer protection_domain::create_qp. Throws
  /// usage_error when a CQ is too small or signal_every<N> does not fit max_send_wr
  /// (nothing was created), verbs_error when the device refuses.
  template <polling PS, polling PR>
  static queue_pair create(detail::pd_ref<B> pd, completion_queue<B, PS>& send_cq,
                           completion_queue<B, PR>& recv_cq, const qp_cap& caps, const qp_options& o = {})
    requires(State == qp_state::init)
  {
    static_assert(!detail::shares_receives<T>,
                  "an on_srq<T> queue pair takes its receives from a shared receive queue: create it on one, "
                  "pd.create_qp<T>(cq, srq, caps)");
    auto scq = detail::policy_access::shared_block(send_cq);
    auto rcq = detail::policy_access::shared_block(recv_cq);
    if (!scq) detail::throw_empty_argument("completion_queue", "create_qp: send CQ");
    if (!rcq) detail::throw_empty_argument("completion_queue", "create_qp: receive CQ");
    return create_on_(std::move(pd), std::move(scq), std::move(rcq), caps, o);
  }

  /// Creates the QP on the shared receive queue `srq` and moves it to INIT (transport
  /// `on_srq<X>`). Prefer protection_domain::create_qp(cq, srq, caps). The queue pair
  /// keeps the SRQ alive; the receive CQ reserves the SRQ's max_wr once for all its QPs.
  template <polling PS, polling PR>
  static queue_pair create(detail::pd_ref<B> pd, completion_queue<B, PS>& send_cq,
                           completion_queue<B, PR>& recv_cq, detail::shared_owner<detail::srq_state<B>> srq,
                           const qp_cap& caps, const qp_options& o = {})
    requires(State == qp_state::init && detail::shares_receives<T>)
  {
    auto scq = detail::policy_access::shared_block(send_cq);
    auto rcq = detail::policy_access::shared_block(recv_cq);
    if (!scq) detail::throw_empty_argument("completion_queue", "create_qp: send CQ");
    if (!rcq) detail::throw_empty_argument("completion_queue", "create_qp: receive CQ");
    if (!srq) detail::throw_empty_argument("shared_receive_queue", "create_qp");
    return create_on_(std::move(pd), std::move(scq), std::move(rcq), caps, o, std::move(srq));
  }

  /// Any state → a fresh INIT queue pair on the same PD and CQs with the same
  /// capacities and options, for a reconnect. It is a new QP (a new QP number and PSN:
  /// exchange endpoints again, as the peer must also start over). The old QP is moved
  /// to ERR and kept while it may complete WRs (docs/ownership-and-threads.md), so
  /// every WR still outstanding on it completes with WR_FLUSH_ERR and its own wr_id,
  /// through the CQs' normal polls (qp_num() of the old QP; a handler set with `on`
  /// still gets them; the new QP has none). They never touch the new QP's credits.
  /// Throws usage_error, changing nothing, when the CQs cannot hold the new QP's depths
  /// beside the old one's outstanding WRs (and earlier resets' unpolled flushes);
  /// verbs_error if the new QP cannot be made (then the old one is destroyed with its
  /// outstanding WRs, this object is empty, and the error says so), or if the device
  /// refuses to move the old QP to ERR (then this queue pair is as it was). std::bad_alloc
  /// before the old QP went to ERR changes nothing; after, it is as verbs_error's case.
  queue_pair<B, T, S, qp_state::init> reset() && {
    link_("reset");
    detail::refuse_if_waited_on(*parts_.scq, "queue_pair::reset()");
    detail::refuse_if_waited_on(*parts_.rcq, "queue_pair::reset()");
    parts_.scq->forget_drained();  // first: what drained polls proved lets old queue pairs go
    parts_.rcq->forget_drained();
    detail::prune_retired(parts_.retired);
    // Refused before anything changes: this queue pair stays as it was.
    if (auto why = detail::no_room_for_replacement(parts_, "reset()", !T::needs_ah); !why.empty()) throw usage_error(why);
    const auto& l = *parts_.link;
    const std::uint32_t old_qpn = l.qp_num, outstanding = l.sends_to_come() + l.rq.held;
    queue_pair<B, T, S, qp_state::init> fresh(std::move(parts_));
    try {
      detail::replace_with_fresh<B, T, S>(fresh.parts_);
    } catch (const verbs_error& e) {
      if (fresh.parts_.qp != typename B::qp{}) {  // the old QP refused ERR: it is this object's again, as it was
        parts_ = std::move(fresh.parts_);
        const std::string what = detail::cat(
            e.detail(), "; reset(): QP ", detail::hex(old_qpn), " could not be moved to ERR",
            outstanding ? detail::cat(", so its ", outstanding, " outstanding WRs cannot flush") : "",
            ": this queue pair is as it was; retry reset(), or destroy it",
            outstanding ? " (its WRs are dropped without completions)" : "");
        if (const auto* t = e.transition()) throw verbs_error(e.verb(), e.errno_value(), what, *t);
        throw verbs_error(e.verb(), e.errno_value(), what);
      }
      // The old QP went with the refused new one: say so, not only the device's "destroy one first".
      const std::string what = detail::cat(
          e.detail(), "; reset(): the new queue pair could not be made, and QP ", detail::hex(old_qpn), " was destroyed",
          outstanding ? detail::cat(" with its ", outstanding, " outstanding WRs (they may never complete)") : "",
          ": this queue pair is now empty; create a new one");
      if (const auto* t = e.transition()) throw verbs_error(e.verb(), e.errno_value(), what, *t);
      throw verbs_error(e.verb(), e.errno_value(), what);
    } catch (...) {
      // Out of memory: before the old QP went to ERR it is this object's again, as it
      // was; after, the new QP could not be made, as above (this object is empty).
      if (fresh.parts_.qp != typename B::qp{}) parts_ = std::move(fresh.parts_);
      throw;
    }
    return fresh;
  }

 private:
  static queue_pair create_on_(detail::pd_ref<B> pd, detail::shared_owner<detail::cq_block<B>> send_blk,
                               detail::shared_owner<detail::cq_block<B>> recv_blk, const qp_cap& caps,
                               const qp_options& o, detail::shared_owner<detail::srq_state<B>> srq = {}) {
    return queue_pair(detail::create_parts<B, T, S>(std::move(pd), std::move(send_blk), std::move(recv_blk), caps, o,
                                                    std::move(srq)));
  }

 public:

  /// False once moved from: every call on it then throws usage_error (setup and
  /// accessors) or returns post_status::empty_handle (posts).
  explicit operator bool() const noexcept { return parts_.qp != typename B::qp{}; }
  /// The queue pair's number (what the peer connects to); throws usage_error when empty.
  std::uint32_t qp_num() const { return link_("qp_num").qp_num; }
  /// The capacities the device granted.
  const qp_cap& caps() const {
    link_("caps");
    return parts_.caps;
  }
  /// Send WRs that can be posted now without waiting for completions (none in error).
  std::uint32_t send_credits() const {
    // The closed link of an empty handle admits nothing: only then is the handle tested.
    const auto& sq = parts_.link->sq;
    if (RDMAKIT_UNLIKELY(sq.blocked())) {
      (void)link_("send_credits");  // throws for an empty handle
      return 0;
    }
    return sq.available();
  }
  /// True when n send WRs can be posted now without waiting for completions: one
  /// compare, for a loop that reaps until a whole list fits (false in error; throws
  /// usage_error when empty, or when n is more than the send queue ever holds).
  bool can_post(std::uint32_t n = 1) const {
    const auto& sq = parts_.link->sq;
    // (A closed ledger admits 0 WRs: n == 0 asks the link. n is most often a constant.)
    if (RDMAKIT_LIKELY(sq.admits(n))) return n != 0 || !link_("can_post").error;
    // One compare for the rest: a closed ledger (ERR, or the empty handle's) is 0 deep.
    if (RDMAKIT_UNLIKELY(n > sq.open_depth())) return cannot_post_(n);
    return false;
  }
  /// Unsignaled WRs since the last signaled one.
  std::uint32_t unsignaled_run() const { return link_("unsignaled_run").sq.unsignaled_run(); }
  /// Receives posted and not completed yet.
  std::uint32_t posted_recvs() const { return link_("posted_recvs").rq.held; }
  /// True once a completion of this QP failed (the QP is in ERR; posts return qp_error);
  /// not for a UD receive too small for its datagram (LOC_LEN_ERR: the QP stays in RTS).
  bool in_error() const {
    // The closed link of an empty handle is in error: only then is the handle tested.
    if (RDMAKIT_LIKELY(!parts_.link->error)) return false;
    return link_("in_error").error;
  }
  /// Whether the asynchronous event `ev` (device::next_event) is about this queue pair:
  /// QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR (the device moved it to ERR: as a responder it
  /// learns so from no completion of its own, so in_error() stays false until one of
  /// its own WRs fails), COMM_EST, SQ_DRAINED, PATH_MIG, PATH_MIG_ERR or
  /// LAST_WQE_REACHED. False on an empty handle, and for an event of the queue pair a
  /// reset() replaced (told apart by the QP number as well as the handle, which a
  /// device may reuse; unless it reuses the number too, as the mock's reuse_qp_numbers).
  bool raised(const async_event& ev) const noexcept {
    if (parts_.qp == typename B::qp{} || ev.object != static_cast<const void*>(parts_.qp)) return false;
    if (ev.qp_num != parts_.link->qp_num) return false;
    switch (ev.type) {
      case async_event_type::qp_fatal:
      case async_event_type::qp_req_err:
      case async_event_type::qp_access_err:
      case async_event_type::comm_est:
      case async_event_type::sq_drained:
      case async_event_type::path_mig:
      case async_event_type::path_mig_err:
      case async_event_type::qp_last_wqe_reached: return true;
      default: return false;
    }
  }
  /// The status that put the queue pair in error: the root cause, a flush only when
  /// nothing else failed (success if none).
  wc_status first_error() const { return link_("first_error").first_error; }
  /// The GID index used for this QP's address (chosen automatically unless given).
  /// Throws usage_error on an empty handle (0 is a GID index too).
  int gid_index() const {
    (void)link_("gid_index");
    return parts_.gid_index;
  }
  /// The local port the queue pair uses (qp_options::port). Throws usage_error on an
  /// empty handle.
  std::uint8_t port() const {
    (void)link_("port");
    return parts_.opts.port;
  }
  /// The backend's queue pair (ibv_qp* on ibverbs), for calls rdmakit does not wrap.
  typename B::qp native() const noexcept { return parts_.qp; }
  /// The state the device reports (a setup call: it may throw).
  qp_state query_state() const {
    link_("query_state");
    return B::query_qp_state(parts_.qp);
  }

  /// What the peer needs to connect to this QP (or to address it, on UD).
  endpoint local_endpoint() const {
    return {parts_.lid,       link_("local_endpoint").qp_num, parts_.psn, parts_.local_gid,
            parts_.active_mtu, parts_.opts.qkey};
  }

  // ---- connection steps --------------------------------------------------------------

  /// INIT→RTR→RTS against `peer` (RC/UC), with the transport's exact attribute masks.
  /// The options are checked before the QP is touched (usage_error). If the device
  /// refuses a step, verbs_error is thrown and this object stays a valid INIT queue
  /// pair, so connect can be retried. After a refused RTR→RTS the QP is taken back
  /// through RESET to INIT; if receives were posted it is replaced instead, as reset()
  /// replaces it (a new QP number: give the peer the new endpoint), and each receive
  /// completes on the old QP, with WR_FLUSH_ERR unless a message took it in RTR. The
  /// message says which.
  queue_pair<B, T, S, qp_state::rts> connect(const endpoint& peer, const connect_options& o = {}) && {
    static_assert(T::connected,
                  "UD queue pairs have no peer to connect to: use std::move(qp).activate(), then "
                  "send to ah.to(remote_qpn)");
    static_assert(State == qp_state::init, "connect(): this queue pair is already connected");
    link_("connect");
    detail::check_connect(peer, o, initiates_reads<T>, parts_.dev().attr.max_qp_init_rd_atom);
    modify_(detail::rtr_attributes<B, T>(parts_, peer, o), T::rtr_mask, qp_state::init, "INIT→RTR");
    qp_attr b;
    b.state = qp_state::rts;
    b.sq_psn = parts_.psn;
    T::rts_attr(b, o, parts_.dev().attr);
    detail::to_rts_or_back_to_init<B, T, S>(parts_, b, "connect");
    return queue_pair<B, T, S, qp_state::rts>(std::move(parts_));
  }

  /// connect(), activate() and reset() consume this object (the queue pair moves to the
  /// one they return): called on an lvalue they do not compile, with this message
  /// rather than the compiler's "discards qualifiers". (Each returns what the real call
  /// does, so `auto live = qp.connect(peer)` fails on the message first, not on a void.)
  template <class... Args>
  queue_pair<B, T, S, qp_state::rts> connect(const Args&...) const& {
    static_assert(detail::consumed_by_call<Args...>,
                  "connect() consumes the INIT queue pair and returns the connected one: write "
                  "auto live = std::move(qp).connect(peer);");
    std::terminate();
  }
  /// Does not compile: activate() consumes the queue pair (std::move(qp).activate()).
  template <class... Args>
  queue_pair<B, T, S, qp_state::rts> activate(const Args&...) const& {
    static_assert(detail::consumed_by_call<Args...>,
                  "activate() consumes the INIT queue pair and returns the active one: write "
                  "auto live = std::move(qp).activate();");
    std::terminate();
  }
  /// Does not compile: reset() consumes the queue pair (std::move(qp).reset()).
  template <class... Args>
  queue_pair<B, T, S, qp_state::init> reset(const Args&...) const& {
    static_assert(detail::consumed_by_call<Args...>,
                  "reset() consumes the queue pair and returns a fresh INIT one: write "
                  "auto init = std::move(qp).reset();");
    std::terminate();
  }

  /// INIT→RTR→RTS of a UD queue pair (no peer: each send names its destination).
  queue_pair<B, T, S, qp_state::rts> activate() && {
    static_assert(!T::connected,
                  "RC/UC queue pairs are connected to one peer: use std::move(qp).connect(peer)");
    static_assert(State == qp_state::init, "activate(): this queue pair is already active");
    link_("activate");
    qp_attr a;
    a.state = qp_state::rtr;
    modify_(a, T::rtr_mask, qp_state::init, "INIT→RTR");
    qp_attr b;
    b.state = qp_state::rts;
    b.sq_psn = parts_.psn;
    detail::to_rts_or_back_to_init<B, T, S>(parts_, b, "activate");
    return queue_pair<B, T, S, qp_state::rts>(std::move(parts_));
  }

  // ---- receives (INIT and later) -----------------------------------------------------

  /// Posts one receive into `buf` (UD: buf must also hold the 40-byte GRH first).
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post_recv(const local_buffer& buf, std::uint64_t wr_id) noexcept {
    static_assert(!detail::shares_receives<T>, RDMAKIT_DETAIL_SHARED_RECEIVES);
    typename B::sge s;
    B::set_sge(s, buf.addr, buf.length, buf.lkey);
    return post_recv_(&s, 1, buf.length, wr_id);
  }
  /// Posts one receive scattered over `sgl`.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post_recv(std::span<const local_buffer> sgl, std::uint64_t wr_id) noexcept {
    static_assert(!detail::shares_receives<T>, RDMAKIT_DETAIL_SHARED_RECEIVES);
    typename B::sge s[detail::max_stack_sge];
    const auto list = detail::fill_sges<B>(sgl, s);
    if (RDMAKIT_UNLIKELY(list.count < 0)) return detail::refused_list(list.broken);
    return post_recv_(s, list.count, list.total, wr_id);
  }
  /// Posts one receive per buffer with wr_ids first_wr_id, first_wr_id + 1, ...; one
  /// doorbell per 32 receives. `posted` says how many went in.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post_recvs(std::span<const local_buffer> bufs, std::uint64_t first_wr_id) noexcept {
    static_assert(!detail::shares_receives<T>, RDMAKIT_DETAIL_SHARED_RECEIVES);
    if (RDMAKIT_UNLIKELY(!parts_.link)) return {post_status::empty_handle, 0, 0};
    auto& l = *parts_.link;
    if (RDMAKIT_UNLIKELY(detail::bad_recv_ids(first_wr_id, bufs.size()))) return {post_status::bad_wr_id, 0, 0};
    if constexpr (T::recv_offset != 0)  // before the room, in post_recv's order: no poll makes it fit
      for (const auto& b : bufs)
        if (RDMAKIT_UNLIKELY(b.length < T::recv_offset)) return {post_status::recv_too_small, 0, 0};
    if (RDMAKIT_UNLIKELY(l.error)) return {post_status::qp_error, 0, 0};
    // One compare: rq_open_depth is rq_depth, but 0 once the receive CQ's handle went.
    if (RDMAKIT_UNLIKELY(l.rq.held + bufs.size() > l.rq_open_depth))
      return {bufs.size() > l.rq_depth ? post_status::list_too_long
              : parts_.rcq->poller_gone ? post_status::cq_gone
                                        : post_status::rq_full,
              0, 0};
    constexpr std::size_t chunk = 32;
    std::uint32_t done = 0;
    while (done < bufs.size()) {
      typename B::sge s[chunk];
      typename B::recv_wr w[chunk];
      std::size_t n = std::min(chunk, bufs.size() - done);
      for (std::size_t i = 0; i < n; ++i) {
        const auto& b = bufs[done + i];
        B::set_sge(s[i], b.addr, b.length, b.lkey);
        B::set_recv(w[i], (first_wr_id + done + i) | detail::recv_wr_bit, &s[i], 1);
        if (i) B::set_next(w[i - 1], &w[i]);
      }
      typename B::recv_wr* bad = nullptr;
      int e = B::post_recv(parts_.qp, w, &bad);
      std::uint32_t k = e ? (bad ? static_cast<std::uint32_t>(bad - w) : 0u) : static_cast<std::uint32_t>(n);
      l.rq.held += k;
      done += k;
      if (e) return {post_status::backend_error, e, done};
    }
    return {post_status::ok, 0, done};
  }

  // ---- sends (RTS only) --------------------------------------------------------------

  /// Posts one send-queue operation (rdmakit/operations.hpp): `qp.post(op::write{src,
  /// dst}, wr_id)`. The operation's transport rule and the RTS state are checked at
  /// compile time; SENDs and WRITEs go inline when they fit max_inline_data.
  template <operation Op>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post(const Op& o, std::uint64_t wr_id,
                                                       send_flags flags = send_flags::none) noexcept {
    static_assert(State == qp_state::rts, RDMAKIT_DETAIL_NEEDS_RTS);
    Op::rule::template check<T>();
    detail::send_desc<B> d{};  // {}: no -Wmaybe-uninitialized in user code; unread fields are dead stores
    d.wr_id = wr_id;
    d.op = Op::code;
    d.flags = flags;
    if constexpr (requires { o.to; }) {  // UD: the handle must still live (address_handle.hpp)...
      if (RDMAKIT_UNLIKELY(!o.to.live())) return {post_status::stale_address, 0, 0};
      // ...on this PD: a device refuses another's, or fails the QP (an empty handle's
      // refusal comes later)
      if (RDMAKIT_UNLIKELY(!detail::ud_address_access::ticket(o.to).in_pd(parts_.pd.get())) && parts_.pd)
        return detail::refused_list(post_rule::address_pd);
    }
    o.fill(d);
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.local)>, local_buffer>) {
      typename B::sge s;
      B::set_sge(s, o.local.addr, o.local.length, o.local.lkey);
      d.sg = &s;
      d.num_sge = 1;
      d.total = o.local.length;
      return post_send_(d);
    } else {
      typename B::sge s[detail::max_stack_sge];
      const auto list = detail::fill_sges<B>(o.local, s);
      if (RDMAKIT_UNLIKELY(list.count < 0)) return detail::refused_list(list.broken);
      d.sg = s;
      d.num_sge = list.count;
      d.total = list.total;
      return post_send_(d);
    }
  }

  /// What prepare<Sges>() returns: it is posted on queue pairs of this type.
  template <std::size_t Sges = 1>
  using prepared_type = prepared_send<B, T, Sges, detail::signals_every_wr<S>>;

  /// Builds `o` once into a WR that `post(w)` posts again and again
  /// (rdmakit/prepared_send.hpp): the SGEs, the opcode's fields and the inline decision
  /// are done here, so a post only sets the flags the signaling policy decides. A setup
  /// call: throws usage_error when the queue pair is empty, when the wr_id uses bit 63,
  /// when the operation has more than Sges SGEs, when they add up to more than 2 GiB, or
  /// when they hold more bytes than the operation's remote_region.
  template <std::size_t Sges = 1, operation Op>
  prepared_type<Sges> prepare(const Op& o, std::uint64_t wr_id, send_flags flags = send_flags::none) const {
    static_assert(State == qp_state::rts, RDMAKIT_DETAIL_NEEDS_RTS);
    static_assert(Op::code != opcode::bind_mw && Op::code != opcode::local_inv,
                  "BIND_MW and LOCAL_INV are posted once each: qp.post(op, wr_id), not prepared");
    Op::rule::template check<T>();
    link_("prepare");
    if (wr_id & detail::recv_wr_bit)
      throw usage_error("queue_pair::prepare(): the wr_id uses bit 63, which rdmakit keeps to tell receives from "
                        "sends; use wr_ids below 2^63");
    std::span<const local_buffer> sgl;
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.local)>, local_buffer>)
      sgl = {&o.local, 1};
    else
      sgl = o.local;
    if (sgl.size() > Sges)
      throw usage_error(detail::cat("queue_pair::prepare(): the operation has ", sgl.size(),
                                    " SGEs and the prepared send holds ", Sges, ": use qp.prepare<", sgl.size(),
                                    ">(op, wr_id)"));
    std::uint64_t total = 0;
    for (const local_buffer& b : sgl) total += b.length;
    if (total > detail::max_message_bytes)  // (one SGE too: a post of it leaves that to the device)
      throw usage_error(detail::cat("queue_pair::prepare(): the operation's buffers hold ", total,
                                    " bytes, more than 2 GiB (2^31), the largest message a WR carries; "
                                    "split it into several WRs"));
    // Checked here, once; a post does not compare the lengths (docs/memory.md).
    if constexpr (requires { o.remote.length(); })
      if (total > o.remote.length())
        throw usage_error(detail::cat("queue_pair::prepare(): the operation moves ", total,
                                      " bytes and its remote_region holds ", o.remote.length(),
                                      ": each post would reach past it, into whatever follows in the peer's "
                                      "region (the device checks only the region's bounds); cut the local "
                                      "buffer or pass a larger remote_region"));
    return prepared_type<Sges>(o, sgl, wr_id, flags, parts_.inline_limit);
  }

  /// Posts the prepared WR `w` once more, with its wr_id: the same credits, signaling
  /// and refusals as post(op, wr_id). Allocation-free and noexcept.
  template <std::size_t Sges, bool SignalEach>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post(prepared_send<B, T, Sges, SignalEach>& w) noexcept {
    static_assert(State == qp_state::rts, RDMAKIT_DETAIL_NEEDS_RTS);
    auto& l = *parts_.link;  // the closed link when empty: admits nothing
    constexpr bool manual = std::is_same_v<S, signal_manual>;
    if constexpr (manual && !SignalEach) {
      // One signed compare tells the usual post (a free slot that is not the last, no
      // signal asked) from a full or closed queue, the last slot and an asked signal,
      // which the path below sorts out: 3 instructions fewer than its two tests. It
      // writes no flag: the threshold is 1 only while the WR rests unsignaled.
      if (RDMAKIT_LIKELY(l.sq.free_slots() > w.quiet_above_)) {
        l.sq.template commit<S>(false);
        return post_prepared_(l, w.wr_);
      }
    }
    if (RDMAKIT_UNLIKELY(l.sq.blocked())) return refused_credits_(l, 0);
    const bool sig = l.sq.template must_signal<S>(w.wanted_);
    static_assert(SignalEach == detail::signals_every_wr<S>,
                  "this prepared send was prepared on a queue pair whose signaling policy signals every WR (or "
                  "on one whose policy does not) and this one's differs: prepare it on a queue pair with this "
                  "queue pair's signaling policy");
    // Built signaled for a policy that signals every WR, it is posted as it is. Under
    // signal_every<N>, one branch on the decision (a WR in N is signaled): computed
    // branch-free, the flags cost GCC 3 more instructions per post (and the branch
    // costs signal_manual 1 more). A post that leaves the WR signaled lifts the
    // threshold of signal_manual's one compare (prepared_send::quiet_above_), which
    // signal_manual's unsignaled post lowers again.
    if constexpr (!SignalEach) {
      if constexpr (!detail::branch_on_signal<S>) {
        B::set_send_flags(w.wr_, w.base_ | signaled_if_(sig));
        w.quiet_above_ = w.flags_unknown;
        l.sq.template commit<S>(sig);  // before the call, undone if the device refuses
      } else if (RDMAKIT_UNLIKELY(sig)) {
        B::set_send_flags(w.wr_, w.base_ | send_flags::signaled);
        l.sq.template commit<S>(true, w.wanted_);  // before the call, undone if the device refuses
        // signal_manual puts the unsignaled flags back after the call (whatever the
        // device said), so its next post takes the one compare.
        if constexpr (manual) return post_prepared_(l, w.wr_, w.base_);
        w.quiet_above_ = w.flags_unknown;
      } else {
        B::set_send_flags(w.wr_, w.base_);
        if constexpr (manual) w.quiet_above_ = 1;  // (an unsignaled post: no signal was asked)
        l.sq.template commit<S>(false);
      }
    } else {
      l.sq.template commit<S>(sig);
    }
    return post_prepared_(l, w.wr_);
  }

  /// Posts the prepared WR `w` with a new wr_id (kept for the posts after it).
  template <std::size_t Sges, bool SignalEach>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post(prepared_send<B, T, Sges, SignalEach>& w,
                                                       std::uint64_t wr_id) noexcept
    requires wr_id_backend<B>
  {
    if (RDMAKIT_UNLIKELY(wr_id & detail::recv_wr_bit)) return refusal_(wr_id);
    B::set_wr_id(w.wr_, wr_id);
    w.wr_id_ = wr_id;
    return post(w);
  }

  /// An empty post list for this queue pair (Max WRs, SgePerWr SGEs each). Under a
  /// policy that signals every WR its WRs are built signaled, so post sets no flag.
  template <std::size_t Max, std::size_t SgePerWr = 1>
  static send_batch<B, T, Max, SgePerWr, detail::signals_every_wr<S>> make_batch() noexcept {
    return {};
  }

  /// Posts every WR of `batch` with one doorbell. All or nothing on credits; if the
  /// device refuses a WR, `posted` is the index of that WR (its bad_wr), the ones before
  /// it are posted and removed from the batch, which keeps the rest. The batch is
  /// cleared when all were posted (unless reuse()). An empty batch posts nothing and is
  /// refused: empty_list, whatever the credits (empty_handle or qp_error first, as any
  /// post), so a list posted again without reuse() is not taken for a post of its WRs.
  template <std::size_t Max, std::size_t SgePerWr, bool SignalEach>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post(send_batch<B, T, Max, SgePerWr, SignalEach>& batch) noexcept {
    static_assert(State == qp_state::rts, RDMAKIT_DETAIL_NEEDS_RTS);
    // Where S puts the signals of the list, as a number (signal_key): computed once.
    constexpr bool keyed =
        detail::keyed_signals<S> && !SignalEach && std::remove_reference_t<decltype(batch)>::keyable;
    // signal_manual: a list posted with credits for all of it takes the last free slot,
    // if at all, with its last WR: such a list is keyed by whether that WR is signaled
    // (last_slot_key_, set by the plain path below).
    constexpr bool last_slot_keyed =
        std::is_same_v<S, signal_manual> && !SignalEach && std::remove_reference_t<decltype(batch)>::keyable;
    constexpr bool fast_path = (keyed && detail::regular_marks<S>) || last_slot_keyed;
    auto& l = *parts_.link;  // the closed link when empty: admits nothing
    [[maybe_unused]] std::uint64_t key = 0;
    if constexpr (keyed) key = l.sq.template signal_key<S>(batch.key_size_());
    if constexpr (fast_path) {
      // A reused list posted again with its signals where they fell last time, on a
      // queue pair with the same inline limit: its flags and chain are as that post left
      // them, and what it checked (no WR asked for a signal or used bit 63, none can go
      // inline) still holds, since add, clear and a partial post drop the key. Under
      // signal_every<N> its signals are at multiples of N: the ledger records the count
      // alone; under signal_manual the last WR's flags are written when its signal
      // changes, and the ledger records one mark at most. (No key names an empty list.)
      const std::uint64_t fast_key = last_slot_keyed ? batch.last_slot_key_() : key;
      if (RDMAKIT_LIKELY(batch.signal_key_ == fast_key && batch.keyed_inline_limit_ == parts_.inline_limit)) {
        const std::uint32_t n = batch.keyed_n_;
        if (RDMAKIT_UNLIKELY(!l.sq.admits(n))) return refused_list_credits_(l, n);
        [[maybe_unused]] bool last_signaled = false;
        if constexpr (last_slot_keyed) {
          last_signaled = l.sq.fills(n);
          if (last_signaled != batch.keyed_last_signaled_) batch.set_last_signal_(n, last_signaled);
        }
        typename B::send_wr* bad = nullptr;
        if (int e = B::post_send(parts_.qp, &batch.keyed_front_()->wr, &bad); RDMAKIT_UNLIKELY(e != 0))
          return partly_posted_(batch, e, bad);
        if constexpr (last_slot_keyed)
          l.sq.template commit_unasked_list<S>(n, last_signaled);
        else
          l.sq.template commit_unasked<S>(n);
        return {post_status::ok, 0, n};
      }
    }
    const std::size_t n = batch.size();
    // Whatever the credits; refused as any post on an empty handle or a QP in ERR.
    if (n == 0) return parts_.link->error ? refusal_(0) : post_result{post_status::empty_list, 0, 0};
    if (RDMAKIT_UNLIKELY(!l.sq.admits(static_cast<std::uint32_t>(n)))) return refused_list_credits_(l, n);
    const bool odd = batch.odd_ != 0;  // one test for the refusal and the plain path
    if (RDMAKIT_UNLIKELY(odd) && batch.refused_()) return batch.refusal_();
    if constexpr (T::needs_ah)  // a WR's handle may have gone since it was added, or be another PD's...
      if (const post_result r = batch.address_refusal_(parts_.pd.get(), ud_mtu_()); RDMAKIT_UNLIKELY(!r.ok()))
        return r;  // ...or a WR be larger than a datagram
    auto* w = batch.front_();
    auto plan = l.sq.start();
    const std::uint32_t inline_limit = parts_.inline_limit;
    if constexpr (detail::plans_unasked<S>) {
      // Only the signaled WRs change (none when the batch was built for this policy).
      const bool plain = SignalEach == detail::signals_every_wr<S> && !odd;
      const bool inline_free = plain && batch.inline_free_(inline_limit);
      // A list posted once whose WRs may go inline needs their flags, not the general path.
      if (RDMAKIT_UNLIKELY(plain && !inline_free && !batch.reuse_)) return post_inline_once_(batch, l, plan, w, n);
      if (RDMAKIT_LIKELY(inline_free)) {
        if constexpr (SignalEach) {
          detail::sq_credits::plan_unasked<S>(plan, static_cast<std::uint32_t>(n), [](std::uint32_t) {});
        } else {
          if (!batch.reuse_) {
            // A list posted once: its flags are add()'s (no bit of signaled_ is set), and
            // the post empties it: the signaled WRs are written, no bit or key is kept.
            detail::sq_credits::plan_unasked<S>(plan, static_cast<std::uint32_t>(n), [&](std::uint32_t i) {
              B::set_send_flags(w[i].wr, w[i].entry.flags | send_flags::signaled);
            });
            return post_planned_(batch, l, plan, w, n);
          }
          if constexpr (keyed) {
            // (Under regular_marks<S> a match was posted above, unless the inline limit
            // differs: the flags written below are then the same.)
            if (!detail::regular_marks<S> && key == batch.signal_key_) {
              // A reused list whose signals fall where they did last time: its flags
              // are right, only the ledger records the signaled WRs. (Only a reused
              // list keeps a key: a post empties any other.)
              batch.keyed_inline_limit_ = inline_limit;
              detail::sq_credits::plan_unasked<S>(plan, static_cast<std::uint32_t>(n), [](std::uint32_t) {});
              return post_planned_<false>(batch, l, plan, w, n);  // its chain still ends where it did
            }
            // The flags written next are this key's. (Only a list from its first slot is
            // keyed: the fast path posts from there without a product. Here that is
            // always so, as a partial post leaves a list odd until it is cleared.)
            batch.set_key_(batch.first_ == 0 ? key : batch.no_signal_key, inline_limit, n);
          } else {
            batch.signal_key_ = batch.no_signal_key;  // flags written by no key
          }
          // Only the WRs whose signaling changed are written.
          typename std::remove_reference_t<decltype(batch)>::signal_bits now{};
          detail::sq_credits::plan_unasked<S>(plan, static_cast<std::uint32_t>(n),
                                              [&](std::uint32_t i) { batch.mark_(now, i); });
          batch.apply_signals_(now);
          // (Keyed only here, where no WR can go inline: the fast path above writes the
          // last WR's flags without an inline flag.)
          if constexpr (last_slot_keyed)
            if (batch.first_ == 0) batch.set_last_slot_key_(inline_limit, n);
        }
        return post_planned_(batch, l, plan, w, n);
      }
    }
    typename std::remove_reference_t<decltype(batch)>::signal_bits now{};
    batch.signal_key_ = batch.no_signal_key;  // flags written one by one below
    // A list built signaled (SignalEach) no longer is: the next post writes its flags too.
    if constexpr (SignalEach) batch.odd_ |= batch.odd_touched;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& e = w[i].entry;
      const bool sig = plan.template next<S>(has_any(e.flags, send_flags::signaled));
      send_flags fl = (e.flags & ~send_flags::signaled) | signaled_if_(sig);
      if (e.inline_bytes <= inline_limit) fl |= send_flags::inline_data;
      B::set_send_flags(w[i].wr, fl);
      if (sig) batch.mark_(now, i);
    }
    batch.signaled_ = now;
    // Inline flags are not add()'s: a reused list posted next on a queue pair that takes
    // less inline data has every flag written again. (Marked for any queue pair that
    // takes inline data, not for each WR that went inline: a flag kept in the loop cost
    // a stack store per WR.)
    if (inline_limit != 0) batch.odd_ |= batch.odd_touched;
    if constexpr (keyed) {
      // Every flag is now this key's on this inline limit: unless a WR asked for a signal
      // (a signal the key does not place), the next post of the same key on a queue pair
      // of the same limit takes the fast path, with its WRs' inline flags as they are.
      if (batch.reuse_ && batch.first_ == 0 && !(batch.odd_ & batch.odd_asked_signal))
        batch.set_key_(key, inline_limit, n);
    }
    return post_planned_(batch, l, plan, w, n);
  }

 private:
  template <verbs_backend, transport, signaling, qp_state>
  friend class queue_pair;
  friend struct detail::policy_access;
  friend class detail::operation_calls<queue_pair, B>;

  template <class Op>
  RDMAKIT_ALWAYS_INLINE post_result submit_(const Op& o, std::uint64_t wr_id, send_flags flags) noexcept {
    return post(o, wr_id, flags);
  }

  explicit queue_pair(detail::qp_parts<B>&& p) noexcept : parts_(std::move(p)) {}

  // The device call of post(prepared_send): the ledger was committed; undone if refused.
  RDMAKIT_ALWAYS_INLINE post_result post_prepared_(detail::qp_link<B>& l, typename B::send_wr& wr) noexcept {
    typename B::send_wr* bad = nullptr;
    if (int e = B::post_send(parts_.qp, &wr, &bad); RDMAKIT_UNLIKELY(e != 0)) {
      l.sq.template uncommit<S>();
      return refused_(e, 0, &wr);
    }
    return {post_status::ok, 0, 1};
  }
  // The same, for a post that set flags other than the WR's resting ones: puts `rest`
  // back whatever the device said (refused_ has read the WR by then). By reference: read
  // after the call, it holds no register across it.
  RDMAKIT_ALWAYS_INLINE post_result post_prepared_(detail::qp_link<B>& l, typename B::send_wr& wr,
                                                   const send_flags& rest) noexcept {
    const post_result r = post_prepared_(l, wr);
    B::set_send_flags(wr, rest);
    return r;
  }

  const detail::qp_link<B>& link_(const char* call) const {
    if (RDMAKIT_UNLIKELY(!parts_.link)) detail::throw_empty("queue_pair", call);
    return *parts_.link;
  }

  void modify_(const qp_attr& a, qp_attr_mask m, qp_state from, const char* step) {
    detail::modify_step<B, T>(parts_, a, m, from, step);
  }

  // w and n: the batch's first slot and size, read before the plan (whose ring stores
  // the compiler cannot tell from the batch's fields).
  template <bool EndChain = true, std::size_t Max, std::size_t SgePerWr, bool SignalEach>
  RDMAKIT_ALWAYS_INLINE post_result post_planned_(send_batch<B, T, Max, SgePerWr, SignalEach>& batch, detail::qp_link<B>& l,
                                                  const detail::sq_credits::plan& plan,
                                                  typename send_batch<B, T, Max, SgePerWr, SignalEach>::slot_* w,
                                                  std::size_t n) noexcept {
    typename B::send_wr* bad = nullptr;
    if constexpr (EndChain) {
      auto* last = w + (n - 1);
      if (batch.reuse_ && batch.ended_ != last) {
        // WRs were added after the last post, which ended the chain before them.
        if (batch.ended_) B::set_next(batch.ended_->wr, &batch.ended_[1].wr);
        batch.ended_ = last;
      }
      B::set_next(last->wr, nullptr);  // the last WR ends the list while it is posted
    }
    if (int e = B::post_send(parts_.qp, &w->wr, &bad); RDMAKIT_UNLIKELY(e != 0))
      return partly_posted_(batch, e, bad);
    l.sq.template apply<S>(plan);
    if (!batch.reuse_) batch.clear();
    return {post_status::ok, 0, static_cast<std::uint32_t>(n)};
  }

  // A list posted once, none of whose WRs asked for a signal, whose WRs may go inline:
  // one pass adds the inline flag to those that fit (every flag is add()'s until then),
  // and the plan writes the signaled ones, with their inline flag. The general path's
  // decision per WR is not needed: the plan finds the signaled WRs by position.
  template <std::size_t Max, std::size_t SgePerWr, bool SignalEach>
  RDMAKIT_ALWAYS_INLINE post_result post_inline_once_(send_batch<B, T, Max, SgePerWr, SignalEach>& batch,
                                                      detail::qp_link<B>& l, detail::sq_credits::plan& plan,
                                                      typename send_batch<B, T, Max, SgePerWr, SignalEach>::slot_* w,
                                                      std::size_t n) noexcept {
    const std::uint32_t inline_limit = parts_.inline_limit;
    constexpr send_flags base = SignalEach ? send_flags::signaled : send_flags::none;  // as add() built them
    auto fits = [inline_limit](const detail::batch_entry& e) { return e.inline_bytes <= inline_limit; };
    for (std::size_t i = 0; i < n; ++i)
      if (fits(w[i].entry)) B::set_send_flags(w[i].wr, w[i].entry.flags | base | send_flags::inline_data);
    detail::sq_credits::plan_unasked<S>(plan, static_cast<std::uint32_t>(n), [&](std::uint32_t i) {
      const auto& e = w[i].entry;
      if constexpr (!SignalEach)
        B::set_send_flags(w[i].wr, e.flags | send_flags::signaled | (fits(e) ? send_flags::inline_data : send_flags::none));
    });
    return post_planned_(batch, l, plan, w, n);
  }

  // The device refused WR k of a list: the ledger records the k before it (planned again
  // from the same counters, so with the same decisions) and the batch keeps the rest.
  template <std::size_t Max, std::size_t SgePerWr, bool SignalEach>
  RDMAKIT_NOINLINE post_result partly_posted_(send_batch<B, T, Max, SgePerWr, SignalEach>& batch, int e,
                                              typename B::send_wr* bad) noexcept {
    auto* w = batch.front_();
    const std::size_t n = batch.size();
    const std::size_t k = bad ? batch.index_from_front_(bad) : 0;
    auto& l = *parts_.link;
    auto plan = l.sq.start();
    for (std::size_t i = 0; i < k; ++i) (void)plan.template next<S>(has_any(batch.entry_(i).flags, send_flags::signaled));
    l.sq.template apply<S>(plan);
    const post_result r = refused_(e, static_cast<std::uint32_t>(k), k < n ? &w[k].wr : nullptr);
    batch.drop_front_(k);  // the batch keeps exactly the WRs that were not posted
    return r;
  }

  // The largest UD message: one packet of the port's MTU. A device takes a larger one and
  // fails it (LOC_LEN_ERR), which puts the queue pair in ERR: every peer's address of it
  // is lost with the reset that follows.
  // (In bytes since the port was read: qp_parts::active_mtu_bytes.)
  std::uint32_t ud_mtu_() const noexcept { return parts_.active_mtu_bytes; }

  RDMAKIT_NOINLINE post_result refused_(int e, std::uint32_t posted, const typename B::send_wr* wr) const noexcept {
    return detail::refused_send<B>(parts_.caps, e, posted, wr);
  }

  // send_flags::signaled when sig, arithmetically: the decision is computed once.
  static RDMAKIT_ALWAYS_INLINE send_flags signaled_if_(bool sig) noexcept {
    return static_cast<send_flags>(static_cast<std::underlying_type_t<send_flags>>(sig) *
                                   to_underlying(send_flags::signaled));
  }

  RDMAKIT_ALWAYS_INLINE send_flags final_flags_(opcode op, send_flags requested, std::uint32_t total,
                                                bool sig) const noexcept {
    send_flags fl = detail::device_flags(requested) | signaled_if_(sig);
    // A branch, not a select: it goes the same way for every post of a queue pair's
    // message size, costs a post that does not go inline 2 instructions where the
    // select cost 4 to 5 (bench/README), and one that does 4. 0 bytes: harmless.
    // A constant send_flags::no_auto_inline removes it.
    if (detail::may_auto_inline(op, requested) && RDMAKIT_UNLIKELY(total <= parts_.inline_limit)) {
      fl |= send_flags::inline_data;
      RDMAKIT_OPAQUE(fl);
    }
    return fl;
  }

  RDMAKIT_ALWAYS_INLINE void build_(typename B::send_wr& w, const detail::send_desc<B>& d, typename B::sge* sg,
                                    bool sig) const noexcept {
    B::set_send(w, d.wr_id, d.op, final_flags_(d.op, d.flags, d.total, sig), sg, d.num_sge);
    detail::set_op_fields<B, T>(w, d);
  }

  // The usual refusal, sq_full (a live QP, not in ERR, a valid wr_id), answered here:
  // a bandwidth loop meets it once per reap. The others are found out of line.
  RDMAKIT_ALWAYS_INLINE post_result refused_credits_(const detail::qp_link<B>& l,
                                                     std::uint64_t wr_id_bits) const noexcept {
    // Not in ERR and not without slots (the closed link of an empty handle is neither):
    // refusal_ tells the others apart.
    if (RDMAKIT_LIKELY(l.sends_possible && !(wr_id_bits & detail::recv_wr_bit))) return {post_status::sq_full, 0, 0};
    return refusal_(wr_id_bits);
  }

  // can_post(n) for n above the open depth: false in ERR, else a throw (empty handle, or
  // more WRs than the send queue ever holds).
  RDMAKIT_NOINLINE bool cannot_post_(std::uint32_t n) const {
    const auto& l = link_("can_post");  // throws for an empty handle
    if (l.error || parts_.scq->poller_gone) return false;
    throw usage_error(detail::cat("queue_pair::can_post(", n, "): ", n, " WRs never fit a send queue of ",
                                  l.sq.depth(), " slots, however many completions are polled: split the list, or "
                                  "create the queue pair with a larger max_send_wr"));
  }

  // A list refused for credits: sq_full, unless it could never fit the send queue, or no
  // completion is due to free a slot (its slots held by unsignaled WRs alone: a single
  // post takes the last free slot signaled, a list may need more than are free). A
  // bandwidth loop that posts until the send queue is full comes here once a poll, so
  // the usual answer is inline (out of line, with pending_signaled()'s divisions, it
  // cost rdmakit-perf 0.6 instructions a WR with lists of 32 on rxe):
  // - under a policy that never leaves min_sq_depth WRs in a row unsignaled (bounded_run:
  //   signal_all, signal_every<N>), a list that fits an empty send queue with
  //   min_sq_depth - 1 slots to spare is one compare: refused, it found more than
  //   depth - n >= min_sq_depth - 1 slots held, so among them a signaled WR whose
  //   completion is not polled yet (signaling_test's model checks it);
  // - under the others, the ledger's test of a completion due (completion_due).
  // The rest, out of line: a list that can never fit, one no completion will make room
  // for, an empty handle, a QP in ERR (a closed ledger is 0 deep).
  RDMAKIT_ALWAYS_INLINE post_result refused_list_credits_(const detail::qp_link<B>& l, std::size_t n) const noexcept {
    if constexpr (detail::bounded_run<S>) {
      if (RDMAKIT_LIKELY(n + (S::min_sq_depth - 1) <= l.sq.open_depth())) return {post_status::sq_full, 0, 0};
    } else {
      if (RDMAKIT_LIKELY(n <= l.sq.open_depth() && l.sq.template completion_due<S>()))
        return {post_status::sq_full, 0, 0};
    }
    return list_refusal_(n);
  }
  RDMAKIT_NOINLINE post_result list_refusal_(std::size_t n) const noexcept {
    post_result r = refusal_(0);
    if (r.status != post_status::sq_full) return r;
    if (n > parts_.link->sq.depth())
      r.status = post_status::list_too_long;
    else if (parts_.link->sq.pending_signaled() == 0)
      r.status = post_status::no_completion_due;
    return r;
  }

  // Why a post is refused before it reaches the device, in this order: an empty handle,
  // a wr_id using bit 63, a QP in ERR, too few SQ credits. Off the data path.
  RDMAKIT_NOINLINE post_result refusal_(std::uint64_t wr_id_bits) const noexcept {
    if (!parts_.link) return {post_status::empty_handle, 0, 0};
    if (wr_id_bits & detail::recv_wr_bit) return {post_status::bad_wr_id, 0, 0};
    if (parts_.link->error) return {post_status::qp_error, 0, 0};
    // max_send_wr 0 (a receive-only queue pair): no polling ever makes room.
    if (parts_.link->sq.depth() == 0) return {post_status::list_too_long, 0, 0};
    if (parts_.scq->poller_gone) return {post_status::cq_gone, 0, 0};  // nothing will poll
    return {post_status::sq_full, 0, 0};  // what is left: fewer than n credits
  }

  RDMAKIT_ALWAYS_INLINE post_result post_send_(const detail::send_desc<B>& d) noexcept {
    if constexpr (T::needs_ah)  // a datagram is one packet
      if (RDMAKIT_UNLIKELY(d.total > ud_mtu_())) return detail::refused_list(post_rule::ud_mtu);
    auto& l = *parts_.link;
    // One compare refuses a full SQ, a QP in ERR and an empty handle (closed ledgers).
    if (RDMAKIT_UNLIKELY(l.sq.blocked() || (d.wr_id & detail::recv_wr_bit))) return refused_credits_(l, d.wr_id);
    const bool sig = l.sq.template must_signal<S>(has_any(d.flags, send_flags::signaled));
    typename B::send_wr w;
    if constexpr (!detail::branch_on_signal<S>) {  // (signal_all: sig is the constant true)
      build_(w, d, d.sg, sig);
      l.sq.template commit<S>(sig);  // before the call, undone if the device refuses
    } else if (RDMAKIT_UNLIKELY(sig)) {  // one branch on the decision, as post(prepared)
      build_(w, d, d.sg, true);
      l.sq.template commit<S>(true, has_any(d.flags, send_flags::signaled));
    } else {
      build_(w, d, d.sg, false);
      l.sq.template commit<S>(false);
    }
    typename B::send_wr* bad = nullptr;
    // The refused WR is read back from memory (describe_send), not from the descriptor:
    // keeping the descriptor alive past the post cost ~40 instructions per post.
    if (int e = B::post_send(parts_.qp, &w, &bad); RDMAKIT_UNLIKELY(e != 0)) {
      l.sq.template uncommit<S>();
      return refused_(e, 0, &w);
    }
    return {post_status::ok, 0, 1};
  }

  // A verbs call that puts one WR on the send queue (ibv_bind_mw): the same refusals,
  // signaling decision and credits as a post. `call(native qp, flags)` returns an errno.
  template <class Call>
  post_result post_call_(std::uint64_t wr_id, send_flags flags, Call&& call) noexcept {
    static_assert(State == qp_state::rts, RDMAKIT_DETAIL_NEEDS_RTS);
    auto& l = *parts_.link;  // the closed link when empty: admits nothing
    if (RDMAKIT_UNLIKELY(l.sq.blocked() || (wr_id & detail::recv_wr_bit))) return refusal_(wr_id);
    const bool sig = l.sq.template must_signal<S>(has_any(flags, send_flags::signaled));
    if (int e = call(parts_.qp, detail::device_flags(flags) | signaled_if_(sig)); RDMAKIT_UNLIKELY(e != 0))
      return {post_status::backend_error, e, 0};
    l.sq.template commit<S>(sig, has_any(flags, send_flags::signaled));
    return {post_status::ok, 0, 1};
  }

  RDMAKIT_ALWAYS_INLINE post_result post_recv_(typename B::sge* s, int n, std::uint32_t total,
                                               std::uint64_t wr_id) noexcept {
    // One test of room refuses a full receive queue, a QP in ERR and an empty handle
    // (their links have no room: rq_open_depth), and recv_refusal_ tells them apart.
    auto& l = *parts_.link;
    if (RDMAKIT_UNLIKELY(l.rq.held >= l.rq_open_depth)) return recv_refusal_(wr_id, total);
    if (RDMAKIT_UNLIKELY(wr_id >= detail::recv_wr_id_end)) return {post_status::bad_wr_id, 0, 0};
    if constexpr (T::recv_offset != 0)
      if (RDMAKIT_UNLIKELY(total < T::recv_offset)) return {post_status::recv_too_small, 0, 0};
    typename B::recv_wr w;
    B::set_recv(w, wr_id | detail::recv_wr_bit, s, n);
    typename B::recv_wr* bad = nullptr;
    if (int e = B::post_recv(parts_.qp, &w, &bad); RDMAKIT_UNLIKELY(e != 0))
      return {post_status::backend_error, e, 0,
              e == EINVAL && static_cast<std::uint32_t>(n) > parts_.caps.max_recv_sge ? post_rule::sge_count
                                                                                       : post_rule::unknown};
    ++l.rq.held;
    return {post_status::ok, 0, 1};
  }

  // A receive refused for room: in this order, an empty handle, a bad wr_id, a buffer
  // too small for the GRH, a QP in ERR, a queue pair without receive slots (max_recv_wr
  // 0: no poll ever makes room), a full receive queue.
  RDMAKIT_NOINLINE post_result recv_refusal_(std::uint64_t wr_id, [[maybe_unused]] std::uint32_t total) const noexcept {
    if (!parts_.link) return {post_status::empty_handle, 0, 0};
    if (wr_id >= detail::recv_wr_id_end) return {post_status::bad_wr_id, 0, 0};
    if constexpr (T::recv_offset != 0)
      if (total < T::recv_offset) return {post_status::recv_too_small, 0, 0};
    if (parts_.link->error) return {post_status::qp_error, 0, 0};
    if (parts_.link->rq_depth == 0) return {post_status::list_too_long, 0, 0};
    return {parts_.rcq->poller_gone ? post_status::cq_gone : post_status::rq_full, 0, 0};
  }

  detail::qp_parts<B> parts_;
};

RDMAKIT_END_NAMESPACE
