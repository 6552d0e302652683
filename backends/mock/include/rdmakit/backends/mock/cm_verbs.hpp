#pragma once
// The connection manager of backends::mock: librdmacm's event sequence over the mock
// fabric. An address is the IPv4 address of a port's IPv4-mapped GID. Each step's
// event is queued at once on the id's channel (whose ready_fd is readable while one is
// queued); the QPs are moved to RTR/RTS by accept and to ERR by disconnect through the
// mock's own modify_qp, outside the fabric lock (which modify_qp takes).
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/engine.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/owning_ptr.hpp>
#include <rdmakit/detail/qp_transitions.hpp>
#include <rdmakit/detail/reserve_room.hpp>

#include <cassert>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

inline fabric_state& fab_of(cm_channel_obj* c) { return *c->fab; }
inline fabric_state& fab_of(cm_id_obj* i) { return *i->ch->fab; }

// A channel's queue keeps room for two more events per id on it: each id gets at most
// one event from a verb that cannot fail (the REJECTED or DISCONNECTED that ends its
// connection, from the peer's rdma_destroy_id, rdma_disconnect or rdma_reject, or its
// UNREACHABLE falling due in rdma_get_cm_event), DISCONNECTED followed by TIMEWAIT_EXIT,
// and queuing them must not allocate. Under f.mu; may throw (nothing changed then).
inline void cm_make_room(cm_channel_obj& c, std::size_t more) {
  rdmakit::detail::reserve_room(c.events, c.events.size() + 2 * static_cast<std::size_t>(c.ids) + more);
}

// Under f.mu: queue `r` on its id's channel, in the room kept for it (allocates nothing).
inline void cm_queue(fabric_state& f, cm_event_rec&& r) noexcept {
  cm_channel_obj& c = *r.id->ch;
  assert(c.events.size() < c.events.capacity());
  c.events.push_back(std::move(r));
  c.ready.sync(true);
  f.cv.notify_all();
}

inline cm_event_rec cm_event(cm_id_obj* id, cm_event_type t, int status = 0) noexcept {
  cm_event_rec r;
  r.type = t;
  r.id = id;
  r.status = status;
  return r;
}

// Under f.mu: queue an event on the id's channel. May throw (nothing changed then).
inline void cm_push(fabric_state& f, cm_id_obj* id, cm_event_type t, int status = 0, const void* data = nullptr,
                    std::size_t len = 0, cm_id_obj* listen_id = nullptr) {
  cm_event_rec r = cm_event(id, t, status);
  r.listen_id = listen_id;
  if (data && len) r.data.assign(static_cast<const std::byte*>(data), static_cast<const std::byte*>(data) + len);
  cm_make_room(*id->ch, 1);
  cm_queue(f, std::move(r));
}

// Under f.mu: the event that ends `id`'s connection, from a verb that cannot fail: in the
// room its channel keeps for it.
inline void cm_push_final(fabric_state& f, cm_id_obj* id, cm_event_type t, int status = 0) noexcept {
  cm_queue(f, cm_event(id, t, status));
}

// Under f.mu: DISCONNECTED, then TIMEWAIT_EXIT, as the kernel's CM queues them once the
// QP has left TIMEWAIT (seconds later there; at once here, as the mock's events come).
inline void cm_push_disconnected(fabric_state& f, cm_id_obj* id) noexcept {
  cm_push_final(f, id, cm_event_type::disconnected);
  cm_push_final(f, id, cm_event_type::timewait_exit);
}

// Why the CM's verbs refuse an id in phase::done (EINVAL, as the kernel's CM once a REJ
// or a disconnect reset the connection).
inline constexpr const char* cm_over =
    "the id's connection is no longer being set up (a connect request whose client gave up, or a rejected or "
    "closed connection)";

// A REJECTED owed to a requester. librdmacm moves the requester's QP to ERR when it
// reads REJECTED (so the receives it posted flush); the mock does it before queuing
// the event, under the fabric lock, so the ids cannot go meanwhile. The event is the
// one that ends the requester's connection: it goes in the room kept for it.
// `type`: REJECTED, or UNREACHABLE, which librdmacm handles alike.
inline void cm_deliver_reject(fabric_state& f, cm_id_obj* id, int status, std::vector<std::byte> data = {},
                              cm_event_type type = cm_event_type::rejected) noexcept {
  if (!f.cm_ids.count(id)) return;
  if (qp_obj* q = id->qp) {
    try {
      qp_attr a;
      a.state = qp_state::err;
      touch(f);
      modify_qp_locked(f, q, a, qp_attr_mask::state);
    } catch (...) {
    }
  }
  cm_event_rec r = cm_event(id, type, status);
  r.data = std::move(data);
  cm_queue(f, std::move(r));
}

// The id listening on exactly (ip, port); null when none.
inline cm_id_obj* cm_listening(const fabric_state& f, std::uint32_t ip, std::uint16_t port) {
  for (const cm_listener& l : f.cm_listeners)
    if (l.ip == ip && l.port == port) return l.id;
  return nullptr;
}

// Whether a listener holds `port` on `ip` (a listener on 0.0.0.0, or `ip` 0, holds it on all).
inline bool cm_port_listened(const fabric_state& f, std::uint32_t ip, std::uint16_t port) {
  for (const auto& l : f.cm_listeners)
    if (l.port == port && (l.ip == 0 || ip == 0 || l.ip == ip)) return true;
  return false;
}

// Whether a live id holds `port` on `ip` as its own address (an active id's, a bound one's).
inline bool cm_port_held(const fabric_state& f, std::uint32_t ip, std::uint16_t port) {
  for (const cm_id_obj* id : f.cm_ids)
    if (id->local_port == port && (id->local_ip == 0 || ip == 0 || id->local_ip == ip)) return true;
  return false;
}

