#pragma once
// The state a completion queue shares with the queue pairs attached to it: routing by
// qp_num, send/receive credit accounting, CQ capacity accounting, per-QP handlers.
// Both live on the heap so the RAII handles stay movable while pointers stay valid.
#include <rdmakit/backend.hpp>
#include <rdmakit/completion.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/reserve_room.hpp>
#include <rdmakit/detail/thread.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/signaling.hpp>

#include <bit>
#include <cassert>
#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class B>
struct cq_block;
template <class B>
struct batch_frame;

/// The rkey a peer's SEND_WITH_INV names when `w` is its receive (0 when not): a
/// successful receive without immediate data (the field holds the rkey then). Not told
/// by wc_flags::with_inv: rxe 6.1 does not set it (semantics.md §13, mw.recv_with_inv_flag).
template <class B>
std::uint32_t invalidated_by_peer(const typename B::wc& w) noexcept {
  if constexpr (mw_backend<B>) {
    if (B::get_status(w) == wc_status::success && (B::get_wr_id(w) & recv_wr_bit) != 0 &&
        !has_any(B::get_wc_flags(w), wc_flags::with_imm))
      return B::get_invalidated_rkey(w);
  }
  return 0;
}

template <class B>
struct qp_link {
  std::uint32_t qp_num = 0;
  std::uint32_t recv_offset = 0;
  sq_credits sq;
  std::uint32_t rq_depth = 0;
  // rq_depth until the QP goes to ERR, 0 then and on the closed link of an empty handle:
  // post_recv's one test of room refuses those too (recv_refusal_ tells them apart).
  std::uint32_t rq_open_depth = 0;
  // The receives posted and not completed, and whether they are counted here, side by
  // side: may_receive_on reads both with one load.
  struct rq_count {
    std::uint32_t held = 0;
    // 1 on a shared receive queue: its receives are not this QP's to count.
    std::uint32_t shared = 0;
    // 1, or 0 on a shared receive queue (a factor, so the batch path stays branch-free).
    std::uint32_t own() const noexcept { return shared ^ 1; }
  };
  rq_count rq;
  bool error = false;
  // False in ERR and for a queue pair made without send slots (max_send_wr 0): the one
  // test by which a post refused for credits says sq_full (refusal_ tells the others).
  bool sends_possible = true;
  // An async_queue_pair holds this QP: its handler (the async one's) routes completions
  // to the awaiters, and completion_queue::on() refuses to replace it.
  bool async_owned = false;
  wc_status first_error = wc_status::success;
  cq_block<B>* send_cq = nullptr;
  cq_block<B>* recv_cq = nullptr;
  void (*handler)(void*, const completion<B>&) = nullptr;
  void* handler_ctx = nullptr;
  void (*handler_free)(void*) = nullptr;
  // The CQ whose on() set the handler: one handler takes the completions of both CQs, so
  // on() through the other one is refused (it would silently replace it for both).
  const cq_block<B>* handler_cq = nullptr;
  // While dispatch runs the handler: where to say it was dropped (replaced, or its
  // queue pair destroyed) during its own call, which then frees it once it returns.
  bool* handler_dropped = nullptr;
  // Once replaced by reset() (retired, in ERR): the completions it may still put in its
  // send and receive CQs (each CQ's `flushing` holds them), and how many of its sends
  // were signaled and not polled (each of those completes for certain). Read and
  // written off the data path only: a retired QP's completions are routed apart.
  std::uint32_t retired_sends = 0;
  std::uint32_t retired_recvs = 0;
  std::uint32_t retired_signaled = 0;
  // Once replaced on an SRQ that was posted to: receive completions of it may be in its
  // receive CQ, which no count knows (the receives are the SRQ's), until a poll finds
  // that CQ empty (cq_block::forget_departed) or drains it (fewer than it asked:
  // forget_drained, by `srq_retired_at`, the CQ's `drains` at the retire), the QP being
  // in ERR by then.
  bool retired_srq_receives = false;
  std::uint64_t srq_retired_at = 0;
  // Once replaced with unsignaled sends out (selective signaling): a flush does not say
  // whether its WR was signaled, and those of unsignaled WRs come first, so no count
  // tells when the signaled ones' came; and an unsignaled WR that completed unseen never
  // flushes. Until its drain marker is polled (cq_block::drained) or, without one, a poll
  // finds its send CQ empty past drain_deadline (forget_departed).
  bool retired_unsure_sends = false;
  // How such a QP says when its last send completion came: a drain marker, a signaled WR
  // of no data posted in ERR after every other (the idea of Linux's ib_drain_sq). Send
  // completions come in SQ order, so once its flush is polled none of the QP's is left
  // (a poll finding the CQ empty proves nothing: a device writes flushes after
  // modify_qp returns). `none`: no marker (UD has no address for it, or the device
  // refused it): a poll finding the CQ empty decides instead, the first one past
  // `drain_deadline` (drain_grace after the reset), by when the device wrote the flushes.
  // A marker not polled by then (rxe 6.1 sometimes never completes a WR posted in ERR)
  // is given up the same way.
  enum class drain : std::uint8_t { none, posted, waits_for_slot };
  drain drain_marker = drain::none;
  typename B::qp native_qp{};  // the retired QP, to post the marker once a slot is free
  std::chrono::steady_clock::time_point drain_deadline{};
  // Failed send completions polled (the failure and the flushes after it): they give
  // no slot back (the ledger is closed), but are completions no longer to come.
  std::uint32_t send_errors = 0;
  // This native QP's number among every QP the process made (next_qp_serial): 0 on the
  // closed link. A type 2 memory window names the QP it was bound through by it (a
  // pointer or a qp_num may come back for another QP).
  std::uint64_t serial = 0;

