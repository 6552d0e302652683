#pragma once
// The mock HCA's small rules: timer codes, opcodes per transport, MTU and packet
// counts, local and remote key checks, gather/scatter, routing by address vector.
#include <rdmakit/backends/mock/objects.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/qp_transitions.hpp>

#include <cstring>
#include <span>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// ---------------------------------------------------------------- small helpers

inline fabric_state& fab_of(context_obj* c) { return *c->fab; }
inline fabric_state& fab_of(pd_obj* p) { return *p->ctx->fab; }
inline fabric_state& fab_of(qp_obj* q) { return *q->pd->ctx->fab; }
inline fabric_state& fab_of(cq_obj* c) { return *c->ctx->fab; }
inline fabric_state& fab_of(channel_obj* c) { return *c->ctx->fab; }
inline fabric_state& fab_of(srq_obj* s) { return *s->pd->ctx->fab; }

inline device_rt& device_of(qp_obj* q) { return fab_of(q).devices[q->pd->ctx->dev]; }

/// RC local ACK timeout: 4.096 µs · 2^timeout; 0 disables the timer.
inline clock_ns ack_timeout_ns(std::uint8_t timeout) { return timeout ? (std::uint64_t{4096} << timeout) : 0; }

/// The IB RNR NAK timer encoding, in nanoseconds (0 means 655.36 ms).
inline clock_ns rnr_timer_ns(std::uint8_t code) {
  static constexpr std::uint32_t us[32] = {655360, 10,    20,    30,    40,    60,     80,     120,
                                           160,    240,   320,   480,   640,   960,    1280,   1920,
                                           2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
                                           40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return clock_ns{us[code & 31]} * 1000;
}

inline bool is_read_or_atomic(opcode op) {
  return op == opcode::rdma_read || op == opcode::atomic_cmp_and_swp || op == opcode::atomic_fetch_and_add;
}
inline bool is_atomic(opcode op) { return op == opcode::atomic_cmp_and_swp || op == opcode::atomic_fetch_and_add; }
inline bool carries_payload(opcode op) { return !is_read_or_atomic(op); }
/// BIND_MW and LOCAL_INV run in the send queue's order but send nothing.
inline bool is_local_op(opcode op) { return op == opcode::bind_mw || op == opcode::local_inv; }

inline wc_opcode completion_opcode(opcode op) {
  switch (op) {
    case opcode::send:
    case opcode::send_with_imm:
    case opcode::send_with_inv: return wc_opcode::send;
    case opcode::bind_mw: return wc_opcode::bind_mw;
    case opcode::local_inv: return wc_opcode::local_inv;
    case opcode::rdma_write:
    case opcode::rdma_write_with_imm: return wc_opcode::rdma_write;
    case opcode::rdma_read: return wc_opcode::rdma_read;
    case opcode::atomic_cmp_and_swp: return wc_opcode::comp_swap;
    case opcode::atomic_fetch_and_add: return wc_opcode::fetch_add;
  }
  return wc_opcode::send;
}

inline bool opcode_allowed(qp_type t, opcode op) {
  switch (op) {
    case opcode::send:
    case opcode::send_with_imm: return true;
    case opcode::bind_mw:
    case opcode::local_inv:
    case opcode::rdma_write:
    case opcode::rdma_write_with_imm: return t != qp_type::ud;
    case opcode::send_with_inv:  // the IBA has no UC opcode for it (rxe: LOC_QP_OP_ERR)
    case opcode::rdma_read:
    case opcode::atomic_cmp_and_swp:
    case opcode::atomic_fetch_and_add: return t == qp_type::rc;
  }
  return false;
}

inline std::uint32_t path_mtu_bytes(qp_obj* q) {
  if (q->type == qp_type::ud) {
    auto& dev = device_of(q);
    return mtu_bytes(dev.ports[q->attr.port_num - 1].cfg.active_mtu);
  }
  return mtu_bytes(q->attr.path_mtu);
}

inline std::uint32_t packets_for(std::uint32_t length, std::uint32_t mtu) {
  return length == 0 ? 1 : (length + mtu - 1) / mtu;
}

/// The MR registered under `key` in `keys` (by_lkey or by_rkey), through the cache.
inline mr_obj* find_mr(fabric_state& f, const object_map<mr_obj>& keys, key_cache* cache,
                       std::uint32_t key) {
  if (cache && cache->epoch == f.mr_epoch && cache->key == key && cache->mr) return cache->mr;
  auto it = keys.find(key);
  if (it == keys.end()) return nullptr;
  if (cache) *cache = {key, it->second, f.mr_epoch};
  return it->second;
}

/// A local SGE is usable when its lkey names an MR of the QP's PD covering it (and
/// granting LOCAL_WRITE when the HCA writes there).
RDMAKIT_ALWAYS_INLINE bool local_sge_ok(fabric_state& f, pd_obj* pd, const sge& s, bool hca_writes, key_cache* cache = nullptr) {
  if (s.length == 0) return true;
  const mr_obj* m = find_mr(f, f.by_lkey, cache, s.lkey);
  if (!m) return false;
  if (m->pd != pd) return false;
  if (s.addr < m->addr || s.addr + s.length > m->addr + m->length || s.addr + s.length < s.addr) return false;
  return !hca_writes || has_all(m->flags, access::local_write);
}

/// The SGE's lkey names a live MR of `pd` (its range and rights not looked at).
inline bool local_sge_key_ok(fabric_state& f, pd_obj* pd, const sge& s) {
  if (s.length == 0) return true;
  const mr_obj* m = find_mr(f, f.by_lkey, nullptr, s.lkey);
  return m && m->pd == pd;
}

/// Window rkeys are 0x40000000 | index << 8 | key byte; region rkeys have bit 31 set.
inline bool is_mw_key(std::uint32_t key) { return (key & 0xC0000000u) == 0x40000000u; }

/// The bound window `rkey` names, or null (freed, rebound since, or invalidated).
inline mw_obj* find_mw(fabric_state& f, std::uint32_t rkey) {
  auto it = f.mws.find(rkey >> 8);
  if (it == f.mws.end() || it->second->rkey != rkey || !it->second->mr || it->second->length == 0) return nullptr;
  return it->second;
}

/// The region behind a remote access by `d` (the responder QP), checked: a region's rkey
/// against the region, a window's against the window (its rights and range, its PD, and
/// for type 2 the QP that bound it). The rxe profile checks a window's range against its
/// region (rxe 6.1 does: deviations.hpp, mw_out_of_window).
// A window's rkey: out of line, so the region path below stays small enough to inline
// into the responder (it is every WRITE's and READ's).
RDMAKIT_NOINLINE inline mr_obj* remote_mw_ok(fabric_state& f, const qp_obj* d, std::uint32_t rkey,
                                             std::uint64_t addr, std::uint64_t length, access needed) {
  mw_obj* w = find_mw(f, rkey);
  if (!w || w->pd != d->pd || (w->type == mw_type::type2 && w->qp != d) || !has_all(w->rights, needed))
    return nullptr;
  const std::uint64_t lo = f.as_rxe() ? w->mr->addr : w->addr;
  const std::uint64_t hi = f.as_rxe() ? w->mr->addr + w->mr->length : w->addr + w->length;
  if (addr < lo || addr + length > hi || addr + length < addr) return nullptr;
  return w->mr;
}

inline mr_obj* remote_mr_ok(fabric_state& f, const qp_obj* d, std::uint32_t rkey, std::uint64_t addr,
                            std::uint64_t length, access needed, key_cache* cache = nullptr) {
  pd_obj* pd = d->pd;
  if (RDMAKIT_UNLIKELY(is_mw_key(rkey))) return remote_mw_ok(f, d, rkey, addr, length, needed);
  mr_obj* m = find_mr(f, f.by_rkey, cache, rkey);
  if (!m) return nullptr;
  if (m->pd != pd || !has_all(m->flags, needed)) return nullptr;
  if (addr < m->addr || addr + length > m->addr + m->length || addr + length < addr) return nullptr;
  return m;
}

/// The bytes the SGEs name, in order, into a reused buffer (no allocation once it is
/// large enough).
inline void gather_into(std::span<const sge> sges, std::vector<std::uint8_t>& out) {
  out.clear();
  for (const auto& s : sges) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(s.addr);
    if (s.length) out.insert(out.end(), p, p + s.length);
  }
}

