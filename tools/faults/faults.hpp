#pragma once
// rdmakit-faults' scenario: a client sends `count` messages of `size` bytes to a server
// (SENDs into posted receives, WRITE_WITH_IMM, or plain WRITE) over RC, UC or UD, and
// each side reports what it saw as one machine-readable line. Every payload carries its
// sequence number and a pattern derived from it, so the server tells complete, partial
// or corrupt messages apart and counts duplicates, losses and order. Generic over the
// backend: the same code runs on the mock (with fabric faults) and on rxe (with netem
// on the link, tests/rxe/netem.sh).
#include "../pingpong/pingpong.hpp"

#include <rdmakit/connection.hpp>
#include <rdmakit/rdmakit.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rdmakit_tools {

using namespace rdmakit;

enum class fault_op { send, write_imm, write };

inline const char* to_string(fault_op o) {
  return o == fault_op::send ? "send" : o == fault_op::write_imm ? "write_imm" : "write";
}

struct faults_options {
  std::string device;
  std::uint8_t ib_port = 1;
  std::optional<int> gid_index{};
  fault_op op = fault_op::send;
  std::uint32_t count = 200;      ///< messages
  std::uint32_t size = 4096;      ///< bytes each
  std::uint32_t window = 16;      ///< sends outstanding at most (the SQ depth)
  mtu path_mtu = mtu::mtu_1024;   ///< 4096-byte messages are 4 packets
  std::uint8_t timeout = 12;      ///< RC: 4.096 µs · 2^12 ≈ 17 ms per try
  std::uint8_t retry_cnt = 6;     ///< RC: total loss ends in RETRY_EXC_ERR after 7 tries
  bool server = true;
  /// Server: how long to keep polling after the client said it is done (late packets).
  std::chrono::milliseconds grace{300};
  /// Client: how long to wait for all send completions before giving up.
  std::chrono::milliseconds stall_timeout{20'000};
};

/// The byte at `i` of message `seq`: the first 8 bytes are the sequence number and the
/// size, the rest a pattern of both, so a partial or misplaced message never matches.
inline std::byte pattern_byte(std::uint32_t seq, std::size_t i) {
  return static_cast<std::byte>((seq * 131u + static_cast<std::uint32_t>(i) * 7u + (i >> 8)) & 0xff);
}
inline void fill_message(std::byte* p, std::uint32_t seq, std::uint32_t size) {
  for (std::size_t i = 0; i < size; ++i) p[i] = pattern_byte(seq, i);
  if (size >= 8) {
    std::memcpy(p, &seq, 4);
    std::memcpy(p + 4, &size, 4);
  }
}
/// The sequence number a message claims (its first 4 bytes), if it is complete and intact.
inline std::optional<std::uint32_t> check_message(const std::byte* p, std::uint32_t size) {
  if (size < 8) return std::nullopt;
  std::uint32_t seq, len;
  std::memcpy(&seq, p, 4);
  std::memcpy(&len, p + 4, 4);
  if (len != size) return std::nullopt;
  for (std::size_t i = 8; i < size; ++i)
    if (p[i] != pattern_byte(seq, i)) return std::nullopt;
  return seq;
}

/// What each side counted.
struct faults_report {
  bool server = true;
  std::uint32_t posted = 0;                     ///< client: sends posted
  std::map<std::string, std::uint32_t> status;  ///< completions by status name
  std::uint32_t delivered = 0;   ///< server: distinct sequence numbers received intact
  std::uint32_t duplicates = 0;  ///< server: intact messages seen again
  std::uint32_t partial = 0;     ///< server: successful completions whose data is not one intact message
  std::uint32_t missing = 0;     ///< server: sequence numbers never received
  bool in_order = true;          ///< server: intact messages arrived in sending order
  std::string first_error;       ///< the first non-success status, if any