  /// Send completions this QP may still put in its send CQ once in ERR: every WR
  /// holding a slot, less the failed ones polled (an overestimate under selective
  /// signaling: an unsignaled WR may have completed unseen).
  std::uint32_t sends_to_come() const noexcept {
    const std::uint32_t h = sq.held();
    return h > send_errors ? h - send_errors : 0;
  }
  /// Of those, the ones that certainly come: the signaled WRs not polled yet.
  std::uint32_t signaled_to_come() const noexcept {
    const std::uint32_t s = sq.pending_signaled();
    return s > send_errors ? s - send_errors : 0;
  }
  /// Whether its receives and signaled sends were polled, and a poll found its CQ empty
  /// where no count can tell (SRQ receives, unsignaled sends): the next replacement may
  /// then let it go.
  bool retired_done() const noexcept {
    return retired_recvs == 0 && retired_signaled == 0 && !retired_srq_receives && !retired_unsure_sends;
  }

  qp_link() = default;
  /// The closed link (closed_link<B>): in error, so the inline refusal path tells a
  /// full SQ from every other refusal with one test.
  struct closed_t {};
  constexpr explicit qp_link(closed_t) noexcept : error(true), sends_possible(false) {}
  qp_link(const qp_link&) = delete;
  qp_link& operator=(const qp_link&) = delete;
  ~qp_link() { reset_handler(); }

  /// The QP went to ERR: posts are refused (qp_error) until it is reset.
  void set_error() noexcept {
    error = true;
    sends_possible = false;
    rq_open_depth = 0;
    sq.close();
  }

  void reset_handler() noexcept {
    if (handler_dropped)
      *std::exchange(handler_dropped, nullptr) = true;  // running: freed by its dispatch
    else if (handler_free)
      handler_free(handler_ctx);
    handler = nullptr;
    handler_ctx = nullptr;
    handler_free = nullptr;
    handler_cq = nullptr;
  }

  /// Whether a completion on `cq` may be one of this QP's receives: its receives go
  /// there and some are posted (or come from a shared receive queue, not counted here).
  bool may_receive_on(const cq_block<B>* cq) const noexcept {
    // A receive held, or a shared queue; tested first: a sender's polls stop there.
    return std::bit_cast<std::uint64_t>(rq) != 0 && recv_cq == cq;
  }

  /// n successful completions of this QP, `recvs` of them receives (any order: each
  /// send completion frees the oldest signaled WR's slots, as account() would).
  RDMAKIT_ALWAYS_INLINE void on_polled_batch(std::uint32_t n, std::uint32_t recvs) noexcept {
    if (recvs != 0) rq.held -= recvs * rq.own();  // a sender's polls find none
    sq.on_signaled_completions(n - recvs);
  }

  RDMAKIT_ALWAYS_INLINE void account(const typename B::wc& w) noexcept {
    const bool recv = (B::get_wr_id(w) & recv_wr_bit) != 0;
    if (RDMAKIT_LIKELY(B::get_status(w) == wc_status::success)) {
      if (recv)
        rq.held -= rq.own();
      else
        sq.on_signaled_completion();
    } else if (recv && recv_offset != 0 && B::get_status(w) == wc_status::loc_len_err) {
      // UD (the only transport with a receive offset): a datagram too large for its
      // receive costs that receive, not the QP, which stays in RTS (docs/semantics.md#ud).
      rq.held -= rq.own();
    } else {
      set_error();
      // The root cause, not a flush it caused: with separate send and receive CQs the
      // flushed receives may be polled before the failed send.
      const wc_status st = B::get_status(w);
      if (first_error == wc_status::success ||
          (first_error == wc_status::wr_flush_err && st != wc_status::wr_flush_err))
        first_error = st;
      if (recv) {
        if (rq.held) --rq.held;
      } else {
        ++send_errors;
      }
    }
  }
};

/// How long a drain marker may take (qp_link::drain): a device writes flushes within
/// microseconds of the move to ERR, or never (rxe 6.1, for a WR posted in ERR).
inline constexpr std::chrono::seconds drain_grace{1};

/// Posts the drain marker of retired QP `l` (qp_link::drain), whose entry is counted in
/// its retired_sends and its send CQ's `flushing`. A full SQ (ENOMEM): again when a send
/// completion of `l` gives a slot back (cq_block::retired_polled). Refused otherwise: no
/// marker comes, and a poll that finds the send CQ empty past the deadline decides instead.
template <class B>
void post_drain_marker(qp_link<B>& l) noexcept {
  typename B::send_wr w{};
  B::set_send(w, drain_wr_id, opcode::send, send_flags::signaled, nullptr, 0);
  typename B::send_wr* bad = nullptr;
  const int e = B::post_send(l.native_qp, &w, &bad);
  if (e == 0) {
    l.drain_marker = qp_link<B>::drain::posted;
  } else if (e == ENOMEM) {
    l.drain_marker = qp_link<B>::drain::waits_for_slot;
  } else {
    l.drain_marker = qp_link<B>::drain::none;
    if (l.retired_sends) --l.retired_sends;
    if (l.send_cq->flushing) --l.send_cq->flushing;
    l.send_cq->watch(true);
  }
}

/// The last serial given to a native QP of the process (next_qp_serial).
inline constinit std::uint64_t qp_serial_counter = 0;
/// A number no other native QP of the process had: set on each qp_link (a reset() makes
/// a new QP, hence a new link and number).
inline std::uint64_t next_qp_serial() noexcept { return __atomic_add_fetch(&qp_serial_counter, 1, __ATOMIC_RELAXED); }
/// The last serial given: a link of a larger one was made after this call.
inline std::uint64_t last_qp_serial() noexcept { return __atomic_load_n(&qp_serial_counter, __ATOMIC_RELAXED); }

// The link every empty link_ptr points at: constant-initialized at namespace scope,
// so using it costs no guard (a function-local static with a destructor would test one).
template <class B>
inline constinit qp_link<B> closed_link{typename qp_link<B>::closed_t{}};

