#pragma once
// The device verbs of backends::mock (devices, ports, GIDs, asynchronous events,
// PDs, MRs, AHs): argument checks with errors that say what to do, then the engine.
// Every call takes the fabric lock.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/engine.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/owning_ptr.hpp>

#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace backends {

namespace mockd = rdmakit::mock::detail;

// The name-only forms open from the process default fabric, never from one the caller made.
RDMAKIT_DECL std::vector<std::string> mock::device_names() { return device_names(rdmakit::mock::default_fabric()); }

RDMAKIT_DECL std::vector<std::string> mock::device_names(rdmakit::mock::fabric& fab) {
  return device_names(fab.shared_state());
}

RDMAKIT_DECL std::vector<std::string> mock::device_names(rdmakit::detail::shared_owner<mockd::fabric_state> st) {
  auto& f = *st;
  std::lock_guard lk(f.mu);
  std::vector<std::string> out;
  for (auto& d : f.devices) out.push_back(d.cfg.name);
  return out;
}

RDMAKIT_DECL mock::context mock::open_device(std::string_view dev_name) {
  return open_device(rdmakit::mock::default_fabric(), dev_name);
}

RDMAKIT_DECL mock::context mock::open_device(rdmakit::mock::fabric& fab, std::string_view dev_name) {
  return open_device(fab.shared_state(), dev_name);
}

RDMAKIT_DECL mock::context mock::open_device(rdmakit::detail::shared_owner<mockd::fabric_state> st, std::string_view dev_name) {
  auto& f = *st;
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  for (auto& d : f.devices) {
    if (!dev_name.empty() && d.cfg.name != dev_name) continue;
    auto c = detail::make_unique_owner<mockd::context_obj>();
    mockd::check_ready_fd(c->async_ready, "ibv_open_device", "the device's asynchronous events");
    c->fab = &f;
    c->dev = d.index;
    f.contexts.insert(c.get());  // may throw: then c goes, not yet owning the fabric
    c->keep = std::move(st);
    return c.release();
  }
  std::string names;
  for (auto& d : f.devices) detail::append(names, names.empty() ? "" : ", ", d.cfg.name);
  mockd::fail("ibv_open_device", ENODEV,
              dev_name.empty() ? "the mock fabric has no devices"
                               : detail::cat("no mock device named '", dev_name, "'; devices: ", names));
}

RDMAKIT_DECL void mock::close_device(context ctx) noexcept {
  if (!ctx) return;
  auto& f = mockd::fab_of(ctx);
  rdmakit::detail::shared_owner<mockd::fabric_state> last;  // released after the lock: it may free the fabric
  {
    std::lock_guard lk(f.mu);
    if (ctx->children) return;  // objects still use it: the fabric releases it when it goes
    f.contexts.erase(ctx);
    last = std::move(ctx->keep);
    delete ctx;
  }
}

RDMAKIT_DECL std::string mock::device_name(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  return f.devices[ctx->dev].cfg.name;
}

RDMAKIT_DECL const void* mock::device_identity(context ctx) noexcept { return &ctx->fab->devices[ctx->dev]; }

RDMAKIT_DECL device_attr mock::query_device(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  return f.devices[ctx->dev].cfg.limits;
}

RDMAKIT_DECL port_attr mock::query_port(context ctx, std::uint8_t port) {
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

RDMAKIT_DECL gid_entry mock::query_gid(context ctx, std::uint8_t port, int index) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  const auto& p = mockd::port_checked(f, ctx, port, "ibv_query_gid");
  if (index < 0 || static_cast<std::uint32_t>(index) >= p.gids.size())
    mockd::fail("ibv_query_gid", EINVAL,
                detail::cat("GID index ", index, " is outside the table (0..", p.gids.size() - 1, ")"));
  return p.gids[static_cast<std::size_t>(index)];
}

