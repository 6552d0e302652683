#pragma once
// The responder: checks one request message (PSN, transport rules, keys and rights)
// and executes it (SEND into a receive, WRITE, READ and atomic responses).
#include <rdmakit/backends/mock/wire.hpp>

#include <algorithm>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

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

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