// Owns a queue pair's qp_link. Empty, it points at a shared closed link (no credit, in
// error, never attached to a CQ, never written): the post path reads the credits through it
// without a separate test for an empty handle, and only the refusal looks closer.
template <class B>
class link_ptr {
 public:
  link_ptr() noexcept = default;
  static link_ptr make() { return link_ptr(new qp_link<B>()); }
  link_ptr(link_ptr&& o) noexcept : p_(std::exchange(o.p_, closed())) {}
  link_ptr& operator=(link_ptr&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, closed());
    }
    return *this;
  }
  ~link_ptr() { reset(); }

  void reset() noexcept {
    if (p_ != closed()) delete std::exchange(p_, closed());
  }
  RDMAKIT_ALWAYS_INLINE explicit operator bool() const noexcept { return p_ != closed(); }
  /// The link, or null when empty.
  qp_link<B>* get() const noexcept { return p_ != closed() ? p_ : nullptr; }
  /// The link, or the closed one when empty: only for reading the credits.
  RDMAKIT_ALWAYS_INLINE qp_link<B>& operator*() const noexcept { return *p_; }
  qp_link<B>* operator->() const noexcept { return p_; }

 private:
  explicit link_ptr(qp_link<B>* p) noexcept : p_(p) {}
  RDMAKIT_ALWAYS_INLINE static qp_link<B>* closed() noexcept { return &closed_link<B>; }
  qp_link<B>* p_ = closed();
};

// Whether a native QP that a type 2 memory window keeps (qp_native_hold) is not
// destroyed yet: its CQs' records of it (cq_block::departed) read it, the hold clears it
// once it has destroyed the QP, on whatever thread frees the last such window.
struct native_qp_kept {
  bool alive_ = true;  // __atomic builtins
  bool alive() const noexcept { return __atomic_load_n(&alive_, __ATOMIC_ACQUIRE); }
  void destroyed() noexcept { __atomic_store_n(&alive_, false, __ATOMIC_RELEASE); }
};

// Owned by the completion_queue handle and by every queue pair attached to it: the
// native CQ is destroyed when the last of them goes, after its QPs.
template <class B>
struct cq_block {
  device_ref<B> dev;
  typename B::cq cq{};
  typename B::channel channel{};
  int capacity = 0;
  std::uint64_t reserved = 0;  // entries promised to attached QPs
  // Entries the retired QPs (replaced by reset(), in ERR) may still complete into,
  // counted apart from `reserved`. Never more than capacity with it: a queue pair (or a
  // replacement) that does not fit beside both is refused (check_cq_room,
  // no_room_for_replacement), and a retired QP's share shrinks as its completions are
  // polled (find_retired).
  std::uint64_t flushing = 0;
  // Destroyed QPs whose completions may still be here: a device that does not clean
  // them out at destroy_qp (rxe) returns them to later polls. Each one's `left` entries
  // are counted in `flushing` until polled (departed_polled) or until a poll finds the
  // CQ empty (forget_departed): none of them can be here after that. Its room is made
  // when a QP or an SRQ attaches (keep_departed_room_), as each may leave one record when
  // it goes: a destroy cannot fail, and letting the room go would let the CQ overrun.
  // A UD QP's record keeps its receives' payload offset (the GRH's 40 bytes), also once
  // `left` is 0 (an SRQ's receives hold their room apart): its receive completions polled
  // later still have their payload where it is.
  // A record whose QP a type 2 memory window keeps (`kept`: qp_native_hold) proves
  // nothing by an empty poll until that QP was seen destroyed before the poll: it is in
  // ERR, and its WRs flush here later (waits_for_native_qp).
  // A record goes too once a poll that drained the CQ (returned fewer than it asked)
  // came after its departure (`drained_at` below `drains`) and no batch is still being
  // delivered (forget_drained, at the next create_qp or reset()): a CQ that is never found
  // empty, a busy server's, still gets the room back.
  // An async_queue_pair's record (`async_sends`, `async_receives`: not its SRQ's) drops
  // the completions of its WRs: they are the async layer's, whose awaiters were
  // cancelled, never the polling call's (docs/coroutines.md); kept for that while the CQ
  // may still hold them, also once `left` is 0 (a batch being delivered counted them).
  struct departed_qp {
    std::uint32_t qpn;
    std::uint32_t left;
    std::uint32_t recv_offset;
    shared_owner<native_qp_kept> kept;
    std::uint64_t drained_at;  // `drains` at the departure
    bool async_sends = false;
    bool async_receives = false;
    /// Whether the record still waits for its kept native QP: while it lives, and once
    /// more when first seen gone, stamped `now` (a poll before that proves nothing of
    /// the flushes it wrote until then: audit 29).
    bool waits_for_native_qp(std::uint64_t now) noexcept {
      if (!kept) return false;
      if (!kept->alive()) {
        kept.reset();
        drained_at = now;
      }
      return true;
    }
  };
  /// What departed_polled found of a completion's queue pair.
  struct departed_hit {
    std::uint32_t recv_offset;  // where its receive payloads start (0 when not known)
    bool dropped;               // an async_queue_pair's: given to no call, counted by none
  };
  std::vector<departed_qp> departed;
  std::uint64_t drains = 0;  // polls that drained the CQ while watched
  // Watched while something waits for a poll that finds this CQ empty: a departed
  // record, or a retired QP's SRQ receives (forget_departed ends it; at most one call
  // too many). Kept as the poll's floor, 1 or above any poll's count while watched: the
  // poll's one test `n < poll_floor` is its test for nothing polled and, while watched,
  // for a batch short of what it asked (a poll that drained the CQ), at no extra cost.
  int poll_floor = 1;
  void watch(bool on) noexcept { poll_floor = on ? 0x7fffffff : 1; }
  bool watched() const noexcept { return poll_floor != 1; }
  std::vector<std::pair<std::uint32_t, qp_link<B>*>> routes;  // live QPs, sorted by qp_num
  // Retired QPs (reset() replaced them): found only when `routes` has no match, so the
  // live routing pays nothing for them; never cached as `last`.
  std::vector<qp_link<B>*> retired_links;
  qp_link<B>* last = nullptr;
  std::uint32_t last_qpn = no_qpn;  // last's qp_num, kept here: one compare per completion
  // last's serial (0: none): a batch delivered to user code tells its queue pair's link
  // by it, not by address, which a link made meanwhile may have taken.
  std::uint64_t last_serial = 0;
  // The serial of the queue pair whose batch, accounted whole, is being delivered to user
  // code (0: none): reset() keeps that queue pair for the batch's rest (retire).
  std::uint64_t batch_serial = 0;
  // True while exactly one QP was ever attached and it was never retired or detached:
  // every completion polled here is then `last`'s (no other QP can have left any).
  bool sole = false;
  bool had_others = false;  // a second QP, a detach or a retire was seen: never sole again
  static constexpr std::uint32_t no_qpn = ~std::uint32_t{0};  // QP numbers have 24 bits
  unsigned unacked = 0;
  bool armed = false;
  std::uint64_t unrouted = 0;
  // Shared receive queues whose QPs complete receives here: each one's max_wr is
  // reserved once, however many of its QPs are attached.
  struct srq_use {
    const void* id;
    std::uint32_t max_wr;
    std::uint32_t qps;
  };
  std::vector<srq_use> srqs;