RDMAKIT_DECL int mock::get_async_event(context ctx, std::chrono::milliseconds timeout, async_event& out) noexcept {
  auto& f = mockd::fab_of(ctx);
  std::unique_lock lk(f.mu);
  if (!mockd::wait_for_event(f, lk, mockd::deadline_after(timeout), [&] { return !ctx->async_q.empty(); }))
    return ETIMEDOUT;
  out = ctx->async_q.front();
  ctx->async_q.erase(ctx->async_q.begin());
  ctx->async_ready.sync(!ctx->async_q.empty());
  return 0;
}

RDMAKIT_DECL int mock::async_fd(context ctx) noexcept { return ctx ? ctx->async_ready.fd() : -1; }

RDMAKIT_DECL mock::pd mock::alloc_pd(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  auto& dev = f.devices[ctx->dev];
  mockd::check_room(dev.count.pd, dev.cfg.limits.max_pd, "ibv_alloc_pd", "protection domains", "max_pd", dev);
  auto p = detail::make_unique_owner<mockd::pd_obj>();
  p->ctx = ctx;
  f.pds.insert(p.get());  // the last step that may throw
  ++dev.count.pd;
  ++ctx->children;
  return p.release();
}

RDMAKIT_DECL int mock::dealloc_pd(pd p) noexcept {
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

RDMAKIT_DECL mock::mr mock::reg_mr(pd p, void* addr, std::size_t length, access flags) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  const auto& limits = f.devices[p->ctx->dev].cfg.limits;
  // rxe registers a region of no bytes (whose SGEs of length 0 are valid): row mr.length_zero.
  if (!addr || (length == 0 && !f.as_rxe()))
    mockd::fail("ibv_reg_mr", EINVAL, "nothing to register: the buffer is null or has length 0");
  if (length > limits.max_mr_size)
    mockd::fail("ibv_reg_mr", EINVAL, "length exceeds the device's max_mr_size");
  if (reinterpret_cast<std::uintptr_t>(addr) + length < reinterpret_cast<std::uintptr_t>(addr))
    mockd::fail("ibv_reg_mr", EINVAL, "the range runs past the end of the address space (the kernel refuses it)");
  if (has_any(flags, access::remote_write | access::remote_atomic) && !has_all(flags, access::local_write))
    mockd::fail("ibv_reg_mr", EINVAL,
                detail::cat("REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE too (", to_string(flags),
                            " was asked)"));
  if (length != 0) mockd::check_mapped(addr, length);  // (no page to pin in a region of no bytes)
  if (length != 0)
    mockd::check_mapping_rights(addr, length,
                                has_any(flags, access::local_write | access::remote_write | access::remote_atomic));
  auto& dev = f.devices[p->ctx->dev];
  mockd::check_room(dev.count.mr, limits.max_mr, "ibv_reg_mr", "memory regions", "max_mr", dev);
  auto m = detail::make_unique_owner<mockd::mr_obj>();
  m->pd = p;
  m->addr = reinterpret_cast<std::uint64_t>(addr);
  m->length = length;
  m->flags = flags;
  // Keys below the windows' (is_mw_key), past those of live regions: after 2^30
  // registrations a key comes back, never while its region lives.
  std::uint32_t next = f.next_key;
  m->lkey = mockd::cyclic_number(next, mockd::first_mr_key, mockd::last_mr_key, f.by_lkey.size(),
                                 [&](std::uint32_t k) { return f.by_lkey.count(k) != 0; }, "ibv_reg_mr",
                                 "region keys");
  // The spec profile makes the rkey differ from the lkey, so that using one for the
  // other is caught. rxe gives an MR with remote access its lkey as rkey, and one
  // without rkey 0, which names no MR (rxe 6.1).
  const bool remote = has_any(flags, access::remote_write | access::remote_read | access::remote_atomic);
  m->rkey = !f.as_rxe() ? m->lkey | 0x80000000u : remote ? m->lkey : 0;
  f.by_lkey[m->lkey] = m.get();  // these two may throw: nothing else has changed yet
  try {
    if (m->rkey) f.by_rkey[m->rkey] = m.get();
  } catch (...) {
    f.by_lkey.erase(m->lkey);
    throw;
  }
  f.next_key = next;
  ++dev.count.mr;
  ++p->children;
  return m.release();
}

