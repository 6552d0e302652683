#pragma once
/// backends::rdmacm: the ibverbs backend plus librdmacm's connection manager (the
/// cm_backend concept), for <rdmakit/connection_manager.hpp>. Everything else is
/// backends::ibverbs. Link librdmacm (meson: the rdmakit_rdmacm_dep dependency;
/// pkg-config librdmacm).
///
/// Its devices are librdmacm's: rdma_create_qp refuses a PD on another ibv_context
/// than the id's, so `device<backends::rdmacm>(name)` borrows the context librdmacm
/// opened for that device (rdma_get_devices) instead of opening one of its own, and
/// closing it gives the borrow back (rdma_free_devices).
#include <rdmakit/backends/ibverbs.hpp>
#include <rdmakit/cm_backend.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>

#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace backends {

/// ibverbs with librdmacm's connection manager. Satisfies verbs_backend and cm_backend.
struct rdmacm : ibverbs {
  using cm_channel = rdma_event_channel*;  ///< an event channel
  using cm_id = rdma_cm_id*;               ///< a connection-manager id

  /// The backend's name, as errors print it.
  static constexpr std::string_view name = "rdmacm";
  /// open_device lends librdmacm's one context per device: device objects of one device
  /// share one state (one reader of its asynchronous events, one record of its windows).
  static constexpr bool shares_contexts = true;

  /// librdmacm's context of device `dev_name` (empty: the first), borrowed until close_device.
  static context open_device(std::string_view dev_name) {
    int n = 0;
    errno = 0;
    ibv_context** list = rdma_get_devices(&n);
    if (!list) throw verbs_error("rdma_get_devices", errno ? errno : ENODEV, "listing the devices librdmacm knows");
    ibv_context* found = nullptr;
    std::string present;
    for (int i = 0; i < n; ++i) {
      const std::string dn = ibv_get_device_name(list[i]->device);
      rdmakit::detail::append(present, present.empty() ? "" : ", ", dn);
      if (!found && (dev_name.empty() || dn == dev_name)) found = list[i];
    }
    if (!found) {
      rdma_free_devices(list);
      throw verbs_error("rdma_get_devices", ENODEV,
                        rdmakit::detail::cat("librdmacm has no device named '", dev_name, "' (it has: ",
                                             present.empty() ? std::string_view("none; is rdma_ucm loaded?")
                                                             : std::string_view(present),
                                             ")"));
    }
    if (int e = rdmakit::ibverbs::detail::set_nonblocking(found->async_fd)) {
      rdma_free_devices(list);
      throw verbs_error("fcntl", e, rdmakit::detail::cat("making the async event fd of ", dev_name, " non-blocking"));
    }
    std::lock_guard lk(borrows_mu());
    borrows().emplace_back(found, list);
    return found;
  }
  /// Gives the borrowed context back to librdmacm.
  static void close_device(context ctx) noexcept {
    ibv_context** list = nullptr;
    {
      std::lock_guard lk(borrows_mu());
      auto& b = borrows();
      auto it = std::find_if(b.begin(), b.end(), [&](const auto& e) { return e.first == ctx; });
      if (it == b.end()) return;
      list = it->second;
      b.erase(it);
    }
    rdma_free_devices(list);
  }

  /// `a` as librdmacm takes it: a sockaddr_in, or a sockaddr_in6 for an IPv6 address.
  static sockaddr_storage sockaddr_of(const cm_address& a) noexcept {
    sockaddr_storage ss;
    std::memset(&ss, 0, sizeof ss);
    if (a.is_ipv6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
      s6->sin6_family = AF_INET6;
      std::memcpy(&s6->sin6_addr, a.ipv6.data(), 16);
      s6->sin6_port = htons(a.port);
      s6->sin6_scope_id = a.scope_id;
    } else {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
      s4->sin_family = AF_INET;
      s4->sin_addr.s_addr = htonl(a.ipv4);
      s4->sin_port = htons(a.port);
    }
    return ss;
  }