  // Deliveries to user handlers in progress (nested ones counted), and the count of
  // this block when its last owner went during one: a handler may drop the CQ it runs
  // from (reassign or move its handle, destroy its queue pairs); the block is then
  // destroyed when the outermost delivery ends (cq_delivery).
  unsigned delivering = 0;
  shared_count* doomed = nullptr;
  // Its completion_queue handle went while queue pairs still hold it: nothing polls it
  // again, so their posts are refused (cq_gone) rather than wait for credits.
  bool poller_gone = false;
  // Set, on the CQ's thread, once a type 2 window's qp_native_hold owns this block: the
  // window may be freed on any thread, and drop the last owner while a delivery runs
  // here (audit 31). Then the destroyer marks `delivering` with doomed_bit and the
  // deliveries' ends decrement it, each one atomic step: the side that sees the other's
  // (the doomed bit with no delivery left) destroys the block, and no side touches it
  // after its step otherwise. Other blocks keep plain fields.
  bool owned_across_threads = false;
  // The thread inside a wait on this CQ past its first poll (completion_queue's
  // waiting_), else null; read and written with __atomic builtins. A CQ and its queue
  // pairs are used by one thread at a time (docs/ownership-and-threads.md): while one
  // waits, another thread's create_qp, reset() or on() on it is refused, its queue pair's
  // destructor ends the program, and its own wait answers EBUSY, rather than change the
  // routes and room the waiter's polls read.
  const void* waiter = nullptr;
  bool waited_on_elsewhere() const noexcept {
    const void* w = __atomic_load_n(&waiter, __ATOMIC_ACQUIRE);
    return w != nullptr && w != this_thread_tag();
  }
  static constexpr unsigned doomed_bit = 1u << 31;
  // Routed batches being delivered (batch_frame), innermost first.
  batch_frame<B>* frames = nullptr;

  /// Whether a batch being delivered still holds a completion of QP `qpn` (not yet given).
  bool holds_undelivered(std::uint32_t qpn) const noexcept {
    for (const batch_frame<B>* f = frames; f; f = f->outer)
      for (int j = *f->at + 1; j < f->n; ++j)
        if (B::get_qp_num(f->wcs[j]) == qpn) return true;
    return false;
  }

  cq_block() = default;
  cq_block(const cq_block&) = delete;
  cq_block& operator=(const cq_block&) = delete;
  /// shared_block's destroyer asks first: kept (and destroyed by cq_delivery) while a
  /// handler runs.
  bool keep_while_delivering(shared_count* c) noexcept {
    if (!owned_across_threads) {
      if (delivering == 0) return false;
      doomed = c;
      return true;
    }
    doomed = c;  // (published by the step below)
    return (__atomic_fetch_or(&delivering, doomed_bit, __ATOMIC_ACQ_REL) & ~doomed_bit) != 0;
  }
  ~cq_block() {
    if (unacked && cq != typename B::cq{}) B::ack_cq_events(cq, unacked);
    if (cq != typename B::cq{}) B::destroy_cq(cq);
    if (channel != typename B::channel{}) B::destroy_comp_channel(channel);
  }

  RDMAKIT_ALWAYS_INLINE qp_link<B>* find(std::uint32_t qpn) noexcept {
    if (RDMAKIT_LIKELY(qpn == last_qpn)) return last;
    return route(qpn);
  }

  /// find() past its one-entry cache: the live route of QP `qpn`, cached as `last` (an
  /// async_queue_pair's never is), or null. Where completions of a few queue pairs
  /// interleave (a shared CQ), each is found inline in route_slots, a direct-mapped cache
  /// by the QP number's low bits (QP numbers of a process are mostly consecutive); a miss
  /// searches `routes` out of line (find_route) and fills the slot.
  RDMAKIT_ALWAYS_INLINE qp_link<B>* route(std::uint32_t qpn) noexcept {
    const route_slot& s = route_slots[qpn & (route_slot_count - 1)];
    if (RDMAKIT_LIKELY(s.qpn == qpn)) {
      // Never an async_queue_pair's (find_route does not fill a slot with one).
      last_qpn = qpn;
      last_serial = s.link->serial;
      return last = s.link;
    }
    return find_route(qpn);
  }

