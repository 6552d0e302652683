#pragma once
// The verbs of backends::mock: argument checks with errors that say what to do,
// then the engine. Every call takes the fabric lock.
#include <rdmakit/backends/mock/engine.hpp>

#include <thread>

RDMAKIT_BEGIN_NAMESPACE
namespace backends {

namespace mockd = rdmakit::mock::detail;

// The name-only forms open from the process default fabric, never from one the caller made.
inline std::vector<std::string> mock::device_names() { return device_names(rdmakit::mock::default_fabric()); }

inline std::vector<std::string> mock::device_names(rdmakit::mock::fabric& fab) {
  return device_names(fab.shared_state());
}

inline std::vector<std::string> mock::device_names(std::shared_ptr<mockd::fabric_state> st) {
  auto& f = *st;
  std::lock_guard lk(f.mu);
  std::vector<std::string> out;
  for (auto& d : f.devices) out.push_back(d.cfg.name);
  return out;
}

inline mock::context mock::open_device(std::string_view name) {
  return open_device(rdmakit::mock::default_fabric(), name);
}

inline mock::context mock::open_device(rdmakit::mock::fabric& fab, std::string_view name) {
  return open_device(fab.shared_state(), name);
}

inline mock::context mock::open_device(std::shared_ptr<mockd::fabric_state> st, std::string_view name) {
  auto& f = *st;
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  for (auto& d : f.devices) {
    if (!name.empty() && d.cfg.name != name) continue;
    auto* c = new mockd::context_obj;
    c->fab = &f;
    c->keep = std::move(st);
    c->dev = d.index;
    f.contexts.insert(c);
    return c;
  }
  std::string names;
  for (auto& d : f.devices) names += (names.empty() ? "" : ", ") + d.cfg.name;
  mockd::fail("ibv_open_device", ENODEV,
              name.empty() ? "the mock fabric has no devices"
                           : "no mock device named '" + std::string(name) + "'; devices: " + names);
}

inline void mock::close_device(context ctx) noexcept {
  if (!ctx) return;
  auto& f = mockd::fab_of(ctx);
  std::shared_ptr<mockd::fabric_state> last;  // released after the lock: it may free the fabric
  {
    std::lock_guard lk(f.mu);
    if (ctx->children) return;  // objects still use it: the fabric releases it when it goes
    f.contexts.erase(ctx);
    last = std::move(ctx->keep);
    delete ctx;
  }
}

inline std::string mock::device_name(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  return f.devices[ctx->dev].cfg.name;
}

inline device_attr mock::query_device(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  return f.devices[ctx->dev].cfg.limits;
}

inline port_attr mock::query_port(context ctx, std::uint8_t port) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  const auto& p = mockd::port_checked(f, ctx, port, "ibv_query_port");
  port_attr a;
  a.state = p.up ? port_state::active : port_state::down;
  a.max_mtu = p.cfg.max_mtu;
  a.active_mtu = p.cfg.active_mtu;
  a.gid_tbl_len = mockd::gid_table_len;
  a.max_msg_sz = 1u << 31;
  a.lid = p.lid;
  a.layer = p.cfg.layer;
  return a;
}

inline gid_entry mock::query_gid(context ctx, std::uint8_t port, int index) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  const auto& p = mockd::port_checked(f, ctx, port, "ibv_query_gid");
  if (index < 0 || static_cast<std::uint32_t>(index) >= p.gids.size())
    mockd::fail("ibv_query_gid", EINVAL,
                "GID index " + std::to_string(index) + " is outside the table (0.." +
                    std::to_string(p.gids.size() - 1) + ")");
  return p.gids[static_cast<std::size_t>(index)];
}

inline int mock::get_async_event(context ctx, std::chrono::milliseconds timeout, async_event& out) noexcept {
  auto& f = mockd::fab_of(ctx);
  std::unique_lock lk(f.mu);
  const auto until = mockd::deadline_after(timeout);
  for (;;) {
    mockd::run_due(f);
    if (!ctx->async_q.empty()) {
      out = ctx->async_q.front();
      ctx->async_q.pop_front();
      return 0;
    }
    if (!mockd::wait_until(f, lk, until) && ctx->async_q.empty()) return ETIMEDOUT;
  }
}

