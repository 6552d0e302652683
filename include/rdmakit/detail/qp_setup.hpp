#pragma once
// The setup steps of a queue pair, out of queue_pair.hpp so that header shows the API:
// the capacity checks and creation (RESET→INIT), the connect checks and address
// vector, each modify_qp step with its explanation on refusal, the rollback of a
// refused RTR→RTS, the retirement of a replaced QP, and the diagnosis of a refused post.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/detail/qp_link.hpp>
#include <rdmakit/detail/qp_parts.hpp>
#include <rdmakit/detail/qp_transitions.hpp>
#include <rdmakit/detail/sge_list.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/qp_options.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>
#include <rdmakit/types.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// What already holds a CQ's entries, as a refusal names it: " (N entries already
/// promised to K attached queue pairs)" and the flushes of replaced or destroyed ones
/// with how to get their room back; empty when neither.
RDMAKIT_DECL std::string cq_entries_taken(std::uint64_t reserved, std::uint64_t flushing, std::size_t attached);

/// Why a CQ cannot take a queue pair's WRs, and what to do (the text of check_cq_room).
RDMAKIT_DECL std::string cq_too_small(int capacity, std::uint64_t reserved, std::uint64_t flushing, std::size_t attached,
                                      std::string_view tname, std::uint32_t sends, std::uint32_t recvs,
                                      std::uint64_t need, std::uint32_t max_cqe, bool srq_receives);

/// Refuses connect options and peer fields the IB spec cannot encode, before the QP is
/// touched (a refused modify_qp would leave it half-way), and (`reads`: a transport with
/// READ or atomics) a max_rd_atomic of 0, or one the device's maximum clamps to 0.
// Out of line: inlined into a connect() whose options are a braced temporary, GCC -O2
// warned that an unset path_mtu's payload "may be used uninitialized" (it is not read).
void check_connect(const endpoint& peer, const connect_options& o, bool reads, std::uint32_t device_max_rd_atomic);

/// The address vector to reach `peer` from `port` (GRH on RoCE, or when forced).
inline ah_attr make_av(const endpoint& peer, std::uint8_t port, const port_attr& pa, int gid_index,
                       std::uint8_t hop_limit, std::uint8_t sl, bool force_grh,
                       const std::string& dev_name) {
  ah_attr av;
  av.dlid = peer.lid;
  av.port_num = port;
  av.sl = sl;
  if (pa.layer == link_layer::ethernet || force_grh) {
    if (peer.gid.is_zero())
      throw usage_error(cat("port ", port, " of ", dev_name,
                            pa.layer == link_layer::ethernet ? " is RoCE (Ethernet), which needs a GRH"
                                                             : " is InfiniBand, and connect_options::force_grh asks a GRH",
                            ", but the peer endpoint has no GID: send the peer's local_endpoint().gid along with "
                            "its QPN"));
    av.is_global = true;
    av.grh.dgid = peer.gid;
    av.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
    av.grh.hop_limit = hop_limit;
  }
  return av;
}


// Refuses a send queue shallower than the signaling policy needs (0 is a receive-only
// queue pair, legal in verbs: its sends return sq_full).
template <signaling S>
void check_sq_depth(const qp_cap& caps) {
  if (caps.max_send_wr == 0 || caps.max_send_wr >= S::min_sq_depth) return;
  constexpr std::uint32_t depth = S::min_sq_depth;
  std::string why;
  if constexpr (is_signal_every<S>)
    why = cat(S::name, "<", depth, "> signals every ", depth, "th WR");
  else
    why = cat("the signaling policy ", S::name, " needs min_sq_depth = ", depth, " slots");
  throw usage_error(cat("create_qp(): ", why, ", so the send queue must hold at least ", depth,
                        " WRs, but max_send_wr is ", caps.max_send_wr,
                        ": raise max_send_wr or choose a policy that needs fewer"));
}

