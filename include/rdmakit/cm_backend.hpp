#pragma once
/// The optional `cm_backend` concept: a connection manager (librdmacm's rdma_cm) that
/// resolves an IP address to a device, port and path, carries a connect request, its
/// answer and their private data, and brings a queue pair created on its id to RTS.
/// A backend without one (the null backend, the example backend) still models
/// verbs_backend; only <rdmakit/connection_manager.hpp> asks for this.
///
/// The vocabulary (addresses, events, connection parameters) is backend-agnostic; the
/// ids and event channels are the backend's handles. As the verbs: setup calls throw
/// verbs_error naming the call, get_event and the destroy calls are noexcept.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/types.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

RDMAKIT_BEGIN_NAMESPACE

/// An IP address and port (host byte order), what the connection manager resolves:
/// IPv4, or IPv6 when `is_ipv6` (then `ipv4` is unused).
struct cm_address {
  std::uint32_t ipv4 = 0;  ///< e.g. 0x0A000001 is 10.0.0.1; 0 on a listener: every address
  std::uint16_t port = 0;  ///< 0 on a listener: the system picks one (see cm_listener::address)
  bool is_ipv6 = false;    ///< true: the address is `ipv6`
  std::array<std::uint8_t, 16> ipv6{};  ///< the IPv6 address, network byte order (:: : every address)
  std::uint32_t scope_id = 0;  ///< IPv6 link-local (fe80::…%dummy0): the interface's index

  /// "a.b.c.d", or an IPv6 address ("fe80::1%dummy0", "[::1]"), and a port; throws
  /// usage_error when `text` is neither.
  static cm_address parse(std::string_view text, std::uint16_t port);
  /// "a.b.c.d:port" or "[v6]:port".
  std::string to_string() const;
  /// The unspecified address (0.0.0.0 or ::): a listener's "every address", or no source.
  bool is_any() const noexcept;
  /// The IPv4 address an IPv4-mapped IPv6 one (::ffff:a.b.c.d) stands for; false otherwise.
  bool mapped_ipv4(std::uint32_t& out) const noexcept;
  friend constexpr bool operator==(const cm_address&, const cm_address&) = default;
};

/// What a connection-manager event reports (RDMA_CM_EVENT_*).
enum class cm_event_type : std::uint8_t {
  none,             ///< no event (a timeout)
  addr_resolved,    ///< resolve_addr found the local device and port
  addr_error,       ///< resolve_addr failed (no route to the address, no RDMA device on it)
  route_resolved,   ///< resolve_route found the path
  route_error,      ///< resolve_route failed
  connect_request,  ///< a listener: a peer asks to connect (the event's id is the new one)
  connect_response,  ///< the peer accepted a connect whose QP the application made (qp_num):
                     ///< move the QP to RTS (cm_init_qp_attr), then cm_establish
  connect_error,    ///< the connection could not be set up
  unreachable,      ///< the peer did not answer (timeout of the CM's own retries)
  rejected,         ///< the peer, or its CM (nobody listening), refused; status is the reason
  established,      ///< both sides may post sends now
  disconnected,     ///< the peer disconnected, or this side did
  device_removal,   ///< the device went away
  timewait_exit,    ///< the QP left TIMEWAIT
  other,            ///< an event rdmakit does not name (status: the raw event number)
};

/// The event's name, as rdma_event_str() prints it ("RDMA_CM_EVENT_REJECTED").
inline std::string_view to_string(cm_event_type t) noexcept;

/// The most private data one message carries here: a REP (196 bytes on InfiniBand);
/// a REQ carries 56 and a REJ 148 (the IB CM's limits less the rdma_cm header).
inline constexpr std::size_t cm_private_data_max = 196;
/// The most private data a connect request (REQ) carries: cm_connect's.
inline constexpr std::size_t cm_connect_data_max = 56;
/// The most private data a reject (REJ) carries.
inline constexpr std::size_t cm_reject_data_max = 148;

/// One event, copied out of the backend's (which is acknowledged at once).
template <class Id>
struct basic_cm_event {
  cm_event_type type = cm_event_type::none;  ///< what happened
  Id id{};         ///< the id the event is about (connect_request: the new id)
  Id listen_id{};  ///< connect_request: the listening id
  int status = 0;  ///< 0, a negative errno, or (rejected) the CM's reject reason
  std::uint8_t data_len = 0;  ///< bytes of private data (real devices pad to the message's size)
  std::array<std::byte, cm_private_data_max> data{};  ///< the private data (data_len bytes)
};

