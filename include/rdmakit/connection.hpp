#pragma once
/// Out-of-band endpoint exchange over TCP: each side sends the other what its INIT→RTR
/// transition (or UD address handle) needs, plus, for one-sided tests, a remote memory
/// region. Every wait is bounded (poll(2) with deadlines): a silent or slow peer is an
/// `exchange_error` with `exchange_errc::timeout`, never a hang; a malformed, oversized
/// or truncated record is rejected with a message saying what was wrong, and a listener
/// can accept again afterwards.
///
/// The records and their two wire formats are in exchange_wire.hpp.
///
/// Sequence (both formats): the client connects and sends its record; the server reads
/// it, runs its `on_peer` callback (bring the QP to RTR/RTS there, so the client may
/// send as soon as it has the answer), sends its own record; the client reads it, runs
/// its `on_peer` callback, sends the acknowledgement; the server waits for it. When
/// both calls return, both callbacks have run.
#include <rdmakit/connection_info.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/exchange_error.hpp>
#include <rdmakit/detail/tcp.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/exchange_wire.hpp>
#include <rdmakit/types.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

/// How the exchanges (exchange_client/_server, exchange_listener, connect_client/_server)
/// talk to the peer: the record format and the time limits.
struct exchange_options {
  /// The record both sides send; pingpong talks to rdma-core's ibv_*_pingpong.
  wire_format format = wire_format::rdmakit;
  /// Bound on one exchange once a client is there: connect, send, receive, callback
  /// excluded, acknowledgement. Must be positive; any duration, saturated: hours::max()
  /// (or milliseconds::max()) is no practical limit. A host name's lookup comes before
  /// it and is bounded by the resolver's own timeouts (resolv.conf); a numeric address
  /// needs none.
  detail::ms_timeout timeout{std::chrono::milliseconds{10'000}};
  /// How long a server waits for a client to connect; 0 (the default): `timeout`.
  /// Negative: refused.
  detail::ms_timeout accept_timeout{std::chrono::milliseconds{0}};
  /// Client: retry a refused connection (server not started yet) until `timeout`.
  bool retry_refused = false;
};

/// Called with the peer's record before the exchange completes (see the sequence above).
using on_peer_fn = std::function<void(const connection_info& peer)>;


namespace detail {

/// Refuses timeouts that cannot be waited for before any socket work: a deadline
/// already past would fail later as a puzzling "timed out after -5 ms".
inline void check_timeouts(const exchange_options& o) {
  for (const auto& [t, name] : {std::pair{o.timeout, "timeout"}, std::pair{o.accept_timeout, "accept_timeout"}})
    if (t.is_nan())
      throw exchange_error(exchange_errc::invalid_argument,
                           detail::cat("exchange_options::", name, " is a NaN: give a number of milliseconds (",
                                       name == std::string_view("timeout") ? "positive" : "0 to use timeout",
                                       "), or milliseconds::max() for no limit"));
  if (o.timeout.count() <= 0)
    throw exchange_error(exchange_errc::invalid_argument,
                         detail::cat("exchange_options::timeout must be positive (got ", o.timeout.count(),
                                     " ms): give the longest wait in milliseconds, or milliseconds::max() for no "
                                     "limit"));
  if (o.accept_timeout.count() < 0)
    throw exchange_error(exchange_errc::invalid_argument,
                         detail::cat("exchange_options::accept_timeout must be positive, or 0 to use timeout (got ",
                                     o.accept_timeout.count(),
                                     " ms): give the longest wait for a client in milliseconds, or milliseconds::max() "
                                     "for no limit"));
}

/// Our record as it goes on the wire, made before any socket work: a record that cannot
/// be sent (a region in the pingpong format, a QPN or PSN beyond 24 bits) is refused
/// before a peer is involved, which would otherwise only see us hang up.
inline std::string encode_record(const connection_info& local, const exchange_options& o) {
  if (o.format != wire_format::pingpong) return wire::encode(local);
  if (local.region)
    throw exchange_error(exchange_errc::invalid_argument,
                         "the ibv_*_pingpong format cannot carry a remote region: use wire_format::rdmakit");
  std::string rec = wire::format_pingpong(local.ep);
  rec.push_back('\0');
  return rec;
}

inline void send_record(int fd, const std::string& record, const exchange_options& o, const tcp::deadline& d) {
  tcp::write_all(fd, record.data(), record.size(), d,
                 o.format == wire_format::pingpong ? "our ibv_*_pingpong record" : "our rdmakit record");
}

/// Reads and parses the peer's record. `last`: the peer must now wait for our answer,
/// so bytes beyond the record mean an oversized one.
inline connection_info receive_record(int fd, const connection_info& local, const exchange_options& o,
                                      const tcp::deadline& d, bool last) {
  connection_info peer;
  if (o.format == wire_format::pingpong) {
    // Its first 12 bytes first ("LLLL:QQQQQQ:"): another program's shorter bytes (an
    // HTTP request) are refused then, not waited on to the timeout (audit 45).
    char rec[wire::pingpong_record_size];
    tcp::read_exact(fd, rec, wire::pingpong_lead, d, "the peer's ibv_*_pingpong record");
    wire::check_pingpong_lead(std::string_view(rec, wire::pingpong_lead));
    tcp::read_exact(fd, rec + wire::pingpong_lead, sizeof rec - wire::pingpong_lead, d,
                    "the peer's ibv_*_pingpong record");
    peer = wire::parse_pingpong(std::string_view(rec, sizeof rec), local.ep.mtu);
  } else {
    char h[wire::header_size];
    tcp::read_exact(fd, h, sizeof h, d, "the peer's rdmakit record header");
    const std::size_t len = wire::parse_header(std::string_view(h, sizeof h));
    if (len == 0) wire::detail::malformed("the peer sent an empty rdmakit record where its endpoint was expected");
    std::string payload(len, '\0');
    tcp::read_exact(fd, payload.data(), len, d, "the peer's rdmakit record");
    peer = wire::decode_payload(payload);
  }
  if (last && tcp::bytes_pending(fd))
    throw exchange_error(exchange_errc::too_large,
                         "the peer sent more bytes than its record holds: is it the right program and wire format?");
  return peer;
}

// The bytes of the peer's record, from those of it queued so far: what the listener waits
// for before serving a client (next_client). A header that does not parse needs no more:
// the exchange then reads it and says what is wrong with it.
inline std::size_t record_size(std::string_view queued, wire_format f) {
  if (f == wire_format::pingpong)
    return queued.size() >= wire::pingpong_lead && !wire::detail::looks_like_pingpong(queued) ? queued.size()
                                                                                             : wire::pingpong_record_size;
  if (queued.size() < wire::header_size) return wire::header_size;
  try {
    return wire::header_size + wire::parse_header(queued.substr(0, wire::header_size));
  } catch (const exchange_error&) {
    return wire::header_size;
  }
}

// Runs the callback, and moves the deadline by the time it took: the callback's own
// time is not the peer's (restarted in full, a slow peer got the timeout twice).
inline void run_on_peer(const on_peer_fn& on_peer, const connection_info& peer, tcp::deadline& d) {
  const auto t0 = tcp::clock::now();
  on_peer(peer);
  d = d.later_by(tcp::clock::now() - t0);
}

inline void send_ack(int fd, const exchange_options& o, const tcp::deadline& d) {
  if (o.format == wire_format::pingpong) {
    tcp::write_all(fd, wire::pingpong_ack.data(), wire::pingpong_ack.size(), d, "the \"done\" acknowledgement");
  } else {
    const std::string h = wire::frame_header(0);
    tcp::write_all(fd, h.data(), h.size(), d, "the acknowledgement");
  }
}

inline void receive_ack(int fd, const exchange_options& o, const tcp::deadline& d) {
  if (o.format == wire_format::pingpong) {
    char ack[wire::pingpong_ack.size()];
    tcp::read_exact(fd, ack, sizeof ack, d, "the peer's \"done\" acknowledgement");
    if (std::string_view(ack, sizeof ack) != wire::pingpong_ack)
      wire::detail::malformed("expected the acknowledgement \"done\\0\"", std::string_view(ack, sizeof ack));
  } else {
    char h[wire::header_size];
    tcp::read_exact(fd, h, sizeof h, d, "the peer's acknowledgement");
    if (wire::parse_header(std::string_view(h, sizeof h)) != 0)
      wire::detail::malformed("expected an empty rdmakit frame as the acknowledgement", std::string_view(h, sizeof h));
  }
}

}  // namespace detail

/// A TCP listener that serves endpoint exchanges, one client per `exchange` call. A
/// failed exchange (timeout, malformed record...) throws and leaves it usable.
class exchange_listener {
 public:
  /// Listens on `port` (0: any free port, see port()) on `bind_address` (empty: every
  /// interface, IPv6 and IPv4).
  explicit exchange_listener(std::uint16_t port = pingpong_port, const std::string& bind_address = {})
      : listener_(port, bind_address) {}

  /// The port it listens on (the one picked when constructed with 0); 0 when moved from.
  std::uint16_t port() const noexcept { return listener_.port(); }

  /// Waits for one client (up to `accept_timeout`) and exchanges records with it: the
  /// first connected client whose whole record came, so that a connection that stays
  /// silent or stalls part way (a port scan, a stuck client) does not hold up the
  /// clients behind it; one whose record is not there within `timeout` is served then,
  /// and fails with `timeout`. Throws
  /// usage_error on a moved-from listener.
  connection_info exchange(const connection_info& local, const exchange_options& o = {},
                           const on_peer_fn& on_peer = {}) {
    if (!listener_) detail::throw_empty("exchange_listener", "exchange");
    detail::check_timeouts(o);
    const std::string record = detail::encode_record(local, o);
    const auto accept_budget = o.accept_timeout.count() > 0 ? o.accept_timeout : o.timeout;
    auto next = listener_.next_client(detail::tcp::deadline::after(accept_budget), o.timeout,
                                      [&](std::string_view queued) { return detail::record_size(queued, o.format); });
    auto& c = next.fd;
    auto& d = next.d;
    connection_info peer = detail::receive_record(c.get(), local, o, d, true);
    if (on_peer) detail::run_on_peer(on_peer, peer, d);
    detail::send_record(c.get(), record, o, d);
    detail::receive_ack(c.get(), o, d);
    return peer;
  }

  /// Closes, unanswered, the connection of each client waiting to be served and of each
  /// that connects within `wait`: its exchange fails at once (connection_closed; a reset,
  /// as its record goes unread) instead of at its timeout. For a server that cannot
  /// serve, its own setup having failed, while a client may be waiting for its record.
  /// Returns how many were turned away. Throws usage_error on a moved-from listener.
  std::size_t turn_away(std::chrono::milliseconds wait = std::chrono::milliseconds{0}) {
    if (!listener_) detail::throw_empty("exchange_listener", "turn_away");
    const auto d = detail::tcp::deadline::after(wait);
    std::size_t n = listener_.drop_waiting();
    while (listener_.accept_within(d)) ++n;  // each connection closes as it goes
    return n;
  }

 private:
  detail::tcp::listener listener_;
};

/// Server side: listens on `port`, exchanges with the first client, stops listening.
inline connection_info exchange_server(std::uint16_t port, const connection_info& local,
                                       const exchange_options& o = {}, const on_peer_fn& on_peer = {}) {
  exchange_listener l(port);
  return l.exchange(local, o, on_peer);
}

/// Client side: connects to host:port and exchanges records. A name resolving to several
/// addresses: each in turn, sharing `timeout` (one that does not answer leaves time for the next).
inline connection_info exchange_client(const std::string& host, std::uint16_t port, const connection_info& local,
                                       const exchange_options& o = {}, const on_peer_fn& on_peer = {}) {
  detail::check_timeouts(o);
  // (An empty host would resolve to this machine, port 0 to nothing that can listen.)
  if (host.empty())
    throw exchange_error(exchange_errc::invalid_argument,
                         "exchange_client(): the host is empty: name the server (an unset variable in a script?)");
  if (port == 0)
    throw exchange_error(exchange_errc::invalid_argument,
                         detail::cat("exchange_client(): port 0 is not a port a server listens on (", host,
                                     "): give the server's port (its exchange_listener's port())"));
  const std::string record = detail::encode_record(local, o);
  auto d = detail::tcp::deadline::after(o.timeout);
  detail::tcp::socket_fd c = detail::tcp::connect(host, port, d, o.retry_refused);
  detail::send_record(c.get(), record, o, d);
  connection_info peer = detail::receive_record(c.get(), local, o, d, true);
  if (on_peer) detail::run_on_peer(on_peer, peer, d);
  // The server's wait for our acknowledgement covers on_peer: gone by now, it gave up,
  // and an acknowledgement into its closed connection would return success here while
  // the server undid its side (audit 45).
  if (detail::tcp::peer_closed(c.get()))
    throw exchange_error(exchange_errc::connection_closed,
                         "the server closed the connection before our acknowledgement: its timeout passed "
                         "while our on_peer ran (the server's wait for the acknowledgement covers it: give the "
                         "server a timeout that does), or it failed");
  detail::send_ack(c.get(), o, d);
  return peer;
}

/// A queue pair connected through an exchange, and the record its peer sent.
template <class QP>
struct exchanged {
  /// The local queue pair, already moved to RTS towards the peer.
  QP qp;
  /// What the peer sent: its endpoint and, if it sent one, a region.
  connection_info peer;
};

namespace detail {
template <class QP, class... ConnectArgs>
using connected_t = decltype(std::declval<QP&&>().connect(std::declval<const endpoint&>(),
                                                         std::declval<const ConnectArgs&>()...));
}  // namespace detail

/// Throws exchange_error (malformed) when a peer's record cannot name a queue pair to
/// reach: QP 0 or 1 (the subnet's management QPs: a zeroed or garbled record), a
/// multicast GID or LID (a group's, never a port's; LIDs from 0xC000, the permissive
/// 0xFFFF too), or neither a LID nor a GID (ibv_*_pingpong run on RoCE without -g).
/// Such a record is the network's fault, not the caller's: an on_peer callback calls
/// this before connect() or create_ah(), which would take it for a misuse (usage_error)
/// or send where no peer answers. connect_client and connect_server call it.
inline void check_peer_record(const endpoint& peer) {
  if (peer.qpn <= 1)
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("the peer's record names QP ", peer.qpn,
                                     ", a management QP (QP0/QP1), not its queue pair: is the peer sending its "
                                     "queue pair's local_endpoint()?"));
  if (peer.gid.is_multicast())
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("the peer's record names GID ", peer.gid.to_string(),
                                     ", a multicast group's, not a port's: is the peer sending its queue pair's "
                                     "local_endpoint()?"));
  if (peer.lid >= 0xC000)
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("the peer's record names LID ", detail::hex(peer.lid),
                                     peer.lid == 0xFFFF ? ", the permissive LID" : ", a multicast group's",
                                     ", not a port's (unicast LIDs are 0x1 to 0xbfff): is the peer sending its queue "
                                     "pair's local_endpoint()?"));
  if (peer.lid == 0 && peer.gid.is_zero())
    throw exchange_error(exchange_errc::malformed,
                         "the peer's record has neither a LID nor a GID, so nothing to address: on RoCE, run "
                         "ibv_*_pingpong with -g <GID index>; an rdmakit peer sends its local_endpoint()");
}