  /// The receive completions among wcs[0..n) when every one of them is a success of
  /// the queue pair the previous completion was for (find()'s cache); -1 otherwise.
  /// Branch-free over the batch: a bandwidth loop's polls then cost no routing or
  /// per-completion accounting (on_polled_batch gives the credits back at once).
  template <std::size_t Batch>
  RDMAKIT_ALWAYS_INLINE int receives_if_all_of_last(const typename B::wc (&wcs)[Batch], int n) const noexcept {
    if (sole && !last->may_receive_on(this)) {
      // One QP, no receive of it can be here: only the statuses need a look. Four at a
      // time (a full batch is a multiple of four): GCC does not unroll at -O2, and one
      // compare and branch per four completions saves two instructions per completion.
      std::uint32_t failed = 0;
      int i = 0;
      if constexpr (Batch >= 4)  // (a smaller batch has no room for four: GCC warns of the reads)
        for (; i + 4 <= n; i += 4)
          failed |= status_bits_(wcs[i]) | status_bits_(wcs[i + 1]) | status_bits_(wcs[i + 2]) |
                    status_bits_(wcs[i + 3]);
      for (; i < n; ++i) failed |= status_bits_(wcs[i]);
      return failed == 0 ? 0 : -1;
    }
    std::uint64_t odd = 0;
    std::uint32_t recvs = 0;
    if (sole) {
      // One QP, which receives here: every completion is its own (no QP number to
      // compare); the statuses and the receives, four at a time as above.
      int i = 0;
      if constexpr (Batch >= 4)
        for (; i + 4 <= n; i += 4) {
          odd |= status_bits_(wcs[i]) | status_bits_(wcs[i + 1]) | status_bits_(wcs[i + 2]) | status_bits_(wcs[i + 3]);
          recvs += receive_bit_(wcs[i]) + receive_bit_(wcs[i + 1]) + receive_bit_(wcs[i + 2]) + receive_bit_(wcs[i + 3]);
        }
      for (; i < n; ++i) {
        odd |= status_bits_(wcs[i]);
        recvs += receive_bit_(wcs[i]);
      }
    } else {
      // Completions of several queue pairs interleave on a shared CQ: a batch whose first
      // or last is another's is routed without the pass below (n >= 1).
      if (RDMAKIT_UNLIKELY((B::get_qp_num(wcs[0]) ^ last_qpn) | (B::get_qp_num(wcs[n - 1]) ^ last_qpn))) return -1;
      for (int i = 0; i < n; ++i) {
        odd |= static_cast<std::uint64_t>(B::get_status(wcs[i])) | (B::get_qp_num(wcs[i]) ^ last_qpn);
        recvs += static_cast<std::uint32_t>(B::get_wr_id(wcs[i]) >> 63);
      }
    }
    if constexpr (mw_backend<B>) {
      // Receives while a type 2 window of the device is bound: one by one, so that a
      // peer's invalidation among them is noted (note_invalidation).
      if (recvs != 0 && RDMAKIT_UNLIKELY(dev->windows.watched())) return -1;
    }
    return odd == 0 ? static_cast<int>(recvs) : -1;
  }

  /// Notes a peer's SEND_WITH_INV among this CQ's completions for the device's type 2
  /// windows (peer_invalidations), while one is bound: memory_window::invalidate then
  /// refuses the window it invalidated. Every completion polled comes here, whatever
  /// queue pair it names.
  RDMAKIT_ALWAYS_INLINE void note_invalidation(const typename B::wc& w) const noexcept {
    if constexpr (mw_backend<B>) {
      if (RDMAKIT_UNLIKELY(dev->windows.watched())) note_invalidation_(w);
    }
  }

  static RDMAKIT_ALWAYS_INLINE std::uint32_t status_bits_(const typename B::wc& w) noexcept {
    return static_cast<std::uint32_t>(B::get_status(w));  // 0: success
  }
  // 1 for a receive's completion (recv_wr_bit in its wr_id), 0 for a send's.
  static RDMAKIT_ALWAYS_INLINE std::uint32_t receive_bit_(const typename B::wc& w) noexcept {
    return static_cast<std::uint32_t>(B::get_wr_id(w) >> 63);
  }

  RDMAKIT_NOINLINE void note_invalidation_(const typename B::wc& w) const noexcept {
    dev->windows.note(invalidated_by_peer<B>(w));
  }

  /// find() past its one-entry cache: the routes, searched; null when none matches.
  // Not cold: with more queue pairs interleaving than route_slots holds, every completion
  // comes here.
  RDMAKIT_OUT_OF_LINE qp_link<B>* find_route(std::uint32_t qpn) noexcept {
    auto it = std::lower_bound(routes.begin(), routes.end(), qpn,
                               [](const auto& r, std::uint32_t n) { return r.first < n; });
    if (it == routes.end() || it->first != qpn) return nullptr;
    qp_link<B>* const l = it->second;
    if (RDMAKIT_UNLIKELY(l->async_owned)) return l;  // (never cached: see stop_caching)
    route_slots[qpn & (route_slot_count - 1)] = {qpn, l};
    last_qpn = qpn;
    last_serial = l->serial;
    return last = l;
  }

  // route()'s cache: live, not async routes only, each in the slot of its number's low
  // bits. Emptied whenever `routes` loses or gains one, or a link stops being cached,
  // so a slot never names a link that is gone, retired or another QP's.
  struct route_slot {
    std::uint32_t qpn = no_qpn;
    qp_link<B>* link = nullptr;
  };
  // A power of two; 32: a server's CQ shared by 16 queue pairs routed every completion
  // through find_route with 8 (bench/overhead_paths' shared_rx/16: 1.94 against 1.43).
  static constexpr std::size_t route_slot_count = 32;
  route_slot route_slots[route_slot_count];
  void forget_route_slots_() noexcept {
    for (auto& s : route_slots) s = route_slot{};
  }

  /// `l` became an async_queue_pair's: its completions no longer take the fast path of
  /// `last` (which hands them to whatever call polled), but the routed one, which gives
  /// them to its handler, the async layer's, whichever call polls (completion_queue::
  /// deliver_). Not cached from now on, and this CQ is never `sole` again.
  void stop_caching(const qp_link<B>* l) noexcept {
    forget_route_slots_();
    if (last == l) {
      last = nullptr;
      last_qpn = no_qpn;
      last_serial = 0;
    }
    sole = false;
    had_others = true;
  }

  /// Attaches `l` with its `entries`; a throw (out of memory) changes nothing, and the
  /// caller then does not name this CQ in the link (its destruction detaches nothing).
  void attach(qp_link<B>* l, std::uint32_t entries);