/// What connect/accept ask of the CM: private data, RDMA READ depths and RC retries.
struct cm_conn_param {
  const void* private_data = nullptr;  ///< sent with the request or answer (may be null)
  std::uint8_t private_data_len = 0;   ///< its length
  std::uint8_t responder_resources = 1;  ///< incoming READs/atomics in flight
  std::uint8_t initiator_depth = 1;      ///< outgoing READs/atomics in flight
  std::uint8_t retry_count = 7;          ///< RC transport retries
  std::uint8_t rnr_retry_count = 7;      ///< RC RNR retries (7: for ever)
  /// 0: the QP is the CM's (cm_create_qp). Else the number of a QP the application made
  /// and moves itself (cm_user_qp_backend): the active side then gets CONNECT_RESPONSE.
  std::uint32_t qp_num = 0;
};

/// Where the CM routed an id: local port and GIDs of both ends (after route resolution
/// on the active side, on the new id of a connect request on the passive side).
struct cm_route {
  std::uint8_t port = 0;  ///< the local port (1-based)
  gid sgid{};             ///< this side's GID
  gid dgid{};             ///< the peer's GID
};

/// The connection-manager verbs (librdmacm's names in parentheses):
///  - cm_create_channel(ctx) (rdma_create_event_channel): ctx names the device or fabric
///    the ids live on (librdmacm ignores it); cm_channel_fd is readable exactly while an
///    event is queued.
///  - cm_create_id(ch) (rdma_create_id, RDMA_PS_TCP); cm_migrate_id moves an id and its
///    queued events to another channel.
///  - cm_resolve_addr / cm_resolve_route / cm_listen start the step; its result comes as
///    an event. cm_resolve_addr binds to `src` first when its address is not 0.0.0.0
///    (rdma_resolve_addr's src: a source address no device has throws verbs_error
///    EADDRNOTAVAIL). cm_listen binds and listens; cm_bound_port says which port it got.
///  - cm_create_qp (rdma_create_qp): the QP on the id's device, in INIT; the CM moves it
///    to RTR and RTS during connect/accept and to ERR on disconnect; cm_destroy_qp.
///  - cm_connect / cm_accept / cm_reject / cm_disconnect.
///  - cm_get_event waits up to `timeout`, copies the event and acknowledges it; returns
///    0, ETIMEDOUT or an errno.
template <class B>
concept cm_backend =
    verbs_backend<B> && detail::backend_handle<typename B::cm_channel> && detail::backend_handle<typename B::cm_id> &&
    requires(typename B::context ctx, typename B::cm_channel ch, typename B::cm_id id, typename B::pd pd,
             typename B::cm_id* idp, typename B::cq cq, qp_type t, qp_cap& caps, const cm_address& addr,
             const cm_conn_param& param, std::chrono::milliseconds ms, basic_cm_event<typename B::cm_id>& ev,
             const void* data, std::uint8_t len, int n) {
      { B::cm_create_channel(ctx) } -> std::same_as<typename B::cm_channel>;
      { B::cm_destroy_channel(ch) } noexcept -> std::same_as<int>;
      { B::cm_channel_fd(ch) } noexcept -> std::same_as<int>;
      { B::cm_create_id(ch) } -> std::same_as<typename B::cm_id>;
      { B::cm_destroy_id(id) } noexcept -> std::same_as<int>;
      { B::cm_migrate_id(id, ch) };
      { B::cm_resolve_addr(id, addr, addr, ms) };
      { B::cm_resolve_route(id, ms) };
      { B::cm_listen(id, addr, n) };
      { B::cm_bound_port(id) } -> std::same_as<std::uint16_t>;
      { B::cm_query_route(id) } -> std::same_as<cm_route>;
      { B::cm_create_qp(id, pd, cq, cq, t, caps) } -> std::same_as<typename B::qp>;
      { B::cm_destroy_qp(id) } noexcept -> std::same_as<int>;
      { B::cm_connect(id, param) };
      { B::cm_accept(id, param) };
      { B::cm_reject(id, data, len) } noexcept -> std::same_as<int>;
      { B::cm_disconnect(id) } noexcept -> std::same_as<int>;
      { B::cm_get_event(ch, ms, ev) } noexcept -> std::same_as<int>;
    };

/// The optional `cm_user_qp_backend` concept: connections whose queue pair the
/// application created itself (rping -q), not on the CM id. The CM still computes the
/// attributes of each transition (cm_init_qp_attr: rdma_init_qp_attr, for INIT, RTR and
/// RTS); connect and accept carry the QP's number (cm_conn_param::qp_num); the active
/// side answers CONNECT_RESPONSE with cm_establish (rdma_establish), which sends the
/// RTU that brings the passive side ESTABLISHED. Both throw verbs_error naming the call.
template <class B>
concept cm_user_qp_backend =
    cm_backend<B> && requires(typename B::cm_id id, qp_state st, qp_attr& a, qp_attr_mask& m) {
      { B::cm_init_qp_attr(id, st, a, m) };
      { B::cm_establish(id) };
    };