/// The same, and a record this side's port cannot address, by what `local` (this queue
/// pair's local_endpoint()) says of the port: on RoCE (LID 0), which addresses by GID, a
/// LID without a GID (an InfiniBand peer's ibv_*_pingpong run without -g); on
/// InfiniBand (a LID), which addresses by LID, across subnets too, no LID (a RoCE peer's).
inline void check_peer_record(const endpoint& peer, const endpoint& local) {
  check_peer_record(peer);
  if (local.lid == 0 && peer.gid.is_zero())
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("the peer's record has LID ", peer.lid,
                                     " but no GID, and this port is RoCE, which addresses by GID: run "
                                     "ibv_*_pingpong with -g <GID index>; an rdmakit peer sends its local_endpoint()"));
  if (local.lid != 0 && peer.lid == 0)
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("the peer's record has a GID (", peer.gid.to_string(),
                                     ") but no LID, and this port is InfiniBand (LID ", local.lid,
                                     "), which addresses by LID: the peer is on RoCE, another link layer, or "
                                     "its port is not active"));
}

namespace detail {
// Runs an exchange whose on_peer connects `qp` into `live`. If the exchange fails after
// that (the peer went away before the acknowledgement), the caller's `qp` is given back
// reset (a fresh INIT queue pair, new QP number): a retry may call again, and the
// connected one, whose peer is gone, is not destroyed unseen.
template <class QP, class Live, class Exchange>
connection_info exchange_connecting(QP& qp, std::optional<Live>& live, Exchange&& exchange) {
  try {
    return exchange();
  } catch (...) {
    if constexpr (requires { qp = std::move(*live).reset(); }) {
      if (live) {
        try {
          qp = std::move(*live).reset();
        } catch (...) {  // no room for a new queue pair: the connected one is gone, `qp` stays empty
        }
      }
    }
    throw;
  }
}
}  // namespace detail