// Refuses CQs that cannot hold a completion for every WR the new QP may have out.
template <class B>
void check_cq_room(const cq_block<B>& scq, const cq_block<B>& rcq, const qp_cap& caps, std::string_view tname,
                   std::uint32_t max_cqe, bool srq_receives = false) {
  auto refuse = [&](const char* which, const cq_block<B>& cq, std::uint32_t sends, std::uint32_t recvs) {
    // Flushes of queue pairs replaced by reset() still to be polled take room too.
    const std::uint64_t need = cq.reserved + cq.flushing + sends + recvs;
    if (need > static_cast<std::uint64_t>(cq.capacity))
      throw usage_error(cat("create_qp(): ", which,
                            cq_too_small(cq.capacity, cq.reserved, cq.flushing, cq.live(), tname, sends, recvs, need, max_cqe,
                                         srq_receives && recvs != 0)));
  };
  if (&scq == &rcq) return refuse("", scq, caps.max_send_wr, caps.max_recv_wr);
  refuse("send ", scq, caps.max_send_wr, 0);
  refuse("receive ", rcq, 0, caps.max_recv_wr);
}

// One modify_qp step; a refusal is rethrown naming the step, the transport, the QP and
// the mask, with the attributes the IB spec's table says were missing or not allowed.
template <class B, class T>
void modify_step(qp_parts<B>& p, const qp_attr& a, qp_attr_mask m, qp_state from, const char* step) {
  try {
    B::modify_qp(p.qp, a, m);
  } catch (const verbs_error& e) {
    const auto rule = rule_for(from, a.state, T::type);
    qp_transition_failure t;
    t.qp_num = p.link->qp_num;
    t.from = from;
    t.to = a.state;
    t.mask = m;
    t.missing = rule.required & ~m;
    t.extra = m & ~(rule.required | rule.optional | qp_attr_mask::state);
    throw verbs_error(e.verb(), e.errno_value(),
                      cat(step, " of ", T::name, " QP ", hex(t.qp_num), " with mask ", to_string(m), " failed: ",
                          e.detail()),
                      t);
  }
}

// qp_options::psn has 24 bits: a wider one is refused, not masked. gid_index goes in an
// address vector's 8-bit sgid_index: above 255 (valid on rxe's 1024-entry tables) it
// would become another slot.
inline void check_qp_options(const qp_options& o) {
  // What peers may do to this QP's memory: only the remote bits mean anything there
  // (the local ones and mw_bind are an MR's; the device called them "unknown bits").
  constexpr access remote_bits = access::remote_write | access::remote_read | access::remote_atomic;
  if (has_any(o.remote_access, ~remote_bits))
    throw usage_error(cat("create_qp(): qp_options::remote_access = ", to_string(o.remote_access),
                          " holds ", to_string(o.remote_access & ~remote_bits),
                          ": it says what peers may do to this queue pair's memory, so only remote_write, "
                          "remote_read and remote_atomic belong there (local access and window binding are a "
                          "memory region's)"));
  if (o.psn && *o.psn > psn_mask)
    throw usage_error(cat("create_qp(): qp_options::psn = ", *o.psn, " is out of range (0..", psn_mask,
                          "): packet sequence numbers have 24 bits"));
  if (o.gid_index && (*o.gid_index < 0 || *o.gid_index > 255))
    throw usage_error(cat("create_qp(): qp_options::gid_index = ", *o.gid_index,
                          *o.gid_index < 0 ? " is negative" : " is above 255",
                          ": an address vector's sgid_index has 8 bits (verbs cannot send from a GID past 255); "
                          "use an index 0..255, or leave gid_index unset to choose one automatically"));
}

// A post hands the device at most max_stack_sge SGEs (built on the stack): a queue pair
// asking for more, on a device that grants them, would refuse each such post later.
inline void check_sge_caps(const qp_cap& caps) {
  auto at_most = [](const char* field, std::uint32_t v) {
    if (v > max_stack_sge)
      throw usage_error(cat("create_qp(): qp_cap::", field, " = ", v, " is above the ", max_stack_sge,
                            " SGEs rdmakit hands the device in one WR: ask for ", max_stack_sge,
                            " or fewer (split a longer gather into several WRs)"));
  };
  at_most("max_send_sge", caps.max_send_sge);
  at_most("max_recv_sge", caps.max_recv_sge);
}

// A queue pair's first PSN when none is asked for. The IBA's advice is a random one: a
// device may give a destroyed QP's number to the next QP (mlx5), and packets of the old
// connection still on the wire must not fall in the new one's sequence. Mixed from the QP
// number, a count of the queue pairs this process made and a seed of the process (the
// clock when the first was made, and where ASLR put the count).
inline std::uint32_t fresh_psn(std::uint32_t qp_num) noexcept {
  static constinit std::uint32_t made = 0;  // __atomic builtins: <atomic> costs every unit 7 MB of GCC's
  static const std::uint64_t seed =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      reinterpret_cast<std::uintptr_t>(&made);
  std::uint64_t x = seed ^ (std::uint64_t{qp_num} << 32) ^ __atomic_fetch_add(&made, 1u, __ATOMIC_RELAXED);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;  // splitmix64's finalizer
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
  return static_cast<std::uint32_t>(x ^ (x >> 31)) & psn_mask;
}

