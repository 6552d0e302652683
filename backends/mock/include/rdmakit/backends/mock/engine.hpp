#pragma once
// The mock HCA's engine: data movement, the requester/responder protocol on a
// simulated clock, completions and events.
#include <rdmakit/backends/mock/objects.hpp>
#include <rdmakit/detail/qp_transitions.hpp>

#include <algorithm>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

inline constexpr std::uint32_t gid_table_len = 16;

inline gid_entry make_gid(const gid& g, std::uint32_t index, gid_type t) { return {g, index, t, true}; }

inline void build_devices(fabric_state& f) {
  auto devs = f.cfg.devices;
  if (devs.empty()) {
    devs.resize(2);
    devs[0].name = "mock0";
    devs[1].name = "mock1";
  }
  std::uint16_t next_lid = 1;
  for (std::uint32_t d = 0; d < devs.size(); ++d) {
    device_rt dev;
    dev.cfg = devs[d];
    dev.index = d;
    dev.cfg.limits.phys_port_cnt = static_cast<std::uint8_t>(dev.cfg.ports.size());
    for (std::uint32_t p = 0; p < dev.cfg.ports.size(); ++p) {
      port_rt port;
      port.cfg = dev.cfg.ports[p];
      port.up = port.cfg.up;
      port.gids.resize(gid_table_len);
      for (std::uint32_t i = 0; i < gid_table_len; ++i) port.gids[i].index = i;
      const std::uint8_t host = static_cast<std::uint8_t>(d + 1);
      gid link_local;
      link_local.raw[0] = 0xfe;
      link_local.raw[1] = 0x80;
      link_local.raw[8] = 0x02;
      link_local.raw[13] = static_cast<std::uint8_t>(p + 1);
      link_local.raw[15] = host;
      if (port.cfg.layer == link_layer::infiniband) {
        port.lid = port.cfg.lid ? port.cfg.lid : next_lid++;
        if (port.cfg.gids.empty()) port.gids[0] = make_gid(link_local, 0, gid_type::ib);
      } else if (port.cfg.gids.empty()) {
        port.gids[0] = make_gid(link_local, 0, gid_type::roce_v2);
        port.gids[1] = make_gid(gid::from_ipv4(10, 0, static_cast<std::uint8_t>(p), host), 1, gid_type::roce_v2);
      }
      for (const auto& g : port.cfg.gids)
        if (g.index < gid_table_len) port.gids[g.index] = {g.value, g.index, g.type, true};
      dev.ports.push_back(std::move(port));
    }
    f.devices.push_back(std::move(dev));
  }
}

// ---------------------------------------------------------------- small helpers

inline fabric_state& fab_of(context_obj* c) { return *c->fab; }
inline fabric_state& fab_of(pd_obj* p) { return *p->ctx->fab; }
inline fabric_state& fab_of(qp_obj* q) { return *q->pd->ctx->fab; }
inline fabric_state& fab_of(cq_obj* c) { return *c->ctx->fab; }
inline fabric_state& fab_of(channel_obj* c) { return *c->ctx->fab; }

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

