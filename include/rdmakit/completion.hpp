#pragma once
/// One native work completion (`B::wc`, copied: it may be kept after the callback)
/// with named accessors.
/// rdmakit keeps the top bit of every wr_id to itself: it marks receive WRs, so a
/// flushed completion (whose opcode is meaningless) still says which queue it is from.
/// Your wr_ids therefore have 63 bits.
#include <rdmakit/backend.hpp>

#include <bit>
#include <concepts>
#include <cstdint>
#include <string>
#include <system_error>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
inline constexpr std::uint64_t recv_wr_bit = std::uint64_t{1} << 63;
/// The wr_id of the drain marker reset() posts on the queue pair it replaces (retire,
/// qp_setup.hpp): a receive's as the layer writes them (bit 63), which no receive takes.
inline constexpr std::uint64_t drain_wr_id = ~std::uint64_t{0};
/// The wr_ids a receive may have: below 2^63 - 1 (bit 63 and drain_wr_id are the layer's).
inline constexpr std::uint64_t recv_wr_id_end = recv_wr_bit - 1;
/// Whether receives with wr_ids first, first + 1, ... (n of them) take an id they may not.
inline bool bad_recv_ids(std::uint64_t first, std::size_t n) noexcept {
  return n != 0 && (first >= recv_wr_id_end || n - 1 >= recv_wr_id_end - first);
}

constexpr std::uint32_t net_to_host32(std::uint32_t v) noexcept {
  if constexpr (std::endian::native == std::endian::little)
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
  else
    return v;
}
}  // namespace detail

/// The cause of a failed completion and the usual fix, in one sentence.
inline const char* explain(wc_status s) noexcept {
  switch (s) {
    case wc_status::success: return "success";
    case wc_status::loc_len_err:
      return "a message does not fit: the receive buffer is smaller than the incoming message (UD: "
             "payload + 40-byte GRH), or a UD send is larger than the path MTU (UD messages are one packet)";
    case wc_status::loc_qp_op_err:
      return "the WR is not valid for this queue pair (opcode, SGE count, inline size or state)";
    case wc_status::loc_prot_err:
      return "a local SGE is wrong: bad lkey, range outside its region, region of another "
             "protection domain, or a region without LOCAL_WRITE where the HCA writes";
    case wc_status::wr_flush_err:
      return "flushed: the queue pair moved to ERR (an earlier WR failed or the peer broke the "
             "connection), so every outstanding WR completes with this status";
    case wc_status::rem_inv_req_err:
      return "the responder refused the request: its queue pair lacks the remote access flag, "
             "the message is longer than its receive, or its max_dest_rd_atomic is 0";
    case wc_status::rem_access_err:
      return "the remote key, address range or the remote region's access rights do not allow "
             "this operation";
    case wc_status::rem_op_err:
      return "the responder could not complete the operation (for example an invalid receive SGE)";
    case wc_status::retry_exc_err:
      return "the peer did not answer within retry_cnt timeouts: it is down or unreachable, its queue "
             "pair is not in RTR (check the endpoint exchange), or it went to ERR (say its CQ overflowed "
             "because the peer did not poll it: the peer's device raised an asynchronous event)";
    case wc_status::rnr_retry_exc_err:
      return "the peer had no receive posted (RNR) for rnr_retry attempts: post receives before "
             "the sender sends";
    case wc_status::loc_access_err: return "local access error (memory window or access rights)";
    case wc_status::bad_resp_err: return "unexpected transport response from the peer";
    case wc_status::fatal_err: return "fatal device error";
    case wc_status::resp_timeout_err: return "response timeout";
    default: return "see the device's documentation for this status";
  }
}

namespace detail {
/// completion::status_message's text. Not a template: compiled once per program in
/// separate builds, once per translation unit (not per backend) otherwise. Without
/// `show_wr_id` (an awaited WR: the wr_id is the async layer's, not the caller's) the
/// text names the queue pair alone.
std::string status_message(wc_status s, bool recv, std::uint64_t wr_id, std::uint32_t qp_num, bool show_wr_id = true);
}  // namespace detail

/// One work completion, as polled from a completion queue.
template <verbs_backend B>
class completion {
 public:
  /// Wraps a polled work completion; `recv_offset` is where the payload starts in receive buffers (40 on UD).
  explicit completion(const typename B::wc& w, std::uint32_t recv_offset = 0) noexcept
      : wc_(w), recv_offset_(recv_offset) {}