  /// Live queue pairs attached (retired ones excluded).
  std::size_t live() const noexcept { return routes.size(); }

  /// Whether a queue pair numbered `qpn` is attached here, live or retired by reset().
  /// Off the data path (the async layer asks about destroyed queue pairs' numbers).
  bool has_qp(std::uint32_t qpn) const noexcept { return serial_of(qpn) != 0; }
  /// The serial (next_qp_serial) of the queue pair numbered `qpn` attached here, live or
  /// retired; 0 when none is. Off the data path, as has_qp.
  std::uint64_t serial_of(std::uint32_t qpn) const noexcept;

  /// The retired QP numbered `qpn`, or null. Off the data path: only a completion whose
  /// qp_num no live route matches comes here.
  RDMAKIT_NOINLINE qp_link<B>* find_retired(std::uint32_t qpn) noexcept;
  /// A completion of retired QP `l` polled here (not one its batch accounted before
  /// `l` was retired): the entry it held is free again.
  RDMAKIT_NOINLINE void retired_polled(qp_link<B>& l, bool recv) noexcept;

  /// Retired QP `l`'s drain marker was polled here: every send completion of `l` came
  /// before it, so the room held for the rest (unsignaled WRs that completed unseen,
  /// which never flush) comes back, with the marker's own.
  RDMAKIT_NOINLINE void drained(qp_link<B>& l) noexcept;

  /// A completion of a destroyed QP polled here: the entry it held is free again, unless
  /// `counted` (its batch accounted it before the QP went, which left it out of `left`).
  /// Returns where that QP's receive payloads start (0 when it is not known here), and
  /// whether the completion is dropped (an async_queue_pair's; `recv`: a receive's).
  RDMAKIT_NOINLINE departed_hit departed_polled(std::uint32_t qpn, bool recv, bool counted = false) noexcept;
  /// A poll found the CQ empty: whatever the destroyed QPs left here was polled or was
  /// never there (a device that cleans the CQ at destroy_qp, or WRs that never completed).
  /// Retired QPs without a drain marker, or whose marker is overdue, are taken as done
  /// too (in ERR); those whose marker may still come keep this CQ watched. Not from a
  /// poll nested in a delivery (a handler's): the outer poll may hold completions of
  /// theirs not delivered yet, so the CQ's emptiness proves nothing; the next poll decides.
  RDMAKIT_NOINLINE void forget_departed() noexcept;

  /// The departed records a poll that drained this CQ came after (see departed): what
  /// they held was polled or was never there; so were the SRQ receives of the retired
  /// QPs such a poll came after (qp_link::retired_srq_receives). Not while a batch is being delivered (a
  /// handler's create_qp): the outer batch may hold their completions. Not the retired
  /// QPs', whose flushes a device may write after such a poll (forget_departed waits
  /// for a poll that finds nothing).
  // A record a window kept (`kept`) counts its drains from when its native QP is seen
  // gone: a drain before that proves nothing of the flushes the device wrote while it
  // lived (audit 29, F1), so a record found gone is stamped again, not erased.
  void forget_drained() noexcept;

  /// The completion_queue handle lets go: no poll comes again, and no credit with it.
  /// Its queue pairs' posts are refused from now on (their refusals say cq_gone): a
  /// completion of a WR posted now would never be seen, and the next sq_full's advice to
  /// poll could not be followed.
  void poller_goes() noexcept;

  /// `flushing` less what forget_drained would give back now (completion_queue::flushing()):
  /// a drained poll's room is free once no batch is being delivered, whether or not a
  /// create_qp has taken it back yet. (A kept record is counted: it may still wait.)
  std::uint64_t flushing_held() const noexcept;

  /// A QP moved to ERR by reset(): routed apart from now on, holding at most `flushes`
  /// entries here instead of the `entries` reserved for it. The caller made room in
  /// retired_links first (reserve), so nothing here allocates.
  void retire(qp_link<B>* l, std::uint32_t entries, std::uint32_t flushes) noexcept;

  /// The entries a QP of SRQ `id` adds here: its max_wr for the first one, then none.
  std::uint32_t srq_entries(const void* id, std::uint32_t max_wr) const noexcept {
    for (const auto& s : srqs)
      if (s.id == id) return 0;
    return max_wr;
  }
  void attach_srq(const void* id, std::uint32_t max_wr);
  /// Queue pair `qpn` of SRQ `id` was destroyed. With it the last of the SRQ's here, the
  /// SRQ's max_wr leaves reserved; if `may_have_completed` (the SRQ was posted to), it is
  /// held as a destroyed QP's completions are (see departed): the SRQ's queue pairs may
  /// have left up to max_wr receive completions in the CQ.
  void detach_srq(const void* id, std::uint32_t qpn, std::uint32_t recv_offset, bool may_have_completed) noexcept;

  // Room for one more record than the QPs and SRQs attached may leave (the one attaching).
  void keep_departed_room_();

  void hold_departed_(std::uint32_t qpn, std::uint32_t left, std::uint32_t recv_offset,
                      shared_owner<native_qp_kept> kept = {}, bool async_sends = false,
                      bool async_receives = false) noexcept;

  /// A destroyed QP: its `entries` (its depths, or once retired its flushes, which
  /// `flushing` holds) are let go, but for the `left` completions it may have left here
  /// (and, `srq_receives`, its SRQ's receive completions, whose room the SRQ holds).
  /// `kept`: a type 2 memory window keeps its native QP, in ERR, until it is destroyed.
  void detach(qp_link<B>* l, std::uint32_t entries, std::uint32_t left, bool was_retired, bool srq_receives = false,
              const shared_owner<native_qp_kept>& kept = {}) noexcept;
};

// cq_block's cold members, out of the class: an in-class member is inline, which an
// extern template does not keep a translation unit from compiling
// (detail/backend_instances.hpp: the shipped backends' are compiled once).

