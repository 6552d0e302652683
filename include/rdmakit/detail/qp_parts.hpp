#pragma once
// What a queue pair owns (qp_parts) and the post-list storage helpers. Internal to
// queue_pair.hpp and send_batch.hpp; the setup steps are in qp_setup.hpp.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/qp_link.hpp>
#include <rdmakit/detail/spin_lock.hpp>
#include <rdmakit/qp_options.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/types.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

// Storage for N native objects that is not initialized on construction.
template <class S, std::size_t N>
struct uninit_array {
  union {
    S v[N];
  };
  uninit_array() noexcept {}
  S* data() noexcept { return v; }
  const S* data() const noexcept { return v; }
  S& operator[](std::size_t i) noexcept { return v[i]; }
};

// Whether a WR of this opcode may carry its payload inline (SENDs and WRITEs).
constexpr bool may_inline(opcode op) noexcept {
  return op == opcode::send || op == opcode::send_with_imm || op == opcode::rdma_write ||
         op == opcode::rdma_write_with_imm;
}
// Whether the layer may put a WR inline on its own: an opcode that can, and no
// send_flags::no_auto_inline (a constant flag decides it at compile time).
constexpr bool may_auto_inline(opcode op, send_flags requested) noexcept {
  return may_inline(op) && !has_any(requested, send_flags::no_auto_inline);
}
// The flags the device sees: the asked ones without rdmakit's own (no_auto_inline) and
// without signaled, which the signaling policy decides.
constexpr send_flags device_flags(send_flags requested) noexcept {
  return requested & ~(send_flags::signaled | send_flags::no_auto_inline);
}

// What a post list keeps of each WR to decide its flags at post time: the flags asked
// for, and the bytes inline data would take (none for opcodes that cannot go inline).
struct batch_entry {
  send_flags flags;
  std::uint32_t inline_bytes;
  static constexpr std::uint32_t never_inline = ~std::uint32_t{0};
};

// A shared receive queue's control block (shared_receive_queue.hpp; defined only for
// backends that have SRQs: elsewhere the pointer below is always null).
template <class B>
struct srq_state;

// Where a receive must start its payload on a shared receive queue: grh_bytes while a
// UD queue pair takes receives from it, 0 otherwise (part of srq_state; here so a queue
// pair gives its share back without srq_state's definition).
// Queue pairs on one SRQ may be created and destroyed on different threads, each with
// its own CQs (docs/ownership-and-threads.md), while another posts to the SRQ: the count
// changes under a spin lock (setup path, short), the offset is read atomically.
struct srq_offset {
  /// The offset every receive needs now (a post reads it on any thread).
  RDMAKIT_ALWAYS_INLINE std::uint32_t get() const noexcept { return __atomic_load_n(&recv_offset_, __ATOMIC_ACQUIRE); }
  void add(std::uint32_t offset) noexcept {
    if (offset == 0) return;
    lock_.lock();
    ++users_;
    __atomic_store_n(&recv_offset_, std::max(recv_offset_, offset), __ATOMIC_RELEASE);
    lock_.unlock();
  }
  void remove() noexcept {
    lock_.lock();
    if (users_ != 0 && --users_ == 0) __atomic_store_n(&recv_offset_, 0u, __ATOMIC_RELEASE);
    lock_.unlock();
  }

 private:
  std::uint32_t recv_offset_ = 0;
  std::uint32_t users_ = 0;  // queue pairs on the SRQ that need it (UD); under lock_
  spin_lock lock_;
};

// Whether a receive was ever posted to a shared receive queue (part of srq_state; here so
// a destroyed queue pair reads it without srq_state's definition): until then none of
// its completions can be in a CQ.
struct srq_traffic {
  bool posted = false;  // set by the first post, on any thread: a relaxed atomic store
  void note_post() noexcept { __atomic_store_n(&posted, true, __ATOMIC_RELAXED); }
  bool ever_posted() const noexcept { return __atomic_load_n(&posted, __ATOMIC_RELAXED); }
};

// Who destroys a queue pair the connection manager created (connection_manager.hpp):
// its id, which must forget the QP before the id's next CM call, and which the QP
// keeps alive. Null for every other queue pair.
template <class B>
struct cm_qp_owner {
  virtual void destroy_qp(typename B::qp q) noexcept = 0;
  virtual ~cm_qp_owner() = default;
};