inline mock::pd mock::alloc_pd(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  auto& dev = f.devices[ctx->dev];
  mockd::take_one(dev.count.pd, dev.cfg.limits.max_pd, "ibv_alloc_pd", "protection domains", "max_pd", dev);
  auto* p = new mockd::pd_obj;
  p->ctx = ctx;
  ++ctx->children;
  f.pds.insert(p);
  return p;
}

inline int mock::dealloc_pd(pd p) noexcept {
  if (!p) return EINVAL;
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  if (p->children) return EBUSY;  // MRs, QPs or AHs still use it
  --p->ctx->children;
  --f.devices[p->ctx->dev].count.pd;
  f.pds.erase(p);
  delete p;
  return 0;
}

inline mock::mr mock::reg_mr(pd p, void* addr, std::size_t length, access flags) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  const auto& limits = f.devices[p->ctx->dev].cfg.limits;
  if (!addr || length == 0)
    mockd::fail("ibv_reg_mr", EINVAL, "nothing to register: the buffer is null or has length 0");
  if (length > limits.max_mr_size)
    mockd::fail("ibv_reg_mr", EINVAL, "length exceeds the device's max_mr_size");
  if (has_any(flags, access::remote_write | access::remote_atomic) && !has_all(flags, access::local_write))
    mockd::fail("ibv_reg_mr", EINVAL,
                "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE too (" + to_string(flags) + " was asked)");
  auto& dev = f.devices[p->ctx->dev];
  mockd::take_one(dev.count.mr, limits.max_mr, "ibv_reg_mr", "memory regions", "max_mr", dev);
  auto* m = new mockd::mr_obj;
  m->pd = p;
  m->addr = reinterpret_cast<std::uint64_t>(addr);
  m->length = length;
  m->flags = flags;
  m->lkey = f.next_key;
  m->rkey = f.next_key | 0x80000000u;  // distinct from the lkey, so mixing them up is caught
  ++f.next_key;
  f.by_lkey[m->lkey] = m;
  f.by_rkey[m->rkey] = m;
  ++p->children;
  return m;
}

inline int mock::dereg_mr(mr m) noexcept {
  if (!m) return EINVAL;
  auto& f = mockd::fab_of(m->pd);
  std::lock_guard lk(f.mu);
  f.by_lkey.erase(m->lkey);
  f.by_rkey.erase(m->rkey);
  --m->pd->children;
  --f.devices[m->pd->ctx->dev].count.mr;
  delete m;
  return 0;
}

inline std::uint32_t mock::mr_lkey(mr m) noexcept { return m->lkey; }
inline std::uint32_t mock::mr_rkey(mr m) noexcept { return m->rkey; }

inline mock::ah mock::create_ah(pd p, const ah_attr& attr) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::check_av(f, p->ctx, attr, "ibv_create_ah");
  auto& dev = f.devices[p->ctx->dev];
  mockd::take_one(dev.count.ah, dev.cfg.limits.max_ah, "ibv_create_ah", "address handles", "max_ah", dev);
  auto* a = new mockd::ah_obj;
  a->pd = p;
  a->attr = attr;
  ++p->children;
  f.ahs.insert(a);
  return a;
}

inline int mock::destroy_ah(ah a) noexcept {
  if (!a) return EINVAL;
  auto& f = mockd::fab_of(a->pd);
  std::lock_guard lk(f.mu);
  --a->pd->children;
  --f.devices[a->pd->ctx->dev].count.ah;
  f.ahs.erase(a);
  delete a;
  return 0;
}

inline mock::channel mock::create_comp_channel(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  auto* ch = new mockd::channel_obj;
  ch->ctx = ctx;
  ++ctx->children;
  f.channels.insert(ch);
  return ch;
}