// A queue pair's CQs come from its PD's device object: ibv_create_qp passes their
// handles, which the kernel looks up among the PD's context's objects, where another
// context's may name another CQ (audit 34, F3).
template <class B>
void check_cq_contexts(const pd_state<B>& pd, const cq_block<B>& scq, const cq_block<B>& rcq) {
  for (const cq_block<B>* c : {&scq, &rcq})
    if (c->dev->ctx != pd.dev->ctx)
      throw usage_error(cat("create_qp(): the completion queue was created from another device object (",
                            c->dev->name, c->dev->name == pd.dev->name ? ", another context" : "",
                            ") than the protection domain (", pd.dev->name,
                            "): create the CQ from the device object the PD was created from"));
}

// Creates the native QP on checked CQs, attaches it to them and takes it to INIT. With
// `srq` (transport on_srq<X> only) the receives come from it: the receive CQ reserves
// the SRQ's max_wr once for all its QPs. With `make_qp` (the connection manager) the
// QP is made by `make_qp(parts, pd, send cq, recv cq)`, which sets parts.qp (INIT
// already) and parts.cm; o.port and o.gid_index are then the CM's choice.
template <class B, class T, class S, class MakeQp = std::nullptr_t>
qp_parts<B> create_parts(pd_ref<B> pd, shared_owner<cq_block<B>> send_blk,
                         shared_owner<cq_block<B>> recv_blk, const qp_cap& caps, const qp_options& o,
                         shared_owner<srq_state<B>> srq = {}, MakeQp make_qp = nullptr) {
  constexpr bool by_cm = !std::is_null_pointer_v<MakeQp>;
  cq_block<B>* scq = send_blk.get();
  cq_block<B>* rcq = recv_blk.get();
  const device_state<B>& dev = *pd->dev;
  refuse_if_waited_on(*scq, "create_qp()");
  refuse_if_waited_on(*rcq, "create_qp()");
  check_sq_depth<S>(caps);
  check_sge_caps(caps);
  check_qp_options(o);
  qp_cap room = caps;  // what the CQs must have room for
  if constexpr (shares_receives<T>) {
    if (!srq)
      throw usage_error(cat("create_qp(): an on_srq<", T::name,
                            "> queue pair needs its shared receive queue: pd.create_qp<T>(cq, srq, caps)"));
    if (caps.max_recv_wr != 0 || caps.max_recv_sge > 1)
      throw usage_error(cat("create_qp(): a queue pair on a shared receive queue has no receive queue of its own, "
                            "but max_recv_wr is ", caps.max_recv_wr, " and max_recv_sge ", caps.max_recv_sge,
                            ": set max_recv_wr to 0 (the SRQ's max_wr and max_sge apply)"));
    // Devices disagree on whose PD checks a shared receive's lkey: rxe takes the queue
    // pair's, the mock and some NICs the SRQ's (audit 34, F2).
    if (srq->pd.get() != pd.get())
      throw usage_error(cat("create_qp(): the shared receive queue was created on another protection domain (of ",
                            srq->pd->dev->name, ") than the queue pair's (of ", dev.name,
                            "): devices disagree on which one checks its receives' lkeys (rxe takes the queue "
                            "pair's); create the queue pair on the SRQ's protection domain"));
    room.max_recv_wr = rcq->srq_entries(srq.get(), srq->attr.max_wr);
  }
  check_cq_contexts(*pd, *scq, *rcq);
  scq->forget_drained();  // room a busy CQ's polls gave back
  rcq->forget_drained();
  check_cq_room(*scq, *rcq, room, T::name, dev.attr.max_cqe, shares_receives<T>);

  qp_parts<B> p;
  p.pd = pd;
  p.scq = std::move(send_blk);
  p.rcq = std::move(recv_blk);
  p.asked = caps;
  p.opts = o;
  p.caps = caps;
  if constexpr (shares_receives<T>) {
    p.asked.max_recv_wr = 0;
    p.qp = B::create_qp_on_srq(pd->pd, scq->cq, rcq->cq, srq->srq, T::type, p.caps, false);
    if constexpr (T::recv_offset != 0) {  // a UD QP: receives need the GRH area while it is there
      srq->offset.add(T::recv_offset);
      p.srq_needs_offset = &srq->offset;
    }
    p.srq = std::move(srq);
  } else if constexpr (by_cm) {
    make_qp(p, pd->pd, scq->cq, rcq->cq);
  } else {
    p.qp = B::create_qp(pd->pd, scq->cq, rcq->cq, T::type, p.caps, false);
  }
  p.inline_limit = o.auto_inline ? p.caps.max_inline_data : 0;
  p.link = link_ptr<B>::make();
  auto& l = *p.link;
  l.qp_num = B::qp_num(p.qp);
  l.serial = next_qp_serial();
  l.recv_offset = T::recv_offset;
  // Credits follow what was asked: the device may grant more, but the CQs were
  // sized (and checked above) for the requested depths.
  l.sq = sq_credits::for_policy<S>(caps.max_send_wr);
  l.sends_possible = caps.max_send_wr != 0;
  l.rq_depth = l.rq_open_depth = p.asked.max_recv_wr;
  if (scq->poller_gone) l.sends_possible = false, l.sq.close();  // a reset() after the CQ's handle went
  if (rcq->poller_gone) l.rq_open_depth = 0;
  // Each CQ is named in the link once attached: a destruction detaches from those only
  // (one whose attach ran out of memory holds nothing of this QP).
  if (scq == rcq) {
    scq->attach(&l, p.asked.max_send_wr + p.asked.max_recv_wr);
    l.send_cq = l.recv_cq = scq;
  } else {
    scq->attach(&l, p.asked.max_send_wr);
    l.send_cq = scq;
    rcq->attach(&l, p.asked.max_recv_wr);
    l.recv_cq = rcq;
  }
  if constexpr (shares_receives<T>) {
    l.rq.shared = 1;
    rcq->attach_srq(p.srq.get(), p.srq->attr.max_wr);
    p.srq_id = p.srq.get();  // from now on release() gives the CQ's share back
    p.srq_seen = &p.srq->traffic;
  }

  const port_attr pa = dev.port(o.port);
  p.gid_index = o.gid_index ? *o.gid_index : choose_gid<B>(dev.ctx, o.port);
  if (o.gid_index && static_cast<std::uint32_t>(*o.gid_index) >= pa.gid_tbl_len)
    throw usage_error(cat("create_qp(): qp_options::gid_index = ", *o.gid_index, " is past the ", pa.gid_tbl_len,
                          "-entry GID table of port ", o.port, ": use an index whose device::gid(port, index) is "
                          "valid, or leave gid_index unset to choose one automatically"));
  if (pa.layer == link_layer::ethernet || o.gid_index) {
    const auto entry = B::query_gid(dev.ctx, o.port, p.gid_index);
    if (o.gid_index && !entry.valid)
      throw usage_error(cat("create_qp(): qp_options::gid_index = ", p.gid_index, " names an empty slot of port ",
                            o.port, "'s GID table: use an index whose device::gid(port, index) is valid, or leave "
                            "gid_index unset to choose one automatically"));
    p.local_gid = entry.value;
  }
  p.lid = pa.lid;
  p.active_mtu = pa.active_mtu;
  p.active_mtu_bytes = mtu_bytes(pa.active_mtu);
  p.psn = (o.psn ? *o.psn : fresh_psn(l.qp_num)) & psn_mask;
  if constexpr (!by_cm) modify_step<B, T>(p, T::init_attr(o), T::init_mask, qp_state::reset, "RESET→INIT");
  return p;
}