// A native QP that type 2 memory windows were bound through, shared with those windows.
// The device holds a reference to that QP in each such window until it is invalidated or
// freed: rxe's destroy_qp then waits 50 s for it, warns, and frees the QP under the
// window, which drops the reference later on whatever QP took its memory (kernel 6.1,
// seen in the guest). A queue pair that goes while a window holds this (`windows` > 0)
// moves its QP to ERR and leaves the QP here, with what it needs (its CQs, SRQ, PD, the
// CM id): the last owner, the last such window once it has freed its own native window,
// destroys it.
template <class B>
struct qp_native_hold {
  unsigned windows = 0;  // windows holding this (__atomic builtins, as shared_count)
  typename B::qp qp{};   // the orphaned QP, set by qp_parts::release
  shared_owner<cm_qp_owner<B>> cm;
  shared_owner<srq_state<B>> srq;
  shared_owner<cq_block<B>> scq, rcq;
  pd_ref<B> pd;
  // Cleared once the QP is destroyed: its CQs keep its room until then (cq_block::departed).
  shared_owner<native_qp_kept> kept = make_shared_owner<native_qp_kept>();

  qp_native_hold() = default;
  qp_native_hold(const qp_native_hold&) = delete;
  qp_native_hold& operator=(const qp_native_hold&) = delete;
  ~qp_native_hold() {
    if (qp != typename B::qp{}) {
      if (cm)
        cm->destroy_qp(qp);
      else
        B::destroy_qp(qp);
      kept->destroyed();
    }
    cm.reset();  // after the QP, as qp_parts::release
    srq.reset();
    scq.reset();
    rcq.reset();
    pd.reset();
  }
};

// What a queue pair owns. It keeps its PD (and so its device), its CQs and its shared
// receive queue alive: the native QP is destroyed before any of them, whatever order
// the handles go in.
template <class B>
struct qp_parts {
  pd_ref<B> pd;
  shared_owner<cq_block<B>> scq, rcq;
  shared_owner<srq_state<B>> srq;  // null unless the QP takes its receives from one
  // srq.get() as the receive CQ knows it (kept apart: converting srq_state<B>* would
  // instantiate srq_state for backends without SRQs).
  const void* srq_id = nullptr;
  srq_offset* srq_needs_offset = nullptr;  // the SRQ's, when this QP needs a receive offset (UD)
  const srq_traffic* srq_seen = nullptr;    // the SRQ's, with srq_id
  shared_owner<cm_qp_owner<B>> cm;  // null unless the connection manager made the QP
  typename B::qp qp{};
  link_ptr<B> link;  // never null: empty, it is the closed link
  qp_cap asked{};     // as asked: the CQ entries reserved on send_cq / recv_cq, and the credits
  qp_options opts{};  // as created (port, Q_Key, access): reset() and a failed connect reuse them
  qp_cap caps{};      // as granted
  std::uint32_t inline_limit = 0;
  std::uint32_t psn = 0;
  int gid_index = 0;
  gid local_gid{};
  std::uint16_t lid = 0;
  mtu active_mtu = mtu::mtu_1024;
  // mtu_bytes(active_mtu), set with it: the largest UD message, tested at every UD post
  // (a load, where the conversion cost 6 instructions a post).
  std::uint32_t active_mtu_bytes = mtu_bytes(mtu::mtu_1024);
  // The QP that reset() (or a refused connect) replaced, in ERR: it stays attached to
  // the CQs so the flushes of its outstanding WRs reach the pollers with their wr_ids,
  // routed and accounted, until this QP's destruction, or a later replacement once its
  // receives and signaled sends were all polled. Its own `retired` is the generation
  // before it (a chain, oldest last).
  unique_owner<qp_parts> retired;
  bool is_retired = false;
  // Made by the first type 2 memory window bound through this QP (memory_window::bind).
  shared_owner<qp_native_hold<B>> native_hold;

  const device_state<B>& dev() const noexcept { return *pd->dev; }

  qp_parts() = default;
  qp_parts(qp_parts&& o) noexcept { *this = std::move(o); }
  qp_parts& operator=(qp_parts&& o) noexcept;
  ~qp_parts() { release(); }

  void release() noexcept;
};

// Out of the class, as cq_block's cold members (qp_link.hpp; detail/backend_instances.hpp).