  /// rdma_create_event_channel (non-blocking); `ctx` is not needed by librdmacm.
  static cm_channel cm_create_channel(context) {
    errno = 0;
    rdma_event_channel* c = rdma_create_event_channel();
    if (!c)
      throw verbs_error("rdma_create_event_channel", errno ? errno : ENODEV,
                        "opening /dev/infiniband/rdma_cm: is the rdma_ucm module loaded?");
    if (int e = rdmakit::ibverbs::detail::set_nonblocking(c->fd)) {
      rdma_destroy_event_channel(c);
      throw verbs_error("fcntl", e, "making the CM event channel non-blocking");
    }
    return c;
  }
  /// rdma_destroy_event_channel.
  static int cm_destroy_channel(cm_channel c) noexcept {
    rdma_destroy_event_channel(c);
    return 0;
  }
  /// The channel's descriptor (readable while an event is queued).
  static int cm_channel_fd(cm_channel c) noexcept { return c ? c->fd : -1; }
  /// rdma_create_id with RDMA_PS_TCP (reliable connected QPs).
  static cm_id cm_create_id(cm_channel c) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(c, &id, nullptr, RDMA_PS_TCP)) throw verbs_error("rdma_create_id", errno, "");
    return id;
  }
  /// rdma_destroy_id.
  static int cm_destroy_id(cm_id id) noexcept { return rdma_destroy_id(id) ? errno : 0; }
  /// rdma_migrate_id.
  static void cm_migrate_id(cm_id id, cm_channel c) {
    if (rdma_migrate_id(id, c)) throw verbs_error("rdma_migrate_id", errno, "moving a new id to its own channel");
  }
  /// rdma_resolve_addr from `src` (0.0.0.0 or ::: librdmacm picks the source) to `to`.
  static void cm_resolve_addr(cm_id id, const cm_address& src, const cm_address& to,
                              std::chrono::milliseconds timeout) {
    sockaddr_storage s = sockaddr_of(src);
    sockaddr_storage a = sockaddr_of(to);
    if (rdma_resolve_addr(id, src.is_any() ? nullptr : reinterpret_cast<sockaddr*>(&s), reinterpret_cast<sockaddr*>(&a),
                          ms(timeout))) {
      const int e = errno;
      std::string why = rdmakit::detail::cat("resolving ", to.to_string());
      if (!src.is_any())
        rdmakit::detail::append(why, " from the source address ", src.to_string(),
                                e == EADDRNOTAVAIL || e == ENODEV ? ": no RDMA device has it" : "");
      throw verbs_error("rdma_resolve_addr", e, why);
    }
  }
  /// rdma_resolve_route.
  static void cm_resolve_route(cm_id id, std::chrono::milliseconds timeout) {
    if (rdma_resolve_route(id, ms(timeout))) throw verbs_error("rdma_resolve_route", errno, "");
  }
  /// rdma_bind_addr, then rdma_listen.
  static void cm_listen(cm_id id, const cm_address& addr, int backlog) {
    sockaddr_storage a = sockaddr_of(addr);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a))) {
      const int e = errno;
      throw verbs_error("rdma_bind_addr", e,
                        rdmakit::detail::cat("binding ", addr.to_string(),
                                             e == EADDRINUSE                     ? ": the port is in use"
                                             : e == ENODEV ? ": no RDMA device has that address"
                                             : e == EADDRNOTAVAIL
                                                 ? ": no RDMA device has that address, or a listener on the same "
                                                   "port holds another of its addresses (0.0.0.0:p and A:p "
                                                   "exclude each other)"
                                                 : ""));
    }
    if (rdma_listen(id, backlog))
      throw verbs_error("rdma_listen", errno, rdmakit::detail::cat("listening on ", addr.to_string()));
  }
  /// rdma_get_src_port, in host order.
  static std::uint16_t cm_bound_port(cm_id id) { return ntohs(rdma_get_src_port(id)); }
  /// The id's port and GIDs (RoCE v2: the IPv4-mapped GIDs of both addresses).
  static cm_route cm_query_route(cm_id id) {
    cm_route r;
    r.port = id->port_num;
    auto as_gid = [](const sockaddr* s, const ibv_gid& fallback) {
      gid g;
      if (s && s->sa_family == AF_INET) {
        const std::uint32_t v = ntohl(reinterpret_cast<const sockaddr_in*>(s)->sin_addr.s_addr);
        return gid::from_ipv4(static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
                              static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v));
      }
      if (s && s->sa_family == AF_INET6) {  // RoCE v2: the GID is the IPv6 address
        std::memcpy(g.raw.data(), &reinterpret_cast<const sockaddr_in6*>(s)->sin6_addr, 16);
        return g;
      }
      std::memcpy(g.raw.data(), fallback.raw, 16);
      return g;
    };
    r.sgid = as_gid(rdma_get_local_addr(id), id->route.addr.addr.ibaddr.sgid);
    r.dgid = as_gid(rdma_get_peer_addr(id), id->route.addr.addr.ibaddr.dgid);
    return r;
  }
  /// Why rdma_create_qp, rdma_init_qp_attr and rdma_accept are EINVAL on an
  /// id whose connection the kernel's CM reset (a REJ, a disconnect; rxe, observed).
  static constexpr const char* connection_over =
      "the CM id's connection is not being set up (a connect request whose client gave up, a rejected or closed "
      "connection, or a step out of order)";
  /// rdma_create_qp: the QP in INIT on the id's device; `caps` written back as granted.
  static qp cm_create_qp(cm_id id, pd p, cq send_cq, cq recv_cq, qp_type type, qp_cap& caps) {
    ibv_qp_init_attr ia = rdmakit::ibverbs::detail::init_attr(send_cq, recv_cq, nullptr, type, false, caps);
    errno = 0;
    if (rdma_create_qp(id, p, &ia)) {
      const int e = errno ? errno : EINVAL;
      // EINVAL: the PD's device is not the id's, or the kernel's CM no longer sets up the
      // id's connection, whose state gives the QP its attributes (a request whose client
      // gave up, as its REJ reset it; a rejected or closed connection: rxe, observed).
      throw verbs_error("rdma_create_qp", e,
                        e != EINVAL ? std::string("creating the QP on the CM id")
                        : id->verbs && p && id->verbs != p->context
                            ? std::string("the PD is on another ibv_context than the CM id: open the PD on the "
                                          "device the connection manager chose for this address, e.g. "
                                          "device<backends::rdmacm>(name)")
                            : std::string(connection_over));
    }
    caps = rdmakit::ibverbs::detail::from_ibv(ia.cap);
    return id->qp;
  }
  /// rdma_destroy_qp (the id forgets the QP).
  static int cm_destroy_qp(cm_id id) noexcept {
    rdma_destroy_qp(id);
    return 0;
  }
  /// rdma_connect.
  static void cm_connect(cm_id id, const cm_conn_param& p) {
    rdma_conn_param c = param(p);
    if (rdma_connect(id, &c)) throw verbs_error("rdma_connect", errno, "");
  }
  /// rdma_accept.
  static void cm_accept(cm_id id, const cm_conn_param& p) {
    rdma_conn_param c = param(p);
    if (rdma_accept(id, &c)) {
      const int e = errno;
      throw verbs_error("rdma_accept", e, e == EINVAL ? connection_over : "");
    }
  }
  /// rdma_init_qp_attr: the attributes of the id's connection for `state` (INIT, RTR,
  /// RTS), for a QP the application made (cm_user_qp_backend).
  static void cm_init_qp_attr(cm_id id, qp_state state, qp_attr& attr, qp_attr_mask& mask) {
    ibv_qp_attr a;
    std::memset(&a, 0, sizeof a);
    a.qp_state = static_cast<ibv_qp_state>(state);
    int m = 0;
    if (rdma_init_qp_attr(id, &a, &m)) {
      const int e = errno;
      throw verbs_error("rdma_init_qp_attr", e,
                        rdmakit::detail::cat("the attributes for ", to_string(state),
                                             e == EINVAL ? std::string(": ") + connection_over : std::string()));
    }
    attr = rdmakit::ibverbs::detail::from_ibv(a);
    mask = static_cast<qp_attr_mask>(m);
  }
  /// rdma_establish: answers CONNECT_RESPONSE (the RTU).
  static void cm_establish(cm_id id) {
    if (rdma_establish(id)) throw verbs_error("rdma_establish", errno, "");
  }
  /// rdma_reject.
  static int cm_reject(cm_id id, const void* data, std::uint8_t len) noexcept {
    return rdma_reject(id, data, len) ? errno : 0;
  }
  /// rdma_disconnect.
  static int cm_disconnect(cm_id id) noexcept { return rdma_disconnect(id) ? errno : 0; }
  /// poll(2) on the channel up to `timeout`, then rdma_get_cm_event, copy, rdma_ack_cm_event.
  static int cm_get_event(cm_channel c, std::chrono::milliseconds timeout, basic_cm_event<cm_id>& out) noexcept {
    const auto until = rdmakit::detail::deadline_after(timeout);
    for (;;) {
      rdma_cm_event* e = nullptr;
      if (rdma_get_cm_event(c, &e) == 0) {
        copy(*e, out);
        rdma_ack_cm_event(e);
        return 0;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return ETIMEDOUT;
      pollfd pfd{c->fd, POLLIN, 0};
      const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30)));
      if (r < 0 && errno != EINTR) return errno;
    }
  }

 private:
  static std::mutex& borrows_mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::pair<ibv_context*, ibv_context**>>& borrows() {
    static std::vector<std::pair<ibv_context*, ibv_context**>> b;
    return b;
  }
  static int ms(std::chrono::milliseconds t) { return static_cast<int>(std::clamp<long long>(t.count(), 1, 1 << 30)); }
  static rdma_conn_param param(const cm_conn_param& p) {
    rdma_conn_param c;
    std::memset(&c, 0, sizeof c);
    c.private_data = p.private_data;
    c.private_data_len = p.private_data_len;
    c.responder_resources = p.responder_resources;
    c.initiator_depth = p.initiator_depth;
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.qp_num = p.qp_num;
    return c;
  }
  static cm_event_type type_of(rdma_cm_event_type t) noexcept {
    switch (t) {
      case RDMA_CM_EVENT_ADDR_RESOLVED: return cm_event_type::addr_resolved;
      case RDMA_CM_EVENT_ADDR_ERROR: return cm_event_type::addr_error;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: return cm_event_type::route_resolved;
      case RDMA_CM_EVENT_ROUTE_ERROR: return cm_event_type::route_error;
      case RDMA_CM_EVENT_CONNECT_REQUEST: return cm_event_type::connect_request;
      case RDMA_CM_EVENT_CONNECT_RESPONSE: return cm_event_type::connect_response;
      case RDMA_CM_EVENT_CONNECT_ERROR: return cm_event_type::connect_error;
      case RDMA_CM_EVENT_UNREACHABLE: return cm_event_type::unreachable;
      case RDMA_CM_EVENT_REJECTED: return cm_event_type::rejected;
      case RDMA_CM_EVENT_ESTABLISHED: return cm_event_type::established;
      case RDMA_CM_EVENT_DISCONNECTED: return cm_event_type::disconnected;
      case RDMA_CM_EVENT_DEVICE_REMOVAL: return cm_event_type::device_removal;
      case RDMA_CM_EVENT_TIMEWAIT_EXIT: return cm_event_type::timewait_exit;
      default: return cm_event_type::other;
    }
  }
  static void copy(const rdma_cm_event& e, basic_cm_event<cm_id>& out) noexcept {
    out.type = type_of(e.event);
    out.id = e.id;
    out.listen_id = e.listen_id;
    out.status = out.type == cm_event_type::other ? static_cast<int>(e.event) : e.status;
    const std::size_t n = std::min<std::size_t>(e.param.conn.private_data_len, out.data.size());
    out.data_len = static_cast<std::uint8_t>(e.param.conn.private_data ? n : 0);
    if (out.data_len) std::memcpy(out.data.data(), e.param.conn.private_data, out.data_len);
  }
};

static_assert(models_verbs_backend<rdmacm>());
static_assert(cm_backend<rdmacm>);
static_assert(cm_user_qp_backend<rdmacm>);

}  // namespace backends
RDMAKIT_END_NAMESPACE