// The port a bind to port 0 or an active id gets: the next of the mock's ephemeral range
// (40000..65535, wrapping within it) no listener or live id holds on `ip` (after 25,536
// connections the range wraps); EADDRINUSE when none is free.
inline std::uint16_t cm_pick_port(fabric_state& f, std::uint32_t ip, const char* verb) {
  constexpr std::uint32_t first = 40000, count = 65536 - first;
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto port = static_cast<std::uint16_t>(first + (f.next_cm_port - first + i) % count);
    if (cm_port_listened(f, ip, port) || cm_port_held(f, ip, port)) continue;
    f.next_cm_port = static_cast<std::uint16_t>(port == 65535 ? first : port + 1);
    return port;
  }
  fail(verb, EADDRINUSE, "every port of the mock's ephemeral range (40000..65535) is held: destroy ids first");
}

inline void cm_forget_events(cm_id_obj* id) {
  for (auto* q : {&id->ch->events, &id->ch->later})
    for (auto it = q->begin(); it != q->end();) it = (it->id == id) ? q->erase(it) : it + 1;
  id->ch->ready.sync(!id->ch->events.empty());
}

// True when the port is plugged in (an unplugged one drops every packet, CM MADs too).
inline bool cm_port_up(const fabric_state& f, std::uint32_t dev, std::uint8_t port) {
  return port >= 1 && dev < f.devices.size() && port <= f.devices[dev].ports.size() &&
         f.devices[dev].ports[port - 1].up;
}

// The (device, port, GID index) whose IPv4-mapped GID is `ip`; false when none.
inline bool cm_find_address(const fabric_state& f, std::uint32_t ip, std::uint32_t& dev, std::uint8_t& port,
                            int& index) {
  const gid want = gid::from_ipv4(static_cast<std::uint8_t>(ip >> 24), static_cast<std::uint8_t>(ip >> 16),
                                  static_cast<std::uint8_t>(ip >> 8), static_cast<std::uint8_t>(ip));
  for (std::uint32_t d = 0; d < f.devices.size(); ++d)
    for (std::size_t p = 0; p < f.devices[d].ports.size(); ++p) {
      const auto& gids = f.devices[d].ports[p].gids;
      for (std::size_t i = 0; i < gids.size(); ++i)
        if (gids[i].valid && gids[i].value == want) {
          dev = d;
          port = static_cast<std::uint8_t>(p + 1);
          index = static_cast<int>(i);
          return true;
        }
    }
  return false;
}

// The IPv4 address the mock's CM uses for `a`: IPv4, or IPv6 that is :: or IPv4-mapped
// (::ffff:a.b.c.d). False for other IPv6 addresses: the mock's CM does not serve them.
inline bool cm_ipv4_of(const cm_address& a, std::uint32_t& out) noexcept {
  if (!a.is_ipv6) {
    out = a.ipv4;
    return true;
  }
  out = 0;
  return a.is_any() || a.mapped_ipv4(out);
}

inline gid cm_gid_of(const fabric_state& f, const cm_id_obj* id) {
  const auto& gids = f.devices[id->dev].ports[id->port - 1].gids;
  return id->gid_index < static_cast<int>(gids.size()) ? gids[static_cast<std::size_t>(id->gid_index)].value : gid{};
}

// The attributes rdma_init_qp_attr gives `self`'s QP for `state`, connected to `peer`,
// as the kernel's CM (cm.c) derives them from the request (the active side's param)
// and the answer (the passive side's): INIT the port and the remote rights, writes
// always, reads and atomics when the *other* side may initiate them (its
// initiator_depth); RTR the path from the route, the peer's QPN and PSN, the incoming
// READ depth, min_rnr_timer 0 (655 ms); RTS this side's PSN, the ACK timeout of a RoCE
// path (19), the request's retry count on both sides, the *other* side's RNR retry
// count, and the outgoing READ depth. The passive side keeps the depths it answered
// with (librdmacm moves its QP with them); the active side takes the answer's, crossed.
inline void cm_qp_attrs(const fabric_state& f, const cm_id_obj* self, const cm_id_obj* peer,
                        const cm_conn_param& mine, const cm_conn_param& theirs, qp_state state, qp_type type,
                        qp_attr& a, qp_attr_mask& m) {
  const cm_conn_param& req = self->passive ? theirs : mine;
  const cm_conn_param& rep = self->passive ? mine : theirs;
  a = qp_attr{};
  a.state = state;
  if (state == qp_state::init) {
    a.port_num = self->port;
    a.pkey_index = 0;
    a.access_flags = access::remote_write;
    if ((self->passive ? req.initiator_depth : rep.initiator_depth) != 0)
      a.access_flags = a.access_flags | access::remote_read | access::remote_atomic;
    m = qp_attr_mask::state | qp_attr_mask::pkey_index | qp_attr_mask::port | qp_attr_mask::access_flags;
    return;
  }
  const auto& pa = f.devices[self->dev].ports[self->port - 1];
  const auto& pb = f.devices[peer->dev].ports[peer->port - 1];
  if (state == qp_state::rtr) {
    a.path_mtu = std::min(pa.cfg.active_mtu, pb.cfg.active_mtu);
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.av.port_num = self->port;
    a.av.dlid = pb.lid;
    if (pa.cfg.layer == link_layer::ethernet) {
      a.av.is_global = true;
      a.av.grh.dgid = cm_gid_of(f, peer);
      a.av.grh.sgid_index = static_cast<std::uint8_t>(self->gid_index);
      a.av.grh.hop_limit = 64;
    }
    a.max_dest_rd_atomic = self->passive ? rep.responder_resources : rep.initiator_depth;
    a.min_rnr_timer = 0;
    m = rdmakit::detail::rule_for(qp_state::init, qp_state::rtr, type).required | qp_attr_mask::state;
    return;
  }
  a.sq_psn = self->psn;
  a.timeout = 19;
  a.retry_cnt = req.retry_count;
  a.rnr_retry = self->passive ? req.rnr_retry_count : rep.rnr_retry_count;
  a.max_rd_atomic = self->passive ? rep.initiator_depth : rep.responder_resources;
  m = rdmakit::detail::rule_for(qp_state::rtr, qp_state::rts, type).required | qp_attr_mask::state;
}