template <class B>
void cq_block<B>::attach(qp_link<B>* l, std::uint32_t entries) {
  keep_departed_room_();
  auto it = std::lower_bound(routes.begin(), routes.end(), l->qp_num,
                             [](const auto& r, std::uint32_t n) { return r.first < n; });
  if (it == routes.end() || it->first != l->qp_num) routes.insert(it, {l->qp_num, l});
  forget_route_slots_();
  reserved += entries;  // last: nothing after the allocations above can fail
  had_others = had_others || routes.size() > 1;
  sole = !had_others;
  if (sole) {
    last = l;
    last_qpn = l->qp_num;
    last_serial = l->serial;
  }
}

template <class B>
std::uint64_t cq_block<B>::serial_of(std::uint32_t qpn) const noexcept {
  auto it = std::lower_bound(routes.begin(), routes.end(), qpn,
                             [](const auto& r, std::uint32_t n) { return r.first < n; });
  if (it != routes.end() && it->first == qpn) return it->second->serial;
  for (const qp_link<B>* l : retired_links)
    if (l->qp_num == qpn) return l->serial;
  return 0;
}

template <class B>
qp_link<B>* cq_block<B>::find_retired(std::uint32_t qpn) noexcept {
  for (qp_link<B>* l : retired_links)
    if (l->qp_num == qpn) return l;
  return nullptr;
}

template <class B>
void cq_block<B>::retired_polled(qp_link<B>& l, bool recv) noexcept {
  std::uint32_t& left = recv ? l.retired_recvs : l.retired_sends;
  if (left != 0) {
    --left;
    if (flushing) --flushing;
  }
  // Any send completion counts: a flush does not say whether its WR was signaled.
  // Exact under signal_all; with unsignaled sends out, retired_unsure_sends waits for
  // the drain marker (drained) that ends the doubt.
  if (!recv && l.retired_signaled) --l.retired_signaled;
  if (!recv && RDMAKIT_UNLIKELY(l.drain_marker == qp_link<B>::drain::waits_for_slot)) post_drain_marker(l);
}

template <class B>
void cq_block<B>::drained(qp_link<B>& l) noexcept {
  flushing -= std::min<std::uint64_t>(flushing, l.retired_sends);
  l.retired_sends = 0;
  l.retired_signaled = 0;
  l.retired_unsure_sends = false;
  l.drain_marker = qp_link<B>::drain::none;
}

template <class B>
auto cq_block<B>::departed_polled(std::uint32_t qpn, bool recv, bool counted) noexcept -> departed_hit {
  departed_hit hit{0, false};
  for (auto it = departed.begin(); it != departed.end(); ++it) {
    if (it->qpn != qpn) continue;
    hit = {it->recv_offset, recv ? it->async_receives : it->async_sends};
    if (it->left == 0 || counted) continue;  // kept for its offset, or for its drops
    if (flushing) --flushing;
    if (--it->left == 0 && it->recv_offset == 0 && !it->async_sends) departed.erase(it);
    return hit;
  }
  return hit;
}

template <class B>
void cq_block<B>::forget_departed() noexcept {
  if (delivering != 0) return;
  bool waiting = false;
  std::erase_if(departed, [&](departed_qp& d) {
    // Kept, or seen gone only now: it may have written flushes after the poll that
    // found nothing (a window freed on another thread); the next empty poll decides.
    if (d.waits_for_native_qp(drains)) {
      waiting = true;
      return false;
    }
    flushing -= std::min<std::uint64_t>(flushing, d.left);
    return true;
  });
  for (qp_link<B>* l : retired_links) {
    if (l->recv_cq == this) l->retired_srq_receives = false;
    if (l->send_cq == this && l->retired_unsure_sends) {
      if (std::chrono::steady_clock::now() < l->drain_deadline) {  // (a marker, or without one its flushes, may still come)
        waiting = true;
        continue;
      }
      l->retired_unsure_sends = false;
      l->drain_marker = qp_link<B>::drain::none;  // (one polled later is still not delivered)
      flushing -= std::min<std::uint64_t>(flushing, l->retired_sends);  // WRs that completed unseen
      l->retired_sends = 0;
      l->retired_signaled = 0;
    }
  }
  watch(waiting);
}

template <class B>
void cq_block<B>::forget_drained() noexcept {
  if (delivering != 0) return;
  for (qp_link<B>* l : retired_links)  // (a busy server's CQ may never be found empty)
    if (l->recv_cq == this && l->retired_srq_receives && drains > l->srq_retired_at) l->retired_srq_receives = false;
  if (departed.empty()) return;
  std::erase_if(departed, [&](departed_qp& d) {
    if (d.waits_for_native_qp(drains) || d.drained_at >= drains) return false;
    flushing -= std::min<std::uint64_t>(flushing, d.left);
    return true;
  });
}

template <class B>
void cq_block<B>::poller_goes() noexcept {
  poller_gone = true;
  for (auto& r : routes) {
    qp_link<B>& l = *r.second;
    if (l.send_cq == this) {
      l.sends_possible = false;
      l.sq.close();
    }
    if (l.recv_cq == this) l.rq_open_depth = 0;
  }
}

template <class B>
std::uint64_t cq_block<B>::flushing_held() const noexcept {
  if (delivering != 0) return flushing;
  std::uint64_t free = 0;
  for (const departed_qp& d : departed)
    if (!d.kept && d.drained_at < drains) free += d.left;
  return flushing - std::min(flushing, free);
}

template <class B>
void cq_block<B>::retire(qp_link<B>* l, std::uint32_t entries, std::uint32_t flushes) noexcept {
  retired_links.push_back(l);
  std::erase_if(routes, [l](const auto& r) { return r.second == l; });
  forget_route_slots_();
  if (last == l) {
    last = nullptr;
    last_qpn = no_qpn;
    last_serial = 0;
  }
  reserved -= std::min<std::uint64_t>(reserved, entries);
  flushing += flushes;
  sole = false;
  had_others = true;
}

