#pragma once
// The deviation table: every scenario whose outcome differs between devices reads its
// expected outcome from here, by scenario id and device profile. The "spec" rows are
// the specification (docs/semantics.md#rxe-differs), what the mock does by default; the
// "rxe" rows are what soft-RoCE does, the device the conformance suite runs on in CI,
// and what the mock does as `device_profile::rxe` (RDMAKIT_MOCK_PROFILE=rxe). A
// scenario that finds no row for its profile fails: nothing is skipped silently.
// Programs outside doctest (tools/two_node) define CONF_DEVIATIONS_TABLE_ONLY and use
// find_expected(): the table without the doctest checks.
#include <rdmakit/types.hpp>

#ifndef CONF_DEVIATIONS_TABLE_ONLY
#include <doctest/doctest.h>
#endif

#include <array>
#include <cerrno>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace conf {

/// A set of completion statuses, plus "no completion at all".
class status_set {
 public:
  constexpr status_set() = default;
  constexpr status_set(std::initializer_list<rdmakit::wc_status> l) {
    for (auto s : l) bits_ |= bit(s);
  }
  /// Only "no completion".
  static constexpr status_set nothing() {
    status_set s;
    s.bits_ = none_bit;
    return s;
  }
  constexpr status_set operator|(status_set o) const {
    status_set s;
    s.bits_ = bits_ | o.bits_;
    return s;
  }
  constexpr bool allows(rdmakit::wc_status s) const { return (bits_ & bit(s)) != 0; }
  constexpr bool allows_nothing() const { return (bits_ & none_bit) != 0; }
  /// Exactly "no completion".
  constexpr bool is_nothing() const { return bits_ == none_bit; }
  constexpr bool empty() const { return bits_ == 0; }

  std::string to_string() const {
    std::string out;
    for (std::uint32_t i = 0; i < 31; ++i)
      if (bits_ & (1u << i)) out += (out.empty() ? "" : " or ") + std::string(rdmakit::to_string(rdmakit::wc_status(i)));
    if (bits_ & none_bit) out += out.empty() ? "no completion" : " or no completion";
    return out.empty() ? "(unspecified)" : out;
  }

 private:
  static constexpr std::uint32_t none_bit = 1u << 31;
  static constexpr std::uint32_t bit(rdmakit::wc_status s) { return 1u << static_cast<std::uint32_t>(s); }
  std::uint32_t bits_ = 0;
};

enum class tri : std::uint8_t { no, yes, either };

/// What a scenario expects on one backend. Fields a scenario does not use stay default.
struct outcome {
  int post_errno = 0;      ///< what post_send returns
  bool bad_wr_set = true;  ///< when post fails, bad_wr names the failing WR (false: it is NULL)
  status_set req{};        ///< the requester's completion for the faulty WR
  status_set resp{};       ///< the responder's completion (nothing() = none, receive stays posted)
  tri grh_flag = tri::either;  ///< IBV_WC_GRH on the receive completion
  bool exact_capacity = true;  ///< a queue is full at exactly the capacity create reported
  int verb_errno = 0;          ///< what the verb under test returns, when it is not post_send
  tri stays_rts = tri::either;  ///< the QP the scenario names (else the faulty WR's receiver) is still in RTS
  tri inv_flag = tri::either;   ///< IBV_WC_WITH_INV on a SEND_WITH_INV's receive completion
  tri async_event = tri::either;  ///< the scenario's asynchronous event is raised
  tri imm_flag = tri::either;     ///< IBV_WC_WITH_IMM on the sender's completion of a WR with immediate
  tri remote_ran = tri::either;   ///< the remote side of a failed WR ran (an atomic's target changed)
  int hop_limit = -1;  ///< the hop limit (IPv4: TTL) of a UD receive's GRH area; -1: the address handle's
  tri head_written = tri::either;  ///< a failed message's leading packets reached the responder's memory
  bool rounds_grants = false;  ///< create_qp's send caps and create_cq's size come back above the request
  tri window_invalidated = tri::either;  ///< the window a SEND_WITH_INV named no longer grants access
};

struct deviation_row {
  std::string_view scenario;
  std::string_view profile;  ///< "spec" or "rxe"
  outcome expect;
  std::string_view reason;
};