inline int mock::destroy_comp_channel(channel ch) noexcept {
  if (!ch) return EINVAL;
  auto& f = mockd::fab_of(ch);
  std::lock_guard lk(f.mu);
  if (ch->cqs) return EBUSY;  // CQs still report to it
  --ch->ctx->children;
  f.channels.erase(ch);
  delete ch;
  return 0;
}

inline mock::cq mock::create_cq(context ctx, int cqe, channel ch, int comp_vector) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  const auto& limits = f.devices[ctx->dev].cfg.limits;
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > limits.max_cqe)
    mockd::fail("ibv_create_cq", EINVAL,
                "cqe " + std::to_string(cqe) + " is outside 1.." + std::to_string(limits.max_cqe) +
                    " (the device's max_cqe)");
  if (comp_vector < 0) mockd::fail("ibv_create_cq", EINVAL, "negative comp_vector");
  if (ch && ch->ctx != ctx) mockd::fail("ibv_create_cq", EINVAL, "the completion channel belongs to another device");
  auto& dev = f.devices[ctx->dev];
  mockd::take_one(dev.count.cq, limits.max_cq, "ibv_create_cq", "completion queues", "max_cq", dev);
  auto* c = new mockd::cq_obj;
  c->ctx = ctx;
  c->channel = ch;
  c->capacity = cqe;
  if (ch) ++ch->cqs;
  ++ctx->children;
  f.cqs.insert(c);
  return c;
}

inline int mock::cq_capacity(cq c) noexcept { return c->capacity; }

inline int mock::destroy_cq(cq c) noexcept {
  if (!c) return EINVAL;
  auto& f = mockd::fab_of(c);
  std::lock_guard lk(f.mu);
  if (c->qps) return EBUSY;                            // a QP still uses it
  if (c->events_acked < c->events_delivered) return EBUSY;  // ibv_destroy_cq would wait forever
  if (c->channel) {
    auto& ev = c->channel->events;
    ev.erase(std::remove(ev.begin(), ev.end(), c), ev.end());
    --c->channel->cqs;
  }
  for (auto* ctx : f.contexts)
    for (auto it = ctx->async_q.begin(); it != ctx->async_q.end();)
      it = it->object == c ? ctx->async_q.erase(it) : it + 1;
  --c->ctx->children;
  --f.devices[c->ctx->dev].count.cq;
  f.cqs.erase(c);
  delete c;
  return 0;
}

inline int mock::poll_cq(cq c, int n, wc* out) noexcept {
  if (n < 0) return -EINVAL;
  auto& f = mockd::fab_of(c);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  mockd::run_due(f);
  int got = mockd::take(f, c, n, out);
  if (got == 0 && mockd::jump(f)) got = mockd::take(f, c, n, out);
  return got;
}

inline int mock::req_notify_cq(cq c, bool solicited_only) noexcept {
  auto& f = mockd::fab_of(c);
  std::function<void(const void*)> hook;
  {
    std::lock_guard lk(f.mu);
    mockd::touch(f);
    hook = f.arm_hook;
  }
  if (hook) hook(c);
  std::lock_guard lk(f.mu);
  if (!c->channel) return EINVAL;  // nothing to notify
  c->armed = true;
  c->solicited_only = solicited_only;
  return 0;
}

inline int mock::get_cq_event(channel ch, std::chrono::milliseconds timeout, cq& out) noexcept {
  auto& f = mockd::fab_of(ch);
  std::unique_lock lk(f.mu);
  mockd::touch(f);
  const auto until = mockd::deadline_after(timeout);
  for (unsigned jumps = 0;;) {
    mockd::run_due(f);
    if (!ch->events.empty()) {
      out = ch->events.front();
      ch->events.pop_front();
      ++out->events_delivered;
      return 0;
    }
    if (mockd::jump(f)) {  // simulated time passes while we wait
      // A timer source can be endless (rnr_retry = 7 toward a peer that never posts a
      // receive): the wall-clock timeout still holds, and other threads get the lock.
      if (std::chrono::steady_clock::now() >= until) return ETIMEDOUT;
      if (++jumps % 16 == 0) {  // a short sleep, not a yield: std::mutex is not fair
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        lk.lock();
      }
      continue;
    }
    auto slice = until;
    if (f.paced && mockd::pending(f))  // the next event falls due on the wall clock
      slice = std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
    if (!mockd::wait_until(f, lk, slice) && ch->events.empty() && slice == until) return ETIMEDOUT;
  }
}