template <class B>
void cq_block<B>::attach_srq(const void* id, std::uint32_t max_wr) {
  for (auto& s : srqs)
    if (s.id == id) {
      ++s.qps;
      return;
    }
  keep_departed_room_();
  srqs.push_back({id, max_wr, 1});
  reserved += max_wr;
}

template <class B>
void cq_block<B>::detach_srq(const void* id, std::uint32_t qpn, std::uint32_t recv_offset, bool may_have_completed) noexcept {
  for (auto it = srqs.begin(); it != srqs.end(); ++it)
    if (it->id == id) {
      if (--it->qps == 0) {
        const std::uint32_t max_wr = it->max_wr;
        reserved -= std::min<std::uint64_t>(reserved, max_wr);
        srqs.erase(it);
        if (may_have_completed) hold_departed_(qpn, max_wr, recv_offset);
      }
      return;
    }
}

template <class B>
void cq_block<B>::keep_departed_room_() {
  reserve_room(departed, departed.size() + routes.size() + retired_links.size() + srqs.size() + 1);
}

template <class B>
void cq_block<B>::hold_departed_(std::uint32_t qpn, std::uint32_t left, std::uint32_t recv_offset,
 shared_owner<native_qp_kept> kept, bool async_sends,
 bool async_receives) noexcept {
  if (left == 0 && recv_offset == 0 && !async_sends) return;
  assert(departed.size() < departed.capacity());  // kept by keep_departed_room_: no allocation
  departed.push_back({qpn, left, recv_offset, std::move(kept), drains, async_sends, async_receives});
  flushing += left;
  watch(true);
}

template <class B>
void cq_block<B>::detach(qp_link<B>* l, std::uint32_t entries, std::uint32_t left, bool was_retired, bool srq_receives,
 const shared_owner<native_qp_kept>& kept) noexcept {
  auto& pool = was_retired ? flushing : reserved;
  pool -= std::min<std::uint64_t>(pool, entries);
  if (was_retired)
    std::erase(retired_links, l);
  else
    std::erase_if(routes, [l](const auto& r) { return r.second == l; });
  forget_route_slots_();
  // An async_queue_pair's own WRs' completions are dropped; its SRQ's receives are not
  // its own (the async layer hands them to next()).
  hold_departed_(l->qp_num, left, left != 0 || srq_receives ? l->recv_offset : 0, kept, l->async_owned,
                 l->async_owned && !l->rq.shared);
  sole = false;
  had_others = true;
  if (last == l) {
    last = nullptr;
    last_qpn = no_qpn;
    last_serial = 0;
  }
}


// Setup calls that change `b` (create_qp, reset(), on()) refuse to while another thread
// waits on it (cq_block::waiter).
template <class B>
void refuse_if_waited_on(const cq_block<B>& b, const char* call) {
  if (RDMAKIT_UNLIKELY(b.waited_on_elsewhere())) throw_waited_on(call);
}

// A batch of completions being delivered one by one to user code (the routed poll): its
// undelivered rest may hold completions of a queue pair replaced by reset(), which must
// not be let go meanwhile, whatever a nested poll found (prune_retired). Linked through
// the delivering calls' frames, innermost first.
template <class B>
struct batch_frame {
  const typename B::wc* wcs;
  const int* at;  // the index being delivered: the rest follows it
  int n;
  batch_frame* outer;
};

// Registers `f` on `b` for its scope (the block outlives it: cq_delivery).
template <class B>
class batch_frame_scope {
 public:
  batch_frame_scope(cq_block<B>& b, batch_frame<B>& f) noexcept : b_(b) {
    f.outer = b.frames;
    b.frames = &f;
  }
  batch_frame_scope(const batch_frame_scope&) = delete;
  batch_frame_scope& operator=(const batch_frame_scope&) = delete;
  ~batch_frame_scope() { b_.frames = b_.frames->outer; }

 private:
  cq_block<B>& b_;
};

// Marks the delivery of a batch that was accounted whole on one queue pair (serial
// `serial`) before user code runs: a reset() of that queue pair meanwhile keeps it, as
// the batch's rest is still its (retire). The block outlives it (cq_delivery).
template <class B>
class batch_in_delivery {
 public:
  RDMAKIT_ALWAYS_INLINE batch_in_delivery(cq_block<B>& b, std::uint64_t serial) noexcept
      : b_(b), outer_(std::exchange(b.batch_serial, serial)) {}
  batch_in_delivery(const batch_in_delivery&) = delete;
  batch_in_delivery& operator=(const batch_in_delivery&) = delete;
  RDMAKIT_ALWAYS_INLINE ~batch_in_delivery() { b_.batch_serial = outer_; }

 private:
  cq_block<B>& b_;
  std::uint64_t outer_;
};

// Marks a delivery to user handlers: the block stays alive until it ends, even if the
// handler drops the last owner.
template <class B>
class cq_delivery {
 public:
  RDMAKIT_ALWAYS_INLINE explicit cq_delivery(cq_block<B>& b) noexcept : b_(b) { ++b_.delivering; }
  cq_delivery(const cq_delivery&) = delete;
  cq_delivery& operator=(const cq_delivery&) = delete;
  RDMAKIT_ALWAYS_INLINE ~cq_delivery() {
    if (RDMAKIT_UNLIKELY(b_.owned_across_threads))
      end_across_threads_(b_);
    else if (--b_.delivering == 0 && RDMAKIT_UNLIKELY(b_.doomed != nullptr))
      destroy_(b_);
  }

 private:
  RDMAKIT_NOINLINE static void destroy_(cq_block<B>& b) noexcept { b.doomed->destroy(b.doomed); }
  // A window's free on another thread may drop the last owner meanwhile (see
  // cq_block::owned_across_threads): the last delivery to end after it destroys the block.
  RDMAKIT_NOINLINE static void end_across_threads_(cq_block<B>& b) noexcept {
    if (__atomic_fetch_sub(&b.delivering, 1, __ATOMIC_ACQ_REL) == (cq_block<B>::doomed_bit | 1)) destroy_(b);
  }

  cq_block<B>& b_;
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