/// Client side of "exchange, then connect" for an RC/UC queue pair: sends its
/// local_endpoint() (and `region`, rdmakit format only) to the server at host:port and
/// connects it to the answer (`connect(peer, args...)`) before acknowledging. On an
/// exchange_error the queue pair is the caller's again: unconnected if the error came
/// first, else given back reset (a fresh INIT queue pair) for a retry.
template <class QP, class... ConnectArgs>
exchanged<detail::connected_t<QP, ConnectArgs...>> connect_client(QP&& qp, const std::string& host,
                                                                  std::uint16_t port,
                                                                  const exchange_options& o = {},
                                                                  const std::optional<region_descriptor>& region = {},
                                                                  const ConnectArgs&... args) {
  static_assert(!std::is_lvalue_reference_v<QP>, "connect_client(std::move(qp), ...): connecting consumes the queue pair");
  std::optional<detail::connected_t<QP, ConnectArgs...>> live;
  connection_info local(qp.local_endpoint());
  local.region = region;
  connection_info peer = detail::exchange_connecting(qp, live, [&] {
    return exchange_client(host, port, local, o, [&](const connection_info& p) {
      check_peer_record(p.ep, local.ep);
      live.emplace(std::move(qp).connect(p.ep, args...));
    });
  });
  return {std::move(*live), std::move(peer)};
}

/// Server side: waits on `listener` for one client, connects `qp` to it before
/// answering (so the client may send as soon as it returns). On an exchange_error the
/// queue pair is the caller's again, as for connect_client.
template <class QP, class... ConnectArgs>
exchanged<detail::connected_t<QP, ConnectArgs...>> connect_server(QP&& qp, exchange_listener& listener,
                                                                  const exchange_options& o = {},
                                                                  const std::optional<region_descriptor>& region = {},
                                                                  const ConnectArgs&... args) {
  static_assert(!std::is_lvalue_reference_v<QP>, "connect_server(std::move(qp), ...): connecting consumes the queue pair");
  std::optional<detail::connected_t<QP, ConnectArgs...>> live;
  connection_info local(qp.local_endpoint());
  local.region = region;
  connection_info peer = detail::exchange_connecting(qp, live, [&] {
    return listener.exchange(local, o, [&](const connection_info& p) {
      check_peer_record(p.ep, local.ep);
      live.emplace(std::move(qp).connect(p.ep, args...));
    });
  });
  return {std::move(*live), std::move(peer)};
}

RDMAKIT_END_NAMESPACE