inline wc_opcode completion_opcode(opcode op) {
  switch (op) {
    case opcode::send:
    case opcode::send_with_imm: return wc_opcode::send;
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
    case opcode::rdma_write:
    case opcode::rdma_write_with_imm: return t != qp_type::ud;
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

/// A local SGE is usable when its lkey names an MR of the QP's PD covering it (and
/// granting LOCAL_WRITE when the HCA writes there).
inline bool local_sge_ok(fabric_state& f, pd_obj* pd, const sge& s, bool hca_writes) {
  if (s.length == 0) return true;
  auto it = f.by_lkey.find(s.lkey);
  if (it == f.by_lkey.end()) return false;
  const mr_obj* m = it->second;
  if (m->pd != pd) return false;
  if (s.addr < m->addr || s.addr + s.length > m->addr + m->length || s.addr + s.length < s.addr) return false;
  return !hca_writes || has_all(m->flags, access::local_write);
}

inline mr_obj* remote_mr_ok(fabric_state& f, pd_obj* pd, std::uint32_t rkey, std::uint64_t addr,
                            std::uint64_t length, access needed) {
  auto it = f.by_rkey.find(rkey);
  if (it == f.by_rkey.end()) return nullptr;
  mr_obj* m = it->second;
  if (m->pd != pd || !has_all(m->flags, needed)) return nullptr;
  if (addr < m->addr || addr + length > m->addr + m->length || addr + length < addr) return nullptr;
  return m;
}

inline std::vector<std::uint8_t> gather(const std::vector<sge>& sges, std::uint32_t total) {
  std::vector<std::uint8_t> out(total);
  std::size_t off = 0;
  for (const auto& s : sges) {
    if (s.length) std::memcpy(out.data() + off, reinterpret_cast<const void*>(s.addr), s.length);
    off += s.length;
  }
  return out;
}

inline void scatter(const std::vector<sge>& sges, const std::uint8_t* data, std::size_t len) {
  std::size_t off = 0;
  for (const auto& s : sges) {
    if (off >= len) break;
    std::size_t n = std::min<std::size_t>(s.length, len - off);
    if (n) std::memcpy(reinterpret_cast<void*>(s.addr), data + off, n);
    off += n;
  }
}

inline std::uint64_t sge_total(const std::vector<sge>& sges) {
  std::uint64_t t = 0;
  for (const auto& s : sges) t += s.length;
  return t;
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

// ---------------------------------------------------------------- events and completions

inline void post_async(fabric_state& f, std::uint32_t dev, const async_event& ev) {
  for (auto* c : f.contexts)
    if (c->dev == dev) c->async_q.push_back(ev);
  f.cv.notify_all();
}

/// Adds a CQE; false when the CQ was full (the CQE is lost and CQ_ERR raised).
inline bool push_cqe(fabric_state& f, cq_obj* cq, const cq_entry& e, bool solicited) {
  if (static_cast<int>(cq->entries.size()) >= cq->capacity) {
    async_event ev;
    ev.type = async_event_type::cq_err;
    ev.object = cq;
    cq->ctx->async_q.push_back(ev);
    f.cv.notify_all();
    return false;
  }
  cq->entries.push_back(e);
  const bool error = e.wc.status != wc_status::success;
  if (cq->armed && (!cq->solicited_only || solicited || error)) {
    cq->armed = false;
    if (cq->channel) {
      cq->channel->events.push_back(cq);
      f.cv.notify_all();
    }
  }
  return true;
}

inline void release_slots(fabric_state& f, qp_obj* q, std::uint64_t upto) {
  while (!q->sq.empty() && q->sq.front().reported && q->sq.front().seq <= upto) q->sq.pop_front();
  (void)f;
}

inline void retire_front_on_completion(fabric_state& f, qp_obj* q) {
  if (f.cfg.slots != slot_release::on_completion) return;
  while (!q->sq.empty() && q->sq.front().reported) q->sq.pop_front();
}

inline void send_cqe(fabric_state& f, qp_obj* q, send_wqe& w, wc_status status) {
  cq_entry e;
  e.wc.wr_id = w.wr_id;
  e.wc.status = status;
  e.wc.qp_num = q->qpn;
  if (status == wc_status::success) {
    e.wc.opcode = completion_opcode(w.op);
    e.wc.byte_len = w.length;
  }
  e.release_upto = f.cfg.slots == slot_release::on_signaled_poll ? w.seq : 0;
  if (!push_cqe(f, q->send_cq, e, false)) release_slots(f, q, w.seq);
}

inline void recv_cqe(fabric_state& f, qp_obj* q, const cq_entry& e, bool solicited) {
  push_cqe(f, q->recv_cq, e, solicited);
}

inline void flush_recv(fabric_state& f, qp_obj* q, const recv_wqe& r) {
  cq_entry e;
  e.wc.wr_id = r.wr_id;
  e.wc.status = wc_status::wr_flush_err;
  e.wc.qp_num = q->qpn;
  e.wc.opcode = wc_opcode::recv;
  recv_cqe(f, q, e, false);
}

inline void disarm_timer(fabric_state& f, qp_obj* q) {
  q->deadline = 0;
  q->rnr_wait = false;
  f.timed.erase(q);
}

inline void set_timer(fabric_state& f, qp_obj* q, clock_ns at) {
  q->deadline = at;
  f.timed.insert(q);
}

/// Moves a QP to ERR: every outstanding send WR and posted receive completes with
/// WR_FLUSH_ERR, in queue order, signaled or not.
inline void to_error(fabric_state& f, qp_obj* q) {
  if (q->state == qp_state::err) return;
  q->state = qp_state::err;
  disarm_timer(f, q);
  q->held.clear();
  for (auto& w : q->sq) {
    if (w.reported) continue;
    w.reported = true;
    w.state = send_wqe::phase::done;
    w.status = wc_status::wr_flush_err;
    send_cqe(f, q, w, wc_status::wr_flush_err);
  }
  retire_front_on_completion(f, q);
  auto rq = std::move(q->rq);
  q->rq.clear();
  for (auto& r : rq) flush_recv(f, q, r);
}

/// Reports finished send WQEs in SQ order; an error completion moves the QP to ERR.
inline void report_sends(fabric_state& f, qp_obj* q) {
  for (auto& w : q->sq) {
    if (w.reported) continue;
    if (w.state != send_wqe::phase::done) break;
    w.reported = true;
    const bool error = w.status != wc_status::success;
    if (w.signaled || error) {
      send_cqe(f, q, w, w.status);
    } else if (f.cfg.slots == slot_release::on_signaled_poll) {
      // keeps its slot until a later signaled completion is polled
    }
    if (error) {
      retire_front_on_completion(f, q);
      to_error(f, q);
      return;
    }
  }
  retire_front_on_completion(f, q);
}

inline void schedule(fabric_state& f, clock_ns when, std::function<void()> fn) {
  f.wire.push(wire_event{when, f.order++, std::move(fn)});
}

inline void deliver(fabric_state& f, const message& m);
inline void on_response(fabric_state& f, std::uint32_t qpn, std::uint64_t seq, std::uint32_t psn, const response& r);
inline void issue(fabric_state& f, qp_obj* q);

inline bool fault_hits(fabric_state& f, fault& ft, std::uint32_t src) {
  if (ft.src_qp_num && ft.src_qp_num != src) return false;
  if (ft.count == 0 && ft.probability <= 0) return false;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (ft.probability < 1.0 && u(f.rng) >= ft.probability) return false;
  return true;
}

/// Puts a message on the wire, applying injected faults.
inline void transmit(fabric_state& f, qp_obj* q, message m) {
  f.packets += m.npkts;
  clock_ns at = f.now + static_cast<clock_ns>(f.cfg.latency.count());
  bool drop = false, dup = false, hold = false;
  for (auto it = f.faults.begin(); it != f.faults.end();) {
    if (!fault_hits(f, *it, q->qpn)) {
      ++it;
      continue;
    }
    switch (it->kind) {
      case fault_kind::drop: drop = true; break;
      case fault_kind::duplicate: dup = true; break;
      case fault_kind::reorder: hold = true; break;
      case fault_kind::delay: at += static_cast<clock_ns>(it->delay.count()); break;
    }
    if (it->count && --it->count == 0)
      it = f.faults.erase(it);
    else
      ++it;
  }
  if (drop) return;
  if (hold) {
    q->held.push_back(std::move(m));
    return;
  }
  fabric_state* fp = &f;
  schedule(f, at, [fp, m] { deliver(*fp, m); });
  if (dup) schedule(f, at, [fp, m] { deliver(*fp, m); });
  // Messages held back by a reorder fault go right after this one.
  for (auto& h : q->held) schedule(f, at, [fp, h] { deliver(*fp, h); });
  q->held.clear();
}

inline void respond(fabric_state& f, const message& m, response r) {
  fabric_state* fp = &f;
  std::uint32_t qpn = m.src_qpn;
  std::uint64_t seq = m.wqe_seq;
  std::uint32_t psn = m.psn;
  schedule(f, f.now + static_cast<clock_ns>(f.cfg.latency.count()),
           [fp, qpn, seq, psn, r = std::move(r)] { on_response(*fp, qpn, seq, psn, r); });
}

inline response nak(wc_status s) {
  response r;
  r.what = response::kind::nak;
  r.status = s;
  return r;
}

inline void responder_error(fabric_state& f, qp_obj* q, async_event_type type) {
  async_event ev;
  ev.type = type;
  ev.qp_num = q->qpn;
  ev.object = q;
  q->pd->ctx->async_q.push_back(ev);
  to_error(f, q);
}

/// The responder side: checks and executes one request message.
inline void deliver(fabric_state& f, const message& m) {
  std::uint32_t dev = 0;
  std::uint8_t port = 0;
  if (!route(f, m.av, dev, port)) return;
  if (!f.devices[m.src_dev].ports[m.src_port - 1].up || !f.devices[dev].ports[port - 1].up) return;
  auto it = f.qps.find(m.dest_qpn);
  if (it == f.qps.end()) return;
  qp_obj* d = it->second;
  if (d->pd->ctx->dev != dev || d->attr.port_num != port || d->type != m.type) return;
  if (d->state != qp_state::rtr && d->state != qp_state::rts && d->state != qp_state::sqd) return;
  fabric_state& fr = f;
  const bool rc = m.type == qp_type::rc;
  const bool uc = m.type == qp_type::uc;
  const bool ud = m.type == qp_type::ud;

  if (rc) {
    std::uint32_t diff = (m.psn - d->expected_psn) & psn_mask;
    if (diff != 0) {
      if (diff >= (1u << 23)) {  // behind: a duplicate; answer it again without executing twice
        response r;
        if (m.op == opcode::rdma_read) {
          if (auto* mr = remote_mr_ok(f, d->pd, m.rkey, m.remote_addr, m.length, access::remote_read)) {
            (void)mr;
            r.data.resize(m.length);
            if (m.length) std::memcpy(r.data.data(), reinterpret_cast<const void*>(m.remote_addr), m.length);
          }
        } else if (is_atomic(m.op)) {
          auto old = d->atomic_replay.find(m.psn);
          if (old == d->atomic_replay.end()) return;
          r.data.resize(8);
          std::memcpy(r.data.data(), &old->second, 8);
        }
        respond(f, m, std::move(r));
      }
      return;  // ahead: out of sequence, dropped; the requester times out and retransmits
    }
  } else if (uc) {
    d->expected_psn = m.psn;  // every UC message starts a new sequence
  } else if (ud) {
    if (m.qkey != d->attr.qkey) return;
  }
  auto advance_psn = [&] { d->expected_psn = (m.psn + m.npkts) & psn_mask; };

  switch (m.op) {
    case opcode::send:
    case opcode::send_with_imm: {
      if (d->rq.empty()) {
        if (rc) {
          response r;
          r.what = response::kind::rnr_nak;
          r.rnr_timer = d->attr.min_rnr_timer;
          respond(f, m, std::move(r));
        } else if (uc) {
          advance_psn();
        }
        return;
      }
      recv_wqe rw = std::move(d->rq.front());
      d->rq.pop_front();
      const std::uint64_t need = std::uint64_t{m.length} + (ud ? grh_bytes : 0);
      cq_entry e;
      e.wc.wr_id = rw.wr_id;
      e.wc.qp_num = d->qpn;
      e.wc.opcode = wc_opcode::recv;
      bool sges_ok = true;
      for (const auto& s : rw.sges) sges_ok = sges_ok && local_sge_ok(f, d->pd, s, true);
      if (!sges_ok || sge_total(rw.sges) < need) {
        e.wc.status = sges_ok ? wc_status::loc_len_err : wc_status::loc_prot_err;
        recv_cqe(f, d, e, false);
        to_error(f, d);
        if (rc) respond(f, m, nak(sges_ok ? wc_status::rem_inv_req_err : wc_status::rem_op_err));
        return;
      }
      if (ud) {
        std::uint8_t grh[grh_bytes] = {};
        grh[0] = 0x60;  // IP version 6, as an IB GRH
        std::memcpy(grh + 8, m.sgid.raw.data(), 16);
        std::memcpy(grh + 24, m.av.grh.dgid.raw.data(), 16);
        std::vector<std::uint8_t> all(grh, grh + grh_bytes);
        all.insert(all.end(), m.payload.begin(), m.payload.end());
        scatter(rw.sges, all.data(), all.size());
        e.wc.src_qp = m.src_qpn;
        e.wc.flags = wc_flags::grh;
      } else {
        scatter(rw.sges, m.payload.data(), m.payload.size());
      }
      e.wc.byte_len = static_cast<std::uint32_t>(need);
      if (m.op == opcode::send_with_imm) {
        e.wc.flags |= wc_flags::with_imm;
        e.wc.imm_data = m.imm;
      }
      recv_cqe(f, d, e, m.solicited);
      if (rc) {
        advance_psn();
        respond(f, m, response{});
      } else if (uc) {
        advance_psn();
      }
      return;
    }
    case opcode::rdma_write:
    case opcode::rdma_write_with_imm: {
      const bool imm = m.op == opcode::rdma_write_with_imm;
      if (!has_all(d->attr.access_flags, access::remote_write)) {
        if (rc) {
          respond(f, m, nak(wc_status::rem_inv_req_err));
          responder_error(fr, d, async_event_type::qp_req_err);
        }
        return;
      }
      mr_obj* target = m.length ? remote_mr_ok(f, d->pd, m.rkey, m.remote_addr, m.length, access::remote_write)
                                : nullptr;
      if (m.length && !target) {
        if (rc) {
          if (imm && !d->rq.empty()) {
            cq_entry e;
            e.wc.wr_id = d->rq.front().wr_id;
            e.wc.qp_num = d->qpn;
            e.wc.status = wc_status::rem_access_err;
            d->rq.pop_front();
            recv_cqe(f, d, e, false);
          }
          respond(f, m, nak(wc_status::rem_access_err));
          responder_error(fr, d, async_event_type::qp_access_err);
        }
        return;  // UC: an access violation is silently dropped
      }
      if (imm && d->rq.empty()) {
        if (rc) {
          response r;
          r.what = response::kind::rnr_nak;
          r.rnr_timer = d->attr.min_rnr_timer;
          respond(f, m, std::move(r));
        } else {
          advance_psn();
        }
        return;
      }
      if (m.length) std::memcpy(reinterpret_cast<void*>(m.remote_addr), m.payload.data(), m.length);
      if (imm) {
        cq_entry e;
        e.wc.wr_id = d->rq.front().wr_id;
        d->rq.pop_front();
        e.wc.qp_num = d->qpn;
        e.wc.opcode = wc_opcode::recv_rdma_with_imm;
        e.wc.byte_len = m.length;
        e.wc.flags = wc_flags::with_imm;
        e.wc.imm_data = m.imm;
        recv_cqe(f, d, e, m.solicited);
      }
      advance_psn();
      if (rc) respond(f, m, response{});
      return;
    }
    case opcode::rdma_read: {
      if (!has_all(d->attr.access_flags, access::remote_read) || d->attr.max_dest_rd_atomic == 0) {
        respond(f, m, nak(wc_status::rem_inv_req_err));
        responder_error(fr, d, async_event_type::qp_req_err);
        return;
      }
      if (m.length && !remote_mr_ok(f, d->pd, m.rkey, m.remote_addr, m.length, access::remote_read)) {
        respond(f, m, nak(wc_status::rem_access_err));
        responder_error(fr, d, async_event_type::qp_access_err);
        return;
      }
      response r;
      r.data.resize(m.length);
      if (m.length) std::memcpy(r.data.data(), reinterpret_cast<const void*>(m.remote_addr), m.length);
      advance_psn();
      respond(f, m, std::move(r));
      return;
    }
    case opcode::atomic_cmp_and_swp:
    case opcode::atomic_fetch_and_add: {
      if (!has_all(d->attr.access_flags, access::remote_atomic) || d->attr.max_dest_rd_atomic == 0) {
        respond(f, m, nak(wc_status::rem_inv_req_err));
        responder_error(fr, d, async_event_type::qp_req_err);
        return;
      }
      if (!remote_mr_ok(f, d->pd, m.rkey, m.remote_addr, 8, access::remote_atomic)) {
        respond(f, m, nak(wc_status::rem_access_err));
        responder_error(fr, d, async_event_type::qp_access_err);
        return;
      }
      std::uint64_t old = 0;
      std::memcpy(&old, reinterpret_cast<const void*>(m.remote_addr), 8);
      std::uint64_t next = m.op == opcode::atomic_fetch_and_add ? old + m.compare_add
                                                                 : (old == m.compare_add ? m.swap : old);
      std::memcpy(reinterpret_cast<void*>(m.remote_addr), &next, 8);
      d->atomic_replay[m.psn] = old;
      if (d->atomic_replay.size() > 256) d->atomic_replay.erase(d->atomic_replay.begin());
      response r;
      r.data.resize(8);
      std::memcpy(r.data.data(), &old, 8);
      advance_psn();
      respond(f, m, std::move(r));
      return;
    }
  }
}

/// Go-back-N: every WQE from `from` on that was sent goes back to the queue.
inline void rewind(qp_obj* q, send_wqe& from) {
  bool on = false;
  for (auto& w : q->sq) {
    if (&w == &from) on = true;
    if (on && w.state == send_wqe::phase::issued) w.state = send_wqe::phase::queued;
  }
  q->next_psn = from.psn;
}

inline send_wqe* oldest_in_flight(qp_obj* q) {
  for (auto& w : q->sq)
    if (w.state == send_wqe::phase::issued) return &w;
  return nullptr;
}

inline void rearm_ack_timer(fabric_state& f, qp_obj* q) {
  if (q->rnr_wait) return;
  clock_ns t = ack_timeout_ns(q->attr.timeout);
  if (oldest_in_flight(q) && t)
    set_timer(f, q, f.now + t);
  else if (!oldest_in_flight(q))
    disarm_timer(f, q);
}

inline void on_response(fabric_state& f, std::uint32_t qpn, std::uint64_t seq, std::uint32_t psn, const response& r) {
  auto it = f.qps.find(qpn);
  if (it == f.qps.end()) return;
  qp_obj* q = it->second;
  if (q->state != qp_state::rts && q->state != qp_state::sqd) return;
  send_wqe* w = nullptr;
  for (auto& x : q->sq)
    if (x.seq == seq) w = &x;
  if (!w || w->state != send_wqe::phase::issued || w->psn != psn) return;
  switch (r.what) {
    case response::kind::ack:
      w->state = send_wqe::phase::done;
      w->status = wc_status::success;
      if (w->op == opcode::rdma_read || is_atomic(w->op)) {
        // The local region may have been deregistered since the WR was issued: the HCA
        // writes only into live regions, else the WR fails (LOC_PROT_ERR), as hardware.
        bool live = true;
        for (const auto& s : w->sges) live = live && local_sge_ok(f, q->pd, s, true);
        if (live)
          scatter(w->sges, r.data.data(), r.data.size());
        else
          w->status = wc_status::loc_prot_err;
      }
      q->retries_left = q->attr.retry_cnt;
      q->rnr_left = q->attr.rnr_retry;
      break;
    case response::kind::rnr_nak:
      if (q->attr.rnr_retry != 7 && q->rnr_left == 0) {
        w->state = send_wqe::phase::done;
        w->status = wc_status::rnr_retry_exc_err;
        break;
      }
      if (q->attr.rnr_retry != 7) --q->rnr_left;
      rewind(q, *w);
      q->rnr_wait = true;
      set_timer(f, q, f.now + rnr_timer_ns(r.rnr_timer));
      break;
    case response::kind::nak:
      w->state = send_wqe::phase::done;
      w->status = r.status;
      break;
  }
  report_sends(f, q);
  if (q->state == qp_state::err) return;
  rearm_ack_timer(f, q);
  issue(f, q);
}

inline void on_deadline(fabric_state& f, qp_obj* q) {
  q->deadline = 0;
  f.timed.erase(q);
  if (q->state != qp_state::rts && q->state != qp_state::sqd) return;
  if (q->rnr_wait) {
    q->rnr_wait = false;
    issue(f, q);
    return;
  }
  send_wqe* w = oldest_in_flight(q);
  if (!w) return;
  if (q->retries_left == 0) {
    w->state = send_wqe::phase::done;
    w->status = wc_status::retry_exc_err;
    report_sends(f, q);
    return;
  }
  --q->retries_left;
  rewind(q, *w);
  issue(f, q);
}

/// The requester side: sends every queued WQE it may (fence and rd_atomic limits).
inline void issue(fabric_state& f, qp_obj* q) {
  if (q->state != qp_state::rts || q->rnr_wait) return;
  auto& dev = device_of(q);
  const std::uint32_t mtu = path_mtu_bytes(q);
  std::uint32_t reads_in_flight = 0;
  bool earlier_reads_pending = false;
  bool sent_any = false;
  for (auto& w : q->sq) {
    if (w.state == send_wqe::phase::issued && is_read_or_atomic(w.op)) {
      ++reads_in_flight;
      earlier_reads_pending = true;
    }
    if (w.state != send_wqe::phase::queued) continue;
    if (has_all(w.flags, send_flags::fence) && earlier_reads_pending) break;
    if (is_read_or_atomic(w.op) && reads_in_flight >= q->attr.max_rd_atomic) break;
    bool ok = true;
    if (!w.is_inline)
      for (const auto& s : w.sges) ok = ok && local_sge_ok(f, q->pd, s, is_read_or_atomic(w.op));
    if (!ok) {
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_prot_err;
      break;
    }
    if (q->type == qp_type::ud && w.length > mtu) {
      w.state = send_wqe::phase::done;
      w.status = wc_status::loc_len_err;
      break;
    }
    message m;
    m.src_qpn = q->qpn;
    m.src_dev = q->pd->ctx->dev;
    m.src_port = q->attr.port_num;
    m.type = q->type;
    m.op = w.op;
    m.wqe_seq = w.seq;
    m.length = w.length;
    m.imm = w.imm;
    m.solicited = has_all(w.flags, send_flags::solicited);
    m.remote_addr = w.remote_addr;
    m.rkey = w.rkey;
    m.compare_add = w.compare_add;
    m.swap = w.swap;
    if (q->type == qp_type::ud) {
      m.av = w.ud_av;
      m.dest_qpn = w.remote_qpn;
      m.qkey = w.remote_qkey;
    } else {
      m.av = q->attr.av;
      m.dest_qpn = q->attr.dest_qp_num;
    }
    const auto& sg = dev.ports[m.src_port - 1].gids;
    if (m.av.grh.sgid_index < sg.size()) m.sgid = sg[m.av.grh.sgid_index].value;
    if (carries_payload(w.op)) m.payload = w.is_inline ? w.inline_data : gather(w.sges, w.length);
    m.psn = q->next_psn;
    m.npkts = is_atomic(w.op) ? 1 : packets_for(w.length, mtu);
    q->next_psn = (q->next_psn + m.npkts) & psn_mask;
    w.psn = m.psn;
    w.npkts = m.npkts;
    w.state = send_wqe::phase::issued;
    if (is_read_or_atomic(w.op)) {
      ++reads_in_flight;
      earlier_reads_pending = true;
    }
    if (q->type != qp_type::rc) w.state = send_wqe::phase::done;  // UC/UD: complete once sent
    sent_any = true;
    transmit(f, q, std::move(m));
  }
  if (q->type == qp_type::rc && sent_any && q->deadline == 0) rearm_ack_timer(f, q);
  report_sends(f, q);
}

/// Earliest pending simulated time, or 0 when nothing is pending.
inline clock_ns next_due(const fabric_state& f) {
  clock_ns t = 0;
  if (!f.wire.empty()) t = f.wire.top().when;
  for (auto* q : f.timed)
    if (q->deadline && (t == 0 || q->deadline < t)) t = q->deadline;
  return t;
}

inline bool pending(const fabric_state& f) { return !f.wire.empty() || !f.timed.empty(); }

/// Runs every wire event and timer that is due at the current simulated time.
inline void run_due(fabric_state& f) {
  if (f.running) return;
  f.running = true;
  for (;;) {
    if (!f.wire.empty() && f.wire.top().when <= f.now) {
      auto ev = f.wire.top();
      f.wire.pop();
      ev.run();
      continue;
    }
    qp_obj* due = nullptr;
    for (auto* q : f.timed)
      if (q->deadline && q->deadline <= f.now) {
        due = q;
        break;
      }
    if (!due) break;
    on_deadline(f, due);
  }
  f.running = false;
}

/// Idle: jump the simulated clock to the next pending event and run it.
// Simulated time and threads. One thread alone may jump the clock to the next event:
// nobody can observe the difference, and runs stay deterministic. Once a second thread
// uses the fabric, a jump could burn a retry or RNR budget in microseconds while the
// other thread has not had the wall-clock time to act (a peer reaching RTR 50 ms late
// must still be reached, as on a NIC). So while more than one thread has used the
// fabric in the last second, simulated time follows the wall clock.
inline constexpr auto paced_window = std::chrono::seconds(1);

/// Notes the calling thread; called by the verbs threads meet in (under the lock).
inline void touch(fabric_state& f) {
  const auto id = std::this_thread::get_id();
  if (id == f.last_thread) return;
  const auto wall = std::chrono::steady_clock::now();
  if (f.last_thread != std::thread::id{}) {
    if (!f.paced) {
      f.paced = true;
      f.wall_base = wall;
      f.sim_base = f.now;
    }
    f.last_switch = wall;
  }
  f.last_thread = id;
}

/// The latest simulated time the wall clock allows (paced), or no limit.
inline clock_ns allowed_now(fabric_state& f) {
  if (!f.paced) return ~clock_ns{0};
  const auto wall = std::chrono::steady_clock::now();
  if (wall - f.last_switch > paced_window) {
    f.paced = false;  // one thread again
    return ~clock_ns{0};
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(wall - f.wall_base).count();
  return f.sim_base + static_cast<clock_ns>(elapsed);
}

/// Moves simulated time to the next event and runs it; false when nothing is pending
/// or (paced) the wall clock has not reached it yet.
inline bool jump(fabric_state& f) {
  if (!pending(f)) return false;
  const clock_ns limit = allowed_now(f);
  clock_ns t = next_due(f);
  if (t > limit) {
    if (limit > f.now) {
      f.now = limit;
      run_due(f);
    }
    return false;
  }
  if (t > f.now) f.now = t;
  run_due(f);
  return true;
}

inline int take(fabric_state& f, cq_obj* cq, int n, backends::mock::wc* out) {
  int got = 0;
  while (got < n && !cq->entries.empty()) {
    cq_entry e = cq->entries.front();
    cq->entries.pop_front();
    if (e.release_upto) {
      auto it = f.qps.find(e.wc.qp_num);
      if (it != f.qps.end()) release_slots(f, it->second, e.release_upto);
    }
    out[got++] = e.wc;
  }
  return got;
}

/// When a wait of `timeout` ends; negative or huge timeouts wait forever (as on ibverbs).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  constexpr auto forever = std::chrono::hours(24 * 365);
  if (timeout.count() < 0 || timeout > forever) return clock::time_point::max();
  return clock::now() + timeout;
}

/// Waits for a notification; false when the deadline passed first.
inline bool wait_until(fabric_state& f, std::unique_lock<std::mutex>& lk, std::chrono::steady_clock::time_point until) {
  if (until == std::chrono::steady_clock::time_point::max()) {
    f.cv.wait(lk);
    return true;
  }
  return f.cv.wait_until(lk, until) != std::cv_status::timeout;
}

[[noreturn]] inline void fail(const char* verb, int err, const std::string& detail) {
  throw verbs_error(verb, err, detail);
}

// A device refuses objects beyond its limits as hardware does (ENOMEM).
inline void take_one(std::uint32_t& count, std::uint32_t max, const char* verb, const char* what,
                     const char* limit, const device_rt& dev) {
  if (count >= max)
    fail(verb, ENOMEM,
         std::to_string(max) + " " + what + " exist on " + dev.cfg.name + " already (its " + limit +
             "): destroy one first" + " (mock: or raise device_config::limits." + limit + ")");
  ++count;
}

inline const port_rt& port_checked(fabric_state& f, context_obj* ctx, std::uint8_t port, const char* verb) {
  auto& dev = f.devices[ctx->dev];
  if (port < 1 || port > dev.ports.size())
    fail(verb, EINVAL, "port " + std::to_string(port) + " does not exist on " + dev.cfg.name + " (ports are 1.." +
                           std::to_string(dev.ports.size()) + ")");
  return dev.ports[port - 1];
}

/// Checks an address vector against the local port it leaves from.
inline void check_av(fabric_state& f, context_obj* ctx, const ah_attr& av, const char* verb) {
  const auto& port = port_checked(f, ctx, av.port_num, verb);
  if (port.cfg.layer == link_layer::ethernet && !av.is_global)
    fail(verb, EINVAL,
         "on RoCE (Ethernet link layer) the address needs a GRH: set is_global=1, grh.dgid to the peer's GID and "
         "grh.sgid_index to a local RoCEv2 GID");
  if (av.is_global && (av.grh.sgid_index >= port.gids.size() || !port.gids[av.grh.sgid_index].valid))
    fail(verb, EINVAL, "grh.sgid_index " + std::to_string(av.grh.sgid_index) + " is not a valid GID on port " +
                           std::to_string(av.port_num) + " (use query_gid to list the table)");
  if (!av.is_global && av.dlid == 0)
    fail(verb, EINVAL, "the address has neither a GRH nor a destination LID");
}

inline void validate_attr(fabric_state& f, qp_obj* q, const qp_attr& a, qp_attr_mask mask) {
  using m = qp_attr_mask;
  auto& dev = device_of(q);
  const char* verb = "ibv_modify_qp";
  auto bad = [&](const std::string& what) {
    fail(verb, EINVAL, std::string(to_string(q->type)) + " QP " + std::to_string(q->qpn) + ": " + what);
  };
  std::uint8_t port = has_all(mask, m::port) ? a.port_num : q->attr.port_num;
  if (has_all(mask, m::port) && (a.port_num < 1 || a.port_num > dev.ports.size()))
    bad("port " + std::to_string(a.port_num) + " does not exist on " + dev.cfg.name);
  if (has_all(mask, m::pkey_index) && a.pkey_index != 0) bad("pkey_index must be 0 (the table has one entry)");
  if (has_all(mask, m::access_flags) &&
      !has_all(access::local_write | access::remote_write | access::remote_read | access::remote_atomic,
               a.access_flags))
    bad("unknown bits in qp_access_flags");
  if (has_all(mask, m::path_mtu)) {
    if (mtu_bytes(a.path_mtu) == 0) bad("path_mtu is not a valid MTU value");
    if (port >= 1 && port <= dev.ports.size() && a.path_mtu > dev.ports[port - 1].cfg.max_mtu)
      bad("path_mtu " + std::to_string(mtu_bytes(a.path_mtu)) + " is above the port's max MTU " +
          std::to_string(mtu_bytes(dev.ports[port - 1].cfg.max_mtu)));
  }
  if (has_all(mask, m::timeout) && a.timeout > 31) bad("timeout " + std::to_string(a.timeout) + " > 31");
  if (has_all(mask, m::retry_cnt) && a.retry_cnt > 7) bad("retry_cnt > 7");
  if (has_all(mask, m::rnr_retry) && a.rnr_retry > 7) bad("rnr_retry > 7");
  if (has_all(mask, m::min_rnr_timer) && a.min_rnr_timer > 31) bad("min_rnr_timer > 31");
  if (has_all(mask, m::max_qp_rd_atomic) && a.max_rd_atomic > dev.cfg.limits.max_qp_init_rd_atom)
    bad("max_rd_atomic " + std::to_string(a.max_rd_atomic) + " exceeds the device's max_qp_init_rd_atom " +
        std::to_string(dev.cfg.limits.max_qp_init_rd_atom));
  if (has_all(mask, m::max_dest_rd_atomic) && a.max_dest_rd_atomic > dev.cfg.limits.max_qp_rd_atom)
    bad("max_dest_rd_atomic " + std::to_string(a.max_dest_rd_atomic) + " exceeds the device's max_qp_rd_atom " +
        std::to_string(dev.cfg.limits.max_qp_rd_atom));
  if (has_all(mask, m::dest_qpn) && a.dest_qp_num > psn_mask) bad("dest_qp_num is wider than 24 bits");
  if (has_all(mask, m::av)) {
    ah_attr av = a.av;
    av.port_num = port;
    try {
      check_av(f, q->pd->ctx, av, verb);
    } catch (const verbs_error& e) {
      bad(std::string("address vector: ") + e.what());
    }
  }
}

}  // namespace mock::detail

// ---------------------------------------------------------------- fabric

namespace mock {

inline fabric::fabric(fabric_config config) : state_(std::make_shared<detail::fabric_state>()) {
  state_->cfg = std::move(config);
  state_->rng.seed(state_->cfg.seed);
  detail::build_devices(*state_);
}

// Devices opened from the fabric hold its state (context_obj::keep): nothing to do here.
inline fabric::~fabric() = default;

inline fabric& default_fabric() {
  // Made once (thread-safe), never destroyed: devices and objects may outlive static
  // destruction, and no other fabric ever takes its place.
  static fabric* const the_default = new fabric();
  return *the_default;
}

inline std::chrono::nanoseconds fabric::now() const {
  std::lock_guard lk(state_->mu);
  return std::chrono::nanoseconds(state_->now);
}

inline void fabric::advance(std::chrono::nanoseconds by) {
  std::lock_guard lk(state_->mu);
  const detail::clock_ns target = state_->now + static_cast<detail::clock_ns>(by.count());
  for (;;) {
    detail::clock_ns t = detail::next_due(*state_);
    if (t == 0 || t > target) break;
    state_->now = std::max(state_->now, t);
    detail::run_due(*state_);
  }
  state_->now = target;
  detail::run_due(*state_);
}

inline void fabric::inject(const fault& f) {
  std::lock_guard lk(state_->mu);
  state_->faults.push_back(f);
}

inline void fabric::clear_faults() {
  std::lock_guard lk(state_->mu);
  state_->faults.clear();
}

inline void fabric::set_port_up(std::string_view device, std::uint8_t port, bool up) {
  std::lock_guard lk(state_->mu);
  for (auto& d : state_->devices) {
    if (d.cfg.name != device) continue;
    if (port < 1 || port > d.ports.size())
      throw verbs_error("mock::fabric::set_port_up", EINVAL, "no port " + std::to_string(port) + " on " + d.cfg.name);
    if (d.ports[port - 1].up == up) return;
    d.ports[port - 1].up = up;
    async_event ev;
    ev.type = up ? async_event_type::port_active : async_event_type::port_err;
    ev.port_num = port;
    detail::post_async(*state_, d.index, ev);
    return;
  }
  throw verbs_error("mock::fabric::set_port_up", ENODEV, "no mock device named '" + std::string(device) + "'");
}

inline void fabric::set_arm_hook(std::function<void(const void*)> hook) {
  std::lock_guard lk(state_->mu);
  state_->arm_hook = std::move(hook);
}

inline std::uint64_t fabric::packets_sent() const {
  std::lock_guard lk(state_->mu);
  return state_->packets;
}

}  // namespace mock
RDMAKIT_END_NAMESPACE

#include <rdmakit/backends/mock/verbs.hpp>