// The INIT→RTR attributes to reach `peer`: the smaller of both MTUs (and the asked
// one), the peer's QPN and PSN, the address vector, and the transport's own fields.
template <class B, class T>
qp_attr rtr_attributes(const qp_parts<B>& p, const endpoint& peer, const connect_options& o) {
  const port_attr pa = p.dev().port(p.opts.port);
  qp_attr a;
  a.state = qp_state::rtr;
  mtu m = pa.active_mtu;
  if (peer.mtu < m) m = peer.mtu;  // check_connect refused one that names no MTU
  if (o.path_mtu && *o.path_mtu < m) m = *o.path_mtu;
  a.path_mtu = m;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn & psn_mask;
  a.av = make_av(peer, p.opts.port, pa, p.gid_index, o.hop_limit, o.sl, o.force_grh, p.dev().name);
  T::rtr_attr(a, o, p.dev().attr);
  return a;
}

// Whether a replaced QP is kept (retired) for the flushes of what it has out: a receive
// posted, or a send not polled (an unsignaled one too: it may flush before a signaled
// one, or have completed unseen; see retire). Otherwise it is destroyed at once.
template <class B>
bool keeps_for_flushes(const qp_link<B>& l) noexcept {
  return l.rq.held + l.sends_to_come() != 0;
}