inline void mock::ack_cq_events(cq c, unsigned n) noexcept {
  auto& f = mockd::fab_of(c);
  std::lock_guard lk(f.mu);
  c->events_acked = std::min(c->events_delivered, c->events_acked + n);
}

inline mock::qp mock::create_qp(pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps, bool sq_sig_all) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  const auto& limits = f.devices[p->ctx->dev].cfg.limits;
  auto bad = [&](const std::string& what) { mockd::fail("ibv_create_qp", EINVAL, what); };
  if (!send_cq || !recv_cq) bad("a QP needs a send CQ and a receive CQ");
  if (send_cq->ctx != p->ctx || recv_cq->ctx != p->ctx) bad("the CQs belong to another device than the PD");
  if (type != qp_type::rc && type != qp_type::uc && type != qp_type::ud) bad("unknown QP type");
  auto limit = [&](std::uint32_t v, std::uint32_t max, const char* name, const char* dev_name) {
    if (v > max)
      bad(std::string(name) + " " + std::to_string(v) + " exceeds the device's " + dev_name + " " +
          std::to_string(max));
  };
  limit(caps.max_send_wr, limits.max_qp_wr, "max_send_wr", "max_qp_wr");
  limit(caps.max_recv_wr, limits.max_qp_wr, "max_recv_wr", "max_qp_wr");
  limit(caps.max_send_sge, limits.max_sge, "max_send_sge", "max_sge");
  limit(caps.max_recv_sge, limits.max_sge, "max_recv_sge", "max_sge");
  limit(caps.max_inline_data, limits.max_inline_data, "max_inline_data", "max_inline_data");
  auto& dev = f.devices[p->ctx->dev];
  mockd::take_one(dev.count.qp, limits.max_qp, "ibv_create_qp", "queue pairs", "max_qp", dev);
  auto* q = new mockd::qp_obj;
  q->pd = p;
  q->send_cq = send_cq;
  q->recv_cq = recv_cq;
  q->type = type;
  q->caps = caps;  // granted exactly as asked
  q->sq_sig_all = sq_sig_all;
  q->qpn = f.next_qpn++;
  f.qps[q->qpn] = q;
  ++send_cq->qps;
  ++recv_cq->qps;
  ++p->children;
  return q;
}

inline int mock::destroy_qp(qp q) noexcept {
  if (!q) return EINVAL;
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  // Like providers that clean the CQ: completions of a destroyed QP are not returned.
  for (auto* c : {q->send_cq, q->recv_cq}) {
    auto& e = c->entries;
    e.erase(std::remove_if(e.begin(), e.end(), [&](const mockd::cq_entry& x) { return x.wc.qp_num == q->qpn; }),
            e.end());
  }
  mockd::disarm_timer(f, q);
  f.qps.erase(q->qpn);
  --q->send_cq->qps;
  --q->recv_cq->qps;
  --q->pd->children;
  --f.devices[q->pd->ctx->dev].count.qp;
  delete q;
  return 0;
}

inline std::uint32_t mock::qp_num(qp q) noexcept { return q->qpn; }