/// archetype_backend plus exactly what cm_backend asks: generic code over the
/// connection manager instantiated with it relies on the concept alone; never run.
struct archetype_cm_backend : archetype_backend {
  struct cm_channel_t;
  struct cm_id_t;
  /// An event channel handle.
  using cm_channel = cm_channel_t*;
  /// A connection-manager id handle.
  using cm_id = cm_id_t*;
  /// Creates an event channel for ids on the device (or fabric) of `ctx`.
  static cm_channel cm_create_channel(context);
  /// Destroys an event channel; returns 0 or an errno.
  static int cm_destroy_channel(cm_channel) noexcept;
  /// A descriptor readable exactly while the channel has an event queued.
  static int cm_channel_fd(cm_channel) noexcept;
  /// Creates an id whose events go to the channel.
  static cm_id cm_create_id(cm_channel);
  /// Destroys an id; returns 0 or an errno.
  static int cm_destroy_id(cm_id) noexcept;
  /// Moves the id (and its queued events) to another channel.
  static void cm_migrate_id(cm_id, cm_channel);
  /// Binds to the source (0.0.0.0: none), starts resolving the destination address:
  /// ADDR_RESOLVED or ADDR_ERROR follows.
  static void cm_resolve_addr(cm_id, const cm_address& src, const cm_address& to, std::chrono::milliseconds);
  /// Starts resolving the route: ROUTE_RESOLVED or ROUTE_ERROR follows.
  static void cm_resolve_route(cm_id, std::chrono::milliseconds);
  /// Binds the id to the address and listens (backlog): CONNECT_REQUESTs follow.
  static void cm_listen(cm_id, const cm_address&, int);
  /// The port the id is bound to.
  static std::uint16_t cm_bound_port(cm_id);
  /// The local port and both GIDs of the id's route.
  static cm_route cm_query_route(cm_id);
  /// Creates the id's QP (INIT), on a PD of the id's device.
  static qp cm_create_qp(cm_id, pd, cq, cq, qp_type, qp_cap&);
  /// Destroys the id's QP; returns 0 or an errno.
  static int cm_destroy_qp(cm_id) noexcept;
  /// Sends the connect request: ESTABLISHED, REJECTED, UNREACHABLE... follow.
  static void cm_connect(cm_id, const cm_conn_param&);
  /// Accepts a connect request: ESTABLISHED follows.
  static void cm_accept(cm_id, const cm_conn_param&);
  /// Rejects a connect request with private data; returns 0 or an errno.
  static int cm_reject(cm_id, const void*, std::uint8_t) noexcept;
  /// Disconnects: DISCONNECTED follows on both sides; returns 0 or an errno.
  static int cm_disconnect(cm_id) noexcept;
  /// Waits for the next event, copies and acknowledges it: 0, ETIMEDOUT or an errno.
  static int cm_get_event(cm_channel, std::chrono::milliseconds, basic_cm_event<cm_id>&) noexcept;
};
static_assert(models_verbs_backend<archetype_cm_backend>() && cm_backend<archetype_cm_backend>);

/// archetype_cm_backend plus exactly what cm_user_qp_backend asks; never run.
struct archetype_cm_user_qp_backend : archetype_cm_backend {
  /// The attributes of the id's connection for INIT, RTR or RTS.
  static void cm_init_qp_attr(cm_id, qp_state, qp_attr&, qp_attr_mask&);
  /// Answers CONNECT_RESPONSE.
  static void cm_establish(cm_id);
};
static_assert(cm_user_qp_backend<archetype_cm_user_qp_backend> && !cm_user_qp_backend<archetype_cm_backend>);

namespace detail {

inline std::string cm_ipv4_string(std::uint32_t a) {
  return cat(a >> 24, ".", (a >> 16) & 0xff, ".", (a >> 8) & 0xff, ".", a & 0xff);
}

}  // namespace detail

inline std::string cm_address::to_string() const {
  if (!is_ipv6) return detail::cat(detail::cm_ipv4_string(ipv4), ":", port);
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, ipv6.data(), buf, sizeof buf);
  std::string s = detail::cat("[", buf);
  if (scope_id) detail::append(s, "%", scope_id);
  detail::append(s, "]:", port);
  return s;
}