// The entry retire() adds to `l`'s flushes for its drain marker (qp_link::drain): one
// when sends are out that no count can follow (unsignaled ones) and the transport can
// post the marker (`may_drain`: not UD, whose sends need an address).
template <class B>
std::uint32_t drain_entries(const qp_link<B>& l, bool may_drain) noexcept {
  return may_drain && l.sends_to_come() > l.signaled_to_come() ? 1 : 0;
}

// Whether a batch of `l`'s completions, accounted already, is being delivered by one of
// its CQs: its rest is still to reach `l`'s handler (a reset() from that handler).
template <class B>
bool batch_being_delivered(const qp_link<B>& l) noexcept {
  return (l.send_cq && l.send_cq->batch_serial == l.serial) || (l.recv_cq && l.recv_cq->batch_serial == l.serial);
}

// Whether a routed batch being delivered by one of `l`'s CQs still holds a completion of
// `l` (a nested poll may have taken later ones, its drain marker among them).
template <class B>
bool held_by_a_batch(const qp_link<B>& l) noexcept {
  return (l.send_cq && l.send_cq->holds_undelivered(l.qp_num)) ||
         (l.recv_cq && l.recv_cq != l.send_cq && l.recv_cq->holds_undelivered(l.qp_num));
}

// Moves a replaced QP to ERR so its outstanding WRs flush, and shrinks its CQ
// reservation to what those flushes can take; destroys it at once when nothing can
// come (keeps_for_flushes). The CQs made room in their retired_links first
// (replace_with_fresh). A refusal of the move to ERR (the device changed nothing) goes
// on with `p` as it was: destroyed, its WRs would never flush, and nothing would say so.
// `srq_receives`: p's QP is on an SRQ that was posted to, so completions of receives
// it took may be in its receive CQ (no count says how many): it is kept until a poll
// finds that CQ empty. `may_drain`: see drain_entries.
template <class B>
void retire(qp_parts<B>& p, bool srq_receives, bool may_drain) {
  auto& l = *p.link;
  const std::uint32_t marker = drain_entries(l, may_drain);
  const std::uint32_t sends = l.sends_to_come() + marker, recvs = l.rq.held;
  if (!keeps_for_flushes(l) && !srq_receives && !batch_being_delivered(l)) return p.release();
  qp_attr err;
  err.state = qp_state::err;
  B::modify_qp(p.qp, err, qp_attr_mask::state);
  l.retired_sends = sends;
  l.retired_recvs = recvs;
  l.retired_signaled = l.signaled_to_come();
  l.retired_srq_receives = srq_receives;
  if (srq_receives) {
    l.srq_retired_at = l.recv_cq->drains;
    l.recv_cq->watch(true);
  }
  // Unsignaled sends out (selective signaling): no count says when the last flush came,
  // the drain marker does (or, without one, a poll finding the send CQ empty past the
  // deadline below).
  l.retired_unsure_sends = sends - marker > l.retired_signaled;
  // Without a marker (UD) a poll finding the CQ empty is all that can say the flushes
  // came, and one right after the move to ERR proves nothing (the device writes them
  // later): the first one past drain_grace decides, as for a marker given up.
  if (l.retired_unsure_sends) l.drain_deadline = std::chrono::steady_clock::now() + drain_grace;
  if (l.retired_unsure_sends && !marker) l.send_cq->watch(true);
  if (l.send_cq == l.recv_cq) {
    l.send_cq->retire(&l, p.asked.max_send_wr + p.asked.max_recv_wr, sends + recvs);
  } else {
    l.send_cq->retire(&l, p.asked.max_send_wr, sends);
    l.recv_cq->retire(&l, p.asked.max_recv_wr, recvs);
  }
  p.is_retired = true;
  if (marker) {
    l.native_qp = p.qp;
    l.send_cq->watch(true);  // (for the deadline)
    post_drain_marker(l);
  }
}