using rdmakit::wc_status;
namespace ids {
inline constexpr std::string_view recv_too_small_rc = "fault.recv_too_small.rc";
inline constexpr std::string_view recv_bad_lkey_rc = "fault.recv_sge_bad_lkey.rc";
inline constexpr std::string_view recv_no_local_write_rc = "fault.recv_sge_no_local_write.rc";
inline constexpr std::string_view recv_bad_lkey_unreached_rc = "fault.recv_sge_bad_lkey_unreached.rc";
inline constexpr std::string_view recv_past_region_unreached_rc = "fault.recv_sge_past_region_unreached.rc";
inline constexpr std::string_view send_bad_lkey = "fault.send_sge_bad_lkey";
inline constexpr std::string_view send_other_pd = "fault.send_sge_other_pd";
inline constexpr std::string_view send_out_of_range = "fault.send_sge_out_of_range";
inline constexpr std::string_view send_out_of_range_before_bad_lkey = "fault.send_sge_out_of_range_before_bad_lkey";
inline constexpr std::string_view atomic_result_bad_lkey = "fault.atomic_result_sge_bad_lkey";
inline constexpr std::string_view ud_over_mtu = "ud.send_over_mtu";
inline constexpr std::string_view ud_over_mtu_bad_lkey = "ud.send_over_mtu_bad_lkey";
inline constexpr std::string_view ud_recv_too_small = "ud.recv_too_small";
inline constexpr std::string_view slot_release = "signaling.unsignaled_slot_release";
inline constexpr std::string_view grh_flag_rc_uc = "recv.grh_flag.rc_uc";
inline constexpr std::string_view invalid_opcode = "opcode.invalid_for_transport";
inline constexpr std::string_view post_below_rts = "posting.send_below_rts";
inline constexpr std::string_view recv_refused_bad_wr = "posting.recv_refused_bad_wr";
inline constexpr std::string_view uc_write_imm_bad_rkey = "uc.write_imm_bad_rkey_takes_srq_receive";
inline constexpr std::string_view queue_capacity = "posting.queue_full_at_reported_capacity";
inline constexpr std::string_view post_in_err = "posting.post_to_qp_in_err";
inline constexpr std::string_view atomic_len_over_8 = "opcode.atomic_local_length_over_8";
inline constexpr std::string_view atomic_sge_past_result_unreached = "opcode.atomic_sge_past_result_unreached";
inline constexpr std::string_view atomic_result_split_bad_sge = "opcode.atomic_result_split_bad_sge";
inline constexpr std::string_view read_response_bad_sge_after_bytes = "fault.read_response_sge_bad_after_bytes";
inline constexpr std::string_view write_imm_bad_rkey = "fault.write_imm_bad_rkey.responder";
inline constexpr std::string_view write_imm_bad_rkey_2_packets = "fault.write_imm_bad_rkey_2_packets.responder";
inline constexpr std::string_view write_imm_bad_rkey_no_receive = "fault.write_imm_bad_rkey_no_receive.responder";
inline constexpr std::string_view arm_without_channel = "cq.req_notify_without_channel";
inline constexpr std::string_view mw_out_of_window = "mw.access_outside_window";
inline constexpr std::string_view recv_with_inv_flag = "mw.recv_with_inv_flag";
inline constexpr std::string_view send_inv_other_pd = "mw.send_inv_other_pd";
inline constexpr std::string_view local_inv_on_uc = "mw.local_inv_on_uc";
inline constexpr std::string_view srq_last_wqe_event = "srq.qp_to_err_last_wqe_reached";
inline constexpr std::string_view destroyed_qp_completions = "cq.destroyed_qp_completions_left";
inline constexpr std::string_view send_overflow = "cq.send_completion_lost_to_overflow";
inline constexpr std::string_view recv_overflow = "cq.recv_completion_lost_to_overflow";
inline constexpr std::string_view flushes_into_full_cq = "cq.flushes_due_while_full";
inline constexpr std::string_view srq_recv_in_srq_pd = "srq.recv_buffer_in_srq_pd";
inline constexpr std::string_view srq_recv_in_qp_pd = "srq.recv_buffer_in_qp_pd";
inline constexpr std::string_view srq_ring = "srq.ring_above_max_wr";
inline constexpr std::string_view sender_imm_flag = "completion.sender_with_imm_flag";
inline constexpr std::string_view create_grants = "create.grants_rounded_up";
inline constexpr std::string_view responder_error_event = "async.responder_access_error_event";
inline constexpr std::string_view ud_grh_hop_limit = "ud.grh_hop_limit";
inline constexpr std::string_view atomic_inline = "opcode.atomic_inline";
inline constexpr std::string_view rkey_as_lkey = "mr.rkey_used_as_lkey";
inline constexpr std::string_view mr_length_zero = "mr.length_zero";
inline constexpr std::string_view send_runs_out_later = "fault.send_sge_runs_out_after_packets";
inline constexpr std::string_view send_bad_after_refused_packet = "fault.send_sge_bad_after_refused_packet";
inline constexpr std::string_view recv_too_small_later = "fault.recv_too_small_after_packets.rc";
inline constexpr std::string_view recv_bad_sge_mid_packet = "fault.recv_sge_bad_mid_packet.rc";
inline constexpr std::string_view rnr_nak_packets_behind = "fault.rnr_nak_packets_behind";
inline constexpr std::string_view srq_create_limit = "srq.create_limit_above_max_wr";
inline constexpr std::string_view ud_ah_other_pd = "ud.ah_other_pd";
inline constexpr std::string_view mw_bind_wr_type1 = "mw.bind_wr_type1";
inline constexpr std::string_view mw_bind_wr_imm = "mw.bind_wr_imm_data";
inline constexpr std::string_view below_rts_left_in_ring = "posting.send_below_rts_left_in_ring";
inline constexpr std::string_view err_then_reset_flushes = "qp.err_then_reset_keeps_flushes";
inline constexpr std::string_view sqd_post_waits_for_doorbell = "posting.send_in_sqd_waits_for_doorbell";
inline constexpr std::string_view read_max_rd_atomic_0 = "posting.read_with_max_rd_atomic_0";
inline constexpr std::string_view retry_cnt_7 = "fault.retry_cnt_7";
inline constexpr std::string_view local_fault_behind_unacked = "fault.send_sge_bad_behind_unacknowledged";
inline constexpr std::string_view solicited_arm_failed = "cq.solicited_arm_failed_completion";
inline constexpr std::string_view send_inv_region_rkey = "mw.send_inv_region_rkey";
inline constexpr std::string_view sq_drained_unasked = "async.sq_drained_unasked";
inline constexpr std::string_view poll_negative_count = "cq.poll_negative_count";
inline constexpr std::string_view message_over_2g = "posting.message_over_2g";

}  // namespace ids