inline bool cm_address::is_any() const noexcept {
  if (!is_ipv6) return ipv4 == 0;
  for (auto b : ipv6)
    if (b) return false;
  return true;
}

inline bool cm_address::mapped_ipv4(std::uint32_t& out) const noexcept {
  if (!is_ipv6) return false;
  for (int i = 0; i < 10; ++i)
    if (ipv6[static_cast<std::size_t>(i)]) return false;
  if (ipv6[10] != 0xff || ipv6[11] != 0xff) return false;
  out = (std::uint32_t{ipv6[12]} << 24) | (std::uint32_t{ipv6[13]} << 16) | (std::uint32_t{ipv6[14]} << 8) | ipv6[15];
  return true;
}

inline cm_address cm_address::parse(std::string_view text, std::uint16_t p) {
  cm_address a;
  a.port = p;
  // The C resolvers would read up to a NUL and accept what is before it.
  if (text.find('\0') != std::string_view::npos)
    throw usage_error("cm_address: the address text holds a NUL character: give the address alone");
  if (text.find(':') != std::string_view::npos) {  // IPv6, maybe [bracketed], maybe %scope
    std::string t(text);
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
    const auto pct = t.find('%');
    // getaddrinfo, numeric only: it also turns a %scope (a name or an index) into the index.
    addrinfo hints{};
    hints.ai_family = AF_INET6;
    hints.ai_flags = AI_NUMERICHOST;
    addrinfo* res = nullptr;
    if (::getaddrinfo(t.c_str(), nullptr, &hints, &res) != 0 || !res) {
      if (pct != std::string::npos && ::inet_pton(AF_INET6, t.substr(0, pct).c_str(), a.ipv6.data()) == 1)
        throw usage_error(detail::cat("cm_address: '", text, "': no network interface named '",
                                      std::string_view(t).substr(pct + 1), "'"));
      throw usage_error(detail::cat("cm_address: '", text,
                                    "' is not an IPv6 address (e.g. fe80::1%dummy0, ::1): give the address of the "
                                    "RDMA device's network interface"));
    }
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(res->ai_addr);
    std::memcpy(a.ipv6.data(), &s6->sin6_addr, 16);
    a.scope_id = s6->sin6_scope_id;
    ::freeaddrinfo(res);
    a.is_ipv6 = true;
    return a;
  }
  int parts = 0;
  std::uint32_t v = 0, cur = 0;
  bool digit = false;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : '.';
    if (c >= '0' && c <= '9') {
      // "010" is 8 to getaddrinfo and inet_aton (octal), which rping uses, and refused by
      // inet_pton: read as 10 here, the two would name different hosts.
      if (digit && cur == 0)
        throw usage_error(detail::cat("cm_address: '", text,
                                      "' has an octet with a leading 0, which the C resolvers read as octal: write "
                                      "each octet in decimal without leading zeros"));
      cur = cur * 10 + static_cast<std::uint32_t>(c - '0');
      digit = true;
      if (cur > 255)
        throw usage_error(detail::cat("cm_address: '", text,
                                      "' has an octet above 255: each of the four numbers of an IPv4 address is "
                                      "0 to 255"));
    } else if (c == '.' && digit && parts < 4) {
      v = (v << 8) | cur;
      cur = 0;
      digit = false;
      ++parts;
    } else {
      parts = -1;
      break;
    }
  }
  if (parts != 4)
    throw usage_error(detail::cat("cm_address: '", text,
                                  "' is not a dotted IPv4 address (a.b.c.d) or an IPv6 one: the connection manager "
                                  "takes the IP address of the RDMA device's network interface"));
  a.ipv4 = v;
  return a;
}

inline std::string_view to_string(cm_event_type t) noexcept {
  switch (t) {
    case cm_event_type::none: return "none";
    case cm_event_type::addr_resolved: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case cm_event_type::addr_error: return "RDMA_CM_EVENT_ADDR_ERROR";
    case cm_event_type::route_resolved: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case cm_event_type::route_error: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case cm_event_type::connect_request: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case cm_event_type::connect_response: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case cm_event_type::connect_error: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case cm_event_type::unreachable: return "RDMA_CM_EVENT_UNREACHABLE";
    case cm_event_type::rejected: return "RDMA_CM_EVENT_REJECTED";
    case cm_event_type::established: return "RDMA_CM_EVENT_ESTABLISHED";
    case cm_event_type::disconnected: return "RDMA_CM_EVENT_DISCONNECTED";
    case cm_event_type::device_removal: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case cm_event_type::timewait_exit: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    case cm_event_type::other: return "other";
  }
  return "unknown";
}

RDMAKIT_END_NAMESPACE