// Moves `self`'s QP (the CM's) INIT→INIT→RTR→RTS, as librdmacm does during connect/accept.
// Under the fabric lock: the peer's owner may destroy its id and QP on another thread.
inline void cm_to_rts(fabric_state& f, cm_id_obj* self, cm_id_obj* peer, const cm_conn_param& mine,
                      const cm_conn_param& theirs) {
  qp_obj* q = self->qp;
  for (qp_state st : {qp_state::init, qp_state::rtr, qp_state::rts}) {
    qp_attr a;
    qp_attr_mask m{};
    cm_qp_attrs(f, self, peer, mine, theirs, st, q->type, a, m);
    touch(f);
    modify_qp_locked(f, q, a, m);
  }
}

// What the passive side's CM grants before it answers: the request's depths, crossed.
inline cm_conn_param cm_offered(const cm_conn_param& req) {
  cm_conn_param p = req;
  p.responder_resources = req.initiator_depth;
  p.initiator_depth = req.responder_resources;
  return p;
}

// Under f.mu: `qpn` is a QP of the application on the id's device (qp_num of connect/accept).
inline void cm_check_user_qp(const fabric_state& f, const cm_id_obj* id, std::uint32_t qpn, const char* verb) {
  auto it = f.qps.find(qpn);
  if (it == f.qps.end() || it->second->pd->ctx->dev != id->dev)
    fail(verb, EINVAL,
         cat("qp_num ", qpn, " is not a queue pair on ", f.devices[id->dev].cfg.name,
             ", the device of the id's route: create the QP there, or let the CM create it (rdma_create_qp)"));
}

// ucma's cap on a listener's backlog (rdma_ucm max_backlog's default), which a backlog of
// 0 or less asks for too.
inline constexpr int cm_max_backlog = 1024;

// Whether listener `l` refuses a request now: its channel holds `backlog` of its
// CONNECT_REQUESTs unread (ucma counts a request from its event to its read).
inline bool cm_backlog_full(const cm_id_obj& l) noexcept {
  int unread = 0;
  for (const cm_event_rec& r : l.ch->events) unread += r.type == cm_event_type::connect_request && r.listen_id == &l;
  return unread >= l.backlog;
}

// The listener a REQ to `id`'s destination reaches (on that address, else on 0.0.0.0).
inline cm_id_obj* cm_listener_for(const fabric_state& f, const cm_id_obj& id) {
  cm_id_obj* l = cm_listening(f, id.remote_ip, id.remote_port);
  return l ? l : cm_listening(f, 0, id.remote_port);
}

// Under f.mu: `id`'s REQ reaches listener `l`: the passive id (its child) and its
// CONNECT_REQUEST on l's channel. May throw (allocations); nothing changed then.
inline void cm_deliver_request(fabric_state& f, cm_id_obj* id, cm_id_obj* l, const void* data, std::size_t len) {
  // What may throw (allocations) comes first, the links and counts after: a child left
  // counted on the listener's channel, or linked with no event to announce it, kept the
  // channel (and with it the fabric) from ever being destroyed.
  auto owned = rdmakit::detail::make_unique_owner<cm_id_obj>();
  auto* child = owned.get();
  child->ch = l->ch;
  std::uint8_t port = 0;
  int index = 0;
  cm_find_address(f, id->remote_ip, child->dev, port, index);
  child->port = port;
  child->gid_index = index;
  child->local_ip = id->remote_ip;
  child->local_port = id->remote_port;
  child->remote_ip = id->local_ip;
  child->remote_port = id->local_port;
  child->state = cm_id_obj::phase::received;
  child->passive = true;
  child->psn = (f.next_cm_psn++ * 0x9E3779B1u) & psn_mask;
  child->peer = id;
  child->listener = l;
  f.cm_ids.insert(child);
  try {
    cm_make_room(*l->ch, 3);  // the request, and the child's final events
    cm_push(f, child, cm_event_type::connect_request, 0, data, len, l);
  } catch (...) {  // cm_push changed nothing: neither does this call
    f.cm_ids.erase(child);
    throw;
  }
  (void)owned.release();
  ++l->ch->ids;
  id->peer = child;
}

// Under f.mu: `id` (requested) sends its REQ again at `due` (cm_get_event on its
// channel), or gives up with UNREACHABLE there once the CM's retry time is over.
inline void cm_resend_later(fabric_state& f, cm_id_obj* id) {
  const auto now = std::chrono::steady_clock::now();
  cm_event_rec r = cm_event(id, cm_event_type::unreachable, -ETIMEDOUT);
  r.resend_request = now < id->gives_up;
  r.due = r.resend_request ? std::min(now + f.cfg.cm_retry_time / 16, id->gives_up) : now;
  id->ch->later.push_back(std::move(r));
}