template <class B>
qp_parts<B>& qp_parts<B>::operator=(qp_parts&& o) noexcept {
  if (this != &o) {
    release();
    pd = std::move(o.pd);
    scq = std::move(o.scq);
    rcq = std::move(o.rcq);
    srq = std::move(o.srq);
    srq_id = std::exchange(o.srq_id, nullptr);
    srq_needs_offset = std::exchange(o.srq_needs_offset, nullptr);
    srq_seen = std::exchange(o.srq_seen, nullptr);
    cm = std::move(o.cm);
    qp = std::exchange(o.qp, {});
    link = std::move(o.link);
    asked = o.asked;
    opts = o.opts;
    caps = o.caps;
    inline_limit = o.inline_limit;
    psn = o.psn;
    gid_index = o.gid_index;
    local_gid = o.local_gid;
    lid = o.lid;
    active_mtu = o.active_mtu;
    active_mtu_bytes = o.active_mtu_bytes;
    retired = std::move(o.retired);
    is_retired = o.is_retired;
    native_hold = std::move(o.native_hold);
  }
  return *this;
}

template <class B>
void qp_parts<B>::release() noexcept {
  if (link && ((link->send_cq && link->send_cq->waited_on_elsewhere()) ||
               (link->recv_cq && link->recv_cq->waited_on_elsewhere())))
    abort_waited_on(link->qp_num);  // (a destructor cannot throw usage_error)
  shared_owner<native_qp_kept> kept;  // set when a window keeps the native QP
  if (qp != typename B::qp{}) {
    if (native_hold && __atomic_load_n(&native_hold->windows, __ATOMIC_ACQUIRE) != 0) {
      // A type 2 window bound through it is not freed yet (qp_native_hold): stopped
      // now (the peer's accesses fail), destroyed by the last such window.
      try {
        qp_attr err;
        err.state = qp_state::err;
        B::modify_qp(qp, err, qp_attr_mask::state);
      } catch (...) {  // already in ERR, most likely: destroyed later all the same
      }
      native_hold->qp = qp;
      native_hold->cm = cm;
      native_hold->srq = srq;
      scq->owned_across_threads = rcq->owned_across_threads = true;  // (before the hold owns them)
      native_hold->scq = scq;
      native_hold->rcq = rcq;
      native_hold->pd = pd;
      kept = native_hold->kept;
    } else if (cm) {
      cm->destroy_qp(qp);
    } else {
      B::destroy_qp(qp);
    }
  }
  qp = {};
  native_hold.reset();
  if (link) {
    // What this QP holds in its CQs: its depths, or once retired, what its flushes
    // may still take there. What it may have left in them (completions not polled,
    // which a device that does not clean the CQ returns later) keeps its room.
    const std::uint32_t sends = is_retired ? link->retired_sends : asked.max_send_wr;
    const std::uint32_t recvs = is_retired ? link->retired_recvs : asked.max_recv_wr;
    const std::uint32_t sends_left = is_retired ? link->retired_sends : link->sends_to_come();
    const std::uint32_t recvs_left = is_retired ? link->retired_recvs : link->rq.held;
    const bool srq_receives = srq_id && srq_seen->ever_posted();  // some may be this QP's, in its CQ
    if (link->send_cq == link->recv_cq) {
      if (link->send_cq)
        link->send_cq->detach(link.get(), sends + recvs, sends_left + recvs_left, is_retired, srq_receives, kept);
    } else {
      if (link->send_cq) link->send_cq->detach(link.get(), sends, sends_left, is_retired, false, kept);
      if (link->recv_cq) link->recv_cq->detach(link.get(), recvs, recvs_left, is_retired, srq_receives, kept);
    }
    if (srq_id && link->recv_cq)
      link->recv_cq->detach_srq(srq_id, link->qp_num, link->recv_offset, srq_seen->ever_posted());
    link.reset();
  }
  retired.reset();
  if (srq_needs_offset) std::exchange(srq_needs_offset, nullptr)->remove();  // the SRQ is alive: srq holds it
  cm.reset();  // after the QP: the id may be destroyed now
  srq.reset();  // after the QP: the SRQ may be destroyed now
  srq_id = nullptr;
  srq_seen = nullptr;
  scq.reset();  // after the QP: the CQs may be destroyed now, then the PD
  rcq.reset();
  pd.reset();
}

}  // namespace detail

RDMAKIT_END_NAMESPACE
