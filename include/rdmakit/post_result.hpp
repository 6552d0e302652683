#pragma once
/// The status of a post on the data path. Posting never throws: it returns a
/// `post_result` saying whether every WR was handed to the device and, if not, why.
#include <rdmakit/error.hpp>

#include <cstdint>
#include <cstring>

RDMAKIT_BEGIN_NAMESPACE

/// Why a post did not go through.
enum class post_status : std::uint8_t {
  ok = 0,
  sq_full,         ///< no send-queue credit: poll the CQ, then post again
  rq_full,         ///< the receive queue holds max_recv_wr receives already
  qp_error,        ///< the queue pair is in ERR: a completion failed or it was flushed
  recv_too_small,  ///< a UD receive smaller than the 40-byte GRH area
  backend_error,   ///< the device refused the WR; `err` holds the errno
  empty_handle,    ///< the queue pair was moved from (or default-constructed)
  bad_wr_id,       ///< the wr_id uses bit 63, which rdmakit keeps to tell receives from sends (a receive's is also not 2^63 - 1)
  list_too_long,   ///< a list of more WRs than the queue has slots (any WR on a queue of none): it never fits
  stale_address,   ///< a UD destination whose address_handle was destroyed (or an empty ud_address)
  empty_list,      ///< a post list with no WR: its post emptied it (no reuse()), or none was added
  /// a list longer than the free slots, whose other slots unsignaled WRs hold: no completion
  /// will give them back; post fewer WRs first (the policy signals one before the queue fills)
  no_completion_due,
  /// the queue pair's send (or receive) CQ has no completion_queue handle left: nothing
  /// polls it, so no credit comes back; keep the CQ's handle while its queue pairs post
  cq_gone,
};

/// Which rule a WR refused with EINVAL broke, found by the queue pair on the failure path
/// of every post (it reads the refused WR back); `unknown` when none of these. A list of
/// more than 32 SGEs or 2 GiB is refused by rdmakit itself, before the device.
enum class post_rule : std::uint8_t {
  unknown = 0,
  sge_count,         ///< more SGEs than the queue pair's max_send_sge / max_recv_sge
  inline_size,       ///< inline data above the queue pair's max_inline_data
  atomic_length,     ///< an atomic whose local buffer is not 8 bytes
  atomic_alignment,  ///< an atomic whose remote address is not 8-byte aligned
  message_size,      ///< SGEs adding up to more than 2 GiB (2^31 bytes), the largest message
  inline_op,         ///< send_flags::inline_data on a READ or an atomic, which carry no data out
  address_pd,        ///< (UD) an address handle of another protection domain than the queue pair's
  ud_mtu,            ///< (UD) a message larger than the port's MTU: a UD message is one packet
};

/// Outcome of a post (one WR or a list). `posted` counts the WRs of a list that
/// reached the device; on failure the first one not posted is `posted` (its bad_wr).
struct [[nodiscard]] post_result {
  post_status status = post_status::ok;  ///< ok, or why the post was refused
  int err = 0;                           ///< errno from the backend when status is backend_error
  std::uint32_t posted = 0;              ///< WRs that reached the device (all on success)
  post_rule rule = post_rule::unknown;   ///< for backend_error EINVAL: the rule broken, when known

  /// True when every WR was posted.
  constexpr bool ok() const noexcept { return status == post_status::ok; }
  /// ok(): `if (!qp.post(...))` handles a refusal.
  constexpr explicit operator bool() const noexcept { return ok(); }