inline constexpr std::array deviation_table{
    // Receive buffer too small on RC.
    deviation_row{ids::recv_too_small_rc, "spec",
                  {.req = {wc_status::rem_inv_req_err}, .resp = {wc_status::loc_len_err}},
                  "spec §3: resp LOC_LEN_ERR, req REM_INV_REQ_ERR"},
    deviation_row{ids::recv_too_small_rc, "rxe",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_qp_op_err}},
                  "rxe responder reports LOC_QP_OP_ERR and NAKs with REM_OP_ERR"},
    // Invalid receive SGE on RC: bad lkey, or an MR without LOCAL_WRITE.
    deviation_row{ids::recv_bad_lkey_rc, "spec",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_prot_err}},
                  "spec §3: resp LOC_PROT_ERR, req REM_OP_ERR"},
    deviation_row{ids::recv_bad_lkey_rc, "rxe",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_qp_op_err}},
                  "rxe responder reports LOC_QP_OP_ERR"},
    deviation_row{ids::recv_no_local_write_rc, "spec",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_prot_err}},
                  "spec §3: resp LOC_PROT_ERR, req REM_OP_ERR"},
    deviation_row{ids::recv_no_local_write_rc, "rxe",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_qp_op_err}},
                  "rxe responder reports LOC_QP_OP_ERR"},
    // A receive SGE with a bad lkey that the message does not reach (it fits in the ones before).
    deviation_row{ids::recv_bad_lkey_unreached_rc, "spec",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_prot_err}},
                  "spec §9: every SGE of a receive is checked: resp LOC_PROT_ERR, req REM_OP_ERR"},
    deviation_row{ids::recv_bad_lkey_unreached_rc, "rxe",
                  {.req = {wc_status::success}, .resp = {wc_status::success}},
                  "rxe (kernel 6.1, observed; copy_data looks an SGE up when the data enters it): the SEND lands"},
    deviation_row{ids::recv_past_region_unreached_rc, "spec",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_prot_err}},
                  "spec §9: a receive SGE must lie in its region: resp LOC_PROT_ERR, req REM_OP_ERR"},
    deviation_row{ids::recv_past_region_unreached_rc, "rxe",
                  {.req = {wc_status::success}, .resp = {wc_status::success}},
                  "rxe (kernel 6.1, observed by a differential fuzzer): it checks the bytes it copies, which lie in "
                  "the region: the SEND lands"},
    // Invalid local SGE on the send side.
    deviation_row{ids::send_bad_lkey, "spec", {.req = {wc_status::loc_prot_err}, .resp = status_set::nothing()},
                  "spec §3: req LOC_PROT_ERR"},
    deviation_row{ids::send_bad_lkey, "rxe",
                  {.req = {wc_status::loc_qp_op_err, wc_status::wr_flush_err}, .resp = status_set::nothing()},
                  "rxe: LOC_QP_OP_ERR, or WR_FLUSH_ERR on newer kernels"},
    deviation_row{ids::send_other_pd, "spec", {.req = {wc_status::loc_prot_err}, .resp = status_set::nothing()},
                  "spec §3: req LOC_PROT_ERR"},
    deviation_row{ids::send_other_pd, "rxe",
                  {.req = {wc_status::loc_qp_op_err, wc_status::wr_flush_err}, .resp = status_set::nothing()},
                  "rxe: LOC_QP_OP_ERR, or WR_FLUSH_ERR on newer kernels"},
    deviation_row{ids::send_out_of_range, "spec",
                  {.req = {wc_status::loc_prot_err}, .resp = status_set::nothing()}, "spec §3: req LOC_PROT_ERR"},
    deviation_row{ids::send_out_of_range, "rxe",
                  {.req = {wc_status::loc_prot_err, wc_status::loc_qp_op_err, wc_status::wr_flush_err},
                   .resp = status_set::nothing()},
                  "rxe: LOC_PROT_ERR observed (kernel 6.1: the lkey is valid, the range check fails); "
                  "LOC_QP_OP_ERR or WR_FLUSH_ERR as for other send-side SGE faults on other kernels"},
    // The same, the bad range (an SGE starting at its MR's end) followed by an SGE with a bad lkey.
    deviation_row{ids::send_out_of_range_before_bad_lkey, "spec",
                  {.req = {wc_status::loc_prot_err}, .resp = status_set::nothing()}, "spec §3: req LOC_PROT_ERR"},
    deviation_row{ids::send_out_of_range_before_bad_lkey, "rxe",
                  {.req = {wc_status::loc_prot_err, wc_status::wr_flush_err}, .resp = status_set::nothing()},
                  "rxe (kernel 6.1, observed by a differential fuzzer): the first SGE it copies from decides "
                  "(copy_data): its range check fails, LOC_PROT_ERR, before the bad lkey is looked up; "
                  "WR_FLUSH_ERR as for other send-side SGE faults on newer kernels"},
    // The same, a SEND or WRITE whose SGE runs past its MR three packets in (path MTU 1024).
    deviation_row{ids::send_runs_out_later, "spec",
                  {.req = {wc_status::loc_prot_err}, .resp = status_set::nothing(), .head_written = tri::no},
                  "spec §3: req LOC_PROT_ERR; the spec leaves the responder's bytes undefined, the spec profile "
                  "writes none"},
    deviation_row{ids::send_runs_out_later, "rxe",
                  {.req = {wc_status::loc_prot_err, wc_status::loc_qp_op_err, wc_status::wr_flush_err},
                   .resp = status_set::nothing(), .head_written = tri::yes},
                  "rxe (kernel 6.1, observed): the three packets before the bad byte are sent and written (a "
                  "SEND's into the receive, which stays posted until flushed); LOC_PROT_ERR"},
    // The same, a 2-packet WRITE_WITH_IMM whose second SGE (another PD's) the first packet does
    // not reach, to a responder QP without REMOTE_WRITE.
    deviation_row{ids::send_bad_after_refused_packet, "spec",
                  {.req = {wc_status::loc_prot_err}, .stays_rts = tri::yes},
                  "spec §3: req LOC_PROT_ERR; the spec profile checks every SGE before it sends: nothing "
                  "reaches the responder"},
    deviation_row{ids::send_bad_after_refused_packet, "rxe",
                  {.req = {wc_status::rem_inv_req_err}, .stays_rts = tri::no},
                  "rxe (kernel 6.1, observed by a differential fuzzer): the first packet goes out and the "
                  "responder, on the same device, NAKs it before the requester reaches the bad SGE: "
                  "REM_INV_REQ_ERR, the responder in ERR"},
    // A SEND of three packets (path MTU 1024) into a receive with room for two and a half.
    deviation_row{ids::recv_too_small_later, "spec", {.head_written = tri::no},
                  "spec §3: the failed receive's bytes are undefined; the spec profile writes none"},
    deviation_row{ids::recv_too_small_later, "rxe", {.head_written = tri::yes},
                  "rxe (kernel 6.1, observed): the two packets that fit are written before the third fails"},
    // An RC receive whose bad SGE (a bad lkey) the SEND reaches inside a packet.
    deviation_row{ids::recv_bad_sge_mid_packet, "spec", {.head_written = tri::no},
                  "spec §3: the failed receive's bytes are undefined; the spec profile writes none"},
    deviation_row{ids::recv_bad_sge_mid_packet, "rxe", {.head_written = tri::yes},
                  "rxe (kernel 6.1, observed by a differential fuzzer): copy_data writes a packet SGE by SGE, "
                  "so every byte before the bad SGE is written, those of the failing packet too"},
    // An RC SEND to a QP without a receive, with packets behind the one refused (a
    // SEND's later packets, a later WR), from a requester with RETRY_CNT 0.
    deviation_row{ids::rnr_nak_packets_behind, "spec",
                  {.req = {wc_status::rnr_retry_exc_err}, .resp = status_set::nothing()},
                  "spec §8.3: RNR_RETRY_EXC_ERR once RNR_RETRY is spent; behind an RNR NAK, the requests ahead of "
                  "the expected PSN are dropped (§8.4)"},
    deviation_row{ids::rnr_nak_packets_behind, "rxe",
                  {.req = {wc_status::retry_exc_err}, .resp = status_set::nothing()},
                  "rxe (kernel 6.1, observed by a differential fuzzer; rxe_resp.c, rxe_comp.c): the responder NAKs "
                  "the packet behind the refused one (also one a post_send during the RNR wait sends) with a PSN "
                  "sequence error, which the requester takes as a "
                  "transport retry (the first since an ACK; RETRY_CNT 7: for ever): with RETRY_CNT 0 "
                  "RETRY_EXC_ERR at once, whatever RNR_RETRY and the timers"},
    // An RDMA READ whose local SGEs are good, then bad (a bad lkey), in the response's first or second packet.
    deviation_row{ids::read_response_bad_sge_after_bytes, "spec", {.req = {wc_status::loc_prot_err}, .head_written = tri::no},
                  "spec §3: req LOC_PROT_ERR; the failed WR's local bytes are undefined; the spec profile checks "
                  "every SGE before it sends, and writes none"},
    deviation_row{ids::read_response_bad_sge_after_bytes, "rxe", {.req = {wc_status::loc_prot_err}, .head_written = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_comp.c do_read copies each response packet with copy_data, SGE "
                  "by SGE): every byte before the bad SGE is written, then LOC_PROT_ERR"},
    // An atomic whose result SGE has a bad lkey.
    deviation_row{ids::atomic_result_bad_lkey, "spec",
                  {.req = {wc_status::loc_prot_err}, .remote_ran = tri::no},
                  "spec §3: req LOC_PROT_ERR; the mock checks every local SGE before it sends: the target is "
                  "unchanged"},
    deviation_row{ids::atomic_result_bad_lkey, "rxe",
                  {.req = {wc_status::loc_prot_err}, .remote_ran = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_comp.c) looks at the result SGE when the response comes: the "
                  "atomic ran on the target, then LOC_PROT_ERR"},
    // UD send larger than the path MTU.
    deviation_row{ids::ud_over_mtu, "spec", {.req = {wc_status::loc_len_err}, .resp = status_set::nothing()},
                  "spec §3: an error completion (the mock reports LOC_LEN_ERR), nothing delivered: stricter than "
                  "IBA C10-93.1.1 (nothing sent, no error), so that the bug shows"},
    deviation_row{ids::ud_over_mtu, "rxe", {.req = {wc_status::success}, .resp = status_set::nothing()},
                  "rxe: SUCCESS and nothing is sent"},
    // The same from an SGE with a bad lkey: which of the two faults is reported.
    deviation_row{ids::ud_over_mtu_bad_lkey, "spec",
                  {.req = {wc_status::loc_prot_err}, .resp = status_set::nothing(), .stays_rts = tri::no},
                  "spec §3: the mock checks the SGEs first: LOC_PROT_ERR, the QP to ERR"},
    deviation_row{ids::ud_over_mtu_bad_lkey, "rxe",
                  {.req = {wc_status::success}, .resp = status_set::nothing(), .stays_rts = tri::yes},
                  "rxe (kernel 6.1, observed): the MTU is tested first: SUCCESS, nothing sent, the QP in RTS"},
    // UD receive smaller than payload + 40.
    deviation_row{ids::ud_recv_too_small, "spec",
                  {.req = {wc_status::success}, .resp = {wc_status::loc_len_err}, .stays_rts = tri::yes},
                  "spec §7.1: resp LOC_LEN_ERR, the datagram is lost and the QP stays in RTS"},
    deviation_row{ids::ud_recv_too_small, "rxe",
                  {.req = {wc_status::success},
                   .resp = status_set{wc_status::loc_qp_op_err} | status_set::nothing(),
                   .stays_rts = tri::either},
                  "rxe >= 6.10 drops it silently and stays in RTS; 6.1 (observed) completes it LOC_QP_OP_ERR "
                  "and moves the QP to ERR"},
    // Unsignaled WRs keep their SQ slot until a later signaled WR is polled.
    deviation_row{ids::slot_release, "spec", {.post_errno = ENOMEM},
                  "spec §6: hardware rule, the SQ is full after max_send_wr unsignaled WRs"},
    deviation_row{ids::slot_release, "rxe", {.post_errno = 0}, "rxe frees a slot as soon as the WR completes"},
    // IBV_WC_GRH on RC/UC receive completions.
    deviation_row{ids::grh_flag_rc_uc, "spec", {.grh_flag = tri::no}, "spec §3: GRH only when one was received (UD)"},
    deviation_row{ids::grh_flag_rc_uc, "rxe", {.grh_flag = tri::yes}, "rxe sets IBV_WC_GRH on RC/UC too"},
    // Opcode not valid for the transport (code that bypasses the typed layer).
    deviation_row{ids::invalid_opcode, "spec", {.post_errno = EINVAL, .req = status_set::nothing()},
                  "spec §2: the mock rejects it at post time"},
    deviation_row{ids::invalid_opcode, "rxe",
                  {.post_errno = 0, .req = {wc_status::loc_qp_op_err, wc_status::wr_flush_err}},
                  "rxe accepts it at post time, then the QP errors"},
    // post_send below RTS.
    deviation_row{ids::post_below_rts, "spec", {.post_errno = EINVAL, .bad_wr_set = true},
                  "spec §4: EINVAL, bad_wr names the first WR"},
    deviation_row{ids::post_below_rts, "rxe", {.post_errno = EINVAL, .bad_wr_set = false},
                  "rxe (kernel 6.1, observed): the doorbell fails after the WQE sits in the ring; bad_wr is NULL "
                  "(posting.send_below_rts_left_in_ring: what becomes of the WQE)"},
    // A UC WRITE_WITH_IMM the responder refuses (bad rkey), a receive posted.
    deviation_row{ids::uc_write_imm_bad_rkey, "spec", {.resp = status_set::nothing()},
                  "spec (UC): dropped silently, no NAK; the receive stays posted"},
    deviation_row{ids::uc_write_imm_bad_rkey, "rxe", {.resp = {wc_status::rem_access_err}},
                  "rxe (kernel 6.1, observed): from a shared receive queue a receive is taken and completes "
                  "REM_ACCESS_ERR (a QP's own receive stays); the QP stays in RTS"},
    // post_recv on a QP in RESET, or on a QP created on an SRQ.
    deviation_row{ids::recv_refused_bad_wr, "spec", {.post_errno = EINVAL, .bad_wr_set = true},
                  "spec §4: EINVAL, bad_wr names the first WR"},
    deviation_row{ids::recv_refused_bad_wr, "rxe", {.post_errno = EINVAL, .bad_wr_set = false},
                  "rxe (kernel 6.1, observed): its provider refuses before it reads a WR; bad_wr is NULL"},
    // Where SQ/RQ posts start failing with ENOMEM.
    deviation_row{ids::queue_capacity, "spec", {.exact_capacity = true},
                  "spec §4: ENOMEM once max_send_wr / max_recv_wr WRs are outstanding"},
    deviation_row{ids::queue_capacity, "rxe", {.exact_capacity = false},
                  "rxe (kernel 6.1, observed): create_qp reports the requested depth, the ring holds 2^k-1"},
    // Where SRQ posts start failing with ENOMEM, against the max_wr create wrote back.
    deviation_row{ids::srq_ring, "spec", {.exact_capacity = true},
                  "spec (ibv_create_srq(3)): the grant is written back; max_wr receives posted fill the SRQ"},
    deviation_row{ids::srq_ring, "rxe", {.exact_capacity = false},
                  "rxe (kernel 6.1, observed): create writes back max_wr as asked; the ring takes 2^k-1 receives "
                  "(and a limit up to that), which query_srq reports"},
    // What create_qp grants of the send caps, and create_cq of the size.
    deviation_row{ids::create_grants, "spec", {.rounds_grants = false},
                  "spec §4 (ibv_create_qp(3), ibv_create_cq(3)): at least what was asked; the mock grants exactly that"},
    deviation_row{ids::create_grants, "rxe", {.rounds_grants = true},
                  "rxe (kernel 6.1, observed): a send WQE holds max(16 x max_send_sge, max_inline_data) bytes and "
                  "both are granted from it (SGE 1, inline 0 gives inline 16; SGE 1, inline 64 gives 4 SGEs); "
                  "create_cq(n) reports 2^k-1 >= n (10 gives 15, 16 gives 31)"},
    // An atomic whose local SGE is longer than 8 bytes.
    deviation_row{ids::atomic_len_over_8, "spec", {.post_errno = EINVAL, .req = status_set::nothing()},
                  "spec §3: local length != 8 is EINVAL at post"},
    deviation_row{ids::atomic_len_over_8, "rxe", {.post_errno = 0, .req = {wc_status::success}},
                  "rxe provider (observed): only fewer than 8 bytes in the SGEs are refused, in any number of "
                  "SGEs; the first 8 take the result and the completion's byte_len is the SGEs' total"},
    // An atomic with 8 good bytes in its first SGE and a bad one after (bad lkey, or past its region).
    deviation_row{ids::atomic_sge_past_result_unreached, "spec", {.post_errno = EINVAL, .req = status_set::nothing()},
                  "spec §3: an atomic's local data is one SGE of 8 bytes: EINVAL at post"},
    deviation_row{ids::atomic_sge_past_result_unreached, "rxe",
                  {.post_errno = 0, .req = {wc_status::success}, .remote_ran = tri::yes, .head_written = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_comp.c do_atomic copies the 8 result bytes with copy_data, which "
                  "looks an SGE up only when the bytes reach it): the SGE past them is never looked at: success"},
    // An atomic whose 8 result bytes are split 4 (good) + 4 (bad lkey, or crossing their region's end).
    deviation_row{ids::atomic_result_split_bad_sge, "spec", {.post_errno = EINVAL, .req = status_set::nothing()},
                  "spec §3: an atomic's local data is one SGE of 8 bytes: EINVAL at post"},
    deviation_row{ids::atomic_result_split_bad_sge, "rxe",
                  {.post_errno = 0, .req = {wc_status::loc_prot_err}, .remote_ran = tri::yes, .head_written = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_comp.c copy_data writes SGE by SGE): the atomic runs, the first 4 "
                  "bytes of the original value are written, then LOC_PROT_ERR at the bad SGE"},
    // An atomic with IBV_SEND_INLINE (on a QP with max_inline_data 64).
    deviation_row{ids::atomic_inline, "spec", {.post_errno = EINVAL, .req = status_set::nothing(),
                  .remote_ran = tri::no},
                  "spec §4.1 (ibv_post_send(3)): IBV_SEND_INLINE is for SEND and RDMA WRITE only: EINVAL at post"},
    deviation_row{ids::atomic_inline, "rxe", {.post_errno = 0, .req = {wc_status::loc_prot_err},
                  .remote_ran = tri::yes},
                  "rxe provider (observed): posted; the target changes, then LOC_PROT_ERR: the inline bytes took "
                  "the place of the SGEs the result should land in"},
    // RDMA WRITE with immediate and a bad rkey: the receive the immediate would have used.
    deviation_row{ids::write_imm_bad_rkey, "spec", {.req = {wc_status::rem_access_err}, .resp = {wc_status::loc_access_err}},
                  "spec §3 (ibv_poll_cq(3) IBV_WC_LOC_ACCESS_ERR): the responder's receive completes with a "
                  "local access error, the requester gets the REM_ACCESS_ERR NAK"},
    deviation_row{ids::write_imm_bad_rkey, "rxe", {.req = {wc_status::rem_access_err}, .resp = {wc_status::rem_access_err}},
                  "rxe completes the responder's receive with the NAK's status, REM_ACCESS_ERR"},
    // The same over two packets (2048 bytes, path MTU 1024).
    deviation_row{ids::write_imm_bad_rkey_2_packets, "spec",
                  {.req = {wc_status::rem_access_err}, .resp = {wc_status::loc_access_err}},
                  "spec §3: a message is checked as a whole: as for one packet"},
    deviation_row{ids::write_imm_bad_rkey_2_packets, "rxe",
                  {.req = {wc_status::rem_access_err}, .resp = {wc_status::wr_flush_err}},
                  "rxe (kernel 6.1, observed) refuses the rkey on the first packet, which takes no receive: the "
                  "receive is flushed with the QP"},
    // The same (one packet; or to an MR without REMOTE_WRITE) with no receive posted, RNR retry count 0.
    deviation_row{ids::write_imm_bad_rkey_no_receive, "spec", {.req = {wc_status::rem_access_err}, .stays_rts = tri::no},
                  "spec §3: the rkey is refused whether or not a receive is posted: REM_ACCESS_ERR, the responder "
                  "in ERR"},
    deviation_row{ids::write_imm_bad_rkey_no_receive, "rxe",
                  {.req = {wc_status::rnr_retry_exc_err}, .stays_rts = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_resp.c check_resource runs before check_rkey): the packet that "
                  "carries the immediate finds no receive and is RNR NAKed before its rkey is looked at: "
                  "RNR_RETRY_EXC_ERR, the responder stays in RTS"},
    // req_notify_cq on a CQ created without a completion channel: no event can ever come.
    deviation_row{ids::arm_without_channel, "spec", {.verb_errno = EINVAL},
                  "the mock refuses an arm that can never deliver an event, so the bug is loud"},
    deviation_row{ids::arm_without_channel, "rxe", {.verb_errno = 0}, "rxe accepts it (and no event comes)"},
    // WRs posted after the QP is already in ERR.
    deviation_row{ids::post_in_err, "spec", {.req = {wc_status::wr_flush_err}, .resp = {wc_status::wr_flush_err}},
                  "they complete with WR_FLUSH_ERR, like WRs outstanding at the move to ERR"},
    deviation_row{ids::post_in_err, "rxe",
                  {.req = status_set{wc_status::wr_flush_err} | status_set::nothing(),
                   .resp = status_set{wc_status::wr_flush_err} | status_set::nothing()},
                  "rxe (kernel 6.1, observed): a send posted in ERR is flushed in one run, never completes in another; "
                  "a receive posted in ERR never completes"},
    // A WRITE through a window's rkey to bytes of its region outside the window.
    deviation_row{ids::mw_out_of_window, "spec", {.req = {wc_status::rem_access_err}},
                  "spec §10.5: a window grants its own range only: REM_ACCESS_ERR"},
    deviation_row{ids::mw_out_of_window, "rxe", {.req = {wc_status::success}},
                  "rxe 6.1 checks the range against the window's region, not the window: the WRITE lands"},
    // An SRQ receive's buffer, the SRQ and its QP in two PDs.
    deviation_row{ids::srq_recv_in_srq_pd, "spec", {.req = {wc_status::success}, .resp = {wc_status::success}},
                  "spec §9: an SRQ's receives are checked against the SRQ's PD"},
    deviation_row{ids::srq_recv_in_srq_pd, "rxe",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_qp_op_err}},
                  "rxe 6.1 (observed) checks an SRQ receive against the QP's PD: refused, the QP to ERR"},
    deviation_row{ids::srq_recv_in_qp_pd, "spec",
                  {.req = {wc_status::rem_op_err}, .resp = {wc_status::loc_prot_err}},
                  "spec §9: the QP's PD is not the SRQ's: resp LOC_PROT_ERR, req REM_OP_ERR"},
    deviation_row{ids::srq_recv_in_qp_pd, "rxe", {.req = {wc_status::success}, .resp = {wc_status::success}},
                  "rxe 6.1 (observed) checks an SRQ receive against the QP's PD: the SEND lands"},
    // The receive of a SEND_WITH_INV.
    deviation_row{ids::recv_with_inv_flag, "spec", {.inv_flag = tri::yes},
                  "spec §10.5: wc_flags has WITH_INV, the completion names the rkey"},
    deviation_row{ids::recv_with_inv_flag, "rxe", {.inv_flag = tri::no},
                  "rxe 6.1 names the rkey but sets no WITH_INV (observed: the receive's wc_flags are GRH alone, "
                  "as on every RC/UC receive)"},
    // A SEND_WITH_INV naming a type 2 window of another PD of the receiving device.
    deviation_row{ids::send_inv_other_pd, "spec",
                  {.req = {wc_status::rem_inv_req_err}, .resp = {wc_status::rem_inv_req_err},
                   .window_invalidated = tri::no},
                  "spec §10.5: an rkey outside the receiving QP's PD is invalid: REM_INV_REQ_ERR, the window "
                  "untouched"},
    deviation_row{ids::send_inv_other_pd, "rxe",
                  {.req = {wc_status::success}, .resp = {wc_status::success}, .window_invalidated = tri::yes},
                  "rxe 6.1 (observed) looks the rkey up device-wide: the SEND lands and the other PD's window is "
                  "invalidated"},
    // A SEND_WITH_INV naming an rkey the receiver cannot invalidate: a memory region's.
    deviation_row{ids::send_inv_region_rkey, "spec",
                  {.req = {wc_status::rem_inv_req_err}, .resp = {wc_status::rem_inv_req_err}},
                  "spec §10.5: only a type 2 window's rkey can be invalidated: an invalid request, NAKed, both "
                  "queue pairs in ERR"},
    deviation_row{ids::send_inv_region_rkey, "rxe",
                  {.req = {wc_status::success}, .resp = {wc_status::rem_inv_req_err}},
                  "rxe 6.1 (observed, audit 36): the receive fails and its queue pair goes to ERR, but the SEND is "
                  "acknowledged: the sender sees success and stays in RTS"},
    // A failed send completion, then a failed receive of an unsolicited SEND, on a CQ
    // armed for solicited completions only: does either raise the CQ's event?
    deviation_row{ids::solicited_arm_failed, "spec", {.verb_errno = 0},
                  "ibv_req_notify_cq(3): a completion with an error status is solicited: the event comes"},
    deviation_row{ids::solicited_arm_failed, "rxe", {.verb_errno = ETIMEDOUT},
                  "rxe 6.1 (observed, audit 36; rxe_comp.c posts send completions unsolicited, rxe_resp.c takes a "
                  "receive's from the packet's SE bit): no event; only a flushed receive (no packet) raises it"},
    // poll_cq asked for a negative number of completions.
    deviation_row{ids::poll_negative_count, "spec", {.verb_errno = EINVAL},
                  "ibv_poll_cq(3) leaves a negative num_entries unspecified; the mock refuses it (-EINVAL), so a "
                  "count computed wrongly is seen"},
    deviation_row{ids::poll_negative_count, "rxe", {.verb_errno = 0},
                  "rxe 6.1's provider (observed, audit 36; mlx5's too) loops up to num_entries: 0 completions, "
                  "none consumed"},
    // A move from RTS to SQD without EN_SQD_ASYNC_NOTIFY: is SQ_DRAINED raised?
    deviation_row{ids::sq_drained_unasked, "spec", {.async_event = tri::no},
                  "IBA: SQ_DRAINED is raised once the send queue drained when the move to SQD asked for it "
                  "(EN_SQD_ASYNC_NOTIFY), else never"},
    deviation_row{ids::sq_drained_unasked, "rxe", {.async_event = tri::yes},
                  "rxe 6.1 (observed, audit 36): raised at every move to SQD, asked for or not, the send queue "
                  "idle or not"},
    // LOCAL_INV of a type 2 window bound through a UC queue pair, posted there.
    deviation_row{ids::local_inv_on_uc, "spec", {.req = {wc_status::success}},
                  "spec §10.5 (and rdmavt): LOCAL_INV is a local operation of RC and UC queue pairs"},
    deviation_row{ids::local_inv_on_uc, "rxe", {.req = {wc_status::loc_qp_op_err}},
                  "rxe 6.1 (observed) takes LOCAL_INV on RC only: LOC_QP_OP_ERR, the queue pair in ERR (the window "
                  "stays bound)"},
    // A QP on an SRQ moved to ERR: the Last WQE Reached event.
    deviation_row{ids::srq_last_wqe_event, "spec", {.async_event = tri::yes},
                  "IB spec (affiliated async events): QP_LAST_WQE_REACHED once the QP takes no more SRQ WQEs"},
    deviation_row{ids::srq_last_wqe_event, "rxe", {.async_event = tri::no},
                  "rxe (kernel 6.1, observed): no event when a QP on an SRQ is moved to ERR"},
    // Completions a QP had in its CQ, not polled yet, when it was destroyed.
    deviation_row{ids::destroyed_qp_completions, "spec", {.req = status_set::nothing()},
                  "ibv_destroy_qp(3) cleans them out of the CQ, as mlx5 does: a poll returns none"},
    deviation_row{ids::destroyed_qp_completions, "rxe", {.req = {wc_status::success}},
                  "rxe (kernel 6.1, observed) leaves them: later polls return them, with the destroyed QP's number"},
    // A send completion lost to a full CQ: the QP, its event, and the next send's completion
    // once the CQ was polled empty.
    deviation_row{ids::send_overflow, "spec",
                  {.req = status_set::nothing(), .stays_rts = tri::no, .async_event = tri::yes},
                  "IBA C9-218: the QP goes to ERR with an affiliated error (QP_FATAL; mlx5 raises it on every QP "
                  "of the CQ); C11-37: the CQ takes no more completions (the next send's is lost)"},
    deviation_row{ids::send_overflow, "rxe", {.req = {wc_status::success}, .stays_rts = tri::yes, .async_event = tri::no},
                  "rxe (kernel 6.1; rxe_comp.c ignores rxe_cq_post's failure): only the completion that did not fit "
                  "is lost; the QP stays in RTS and the CQ takes the next completion once it has room"},
    // A receive completion lost to a full CQ: the receiving QP and its event.
    deviation_row{ids::recv_overflow, "spec", {.stays_rts = tri::no, .async_event = tri::yes},
                  "IBA C9-218: the QP goes to ERR with an affiliated error (QP_FATAL); the message is not "
                  "acknowledged"},
    deviation_row{ids::recv_overflow, "rxe", {.stays_rts = tri::no, .async_event = tri::no},
                  "rxe (kernel 6.1, observed; rxe_resp.c's CQ overflow state): the QP goes to ERR without an event; "
                  "the sender's WR never completes"},
    // The flushes of a queue pair moved to ERR while its send CQ was full, the CQ then polled.
    deviation_row{ids::flushes_into_full_cq, "spec", {.req = {wc_status::wr_flush_err}, .async_event = tri::no},
                  "IBA leaves it to the device when a flush is written (the mock writes them once a poll found "
                  "the CQ empty, semantics.md §1.3): by then there is room, and every outstanding WR flushes"},
    deviation_row{ids::flushes_into_full_cq, "rxe", {.req = status_set::nothing(), .async_event = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_qp_error runs the completer at once, rxe_comp.c ignores "
                  "rxe_cq_post's failure): the flushes find the CQ full and are lost, each with a CQ_ERR"},
    // The sender's completion of SEND_WITH_IMM / RDMA_WRITE_WITH_IMM.
    deviation_row{ids::sender_imm_flag, "spec", {.imm_flag = tri::no},
                  "ibv_poll_cq(3): IBV_WC_WITH_IMM says the receive carries an immediate; the send side has none"},
    deviation_row{ids::sender_imm_flag, "rxe", {.imm_flag = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_comp.c make_send_cqe) sets IBV_WC_WITH_IMM, imm_data 0"},
    // A request the responder refuses for access (a bad rkey): its QP goes to ERR.
    deviation_row{ids::responder_error_event, "spec", {.async_event = tri::yes},
                  "IB spec (affiliated async events): the responder's QP raises QP_ACCESS_ERR (local access "
                  "violation)"},
    deviation_row{ids::responder_error_event, "rxe", {.async_event = tri::no},
                  "rxe (kernel 6.1, observed): no asynchronous event, the QP goes to ERR silently"},
    // The hop limit (IPv4: TTL) a UD datagram arrives with, sent through an address
    // handle whose hop_limit is 9.
    deviation_row{ids::ud_grh_hop_limit, "spec", {.hop_limit = -1},
                  "spec §7.1: the packet's network header carries the address handle's hop limit"},
    // An MR's rkey used as the lkey of a SEND's SGE (an MR with remote access).
    deviation_row{ids::rkey_as_lkey, "spec", {.req = {wc_status::loc_prot_err}},
                  "spec §10.1: L_Key and R_Key may differ; the mock's spec profile makes them differ, so the "
                  "wrong key is caught (LOC_PROT_ERR)"},
    deviation_row{ids::mr_length_zero, "spec", {.verb_errno = EINVAL},
                  "nothing to register (mlx5's ib_umem_get finds no page size for it): EINVAL"},
    deviation_row{ids::mr_length_zero, "rxe", {.verb_errno = 0},
                  "rxe (kernel 6.1, observed): a region of no bytes, whose SGEs of length 0 are valid"},
    deviation_row{ids::rkey_as_lkey, "rxe", {.req = {wc_status::success}},
                  "rxe (kernel 6.1): an MR with remote access has its lkey as rkey (one without has rkey 0), so "
                  "the SEND goes through"},
    deviation_row{ids::ud_grh_hop_limit, "rxe", {.hop_limit = 64},
                  "rxe (kernel 6.1, observed): 64 whatever the address handle asks; the IPv4 header's checksum "
                  "is 0 and its identification varies"},
    // A limit given to create_srq above max_wr, up to the receives the SRQ takes.
    deviation_row{ids::srq_create_limit, "spec", {.verb_errno = EINVAL},
                  "spec §9.1: a limit is at most max_wr, the grant: EINVAL"},
    deviation_row{ids::srq_create_limit, "rxe", {.verb_errno = 0},
                  "rxe (kernel 6.1, observed; rxe_srq.c rxe_srq_chk_attr checks IB_SRQ_LIMIT against the ring's "
                  "index_mask): armed up to the 2^k-1 receives the ring takes; a raw ibv_create_srq takes any "
                  "srq_limit unchecked"},
    // A WRITE whose SGEs add up to more than 2^31 bytes.
    deviation_row{ids::message_over_2g, "spec", {.post_errno = EINVAL, .bad_wr_set = true},
                  "IBA: a message is at most 2^31 bytes (the mock's max_msg_sz): one above it is EINVAL at post"},
    deviation_row{ids::message_over_2g, "rxe",
                  {.post_errno = 0, .req = {wc_status::loc_qp_op_err}, .stays_rts = tri::no},
                  "rxe 6.1 (observed, audit 36): posted (its provider checks no total), then the requester fails "
                  "it before reading an SGE: LOC_QP_OP_ERR, the QP in ERR"},
    // A UD send whose address handle belongs to another PD than the QP's.
    deviation_row{ids::ud_ah_other_pd, "spec", {.post_errno = EINVAL, .bad_wr_set = true},
                  "spec §4.1: a UD WR with an AH of another PD is EINVAL at post"},
    deviation_row{ids::ud_ah_other_pd, "rxe",
                  {.post_errno = 0, .req = {wc_status::loc_qp_op_err}, .stays_rts = tri::no},
                  "rxe (kernel 6.1, observed; rxe_av.c rxe_get_av: PDs don't match for AH and QP): posted, then "
                  "the requester finds no address vector: LOC_QP_OP_ERR, the QP in ERR"},
    // A BIND_MW WR (post_send) naming a type 1 window.
    deviation_row{ids::mw_bind_wr_type1, "spec", {.post_errno = EINVAL, .bad_wr_set = true},
                  "spec §10.5 (ibv_post_send(3)): a BIND_MW WR binds a type 2 window; a type 1 window is bound "
                  "by ibv_bind_mw: EINVAL at post"},
    deviation_row{ids::mw_bind_wr_type1, "rxe", {.post_errno = 0, .req = {wc_status::success}},
                  "rxe (kernel 6.1, observed; rxe_mw.c rxe_check_bind_mw only asks a type 1 window to be valid): "
                  "the window is bound with the WR's rkey (ibv_mw::rkey unchanged), as ibv_bind_mw would"},
    // A BIND_MW WR whose imm_data is not 0.
    deviation_row{ids::mw_bind_wr_imm, "spec", {.post_errno = 0, .req = {wc_status::success}},
                  "ibv_post_send(3): imm_data is read by the *_WITH_IMM opcodes only: the bind runs"},
    deviation_row{ids::mw_bind_wr_imm, "rxe", {.post_errno = EINVAL, .bad_wr_set = true},
                  "rxe provider (rdma-core providers/rxe/rxe.c validate_send_wr): a BIND_MW with imm_data, SGEs "
                  "or on a QP other than RC or UC is EINVAL"},
    // What becomes of a send refused below RTS once the QP is in RTS.
    deviation_row{ids::below_rts_left_in_ring, "spec", {.req = status_set::nothing()},
                  "spec §4.1: a refused WR was not posted: it never runs, nor flushes"},
    deviation_row{ids::below_rts_left_in_ring, "rxe", {.req = {wc_status::success}},
                  "rxe (kernel 6.1, observed; rxe_verbs.c rxe_post_send refuses below RTS after the provider "
                  "wrote the WQE into the ring): the next post in RTS sends it first; a move to ERR flushes it"},
    // A send posted in SQD, once SQD->RTS: what sends it.
    deviation_row{ids::sqd_post_waits_for_doorbell, "spec", {.req = {wc_status::success}},
                  "spec §4.1: a WR posted in SQD executes after SQD->RTS"},
    deviation_row{ids::sqd_post_waits_for_doorbell, "rxe", {.req = status_set::nothing()},
                  "rxe (kernel 6.1, observed; rxe_qp.c rxe_qp_from_attr's RTS case sets req.state READY without "
                  "running the requester): it waits in the ring for the next post_send's doorbell, which sends it "
                  "first; a move to ERR flushes it"},
    // A QP with sends stuck (RNR) and receives posted, moved to ERR and at once to RESET.
    deviation_row{ids::err_then_reset_flushes, "spec", {.req = status_set::nothing(), .resp = status_set::nothing()},
                  "spec §1.3: →RESET drops outstanding WRs without completions; the mock writes a move to ERR's "
                  "flushes once a poll finds nothing, so a RESET before that drops them"},
    deviation_row{ids::err_then_reset_flushes, "rxe", {.req = {wc_status::wr_flush_err}, .resp = {wc_status::wr_flush_err}},
                  "rxe (kernel 6.1, observed; rxe_qp.c rxe_qp_error runs the responder and completer tasks): the "
                  "move to ERR flushes the receives and sends into the CQs at once, and the RESET after it leaves "
                  "them there"},
    // A READ or atomic on a QP connected with max_rd_atomic 0.
    deviation_row{ids::read_max_rd_atomic_0, "spec", {.post_errno = EINVAL, .bad_wr_set = true},
                  "spec §4.1: it could never issue: EINVAL at post"},
    deviation_row{ids::read_max_rd_atomic_0, "rxe",
                  {.post_errno = 0, .req = status_set::nothing(), .stays_rts = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_req.c check_init_depth finds no rd_atomic credit): posted, never "
                  "issued, and every WR behind it waits; the QP stays in RTS, a move to ERR flushes them"},
    // RC with RETRY_CNT 7 towards a peer that never answers.
    deviation_row{ids::retry_cnt_7, "spec", {.req = {wc_status::retry_exc_err}},
                  "spec §8.2: RETRY_CNT 7 is seven retries (RNR_RETRY 7 alone means for ever): RETRY_EXC_ERR"},
    deviation_row{ids::retry_cnt_7, "rxe", {.req = status_set::nothing(), .stays_rts = tri::yes},
                  "rxe (kernel 6.1, observed; rxe_comp.c never counts RETRY_CNT 7 down): retried for ever, no "
                  "completion; the QP stays in RTS"},
    // RC: a WRITE with a bad lkey behind a WR still waiting for its answer (an RNR retry, a
    // peer in ERR that answers nothing), RETRY_CNT 2, RNR_RETRY 1.
    deviation_row{ids::local_fault_behind_unacked, "spec",
                  {.req = {wc_status::rnr_retry_exc_err, wc_status::retry_exc_err}, .stays_rts = tri::no},
                  "spec §8.2: the WR ahead runs out of retries (RNR_RETRY_EXC_ERR, or RETRY_EXC_ERR), the QP "
                  "goes to ERR and the faulty WR flushes"},
    deviation_row{ids::local_fault_behind_unacked, "rxe",
                  {.req = status_set{wc_status::rnr_retry_exc_err, wc_status::retry_exc_err} | status_set::nothing()},
                  "rxe (kernel 6.1, observed; rxe_req.c's err path sets req.state ERROR without rxe_qp_error(), "
                  "rxe_comp.c re-arms its retry timer only while req.state is READY): no completion: the WR ahead "
                  "is never sent again and the QP stays in RTS until a move to ERR flushes both. The mock's rxe "
                  "profile does not model it: it completes as the spec (docs/semantics.md §13 says why)"},
};

/// The row for a scenario under a device profile, or null when there is none.
inline const outcome* find_expected(std::string_view scenario, std::string_view profile) {
  for (const auto& r : deviation_table)
    if (r.scenario == scenario && r.profile == profile) return &r.expect;
  return nullptr;
}

#ifndef CONF_DEVIATIONS_TABLE_ONLY
/// The row for a scenario under a device profile; fails the scenario when there is none.
inline outcome expected(std::string_view scenario, std::string_view profile) {
  if (const outcome* o = find_expected(scenario, profile)) return *o;
  FAIL("no deviation row for scenario " << std::string(scenario) << " under profile " << std::string(profile));
  return {};
}

/// Checks a status against a set, printing both. The status is evaluated once, before the
/// check: doctest builds the message in a lambda only when the check fails, and an
/// argument such as `fx.poll_one(...).status` would then poll a second completion.
#define CONF_CHECK_STATUS(set, status)                                                                \
  do {                                                                                                \
    const ::rdmakit::wc_status conf_checked_status_ = (status);                                       \
    CHECK_MESSAGE((set).allows(conf_checked_status_), "status "                                       \
                      << std::string(rdmakit::to_string(conf_checked_status_)) << " not in {"         \
                      << (set).to_string() << "}");                                                   \
  } while (false)

/// Posts `wr` on `end` (a harness endpoint: its qp and send_cq) and checks what `want`
/// says of a WR a device may refuse at post: its errno and bad_wr (nothing completes),
/// or, posted, its completion's status (want.req). True when it was posted.
template <class B, class Fixture, class End>
bool check_post_outcome(Fixture& fx, const End& end, typename B::send_wr& wr, const outcome& want,
                        const char* completion_name) {
  typename B::send_wr* bad = nullptr;
  CHECK(B::post_send(end.qp, &wr, &bad) == want.post_errno);
  if (want.post_errno != 0) {
    CHECK(bad == (want.bad_wr_set ? &wr : nullptr));
    CHECK(fx.drain(end.send_cq).empty());
    return false;
  }
  CONF_CHECK_STATUS(want.req, fx.poll_one(end.send_cq, completion_name).status);
  return true;
}
#endif

}  // namespace conf
