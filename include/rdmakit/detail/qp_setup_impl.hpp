#pragma once
// The cold text of detail/qp_setup.hpp, not templates: inline in header-only builds,
// compiled once (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/detail/qp_setup.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_DECL std::string cq_entries_taken(std::uint64_t reserved, std::uint64_t flushing, std::size_t attached) {
  std::string s;
  if (attached)
    append(s, " (", reserved, " entries already promised to ", attached, " attached queue pair",
           attached > 1 ? "s" : "", ")");
  if (flushing)
    append(s, " (", flushing, " entries held by completions that queue pairs replaced by reset() or destroyed may "
              "still put here: polling them gives their room back, and so does, for a destroyed one's, a poll after "
              "its destruction that drains the CQ (returns fewer completions than it asks for))");
  return s;
}

RDMAKIT_DECL std::string cq_too_small(int capacity, std::uint64_t reserved, std::uint64_t flushing, std::size_t attached,
                                      std::string_view tname, std::uint32_t sends, std::uint32_t recvs,
                                      std::uint64_t need, std::uint32_t max_cqe, bool srq_receives) {
  std::string s = cat("CQ of ", capacity, " entries is too small for a", tname == "RC" ? "n " : " ", tname,
                      " queue pair of ");
  if (srq_receives)  // (its own max_recv_wr is 0: the receives are the SRQ's, its max_wr as granted)
    append(s, sends, " send WR", sends == 1 ? "" : "s", " + the ", recvs, " receives of its shared receive queue");
  else
    append(s, sends, " send + ", recvs, " receive WRs");
  append(s, cq_entries_taken(reserved, flushing, attached));
  if (flushing && need - flushing <= static_cast<std::uint64_t>(capacity))  // it fits once that room is back
    append(s, ": poll the CQ first (polling those completions, or a poll that finds it empty, gives their room "
              "back), or create it with at least ", need, " entries");
  else if (need <= max_cqe)
    append(s, ": create it with at least ", need,
           " entries (a CQ must hold the queue depths of every QP attached to it)");
  else
    append(s, ": it would need ", need, " entries, above the device's max_cqe (", max_cqe,
           "): give the queue pair separate send and receive CQs, attach fewer "
           "queue pairs to this CQ, or lower ", srq_receives ? "max_send_wr or the SRQ's max_wr" : "max_send_wr/max_recv_wr");
  return s;
}

// What take_back_to_init did, for the refusal's message.
inline std::string taken_back_note(const taken_back& t, std::uint32_t new_qpn, const char* call) {
  std::string why;
  if (t.failure) {
    try {
      std::rethrow_exception(t.failure);
    } catch (const verbs_error& v) {
      why = v.detail();
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "unknown exception";
    }
  }
  switch (t.how) {
    case taken_back::reset_in_place:
      return cat(back_to_init_note, "was reset to INIT: ", call, " can be retried");
    case taken_back::replaced:
      return cat(back_to_init_note, "was replaced by a new one in INIT, QP ", hex(new_qpn), ": its ", t.posted,
                 " posted receive(s) complete on QP ", hex(t.old_qpn),
                 " (WR_FLUSH_ERR unless a message took them); post receives again and give the peer the new "
                 "endpoint before retrying ",
                 call);
    case taken_back::moved_to_err:
      return cat(back_to_init_note, "was moved to ERR, where its ", t.posted,
                 " posted receive(s) complete (WR_FLUSH_ERR unless a message took them): the CQ has no room "
                 "for a new queue pair beside them; poll them, then reset() it before retrying ",
                 call);
    case taken_back::stuck:
      return cat(back_to_init_note, "could not be taken back to INIT (", why, "): reset() or destroy it");
    case taken_back::emptied:
      break;
  }
  return cat(back_to_init_note, "could not be replaced (", why, "): it is now empty");
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_taken_back(const verbs_error& e, const taken_back& t, std::uint32_t new_qpn,
                                                    const char* call) {
  std::string note = taken_back_note(t, new_qpn, call);
  if (const auto* tr = e.transition()) throw verbs_error(e.verb(), e.errno_value(), cat(e.detail(), note), *tr);
  throw verbs_error(e.verb(), e.errno_value(), cat(e.detail(), note));
}

RDMAKIT_NOINLINE RDMAKIT_DECL void check_connect(const endpoint& peer, const connect_options& o, bool reads,
                                                 std::uint32_t device_max_rd_atomic) {
  auto field = [](const char* name, unsigned v, unsigned max, const char* what) {
    if (v > max)
      throw usage_error(cat("connect(): ", name, " = ", v, " is out of range (0..", max, "): ", what));
  };
  field("connect_options::retry_cnt", o.retry_cnt, 7, "3 bits; 7 retries forever on some devices, 6 is the usual choice");
  field("connect_options::rnr_retry", o.rnr_retry, 7, "3 bits; 7 means retry forever");
  field("connect_options::timeout", o.timeout, 31, "5 bits: 4.096 µs · 2^timeout, 0 = infinite");
  field("connect_options::min_rnr_timer", o.min_rnr_timer, 31, "5 bits: an IB RNR timer code");
  field("connect_options::sl", o.sl, 15, "the service level has 4 bits");
  field("endpoint::qpn (peer)", peer.qpn, 0xFFFFFF, "QP numbers have 24 bits: check the endpoint exchange");
  // QP0 and QP1 are the subnet's management QPs (SMI, GSI), never an RC/UC peer: a
  // zeroed or garbled record connected, and every send ended in a retry error later.
  if (peer.qpn <= 1)
    throw usage_error(cat("connect(): endpoint::qpn (peer) = ", peer.qpn,
                          " names a management QP (QP0/QP1), not a peer's queue pair: check the endpoint exchange "
                          "(the peer's local_endpoint().qpn)"));
  field("endpoint::psn (peer)", peer.psn, psn_mask, "packet sequence numbers have 24 bits: check the endpoint exchange");
  // A peer MTU that names none was taken as "the peer said nothing" (this port's MTU).
  if (mtu_bytes(peer.mtu) == 0)
    throw usage_error(cat("connect(): endpoint::mtu (peer) = ", static_cast<std::uint32_t>(peer.mtu),
                          " names no MTU (1..5: 256..4096 bytes): check the endpoint exchange (the peer's "
                          "local_endpoint().mtu)"));
  if (o.path_mtu && mtu_bytes(*o.path_mtu) == 0)
    throw usage_error("connect(): connect_options::path_mtu is not one of 256, 512, 1024, 2048, 4096");
  // rxe takes a READ or an atomic posted on such a queue pair and never starts it: the
  // queue pair stalls behind it without an error (other devices refuse the post).
  if (reads && o.max_rd_atomic == 0)
    throw usage_error("connect(): connect_options::max_rd_atomic = 0 leaves no READ or atomic in flight: one "
                      "posted would never run on rxe, and the queue pair would stall behind it; give 1 or more "
                      "(the default, 16, is clamped to the device's maximum)");
  // The same 0 when the device allows none (the option is clamped to its maximum).
  if (reads && o.max_rd_atomic != 0 && device_max_rd_atomic == 0)
    throw usage_error("connect(): this device's max_qp_init_rd_atom is 0: an RC queue pair on it initiates no READ "
                      "or atomic, and max_rd_atomic is clamped to 0; one posted would never run on rxe, and the "
                      "queue pair would stall behind it. Use a device that initiates them (RC on any RDMA NIC "
                      "does), or UC for WRITEs and SENDs only");
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