inline void mock::modify_qp(qp q, const qp_attr& a, qp_attr_mask mask) {
  using m = qp_attr_mask;
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  const qp_state cur = q->state;
  const qp_state next = has_all(mask, m::state) ? a.state : cur;
  auto bad = [&](const std::string& what) {
    mockd::fail("ibv_modify_qp", EINVAL,
                std::string(to_string(q->type)) + " QP " + std::to_string(q->qpn) + " " + to_string(cur) + "->" +
                    to_string(next) + ": " + what);
  };
  if (has_all(mask, m::cur_state) && a.cur_state != cur)
    bad(std::string("cur_state says ") + to_string(a.cur_state) + " but the QP is in " + to_string(cur));
  auto rule = rdmakit::detail::rule_for(cur, next, q->type);
  if (!rule.legal) bad("not a legal transition");
  const qp_attr_mask allowed = m::state | rule.required | rule.optional;
  if (auto extra = mask & ~allowed; extra != m::none)
    bad("attribute(s) " + to_string(extra) + " are not allowed here (required: " + to_string(rule.required) +
        ", optional: " + to_string(rule.optional) + ")");
  if (auto missing = rule.required & ~mask; missing != m::none)
    bad("missing required attribute(s) " + to_string(missing) + " (required: " + to_string(rule.required) + ")");
  mockd::validate_attr(f, q, a, mask);

  auto& s = q->attr;
  if (has_all(mask, m::port)) s.port_num = a.port_num;
  if (has_all(mask, m::pkey_index)) s.pkey_index = a.pkey_index;
  if (has_all(mask, m::access_flags)) s.access_flags = a.access_flags;
  if (has_all(mask, m::qkey)) s.qkey = a.qkey;
  if (has_all(mask, m::av)) {
    s.av = a.av;
    s.av.port_num = s.port_num;
  }
  if (has_all(mask, m::path_mtu)) s.path_mtu = a.path_mtu;
  if (has_all(mask, m::dest_qpn)) s.dest_qp_num = a.dest_qp_num;
  if (has_all(mask, m::rq_psn)) s.rq_psn = a.rq_psn & psn_mask;
  if (has_all(mask, m::sq_psn)) s.sq_psn = a.sq_psn & psn_mask;
  if (has_all(mask, m::max_dest_rd_atomic)) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (has_all(mask, m::max_qp_rd_atomic)) s.max_rd_atomic = a.max_rd_atomic;
  if (has_all(mask, m::min_rnr_timer)) s.min_rnr_timer = a.min_rnr_timer;
  if (has_all(mask, m::timeout)) s.timeout = a.timeout;
  if (has_all(mask, m::retry_cnt)) s.retry_cnt = a.retry_cnt;
  if (has_all(mask, m::rnr_retry)) s.rnr_retry = a.rnr_retry;

  switch (next) {
    case qp_state::reset:
      // Everything outstanding is dropped without completions.
      mockd::disarm_timer(f, q);
      q->sq.clear();
      q->rq.clear();
      q->held.clear();
      q->state = qp_state::reset;
      break;
    case qp_state::err:
      mockd::to_error(f, q);
      break;
    case qp_state::rtr:
      q->state = next;
      if (cur == qp_state::init) q->expected_psn = s.rq_psn;
      break;
    case qp_state::rts:
      q->state = next;
      if (cur == qp_state::rtr) {
        q->next_psn = s.sq_psn;
        q->retries_left = s.retry_cnt;
        q->rnr_left = s.rnr_retry;
      }
      mockd::issue(f, q);
      mockd::run_due(f);
      break;
    default:
      q->state = next;
      break;
  }
}

inline qp_state mock::query_qp_state(qp q) {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  return q->state;
}