// Lets go of the retired generations under `head` whose receives and signaled sends
// were all polled (retired_done): their room in the CQs comes back. Not one with
// completions still to deliver from a batch polled before (a handler's reset): those are
// its handler's.
template <class B>
void prune_retired(unique_owner<qp_parts<B>>& head) noexcept {
  unique_owner<qp_parts<B>>* at = &head;
  while (*at) {
    const auto& l = *(*at)->link;
    if (l.retired_done() && !batch_being_delivered(l) && !held_by_a_batch(l)) {
      auto rest = std::move((*at)->retired);
      *at = std::move(rest);  // destroys the one that is done
    } else {
      at = &(*at)->retired;
    }
  }
}

// Why the CQs cannot hold a new queue pair in `p`'s place beside the completions `p`
// may still have once in ERR (its outstanding WRs), and what to do; empty when they
// can. The new queue pair takes over `p`'s reservation.
template <class B>
std::string no_room_for_replacement(const qp_parts<B>& p, const char* call, bool may_drain) {
  const auto& l = *p.link;
  // The old QP is kept (retire) while they may flush: they keep their entries (flushing),
  // as does its drain marker.
  const std::uint32_t sends = l.sends_to_come() + drain_entries(l, may_drain), recvs = l.rq.held;
  // After a failure under selective signaling, unsignaled WRs that completed before it
  // count among those to come (no completion tells them apart), and no poll returns them.
  const bool unseen = l.error && l.sends_to_come() > l.signaled_to_come();
  auto check = [&](const char* which, const cq_block<B>& c, std::uint32_t s, std::uint32_t r) -> std::string {
    const std::uint64_t need = c.reserved + c.flushing + s + r;
    if (need <= static_cast<std::uint64_t>(c.capacity)) return {};
    return cat(call, ": the ", which, "CQ of ", c.capacity, " entries cannot hold a new queue pair beside QP ",
               l.qp_num, "'s outstanding WRs (", s, " send + ", r,
               " receive), which complete as flushes once it is replaced: ", c.reserved,
               " entries are promised to the attached queue pairs (the new one takes over this one's), ",
               c.flushing, " to completions of queue pairs replaced or destroyed before; ",
               unseen ? "polling gives back the entries of the flushes still to come, not those of unsignaled WRs "
                        "that completed unseen before the failure, which count until the queue pair is replaced: "
                      : "",
               "poll the CQ (a completion polled gives its entry back; receives still posted complete only once the "
               "queue pair is in ERR), create the CQ with at least ", need,
               " entries, or destroy this queue pair (its WRs are "
               "dropped; its room comes back once a poll finds the CQ empty, or, while a type 2 memory window bound "
               "through it is not freed, once its flushes are polled) and create a new one");
  };
  if (l.send_cq == l.recv_cq) return check("", *l.send_cq, sends, recvs);
  if (auto why = check("send ", *l.send_cq, sends, 0); !why.empty()) return why;
  return check("receive ", *l.recv_cq, 0, recvs);
}