/// The first `limit` bytes the SGEs name (the leading packets of a failed message).
RDMAKIT_NOINLINE inline void gather_head(std::span<const sge> sges, std::uint64_t limit, std::vector<std::uint8_t>& out) {
  out.clear();
  for (const auto& s : sges) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(s.addr);
    const std::uint64_t n = s.length < limit - out.size() ? s.length : limit - out.size();
    if (n) out.insert(out.end(), p, p + n);
  }
}

// Writes `len` bytes of `data` into the SGE list, from its byte `at` on (a UD receive:
// the payload after the GRH, with no buffer joining the two).
inline void scatter(std::span<const sge> sges, const std::uint8_t* data, std::size_t len, std::size_t at = 0) {
  std::size_t off = 0;
  for (const auto& s : sges) {
    if (off >= len) break;
    if (at >= s.length) {
      at -= s.length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(s.length - at, len - off);
    std::memmove(reinterpret_cast<std::uint8_t*>(s.addr) + at, data + off, n);  // data may be the sender's buffer
    off += n;
    at = 0;
  }
}

/// The (device, port) that owns an address, or false.
inline bool route(fabric_state& f, const ah_attr& av, std::uint32_t& dev, std::uint8_t& port) {
  for (auto& d : f.devices)
    for (std::uint32_t p = 0; p < d.ports.size(); ++p) {
      auto& pr = d.ports[p];
      bool match = false;
      if (av.is_global) {
        for (auto& g : pr.gids)
          if (g.valid && g.value == av.grh.dgid) match = true;
      } else {
        match = pr.cfg.layer == link_layer::infiniband && pr.lid == av.dlid;
      }
      if (match) {
        dev = d.index;
        port = static_cast<std::uint8_t>(p + 1);
        return true;
      }
    }
  return false;
}

// Routes `q`'s address (attr.av) once per modify_qp: q->route_ok, route_dev, route_port,
// and q->lost_above: RC/UC packets are PATH_MTU long, and a link drops a packet longer
// than the active MTU of the ports at its ends (a PATH_MTU of 4096 on a 1500-byte RoCE
// link, active MTU 1024), so every message longer than that MTU is lost.
RDMAKIT_NOINLINE inline void route_once(fabric_state& f, qp_obj* q) {
  q->route_ok = route(f, q->attr.av, q->route_dev, q->route_port);
  q->route_known = true;
  q->lost_above = ~std::uint32_t{0};
  if (q->route_ok && q->type != qp_type::ud) {
    const mtu here = device_of(q).ports[q->attr.port_num - 1].cfg.active_mtu;
    const mtu there = f.devices[q->route_dev].ports[q->route_port - 1].cfg.active_mtu;
    const mtu link = std::min(here, there);
    if (q->attr.path_mtu > link) q->lost_above = mtu_bytes(link);
  }
}
// route_once() when the QP was modified since: one test on the data path.
RDMAKIT_ALWAYS_INLINE void learn_route(fabric_state& f, qp_obj* q) {
  if (RDMAKIT_UNLIKELY(!q->route_known)) route_once(f, q);
}

// The bytes of a receive's region from `s.addr` on that rxe can write: none for an lkey,
// PD or rights it refuses (lookup_mr), else up to the region's end (mr_check_range).
inline std::uint64_t rxe_writable_bytes(fabric_state& f, pd_obj* pd, const sge& s) {
  const mr_obj* mr = find_mr(f, f.by_lkey, nullptr, s.lkey);
  if (!mr || mr->pd != pd || !has_all(mr->flags, access::local_write)) return 0;
  if (s.addr < mr->addr || s.addr >= mr->addr + mr->length) return 0;
  return mr->addr + mr->length - s.addr;
}

// The bytes of a failed RC/UC receive, or of a READ response or atomic result failing at
// a local SGE, that rxe has written (rxe 6.1, observed): copy_data takes each packet of
// `pmtu` bytes SGE by SGE. It refuses a packet longer than the room
// left before copying any of it, and stops at the first piece it cannot write: the bad
// SGE's first (for its lkey or rights), or the piece that crosses its region's end.
inline std::uint64_t rxe_bytes_before_receive_fault(fabric_state& f, pd_obj* pd, const sge_list& sges,
                                                    std::uint64_t need, std::uint64_t room, std::uint64_t pmtu) {
  const std::uint64_t packets_that_fit = room < need ? room / pmtu * pmtu : need;
  std::uint64_t at = 0;  // where this SGE starts in the message
  for (const auto& s : sges) {
    if (at >= packets_that_fit) break;
    auto copied = s;
    if (need - at < copied.length) copied.length = static_cast<std::uint32_t>(need - at);
    if (!local_sge_ok(f, pd, copied, true)) {
      const std::uint64_t bad_byte = at + rxe_writable_bytes(f, pd, s);
      return std::min(packets_that_fit, std::max(at, bad_byte / pmtu * pmtu));
    }
    at += s.length;
  }
  return packets_that_fit;
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