  std::uint32_t completions(std::string_view s) const {
    auto it = status.find(std::string(s));
    return it == status.end() ? 0 : it->second;
  }
  bool exactly_once_in_order(std::uint32_t count) const {
    return delivered == count && duplicates == 0 && partial == 0 && missing == 0 && in_order;
  }
  /// One line: `faults side=... transport=... k=v ...`.
  std::string line(std::string_view transport, const faults_options& o) const {
    std::string s = "faults side=" + std::string(server ? "server" : "client") + " transport=" +
                    std::string(transport) + " op=" + to_string(o.op) + " count=" + std::to_string(o.count) +
                    " size=" + std::to_string(o.size);
    if (!server) s += " posted=" + std::to_string(posted);
    s += " completions=";
    bool first = true;
    for (const auto& [k, v] : status) {
      s += (first ? "" : ",") + k + ":" + std::to_string(v);
      first = false;
    }
    if (first) s += "none";
    if (server) {
      s += " delivered=" + std::to_string(delivered) + " duplicates=" + std::to_string(duplicates) +
           " partial=" + std::to_string(partial) + " missing=" + std::to_string(missing) +
           " in_order=" + (in_order ? "yes" : "no") +
           " exactly_once=" + (exactly_once_in_order(o.count) ? "yes" : "no");
    }
    if (!first_error.empty()) s += " first_error=" + first_error;
    return s;
  }
};

/// The status's enumerator name (success, retry_exc_err, wr_flush_err, ...): short, one word.
inline std::string status_name(wc_status s) {
  static constexpr const char* names[] = {
      "success",        "loc_len_err",        "loc_qp_op_err",     "loc_eec_op_err", "loc_prot_err",
      "wr_flush_err",   "mw_bind_err",        "bad_resp_err",      "loc_access_err", "rem_inv_req_err",
      "rem_access_err", "rem_op_err",         "retry_exc_err",     "rnr_retry_exc_err", "loc_rdd_viol_err",
      "rem_inv_rd_req_err", "rem_abort_err",  "inv_eecn_err",      "inv_eec_state_err", "fatal_err",
      "resp_timeout_err", "general_err"};
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(names) ? names[i] : "status_" + std::to_string(i);
}

inline constexpr std::uint64_t faults_recv_wrid = 1ull << 32;

/// One side of the scenario on `opened` (or the device o.device names). `exchange` is
/// called twice: once to connect, once when the client is done (the server stops
/// after `grace` more). Throws verbs_error, exchange_error or pingpong_failure on setup errors.
template <verbs_backend B, transport T, polling P>
faults_report run_faults(const faults_options& o, const exchange_fn& exchange, device<B> opened = {}) {
  if (T::type == qp_type::ud && o.op != fault_op::send) throw pingpong_failure("UD has SENDs only (-o send)");
  device<B> dev = opened ? std::move(opened) : device<B>(o.device);
  if constexpr (T::type == qp_type::ud) {
    const std::uint32_t mtu = mtu_bytes(dev.port(o.ib_port).active_mtu);
    if (o.size > mtu)
      throw pingpong_failure("requested size " + std::to_string(o.size) + " is larger than the port MTU (" +
                             std::to_string(mtu) + "): UD messages are one packet");
  }
  auto pd = dev.create_pd();
  constexpr rdmakit::access rights = rdmakit::access::local_write | rdmakit::access::remote_write;
  const std::size_t slot = std::size_t{o.size} + T::recv_offset;
  // Server: one slot per message (receives land there, or WRITEs at seq * size);
  // client: `window` slots, reused in turn.
  const std::size_t slots = o.server ? o.count : o.window;
  auto mr = pd.template allocate<rights>(slot * slots);
  std::memset(mr.data(), 0, slot * slots);

  auto cq = dev.template create_cq<P>(static_cast<int>(o.count + o.window + 1));
  qp_options qo;
  qo.port = o.ib_port;
  qo.gid_index = o.gid_index;
  const std::uint32_t rq = o.server && o.op != fault_op::write ? o.count : 1;
  qp_cap caps{o.window, rq, 1, 1, 0};
  auto qp = pd.template create_qp<T, signal_all>(cq, caps, qo);
  if (o.server && o.op != fault_op::write)
    for (std::uint32_t i = 0; i < o.count; ++i) {
      // WRITE_WITH_IMM consumes a receive without data: a zero-length one would do, a slot is simpler.
      auto r = qp.post_recv(mr.local(i * slot, slot), faults_recv_wrid | i);
      if (!r) throw pingpong_failure("couldn't post receive " + std::to_string(i) + ": " + r.message());
    }

  using live_qp = queue_pair<B, T, signal_all, qp_state::rts>;
  std::optional<live_qp> live;
  std::optional<address_handle<B>> ah;
  connect_options co;
  co.path_mtu = o.path_mtu;
  co.timeout = o.timeout;
  co.retry_cnt = o.retry_cnt;
  connection_info local(qp.local_endpoint());
  if (o.server) local.region = region_descriptor(mr.remote());
  const connection_info peer = exchange(local, [&](const connection_info& p) {
    check_peer_record(p.ep, local.ep);
    if constexpr (T::connected) {
      live.emplace(std::move(qp).connect(p.ep, co));
    } else {
      live.emplace(std::move(qp).activate());
      ah.emplace(pd.create_ah(p.ep, {.port = o.ib_port, .gid_index = live->gid_index()}));
    }
  });

  faults_report rep;
  rep.server = o.server;
  auto count_status = [&](const completion<B>& c) {
    ++rep.status[status_name(c.status())];
    if (!c.ok() && rep.first_error.empty()) rep.first_error = status_name(c.status());
  };

  if (!o.server) {
    std::optional<remote_region<rdmakit::access::remote_write>> remote;
    if (o.op != fault_op::send) {
      if (!peer.region) throw pingpong_failure("the server sent no region to write to");
      remote = peer.region->template as<rdmakit::access::remote_write>();
    }
    std::uint32_t completed = 0;
    bool stop = false;  // an error completion: the QP is in error, post no more
    auto post = [&](std::uint32_t seq) {
      std::byte* p = mr.data() + std::size_t{seq % o.window} * slot;
      fill_message(p, seq, o.size);
      const local_buffer buf = mr.local(std::size_t{seq % o.window} * slot, o.size);
      post_result r;
      if constexpr (T::needs_ah) {
        r = live->send(ah->to(peer.ep), buf, seq);
      } else {
        if (o.op == fault_op::send)
          r = live->send(buf, seq);
        else if (o.op == fault_op::write_imm)
          r = live->post(op::write_imm<rdmakit::access::remote_write>{buf, remote->sub(std::size_t{seq} * slot, o.size), seq},
                         seq);
        else
          r = live->post(op::write<rdmakit::access::remote_write>{buf, remote->sub(std::size_t{seq} * slot, o.size)}, seq);
      }
      if (!r) throw pingpong_failure("couldn't post message " + std::to_string(seq) + ": " + r.message());
      ++rep.posted;
    };
    while (rep.posted < o.count && rep.posted < o.window) post(rep.posted);
    while (completed < rep.posted) {
      const auto w = cq.wait(
          [&](const completion<B>& c) {
            ++completed;
            count_status(c);
            if (!c.ok()) stop = true;
          },
          o.stall_timeout);
      if (w.failed()) throw pingpong_failure("poll CQ failed: " + std::string(std::strerror(w.error())));
      if (w.timed_out())
        throw pingpong_failure("no send completion for " + std::to_string(o.stall_timeout.count()) + " ms after " +
                               std::to_string(completed) + " of " + std::to_string(rep.posted));
      while (!stop && rep.posted < o.count && rep.posted - completed < o.window) post(rep.posted);
    }
    exchange(local, {});  // done: the server drains and reports
    return rep;
  }

  // Server: count receive completions until the client says it is done, then `grace` more.
  std::atomic<bool> done{false};
  std::string done_error;
  std::thread waiter([&] {
    try {
      exchange(local, {});
    } catch (const std::exception& e) {
      done_error = e.what();
    }
    done = true;
  });
  std::vector<std::uint32_t> seen(o.count, 0);
  std::optional<std::uint32_t> last;
  auto note = [&](std::uint32_t seq) {
    if (seq >= o.count) {
      ++rep.partial;
      return;
    }
    if (seen[seq]++) {
      ++rep.duplicates;
      return;
    }
    ++rep.delivered;
    if (last && seq < *last) rep.in_order = false;
    last = seq;
  };
  std::optional<std::chrono::steady_clock::time_point> stop_at;
  for (;;) {
    if (done && !stop_at) stop_at = std::chrono::steady_clock::now() + o.grace;
    if (stop_at && std::chrono::steady_clock::now() >= *stop_at) break;
    const auto w = cq.wait(
        [&](const completion<B>& c) {
          count_status(c);
          if (!c.ok()) return;
          const std::uint32_t i = static_cast<std::uint32_t>(c.wr_id());
          if (o.op == fault_op::write_imm) {
            const std::uint32_t seq = c.imm();
            const auto got = seq < o.count ? check_message(mr.data() + std::size_t{seq} * slot, o.size) : std::nullopt;
            if (got && *got == seq)
              note(seq);
            else
              ++rep.partial;
          } else {
            const auto got = c.payload_len() == o.size
                                 ? check_message(mr.data() + std::size_t{i} * slot + T::recv_offset, o.size)
                                 : std::nullopt;
            if (got)
              note(*got);
            else
              ++rep.partial;
          }
        },
        std::chrono::milliseconds{20});
    if (w.failed()) {
      waiter.join();
      throw pingpong_failure("poll CQ failed: " + std::string(std::strerror(w.error())));
    }
  }
  waiter.join();
  if (!done_error.empty()) throw pingpong_failure("waiting for the client's end: " + done_error);
  if (o.op == fault_op::write)  // no completions: look at the memory itself
    for (std::uint32_t seq = 0; seq < o.count; ++seq) {
      const std::byte* p = mr.data() + std::size_t{seq} * slot;
      bool empty = true;
      for (std::size_t i = 0; i < o.size && empty; ++i) empty = p[i] == std::byte{0};
      if (empty) continue;
      const auto got = check_message(p, o.size);
      if (got && *got == seq)
        note(seq);
      else
        ++rep.partial;
    }
  for (std::uint32_t seq = 0; seq < o.count; ++seq) rep.missing += seen[seq] == 0;
  return rep;
}

}  // namespace rdmakit_tools