inline int mock::post_send(qp q, send_wr* wr, send_wr** bad_wr) noexcept {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  int err = 0;
  send_wr* w = wr;
  // Counts slots still held, including unsignaled WRs that wait for a later signaled poll.
  auto slots_used = [&] { return static_cast<std::uint32_t>(q->sq.size()); };
  for (; w; w = w->next) {
    if (q->state == qp_state::reset || q->state == qp_state::init || q->state == qp_state::rtr) {
      err = EINVAL;
      break;
    }
    if (w->num_sge < 0 || static_cast<std::uint32_t>(w->num_sge) > q->caps.max_send_sge ||
        (w->num_sge && !w->sg_list) || !mockd::opcode_allowed(q->type, w->op)) {
      err = EINVAL;
      break;
    }
    std::uint64_t total = 0;
    for (int i = 0; i < w->num_sge; ++i) total += w->sg_list[i].length;
    if (total > (1ull << 31)) {
      err = EINVAL;
      break;
    }
    const bool inl = has_all(w->flags, send_flags::inline_data);
    if (inl && (total > q->caps.max_inline_data || mockd::is_read_or_atomic(w->op))) {
      err = EINVAL;
      break;
    }
    if (mockd::is_atomic(w->op) &&
        (w->num_sge != 1 || w->sg_list[0].length != 8 || (w->atomic.remote_addr & 7) != 0)) {
      err = EINVAL;
      break;
    }
    if (mockd::is_read_or_atomic(w->op) && q->attr.max_rd_atomic == 0) {
      err = EINVAL;  // max_rd_atomic 0 can never issue it: refuse instead of stalling
      break;
    }
    if (q->type == qp_type::ud && (!w->ud.address || w->ud.address->pd != q->pd)) {
      err = EINVAL;
      break;
    }
    if (slots_used() >= q->caps.max_send_wr) {
      err = ENOMEM;
      break;
    }
    mockd::send_wqe e;
    e.seq = q->next_seq++;
    e.wr_id = w->wr_id;
    e.op = w->op;
    e.flags = w->flags;
    e.signaled = q->sq_sig_all || has_all(w->flags, send_flags::signaled);
    e.length = static_cast<std::uint32_t>(mockd::is_atomic(w->op) ? 8 : total);
    e.sges.assign(w->sg_list, w->sg_list + w->num_sge);
    if (inl) {
      e.is_inline = true;
      e.inline_data = mockd::gather(e.sges, e.length);  // copied now: the buffer may be reused at once
    }
    e.imm = w->imm_data;
    if (mockd::is_atomic(w->op)) {
      e.remote_addr = w->atomic.remote_addr;
      e.rkey = w->atomic.rkey;
      e.compare_add = w->atomic.compare_add;
      e.swap = w->atomic.swap;
    } else {
      e.remote_addr = w->rdma.remote_addr;
      e.rkey = w->rdma.rkey;
    }
    if (q->type == qp_type::ud) {
      e.ud_av = w->ud.address->attr;
      e.remote_qpn = w->ud.remote_qpn;
      e.remote_qkey = w->ud.remote_qkey;
    }
    q->sq.push_back(std::move(e));
  }
  if (bad_wr) *bad_wr = err ? w : nullptr;
  if (q->state == qp_state::err) {
    // Posting to a QP in ERR completes the WRs at once with flush errors.
    for (auto& x : q->sq)
      if (!x.reported) {
        x.reported = true;
        x.state = mockd::send_wqe::phase::done;
        x.status = wc_status::wr_flush_err;
        mockd::send_cqe(f, q, x, wc_status::wr_flush_err);
      }
    mockd::retire_front_on_completion(f, q);
  } else {
    mockd::issue(f, q);
  }
  mockd::run_due(f);
  return err;
}

inline int mock::post_recv(qp q, recv_wr* wr, recv_wr** bad_wr) noexcept {
  auto& f = mockd::fab_of(q);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  int err = 0;
  recv_wr* w = wr;
  for (; w; w = w->next) {
    if (q->state == qp_state::reset) {
      err = EINVAL;
      break;
    }
    if (w->num_sge < 0 || static_cast<std::uint32_t>(w->num_sge) > q->caps.max_recv_sge ||
        (w->num_sge && !w->sg_list)) {
      err = EINVAL;
      break;
    }
    if (q->rq.size() >= q->caps.max_recv_wr) {
      err = ENOMEM;
      break;
    }
    mockd::recv_wqe r;
    r.wr_id = w->wr_id;
    r.sges.assign(w->sg_list, w->sg_list + w->num_sge);
    if (q->state == qp_state::err)
      mockd::flush_recv(f, q, r);
    else
      q->rq.push_back(std::move(r));
  }
  if (bad_wr) *bad_wr = err ? w : nullptr;
  mockd::run_due(f);
  return err;
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