// Under f.mu, from cm_get_event: the REQ of `id` that a listener's full backlog dropped,
// sent again (its record, just taken from `later`, left room there for the next one). It
// reaches the listener once the backlog has room (ucma counts the requests not read
// yet); with none listening, REJ "invalid service ID"; dropped again (or lost on an
// unplugged port): again later, until the CM's retry time is over (UNREACHABLE).
inline void cm_resend_request(fabric_state& f, cm_id_obj* id) noexcept {
  using ph = cm_id_obj::phase;
  if (id->state != ph::requested || id->peer) return;
  cm_id_obj* l = cm_listener_for(f, *id);
  if (!l) {
    id->state = ph::done;
    cm_deliver_reject(f, id, 8);
    return;
  }
  std::uint32_t to_dev = 0;
  std::uint8_t to_port = 0;
  int to_index = 0;
  const bool to_found = cm_find_address(f, id->remote_ip, to_dev, to_port, to_index);
  if (cm_port_up(f, id->dev, id->port) && (!to_found || cm_port_up(f, to_dev, to_port)) && !cm_backlog_full(*l)) {
    try {
      cm_deliver_request(f, id, l, id->request_data.data(), id->request_data.size());
      id->request_data.clear();
      return;
    } catch (...) {  // no memory for the request: lost, as one a busy CM drops
    }
  }
  cm_resend_later(f, id);  // cannot throw: the room of the record taken
}

}  // namespace mock::detail

