#pragma once
// What a queue pair owns (qp_parts) and the checks and address vector its setup uses;
// the post-list storage helpers. Internal to queue_pair.hpp and send_batch.hpp.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/qp_link.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/qp_options.hpp>
#include <rdmakit/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t max_stack_sge = 32;  // rxe's limit; SGLs above are EINVAL anyway

// Storage for N native objects that is not initialized on construction.
template <class S, std::size_t N>
struct uninit_array {
  union {
    S v[N];
  };
  uninit_array() noexcept {}
  S* data() noexcept { return v; }
  S& operator[](std::size_t i) noexcept { return v[i]; }
};

// What a post list remembers of each WR to finish it at post time.
struct batch_entry {
  std::uint64_t wr_id;
  opcode op;
  send_flags flags;
  int num_sge;
  std::uint32_t total;
  std::uint32_t first_sge;
};

// What a queue pair owns. It keeps its PD (and so its device) and its CQs alive: the
// native QP is destroyed before any of them, whatever order the handles go in.
template <class B>
struct qp_parts {
  pd_ref<B> pd;
  std::shared_ptr<cq_block<B>> scq, rcq;
  typename B::qp qp{};
  std::unique_ptr<qp_link<B>> link;
  qp_cap asked{};     // as asked: the CQ entries reserved on send_cq / recv_cq, and the credits
  qp_options opts{};  // as created (port, Q_Key, access): reset() and a failed connect reuse them
  qp_cap caps{};      // as granted
  std::uint32_t inline_limit = 0;
  std::uint32_t psn = 0;
  int gid_index = 0;
  gid local_gid{};
  std::uint16_t lid = 0;
  mtu active_mtu = mtu::mtu_1024;
  // The QP that reset() replaced, in ERR: it stays attached to the CQs so the flushes
  // of its outstanding WRs reach the pollers with their wr_ids, routed and accounted,
  // until the next reset() or this QP's destruction. At most one is kept.
  std::unique_ptr<qp_parts> retired;
  bool is_retired = false;

  const device_state<B>& dev() const noexcept { return *pd->dev; }

  qp_parts() = default;
  qp_parts(qp_parts&& o) noexcept { *this = std::move(o); }
  qp_parts& operator=(qp_parts&& o) noexcept {
    if (this != &o) {
      release();
      pd = std::move(o.pd);
      scq = std::move(o.scq);
      rcq = std::move(o.rcq);
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
      retired = std::move(o.retired);
      is_retired = o.is_retired;
    }
    return *this;
  }
  ~qp_parts() { release(); }

  void release() noexcept {
    if (qp != typename B::qp{}) B::destroy_qp(qp);
    qp = {};
    if (link) {
      if (link->send_cq == link->recv_cq) {
        if (link->send_cq)
          link->send_cq->detach(link.get(), asked.max_send_wr + asked.max_recv_wr, is_retired);
      } else {
        if (link->send_cq) link->send_cq->detach(link.get(), asked.max_send_wr, is_retired);
        if (link->recv_cq) link->recv_cq->detach(link.get(), asked.max_recv_wr, is_retired);
      }
      link.reset();
    }
    retired.reset();
    scq.reset();  // after the QP: the CQs may be destroyed now, then the PD
    rcq.reset();
    pd.reset();
  }
};

inline std::string cq_too_small(int capacity, std::uint64_t reserved, std::size_t attached,
                                std::string_view tname, std::uint32_t sends, std::uint32_t recvs,
                                std::uint64_t need, std::uint32_t max_cqe) {
  std::string s = "CQ of " + std::to_string(capacity) + " entries is too small for a" +
                  (tname == "RC" ? "n " : " ") + std::string(tname) + " queue pair of " +
                  std::to_string(sends) + " send + " + std::to_string(recvs) + " receive WRs";
  if (attached)
    s += " (" + std::to_string(reserved) + " entries already promised to " + std::to_string(attached) +
         " attached queue pair" + (attached > 1 ? "s" : "") + ")";
  if (need <= max_cqe)
    s += ": create it with at least " + std::to_string(need) +
         " entries (a CQ must hold the queue depths of every QP attached to it)";
  else
    s += ": it would need " + std::to_string(need) + " entries, above the device's max_cqe (" +
         std::to_string(max_cqe) + "): give the queue pair separate send and receive CQs, attach fewer "
         "queue pairs to this CQ, or lower max_send_wr/max_recv_wr";
  return s;
}

/// Refuses connect options and peer fields the IB spec cannot encode, before the QP is
/// touched (a refused modify_qp would leave it half-way).
inline void check_connect(const endpoint& peer, const connect_options& o) {
  auto field = [](const char* name, unsigned v, unsigned max, const char* what) {
    if (v > max)
      throw usage_error(std::string("connect(): ") + name + " = " + std::to_string(v) + " is out of range (0.." +
                        std::to_string(max) + "): " + what);
  };
  field("connect_options::retry_cnt", o.retry_cnt, 7, "3 bits; 7 retries forever on some devices, 6 is the usual choice");
  field("connect_options::rnr_retry", o.rnr_retry, 7, "3 bits; 7 means retry forever");
  field("connect_options::timeout", o.timeout, 31, "5 bits: 4.096 µs · 2^timeout, 0 = infinite");
  field("connect_options::min_rnr_timer", o.min_rnr_timer, 31, "5 bits: an IB RNR timer code");
  field("connect_options::sl", o.sl, 15, "the service level has 4 bits");
  field("endpoint::qpn (peer)", peer.qpn, 0xFFFFFF, "QP numbers have 24 bits: check the endpoint exchange");
  if (o.path_mtu && mtu_bytes(*o.path_mtu) == 0)
    throw usage_error("connect(): connect_options::path_mtu is not one of 256, 512, 1024, 2048, 4096");
}

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
      throw usage_error(
                        "port " + std::to_string(port) + " of " + dev_name +
                            " is RoCE (Ethernet), which needs a GRH, but the peer endpoint has "
                            "no GID: send the peer's local_endpoint().gid along with its QPN");
    av.is_global = true;
    av.grh.dgid = peer.gid;
    av.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
    av.grh.hop_limit = hop_limit;
  }
  return av;
}

}  // namespace detail

RDMAKIT_END_NAMESPACE