  /// What happened and what to do, in one sentence.
  const char* message() const noexcept {
    switch (status) {
      case post_status::ok: return "posted";
      case post_status::sq_full:
        return "send queue full: every slot is held by a WR whose (covering) completion was not "
               "polled yet; poll the completion queue, then post again";
      case post_status::rq_full:
        return "receive queue full: max_recv_wr receives (a shared receive queue's max_wr) are posted and not "
               "completed; poll the completion queue, or create the queue pair (or the shared receive queue) "
               "larger";
      case post_status::qp_error:
        return "queue pair in ERR: an earlier completion failed (or the peer broke the "
               "connection) and outstanding WRs are flushed; poll them and reconnect";
      case post_status::recv_too_small:
        return "UD receive buffer smaller than the 40-byte GRH area every UD receive starts "
               "with: give at least 40 bytes plus the largest payload";
      case post_status::empty_handle:
        return "empty queue_pair (moved from or default-constructed): post on the queue pair that "
               "connect()/activate() or the factory returned";
      case post_status::bad_wr_id:
        return "wr_id uses bit 63, which rdmakit reserves to tell receive completions from send "
               "completions (flushed ones included): use wr_ids below 2^63 (for a receive, below 2^63 - 1, "
               "the one reset() marks its last flush with)";
      case post_status::list_too_long:
        return "more WRs than the queue has slots (max_send_wr, max_recv_wr), so no amount of polling "
               "makes room for them: split it into shorter lists, or create the queue pair deeper (a queue "
               "pair made without that queue has 0 slots, so even one WR is too many: post it on a queue "
               "pair that has the queue)";
      case post_status::stale_address:
        return "the UD destination's address_handle was destroyed (or the ud_address is empty), so "
               "nothing was sent: keep the address_handle while you post through its addresses, or take "
               "the address again from a live one (ah.to(peer))";
      case post_status::empty_list:
        return "the post list holds no WR, so nothing was posted: a list posted without reuse() is emptied "
               "by its post; call reuse() once to post the same WRs again, or add WRs before each post";
      case post_status::no_completion_due:
        return "send queue too full for this list, and no completion will make room: the WRs holding the other "
               "slots are unsignaled, and only a signaled WR's completion gives slots back; post fewer WRs "
               "first (single WRs or a shorter list: the signaling policy signals one before the queue fills), "
               "then poll the completion queue and post the list again";
      case post_status::cq_gone:
        return "no credit will come back: the queue pair's completion queue has no completion_queue handle "
               "left (destroyed, or assigned another CQ, while the queue pair kept it alive), so nothing polls "
               "it; keep the completion_queue as long as the queue pairs that complete into it";
      case post_status::backend_error:
        switch (err) {
          case EINVAL:
            switch (rule) {
              case post_rule::sge_count:
                return "the WR was refused (EINVAL): it has more SGEs than the queue pair's "
                       "max_send_sge/max_recv_sge (or than a post list's SgePerWr, or 32 in one post); "
                       "create the queue pair or the list with more, or gather less";
              case post_rule::inline_size:
                return "the device rejected the WR (EINVAL): its inline data is larger than the queue "
                       "pair's max_inline_data; drop send_flags::inline_data, or create the queue pair "
                       "with more max_inline_data (a WR prepared on another queue pair: prepare it on "
                       "this one)";
              case post_rule::atomic_length:
                return "the device rejected the WR (EINVAL): an atomic's local buffer must be exactly "
                       "8 bytes";
              case post_rule::atomic_alignment:
                return "the device rejected the WR (EINVAL): an atomic's remote address must be "
                       "8-byte aligned";
              case post_rule::message_size:
                return "the WR was refused (EINVAL): its SGEs add up to more than 2 GiB (2^31 bytes), "
                       "the largest message a WR carries; split it into several WRs";
              case post_rule::inline_op:
                return "the device rejected the WR (EINVAL): a READ or an atomic carries no data out, so it "
                       "cannot be sent inline; drop send_flags::inline_data";
              case post_rule::address_pd:
                return "the WR was refused (EINVAL): its destination is an address handle of another protection "
                       "domain than the queue pair's (a device refuses it, or fails the queue pair); create the "
                       "address handle on the queue pair's protection domain";
              case post_rule::ud_mtu:
                return "the WR was refused (EINVAL): a UD message is one packet, and this one is larger than the "
                       "queue pair's port MTU (a device takes it and fails the queue pair, every later post with "
                       "it); send at most the MTU per datagram: mtu_bytes(dev.port().active_mtu) bytes";
              case post_rule::unknown: break;
            }
            return "the device rejected the WR (EINVAL): too many SGEs, inline data above "
                   "max_inline_data, a bad opcode for the transport, or the queue pair state";
          case ENOMEM: return "the device queue is full (ENOMEM)";
          default: return "the device rejected the WR (see err)";
        }
    }
    return "unknown post status";
  }
};

/// Short name of a post status ("sq_full").
constexpr const char* to_string(post_status s) noexcept {
  switch (s) {
    case post_status::ok: return "ok";
    case post_status::sq_full: return "sq_full";
    case post_status::rq_full: return "rq_full";
    case post_status::qp_error: return "qp_error";
    case post_status::recv_too_small: return "recv_too_small";
    case post_status::backend_error: return "backend_error";
    case post_status::empty_handle: return "empty_handle";
    case post_status::bad_wr_id: return "bad_wr_id";
    case post_status::list_too_long: return "list_too_long";
    case post_status::stale_address: return "stale_address";
    case post_status::empty_list: return "empty_list";
    case post_status::no_completion_due: return "no_completion_due";
    case post_status::cq_gone: return "cq_gone";
  }
  return "unknown";
}

/// Short name of a post rule ("inline_size").
constexpr const char* to_string(post_rule r) noexcept {
  switch (r) {
    case post_rule::unknown: return "unknown";
    case post_rule::sge_count: return "sge_count";
    case post_rule::inline_size: return "inline_size";
    case post_rule::atomic_length: return "atomic_length";
    case post_rule::atomic_alignment: return "atomic_alignment";
    case post_rule::message_size: return "message_size";
    case post_rule::inline_op: return "inline_op";
    case post_rule::address_pd: return "address_pd";
    case post_rule::ud_mtu: return "ud_mtu";
  }
  return "unknown";
}

RDMAKIT_END_NAMESPACE