RDMAKIT_DECL int mock::dereg_mr(mr m) noexcept {
  if (!m) return EINVAL;
  auto& f = mockd::fab_of(m->pd);
  std::lock_guard lk(f.mu);
  if (m->windows) return EINVAL;  // a window is bound to it (rxe 6.1 refuses as IBA 10.6.7.2.6 asks)
  f.by_lkey.erase(m->lkey);
  if (m->rkey) f.by_rkey.erase(m->rkey);
  ++f.mr_epoch;
  --m->pd->children;
  --f.devices[m->pd->ctx->dev].count.mr;
  delete m;
  return 0;
}

RDMAKIT_DECL std::uint32_t mock::mr_lkey(mr m) noexcept { return m->lkey; }
RDMAKIT_DECL std::uint32_t mock::mr_rkey(mr m) noexcept { return m->rkey; }

RDMAKIT_DECL mock::mw mock::alloc_mw(pd p, mw_type t) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  if (t != mw_type::type1 && t != mw_type::type2) mockd::fail("ibv_alloc_mw", EINVAL, "unknown memory window type");
  // Indexes past those of live windows; a reused one starts from another key byte (the
  // count of wraps), so that its last window's rkey does not name it.
  std::uint32_t next = f.next_mw, wraps = f.mw_wraps;
  const std::uint32_t index = mockd::cyclic_number(next, 1, mockd::last_mw_index, f.mws.size(),
                                                   [&](std::uint32_t i) { return f.mws.count(mockd::mw_slot(i)) != 0; },
                                                   "ibv_alloc_mw", "window indexes", &wraps);
  auto w = detail::make_unique_owner<mockd::mw_obj>();
  w->pd = p;
  w->type = t;
  w->rkey = w->user_rkey = 0x40000000u | (index << 8) | (wraps & 0xFFu);
  f.mws[mockd::mw_slot(index)] = w.get();  // the last step that may throw
  f.next_mw = next;
  f.mw_wraps = wraps;
  ++p->children;
  return w.release();
}

RDMAKIT_DECL int mock::dealloc_mw(mw w) noexcept {
  if (!w) return EINVAL;
  auto& f = mockd::fab_of(w->pd);
  std::lock_guard lk(f.mu);
  mockd::attach_window(w, nullptr, nullptr);  // (a bound window may be freed: its region is free again)
  f.mws.erase(w->rkey >> 8);
  --w->pd->children;
  delete w;
  return 0;
}

RDMAKIT_DECL std::uint32_t mock::mw_rkey(mw w) noexcept { return w->user_rkey; }

RDMAKIT_DECL void mock::set_mw_rkey(mw w, std::uint32_t rkey) noexcept {
  auto& f = mockd::fab_of(w->pd);
  std::lock_guard lk(f.mu);  // a post on another thread reads it
  w->user_rkey = rkey;
}

RDMAKIT_DECL mock::ah mock::create_ah(pd p, const ah_attr& attr) {
  auto& f = mockd::fab_of(p);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  mockd::check_av(f, p->ctx, attr, "ibv_create_ah");
  auto& dev = f.devices[p->ctx->dev];
  mockd::check_room(dev.count.ah, dev.cfg.limits.max_ah, "ibv_create_ah", "address handles", "max_ah", dev);
  auto a = detail::make_unique_owner<mockd::ah_obj>();
  a->pd = p;
  a->attr = attr;
  f.ahs.insert(a.get());  // the last step that may throw
  ++dev.count.ah;
  ++p->children;
  return a.release();
}

RDMAKIT_DECL int mock::destroy_ah(ah a) noexcept {
  if (!a) return EINVAL;
  auto& f = mockd::fab_of(a->pd);
  std::lock_guard lk(f.mu);
  --a->pd->children;
  --f.devices[a->pd->ctx->dev].count.ah;
  f.ahs.erase(a);
  delete a;
  return 0;
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