// Puts a fresh INIT QP with `p`'s PD, CQs, SRQ, capacities and options in `p`'s place
// and keeps the old one, retired, while it may still complete WRs: a chain of every
// generation whose receives or signaled sends are not all polled (the others go at the
// next replacement). The caller pruned the chain and checked the room first
// (prune_retired, no_room_for_replacement), while `p` could still be left as it was. If
// the new QP cannot be made, `p` is left empty and the error goes on.
template <class B, class T, class S>
void replace_with_fresh(qp_parts<B>& p) {
  // What the successor is made from, taken first: retire() may release the old QP's
  // PD, CQs and SRQ with it.
  auto pd = p.pd;
  auto scq = p.scq;
  auto rcq = p.rcq;
  // What may run out of memory before the old QP changes comes first, then the move to
  // ERR, which changes nothing when it does (retire): until the old QP is in ERR, a
  // failure leaves `p` as it was.
  scq->retired_links.reserve(scq->retired_links.size() + 1);  // retire() allocates nothing of its own
  rcq->retired_links.reserve(rcq->retired_links.size() + 1);
  const qp_cap asked = p.asked;
  const qp_options o = p.opts;
  auto old = make_unique_owner<qp_parts<B>>();
  *old = std::move(p);
  auto older = std::move(old->retired);
  auto retire_or_put_back = [&](bool srq_receives) {
    try {
      retire(*old, srq_receives, !T::needs_ah);  // first: the CQs' reservations go back before the new QP asks for them
    } catch (...) {
      old->retired = std::move(older);
      p = std::move(*old);
      throw;
    }
  };
  if constexpr (shares_receives<T>) {  // (naming the SRQ otherwise instantiates srq_state for backends without)
    auto srq = old->srq;
    // The SRQ's share of the receive CQ is held across: the new QP takes over what the
    // SRQ may have completed there (released alone, the old QP would hold it apart).
    const void* const id = old->srq_id;
    const std::uint32_t old_qpn = old->link->qp_num, old_offset = old->link->recv_offset;
    const auto held_owner = rcq;  // alive whatever create_parts does with rcq
    auto& held_by = *held_owner;
    held_by.attach_srq(id, srq->attr.max_wr);  // attached already: a count, no allocation
    try {
      retire_or_put_back(srq->traffic.ever_posted());
    } catch (...) {
      held_by.detach_srq(id, old_qpn, old_offset, false);  // the old QP's own count stays
      throw;
    }
    try {
      p = create_parts<B, T, S>(std::move(pd), std::move(scq), std::move(rcq), asked, o, srq);
    } catch (...) {
      held_by.detach_srq(id, old_qpn, old_offset, srq->traffic.ever_posted());
      throw;
    }
    held_by.detach_srq(id, old_qpn, old_offset, false);  // the new QP holds it now
  } else {
    retire_or_put_back(false);
    p = create_parts<B, T, S>(std::move(pd), std::move(scq), std::move(rcq), asked, o);
  }
  if (old->qp != typename B::qp{}) {
    old->retired = std::move(older);
    p.retired = std::move(old);
  } else {
    p.retired = std::move(older);
  }
}

// How each note of to_rts_or_back_to_init starts: a qp_pool, which destroys every
// queue pair when one is refused, cuts the queue pair's own advice off there.
inline constexpr std::string_view back_to_init_note = "; the queue pair ";

// What became of a queue pair whose RTR→RTS failed (take_back_to_init).
struct taken_back {
  enum { reset_in_place, replaced, moved_to_err, stuck, emptied } how;
  std::uint32_t posted, old_qpn;
  std::exception_ptr failure;  // stuck, emptied: why the QP could not be taken back
};

// Whether a new queue pair fits in the CQs beside `p`'s outstanding WRs (what
// no_room_for_replacement explains when it does not), with the room busy CQs' polls gave
// back taken first, as create_qp takes it. Allocates nothing.
template <class B>
bool replacement_fits(const qp_parts<B>& p) noexcept {
  const auto& l = *p.link;
  l.send_cq->forget_drained();
  l.recv_cq->forget_drained();
  const std::uint64_t sends = l.sends_to_come(), recvs = l.rq.held;
  auto fits = [](const cq_block<B>& c, std::uint64_t n) {
    return c.reserved + c.flushing + n <= static_cast<std::uint64_t>(c.capacity);
  };
  if (l.send_cq == l.recv_cq) return fits(*l.send_cq, sends + recvs);
  return fits(*l.send_cq, sends) && fits(*l.recv_cq, recvs);
}