  /// The wr_id you posted (63 bits).
  std::uint64_t wr_id() const noexcept { return B::get_wr_id(wc_) & ~detail::recv_wr_bit; }
  /// True for receive completions, flushed ones included.
  bool is_recv() const noexcept { return (B::get_wr_id(wc_) & detail::recv_wr_bit) != 0; }
  /// True for send-queue completions (send, write, read, atomics), flushed ones included.
  bool is_send() const noexcept { return !is_recv(); }
  /// The completion's status; anything but success means the work request failed or was flushed.
  wc_status status() const noexcept { return B::get_status(wc_); }
  /// True when the work request succeeded.
  bool ok() const noexcept { return status() == wc_status::success; }
  /// Meaningful on success only.
  wc_opcode opcode() const noexcept { return B::get_opcode(wc_); }
  /// Bytes transferred; on UD receives this includes the 40-byte GRH.
  std::uint32_t byte_len() const noexcept { return B::get_byte_len(wc_); }
  /// Where the payload starts in the receive buffer (40 on UD receives, else 0).
  std::uint32_t payload_offset() const noexcept { return is_recv() ? recv_offset_ : 0; }
  /// Payload bytes (byte_len without the GRH area).
  std::uint32_t payload_len() const noexcept {
    auto n = byte_len();
    auto off = payload_offset();
    return n >= off ? n - off : 0;
  }
  /// The local queue pair this completion belongs to.
  std::uint32_t qp_num() const noexcept { return B::get_qp_num(wc_); }
  /// The sending queue pair (UD receives only).
  std::uint32_t src_qp() const noexcept { return B::get_src_qp(wc_); }
  /// The sender's LID (UD receives on InfiniBand; 0 on RoCE, where parse_grh() names the
  /// sender's GID). With src_qp(), the endpoint a UD server answers a client at:
  /// `endpoint{.lid = c.slid(), .qpn = c.src_qp()}`.
  std::uint16_t slid() const noexcept { return B::get_slid(wc_); }
  /// The sender's service level (UD receives on InfiniBand; 0 on RoCE): ah_options::sl
  /// for the answer.
  std::uint8_t sl() const noexcept { return B::get_sl(wc_); }
  /// What the completion carries besides its payload: immediate data, a GRH.
  wc_flags flags() const noexcept { return B::get_wc_flags(wc_); }
  /// True when the sender attached immediate data (see imm()).
  bool has_imm() const noexcept { return has_any(flags(), wc_flags::with_imm); }
  /// True when a GRH occupies the first 40 bytes of the receive buffer (UD).
  bool has_grh() const noexcept { return has_any(flags(), wc_flags::grh); }
  /// Immediate data in host byte order (as passed to send_imm/write_imm).
  std::uint32_t imm() const noexcept { return detail::net_to_host32(B::get_imm(wc_)); }
  /// The rkey a received SEND_WITH_INV invalidated (memory_window.hpp). Meaningful only
  /// on the receive of a SEND_WITH_INV (wc_flags::with_inv, where the device sets it).
  std::uint32_t invalidated_rkey() const noexcept
    requires mw_backend<B>
  {
    return B::get_invalidated_rkey(wc_);
  }
  /// The device's own error code, for its vendor's documentation (0 on success).
  std::uint32_t vendor_err() const noexcept { return B::get_vendor_err(wc_); }
  /// status() as a std::error_code of wc_status_category().
  std::error_code error_code() const noexcept { return make_error_code(status()); }
  /// "REM_ACCESS_ERR ..." style text: status, what it means, QP and wr_id.
  std::string status_message() const { return detail::status_message(status(), is_recv(), wr_id(), qp_num()); }
  /// The backend's completion (ibv_wc on ibverbs), for fields rdmakit does not wrap.
  const typename B::wc& native() const noexcept { return wc_; }

 private:
  typename B::wc wc_;
  std::uint32_t recv_offset_;
};

/// What completion_queue::poll, wait and drain call: anything callable with a completion.
template <class F, class B>
concept completion_handler = std::invocable<F&, const completion<B>&>;

RDMAKIT_END_NAMESPACE

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/completion_impl.hpp>
#endif