namespace backends {

namespace mockd = rdmakit::mock::detail;

RDMAKIT_DECL mock::cm_channel mock::cm_create_channel(context ctx) {
  if (!ctx) mockd::fail("rdma_create_event_channel", EINVAL, "no device: open a mock device first");
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  auto c = detail::make_unique_owner<mockd::cm_channel_obj>();
  mockd::check_ready_fd(c->ready, "rdma_create_event_channel", "the channel's events");
  c->fab = &f;
  c->keep = ctx->keep;
  c->dev = ctx->dev;
  f.cm_channels.insert(c.get());  // may throw: then c goes (the context still owns the fabric)
  return c.release();
}

RDMAKIT_DECL int mock::cm_destroy_channel(cm_channel c) noexcept {
  if (!c) return EINVAL;
  auto keep = c->keep;  // the fabric may go with the last of its objects
  auto& f = *c->fab;
  std::lock_guard lk(f.mu);
  if (c->ids) return EBUSY;
  f.cm_channels.erase(c);
  delete c;
  return 0;
}

RDMAKIT_DECL int mock::cm_channel_fd(cm_channel c) noexcept { return c ? c->ready.fd() : -1; }

RDMAKIT_DECL mock::cm_id mock::cm_create_id(cm_channel c) {
  if (!c) mockd::fail("rdma_create_id", EINVAL, "no event channel");
  auto& f = *c->fab;
  std::lock_guard lk(f.mu);
  auto id = detail::make_unique_owner<mockd::cm_id_obj>();
  id->ch = c;
  mockd::cm_make_room(*c, 2);  // the new id's final events
  f.cm_ids.insert(id.get());  // the last step that may throw
  ++c->ids;
  return id.release();
}

RDMAKIT_DECL int mock::cm_destroy_id(cm_id id) noexcept {
  if (!id) return EINVAL;
  auto& f = mockd::fab_of(id);
  std::unique_lock lk(f.mu);
  if (id->qp) return EBUSY;  // librdmacm leaks it; the typed layer always destroys the QP first
  using ph = mockd::cm_id_obj::phase;
  // The events below end their ids' connections: they go in the room kept for them.
  if (auto* p = id->peer) {
    if ((id->state == ph::established || id->state == ph::responded) && p->state == ph::established) {
      p->state = ph::done;
      mockd::cm_push_disconnected(f, p);
    } else if (id->state == ph::received && p->state == ph::requested) {
      p->state = ph::done;
      mockd::cm_deliver_reject(f, p, 28);
    } else if (id->state == ph::requested && p->state == ph::received) {
      // The CM destroys an id in REQ_SENT with a REJ, and the passive side's CM resets the
      // request, whose rdma_create_qp and rdma_accept are EINVAL from then on. Its
      // REJECTED is dropped: the kernel ignores a new connection's events until it is
      // accepted (ucma; rxe, observed).
      p->state = ph::done;
    } else if (id->state == ph::established && p->state == ph::responded) {
      // Accepted, and the active side has not answered with its RTU (it read
      // CONNECT_RESPONSE, or is about to): the CM destroys an id in REP_SENT with a REJ,
      // so the active side gets REJECTED and its rdma_establish is refused, as with
      // librdmacm. Without it, it would establish toward nobody and wait for ever.
      p->state = ph::done;
      mockd::cm_deliver_reject(f, p, 28);
    }
    if (p->peer == id) p->peer = nullptr;
  }
  if (id->state == ph::listening) {
    std::erase_if(f.cm_listeners,
                  [&](const mockd::cm_listener& l) { return l.ip == id->local_ip && l.port == id->local_port; });
    // Requests still queued (nobody took them) go with the listener, as the kernel
    // destroys their ids: their senders are refused.
    auto& q = id->ch->events;
    for (auto it = q.begin(); it != q.end();) {
      if (it->type == cm_event_type::connect_request && it->listen_id == id) {
        mockd::cm_id_obj* child = it->id;
        if (auto* p = child->peer; p && p->state == ph::requested) {
          p->state = ph::done;
          p->peer = nullptr;
          // Queued in room kept beforehand: no reallocation, so `it` stays valid (and a
          // REJECTED is no request: the walk passes over it if p is on this channel).
          mockd::cm_deliver_reject(f, p, 28);
        }
        it = q.erase(it);
        --child->ch->ids;
        f.cm_ids.erase(child);
        delete child;
      } else {
        ++it;
      }
    }
    for (auto* other : f.cm_ids)  // requests taken: they no longer name it
      if (other->listener == id) other->listener = nullptr;
  }
  mockd::cm_forget_events(id);
  --id->ch->ids;
  f.cm_ids.erase(id);
  delete id;
  return 0;
}

RDMAKIT_DECL void mock::cm_migrate_id(cm_id id, cm_channel c) {
  if (!id || !c) mockd::fail("rdma_migrate_id", EINVAL, "no id or channel");
  auto& f = mockd::fab_of(id);
  if (c->fab != &f)
    mockd::fail("rdma_migrate_id", EINVAL,
                "the channel is on another fabric than the id: migrate to a channel of the id's fabric");
  std::lock_guard lk(f.mu);
  if (c == id->ch) return;  // already there (its events moved onto the queue walked would not end)
  // Room first (all that may throw): the id's events and its own room move with it.
  std::size_t events = 0, later_events = 0;
  for (const auto& r : id->ch->events) events += r.id == id;
  for (const auto& r : id->ch->later) later_events += r.id == id;
  mockd::cm_make_room(*c, events + 2);  // its events, and the two final ones it may get here
  c->later.reserve(c->later.size() + later_events);
  auto& from = id->ch->events;
  for (auto it = from.begin(); it != from.end();) {
    if (it->id == id) {
      c->events.push_back(std::move(*it));
      it = from.erase(it);
    } else {
      ++it;
    }
  }
  auto& later = id->ch->later;
  for (auto it = later.begin(); it != later.end();) {
    if (it->id == id) {
      c->later.push_back(std::move(*it));
      it = later.erase(it);
    } else {
      ++it;
    }
  }
  id->ch->ready.sync(!from.empty());
  c->ready.sync(!c->events.empty());
  --id->ch->ids;
  id->ch = c;
  ++c->ids;
}

RDMAKIT_DECL void mock::cm_resolve_addr(cm_id id, const cm_address& src, const cm_address& to,
                                        std::chrono::milliseconds) {
  if (!id) mockd::fail("rdma_resolve_addr", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  using ph = mockd::cm_id_obj::phase;
  if (id->state != ph::idle) mockd::fail("rdma_resolve_addr", EINVAL, "the id is already resolved, bound or connected");
  // A source address binds first (rdma_bind_addr), so one no port has fails at once.
  std::uint32_t src_ip = 0, to_ip = 0;
  if (!mockd::cm_ipv4_of(src, src_ip))
    mockd::fail("rdma_resolve_addr", EADDRNOTAVAIL,
                detail::cat("binding the source address ", src.to_string(),
                            ": the mock's CM serves IPv4 addresses (and IPv4-mapped IPv6 ones, ::ffff:a.b.c.d) only"));
  if (src_ip != 0) {
    std::uint32_t dev = 0;
    std::uint8_t port = 0;
    int index = 0;
    if (!mockd::cm_find_address(f, src_ip, dev, port, index))
      mockd::fail("rdma_resolve_addr", EADDRNOTAVAIL,
                  detail::cat("binding the source address ", rdmakit::detail::cm_ipv4_string(src_ip),
                              ": no port of the fabric has it (mock0 is 10.0.0.1, mock1 10.0.0.2)"));
    id->dev = dev;
    id->port = port;
    id->gid_index = index;
  }
  std::uint32_t dev = 0;
  std::uint8_t port = 0;
  int index = 0;
  // An IPv6 destination other than an IPv4-mapped one has no device here: ADDR_ERROR.
  if (!mockd::cm_ipv4_of(to, to_ip) || !mockd::cm_find_address(f, to_ip, dev, port, index)) {
    if (src_ip != 0) id->port = 0;  // unbound again: resolution failed
    mockd::cm_push(f, id, cm_event_type::addr_error, -EHOSTUNREACH);
    return;
  }
  if (src_ip == 0) {
    // The source is the channel's device (the one the caller opened), on its first port
    // with an IPv4 address: two mock devices stand for two hosts on one subnet.
    id->dev = id->ch->dev;
    id->port = 1;
    id->gid_index = 0;
    const auto& ports = f.devices[id->dev].ports;
    bool found = false;
    for (std::size_t p = 0; p < ports.size() && !found; ++p)
      for (std::size_t i = 0; i < ports[p].gids.size() && !found; ++i)
        if (ports[p].gids[i].valid && ports[p].gids[i].value.is_ipv4_mapped()) {
          id->port = static_cast<std::uint8_t>(p + 1);
          id->gid_index = static_cast<int>(i);
          found = true;
        }
  }
  const gid g = mockd::cm_gid_of(f, id);
  id->local_ip = (std::uint32_t{g.raw[12]} << 24) | (std::uint32_t{g.raw[13]} << 16) |
                 (std::uint32_t{g.raw[14]} << 8) | g.raw[15];
  id->local_port = src_ip != 0 && src.port != 0 ? src.port : mockd::cm_pick_port(f, id->local_ip, "rdma_resolve_addr");
  id->remote_ip = to_ip;
  id->remote_port = to.port;
  id->state = ph::addr;
  mockd::cm_push(f, id, cm_event_type::addr_resolved);
}

RDMAKIT_DECL void mock::cm_resolve_route(cm_id id, std::chrono::milliseconds) {
  if (!id) mockd::fail("rdma_resolve_route", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  if (id->state != mockd::cm_id_obj::phase::addr)
    mockd::fail("rdma_resolve_route", EINVAL, "resolve the address first (ADDR_RESOLVED)");
  id->state = mockd::cm_id_obj::phase::route;
  mockd::cm_push(f, id, cm_event_type::route_resolved);
}

RDMAKIT_DECL void mock::cm_listen(cm_id id, const cm_address& addr, int backlog) {
  if (!id) mockd::fail("rdma_listen", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  if (id->state != mockd::cm_id_obj::phase::idle)
    mockd::fail("rdma_bind_addr", EINVAL, "the id is already resolved, bound or connected");
  std::uint32_t ip = 0;
  if (!mockd::cm_ipv4_of(addr, ip))
    mockd::fail("rdma_bind_addr", EADDRNOTAVAIL,
                detail::cat(addr.to_string(),
                            ": the mock's CM serves IPv4 addresses (and IPv4-mapped IPv6 ones) only"));
  if (ip != 0 && !mockd::cm_find_address(f, ip, id->dev, id->port, id->gid_index))
    mockd::fail("rdma_bind_addr", EADDRNOTAVAIL,
                detail::cat(addr.to_string(),
                            " is not the address of any port of the fabric (mock0 is 10.0.0.1, mock1 10.0.0.2)"));
  const std::uint16_t port = addr.port ? addr.port : mockd::cm_pick_port(f, ip, "rdma_bind_addr");
  if (mockd::cm_port_listened(f, ip, port))
    mockd::fail("rdma_bind_addr", EADDRINUSE, detail::cat("port ", port, " is already listened on"));
  id->local_ip = ip;
  id->local_port = port;
  id->backlog = backlog > 0 && backlog < mockd::cm_max_backlog ? backlog : mockd::cm_max_backlog;
  id->state = mockd::cm_id_obj::phase::listening;
  f.cm_listeners.push_back({ip, port, id});  // (no listener has this address: refused above)
}

RDMAKIT_DECL std::uint16_t mock::cm_bound_port(cm_id id) {
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  return id->local_port;
}

RDMAKIT_DECL cm_route mock::cm_query_route(cm_id id) {
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  if (!id->port) mockd::fail("rdma_cm_id route", EINVAL, "the id has no route yet (resolve it, or take a request)");
  cm_route r;
  r.port = id->port;
  r.sgid = mockd::cm_gid_of(f, id);
  if (id->peer)
    r.dgid = mockd::cm_gid_of(f, id->peer);
  else if (id->remote_ip)  // the peer's id is gone: its address stays the id's, as librdmacm's route does
    r.dgid = gid::from_ipv4(static_cast<std::uint8_t>(id->remote_ip >> 24), static_cast<std::uint8_t>(id->remote_ip >> 16),
                            static_cast<std::uint8_t>(id->remote_ip >> 8), static_cast<std::uint8_t>(id->remote_ip));
  return r;
}

RDMAKIT_DECL mock::qp mock::cm_create_qp(cm_id id, pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps) {
  if (!id || !p) mockd::fail("rdma_create_qp", EINVAL, "no id or PD");
  std::uint8_t port = 0;
  {
    auto& f = mockd::fab_of(id);
    std::lock_guard lk(f.mu);
    if (id->qp) mockd::fail("rdma_create_qp", EINVAL, "the id already has a QP");
    if (!id->port) mockd::fail("rdma_create_qp", EINVAL, "the id has no route yet (resolve it, or take a request)");
    // The kernel's CM gives the QP its attributes from the connection's state, which a
    // REJ or a disconnect has reset: rdma_create_qp is EINVAL then (rxe, observed).
    if (id->state == mockd::cm_id_obj::phase::done) mockd::fail("rdma_create_qp", EINVAL, mockd::cm_over);
    if (p->ctx->fab != &f || p->ctx->dev != id->dev)
      mockd::fail("rdma_create_qp", EINVAL,
                  detail::cat("the PD is on ", f.devices[p->ctx->dev].cfg.name, " but the id's route is on ",
                              f.devices[id->dev].cfg.name,
                              ": make the PD on the device the connection manager chose for this address"));
    port = id->port;
  }
  qp q = create_qp(p, send_cq, recv_cq, type, caps, false);
  try {
    qp_attr a;
    a.state = qp_state::init;
    a.port_num = port;
    a.pkey_index = 0;
    a.access_flags = access::none;  // as the kernel's CM before a connection: set at connect/accept
    modify_qp(q, a, qp_attr_mask::state | qp_attr_mask::pkey_index | qp_attr_mask::port | qp_attr_mask::access_flags);
  } catch (...) {
    destroy_qp(q);
    throw;
  }
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  id->qp = q;
  id->qpn = q->qpn;
  return q;
}

RDMAKIT_DECL int mock::cm_destroy_qp(cm_id id) noexcept {
  if (!id) return EINVAL;
  qp q = nullptr;
  {
    auto& f = mockd::fab_of(id);
    std::lock_guard lk(f.mu);
    q = std::exchange(id->qp, nullptr);
    if (q) id->qpn = 0;  // the CM's QP is going: no accept may take the id for one with an application's QP
  }
  return q ? destroy_qp(q) : 0;
}

RDMAKIT_DECL void mock::cm_connect(cm_id id, const cm_conn_param& prm) {
  if (!id) mockd::fail("rdma_connect", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  std::unique_lock lk(f.mu);
  using ph = mockd::cm_id_obj::phase;
  if (id->state != ph::route) mockd::fail("rdma_connect", EINVAL, "resolve the route first (ROUTE_RESOLVED)");
  if (!id->qp && !prm.qp_num)
    mockd::fail("rdma_connect", EINVAL,
                "create the QP on the id first (rdma_create_qp), or give your own QP's number (qp_num)");
  if (!id->qp) mockd::cm_check_user_qp(f, id, prm.qp_num, "rdma_connect");
  id->qpn = id->qp ? id->qp->qpn : prm.qp_num;
  id->psn = (f.next_cm_psn++ * 0x9E3779B1u) & psn_mask;
  if (prm.private_data_len > 56)
    mockd::fail("rdma_connect", EINVAL, "a connect request carries at most 56 bytes of private data");
  std::uint32_t to_dev = 0;
  std::uint8_t to_port = 0;
  int to_index = 0;
  const bool to_found = mockd::cm_find_address(f, id->remote_ip, to_dev, to_port, to_index);
  if (!mockd::cm_port_up(f, id->dev, id->port) || (to_found && !mockd::cm_port_up(f, to_dev, to_port))) {
    // The REQ is lost on an unplugged port, and so is every retry: after the CM's
    // retry time, UNREACHABLE (ETIMEDOUT), and librdmacm moves the QP to ERR.
    id->state = ph::done;
    mockd::cm_event_rec r;
    r.type = cm_event_type::unreachable;
    r.id = id;
    r.status = -ETIMEDOUT;
    r.due = std::chrono::steady_clock::now() + f.cfg.cm_retry_time;
    id->ch->later.push_back(std::move(r));
    f.cv.notify_all();
    return;
  }
  mockd::cm_id_obj* l = mockd::cm_listener_for(f, *id);
  if (!l) {  // the peer's CM answers with REJ "invalid service ID"
    id->state = ph::done;
    mockd::cm_deliver_reject(f, id, 8);
    return;
  }
  if (mockd::cm_backlog_full(*l)) {
    // ucma refuses a request past the listener's backlog and the CM sends no REJ: the
    // requester's CM sends it again (rxe: seconds later) until it fits or gives up.
    std::vector<std::byte> data(static_cast<const std::byte*>(prm.private_data),
                                static_cast<const std::byte*>(prm.private_data) + prm.private_data_len);
    id->ch->later.reserve(id->ch->later.size() + 1);  // (all that may throw, first)
    id->request_data = std::move(data);
    id->gives_up = std::chrono::steady_clock::now() + f.cfg.cm_retry_time;
    mockd::cm_resend_later(f, id);
  } else {
    mockd::cm_deliver_request(f, id, l, prm.private_data, prm.private_data_len);
  }
  id->state = ph::requested;
  id->param = prm;
  id->param.private_data = nullptr;
}

RDMAKIT_DECL void mock::cm_accept(cm_id id, const cm_conn_param& prm) {
  if (!id) mockd::fail("rdma_accept", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  using ph = mockd::cm_id_obj::phase;
  std::lock_guard lk(f.mu);
  if (id->state == ph::done) mockd::fail("rdma_accept", EINVAL, mockd::cm_over);
  if (id->state != ph::received) mockd::fail("rdma_accept", EINVAL, "the id has no connect request to accept");
  if (!id->qp && !prm.qp_num)
    mockd::fail("rdma_accept", EINVAL,
                "create the QP on the id first (rdma_create_qp), or give your own QP's number (qp_num)");
  if (!id->qp) mockd::cm_check_user_qp(f, id, prm.qp_num, "rdma_accept");
  if (prm.private_data_len > 196)
    mockd::fail("rdma_accept", EINVAL, "an accept carries at most 196 bytes of private data");
  id->qpn = id->qp ? id->qp->qpn : prm.qp_num;
  mockd::cm_id_obj* peer = id->peer;
  if (!peer || peer->state != ph::requested || (!peer->qp && !f.qps.count(peer->qpn))) {
    // The requester gave up (its queue pair is gone; its id goes next, and the CM
    // destroys an id in REQ_SENT with a REJ): REJECTED, not a wait for the timeout.
    id->state = ph::done;
    if (peer && peer->peer == id) peer->peer = nullptr;
    id->peer = nullptr;
    mockd::cm_deliver_reject(f, id, 4);
    return;
  }
  const cm_conn_param theirs = peer->param;
  id->answer = prm;
  peer->answer = prm;
  id->answer.private_data = peer->answer.private_data = nullptr;
  // The CM's own QPs move here (an application's QP is moved by the application, with
  // cm_init_qp_attr), under the lock: the requester's owner may give up and destroy its
  // id and QP on its own thread at any moment.
  if (id->qp) mockd::cm_to_rts(f, id, peer, prm, theirs);
  if (peer->qp) mockd::cm_to_rts(f, peer, id, theirs, prm);
  id->state = ph::established;
  if (peer->qp) {
    peer->state = ph::established;
    mockd::cm_push(f, peer, cm_event_type::established, 0, prm.private_data, prm.private_data_len);
    mockd::cm_push(f, id, cm_event_type::established);
  } else {
    // librdmacm: an active side without a CM QP gets CONNECT_RESPONSE, moves its QP and
    // calls rdma_establish (the RTU), which brings the passive side its ESTABLISHED.
    peer->state = ph::responded;
    mockd::cm_push(f, peer, cm_event_type::connect_response, 0, prm.private_data, prm.private_data_len);
  }
}

RDMAKIT_DECL void mock::cm_init_qp_attr(cm_id id, qp_state state, qp_attr& attr, qp_attr_mask& mask) {
  if (!id) mockd::fail("rdma_init_qp_attr", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  using ph = mockd::cm_id_obj::phase;
  if (state != qp_state::init && state != qp_state::rtr && state != qp_state::rts)
    mockd::fail("rdma_init_qp_attr", EINVAL, "the CM gives attributes for INIT, RTR and RTS only");
  if (!id->port) mockd::fail("rdma_init_qp_attr", EINVAL, "the id has no route yet (resolve it, or take a request)");
  // (INIT too: a connection's ids take it from the reset connection as well; rxe, observed.)
  if (id->state == ph::done) mockd::fail("rdma_init_qp_attr", EINVAL, mockd::cm_over);
  const bool passive = id->passive && (id->state == ph::received || id->state == ph::established);
  const bool active = !id->passive && (id->state == ph::responded || id->state == ph::established);
  if (state != qp_state::init && (!id->peer || (!passive && !active)))
    mockd::fail("rdma_init_qp_attr", EINVAL,
                "RTR and RTS need the peer: on the passive side a connect request, on the active side "
                "CONNECT_RESPONSE");
  cm_conn_param mine, theirs;
  if (id->peer && passive) {
    theirs = id->peer->param;
    mine = id->state == ph::received ? mockd::cm_offered(theirs) : id->answer;
  } else if (id->peer && active) {
    mine = id->param;
    theirs = id->answer;
  }
  mockd::cm_qp_attrs(f, id, id->peer, mine, theirs, state, qp_type::rc, attr, mask);
}

RDMAKIT_DECL void mock::cm_establish(cm_id id) {
  if (!id) mockd::fail("rdma_establish", EINVAL, "no id");
  auto& f = mockd::fab_of(id);
  std::lock_guard lk(f.mu);
  using ph = mockd::cm_id_obj::phase;
  if (id->state != ph::responded)
    mockd::fail("rdma_establish", EINVAL, "the id has no CONNECT_RESPONSE to answer (connect with qp_num first)");
  id->state = ph::established;
  if (auto* p = id->peer; p && p->state == ph::established) mockd::cm_push(f, p, cm_event_type::established);
}

RDMAKIT_DECL int mock::cm_reject(cm_id id, const void* data, std::uint8_t len) noexcept {
  if (!id) return EINVAL;
  auto& f = mockd::fab_of(id);
  std::unique_lock lk(f.mu);
  using ph = mockd::cm_id_obj::phase;
  if (id->state != ph::received) return EINVAL;
  if (auto* p = id->peer; p && p->state == ph::requested) {
    // Out of memory for the private data: ENOMEM and nothing changed, so the request can
    // be rejected again, or destroyed (which refuses the peer too).
    std::vector<std::byte> bytes;
    try {
      const auto* b = static_cast<const std::byte*>(data);
      if (data) bytes.assign(b, b + (len > 148 ? 148 : len));
    } catch (...) {
      return ENOMEM;
    }
    mockd::cm_deliver_reject(f, p, 28, std::move(bytes));
    p->state = ph::done;
  }
  id->state = ph::done;
  return 0;
}

RDMAKIT_DECL int mock::cm_disconnect(cm_id id) noexcept {
  if (!id) return EINVAL;
  auto& f = mockd::fab_of(id);
  using ph = mockd::cm_id_obj::phase;
  qp q = nullptr;
  {
    std::lock_guard lk(f.mu);
    if (id->state != ph::established && id->state != ph::responded && id->state != ph::done) return EINVAL;
    q = id->qp;
    if (id->state == ph::established || id->state == ph::responded) {
      id->state = ph::done;
      mockd::cm_push_disconnected(f, id);
      if (auto* p = id->peer; p && p->state == ph::established) {
        p->state = ph::done;
        mockd::cm_push_disconnected(f, p);
      }
    }
  }
  if (q) {
    try {
      qp_attr a;
      a.state = qp_state::err;
      modify_qp(q, a, qp_attr_mask::state);
    } catch (...) {
      return EINVAL;
    }
  }
  return 0;
}

RDMAKIT_DECL int mock::cm_get_event(cm_channel c, std::chrono::milliseconds timeout,
                                    basic_cm_event<cm_id>& out) noexcept {
  if (!c) return EINVAL;
  auto& f = *c->fab;
  std::unique_lock lk(f.mu);
  const auto until = rdmakit::detail::deadline_after(timeout);
  while (c->events.empty()) {
    // An UNREACHABLE whose retry time is over: its QP goes to ERR, then it is queued.
    auto due = std::min_element(c->later.begin(), c->later.end(),
                                [](const auto& a, const auto& b) { return a.due < b.due; });
    const auto now = std::chrono::steady_clock::now();
    if (due != c->later.end() && due->due <= now) {
      mockd::cm_id_obj* late = due->id;
      const int status = due->status;
      const cm_event_type type = due->type;
      const bool resend = due->resend_request;
      c->later.erase(due);
      if (resend) {
        mockd::cm_resend_request(f, late);
      } else {
        late->state = mockd::cm_id_obj::phase::done;
        mockd::cm_deliver_reject(f, late, status, {}, type);  // the id's final event
      }
      continue;
    }
    if (now >= until) return ETIMEDOUT;
    f.cv.wait_until(lk, due != c->later.end() ? std::min(until, due->due) : until);
  }
  auto r = std::move(c->events.front());
  c->events.erase(c->events.begin());
  c->ready.sync(!c->events.empty());
  out.type = r.type;
  out.id = r.id;
  out.listen_id = r.listen_id;
  out.status = r.status;
  out.data_len = static_cast<std::uint8_t>(std::min(r.data.size(), out.data.size()));
  if (out.data_len) std::memcpy(out.data.data(), r.data.data(), out.data_len);
  return 0;
}

}  // namespace backends

namespace mock {

// Here, beside the CM's events it queues (fabric.hpp declares it).
RDMAKIT_DECL void fabric::remove_device(std::string_view device) {
  auto& f = *state_;
  std::lock_guard lk(f.mu);
  detail::touch(f);
  detail::device_rt* d = nullptr;
  for (auto& x : f.devices)
    if (x.cfg.name == device) d = &x;
  if (!d) throw verbs_error("mock::fabric::remove_device", ENODEV, detail::cat("no mock device named '", device, "'"));
  if (d->ports.empty() || d->ports.front().removed) return;
  // The ids bound to it: a route or a bound address (port 0: unbound, or listening on 0.0.0.0).
  const auto bound = [&](const detail::cm_id_obj* id) { return id->port != 0 && id->dev == d->index; };
  std::size_t n = 0;
  for (auto* id : f.cm_ids) n += bound(id);
  for (auto* id : f.cm_ids)  // room first: the only step that may throw
    if (bound(id)) detail::cm_make_room(*id->ch, n);
  for (auto& p : d->ports) {
    p.up = false;
    p.removed = true;
  }
  for (auto* id : f.cm_ids)
    if (bound(id)) detail::cm_queue(f, detail::cm_event(id, cm_event_type::device_removal));
}

}  // namespace mock
RDMAKIT_END_NAMESPACE