// Takes a queue pair whose RTR→RTS failed back to INIT, so that its type and the device
// agree. Without receives posted that is RESET→INIT in place. With receives, a message
// may have taken one in RTR, and its completion comes after the RESET, which forgets the
// rest unseen: then the QP is replaced as reset() replaces it, and every receive
// completes on the old QP number, a flush unless a message took it (or, when the CQ has
// no room for a new QP beside them, the QP goes to ERR and they complete there). Decides
// nothing by allocating: it runs as well for a failure that was out of memory.
template <class B, class T, class S>
taken_back take_back_to_init(qp_parts<B>& p) noexcept {
  taken_back t{taken_back::stuck, p.link->rq.held, p.link->qp_num, {}};
  p.link->send_cq->forget_drained();  // as reset(): what drained polls proved lets old queue pairs go
  p.link->recv_cq->forget_drained();
  prune_retired(p.retired);
  try {
    if (t.posted == 0) {
      qp_attr r;
      r.state = qp_state::reset;
      B::modify_qp(p.qp, r, qp_attr_mask::state);
      B::modify_qp(p.qp, T::init_attr(p.opts), T::init_mask);
      t.how = taken_back::reset_in_place;
    } else if (replacement_fits(p)) {
      replace_with_fresh<B, T, S>(p);
      t.how = taken_back::replaced;
    } else {
      qp_attr err;
      err.state = qp_state::err;
      B::modify_qp(p.qp, err, qp_attr_mask::state);
      p.link->set_error();
      t.how = taken_back::moved_to_err;
    }
  } catch (...) {
    t.failure = std::current_exception();
    if (p.qp != typename B::qp{}) {
      p.link->set_error();
      t.how = taken_back::stuck;
    } else {
      t.how = taken_back::emptied;
    }
  }
  return t;
}

// Rethrows RTR→RTS's refusal `e` with what take_back_to_init did (`t`) added to its
// detail; `new_qpn`: the queue pair's number now (a replacement's). Not a template: the
// text is compiled once for every backend and transport.
[[noreturn]] void throw_taken_back(const verbs_error& e, const taken_back& t, std::uint32_t new_qpn, const char* call);

// RTR→RTS, or back to INIT (take_back_to_init) and the refusal rethrown saying what
// became of the queue pair. A failure that is not the device's refusal (out of memory
// while the refusal was put in words, or while the device moved) takes it back all the
// same and goes on as it was.
template <class B, class T, class S>
void to_rts_or_back_to_init(qp_parts<B>& p, const qp_attr& rts, const char* call) {
  try {
    modify_step<B, T>(p, rts, T::rts_mask, qp_state::rtr, "RTR→RTS");
  } catch (const verbs_error& e) {
    const taken_back t = take_back_to_init<B, T, S>(p);
    throw_taken_back(e, t, p.link->qp_num, call);
  } catch (...) {
    (void)take_back_to_init<B, T, S>(p);
    throw;
  }
}

// The device refused send WR `wr` (after `posted` were taken): which rule it broke,
// read back from the WR itself. Out of line: the success path pays nothing for it.
template <class B>
RDMAKIT_NOINLINE post_result refused_send(const qp_cap& caps, int e, std::uint32_t posted,
                                          const typename B::send_wr* wr) noexcept {
  post_result r{post_status::backend_error, e, posted};
  if (e != EINVAL || !wr) return r;
  const send_wr_facts f = B::describe_send(*wr);
  const bool atomic = f.op == opcode::atomic_cmp_and_swp || f.op == opcode::atomic_fetch_and_add;
  if (static_cast<std::uint32_t>(f.num_sge) > caps.max_send_sge)
    r.rule = post_rule::sge_count;
  else if (atomic && f.length != 8)
    r.rule = post_rule::atomic_length;
  else if (atomic && f.remote_addr % 8 != 0)
    r.rule = post_rule::atomic_alignment;
  else if (f.length > max_message_bytes)
    r.rule = post_rule::message_size;
  else if (has_any(f.flags, send_flags::inline_data) && (atomic || f.op == opcode::rdma_read))
    r.rule = post_rule::inline_op;
  else if (has_any(f.flags, send_flags::inline_data) && f.length > caps.max_inline_data)
    r.rule = post_rule::inline_size;
  return r;
}

}  // namespace detail

RDMAKIT_END_NAMESPACE

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/qp_setup_impl.hpp>
#endif

// Separate compilation: the shipped backends' cold instantiations are their src.hpp's
// (detail/backend_instances.hpp says which, and why here or in the backend's header).
#if defined(RDMAKIT_SEPARATE_COMPILATION) && !defined(RDMAKIT_COMPILING_SOURCES)
#include <rdmakit/detail/backend_instances.hpp>
#define RDMAKIT_BACKEND_TEMPLATES_DEFINED
#if defined(RDMAKIT_BACKENDS_MOCK_INCLUDED)
RDMAKIT_BACKEND_INSTANCES(extern, ::rdmakit::backends::mock);
#endif
#if defined(RDMAKIT_BACKENDS_IBVERBS_INCLUDED)
RDMAKIT_BACKEND_INSTANCES(extern, ::rdmakit::backends::ibverbs);
#endif
#endif
