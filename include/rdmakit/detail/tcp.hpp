#pragma once
// Blocking-style TCP with deadlines for the endpoint exchange: every socket is
// non-blocking and every wait is a poll(2) bounded by a deadline, so a silent peer is
// an exchange_error(timeout) and never a hang. Writes use MSG_NOSIGNAL (no SIGPIPE).
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/exchange_error.hpp>
#include <rdmakit/detail/text.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail::tcp {

using clock = std::chrono::steady_clock;

/// A deadline plus the budget it came from (for messages).
struct deadline {
  clock::time_point at;
  std::chrono::milliseconds budget;

  /// Saturates: now() + ms is in nanoseconds, where milliseconds::max() would overflow
  /// (and expire at once); a budget past the clock's range means no practical limit.
  static deadline after(std::chrono::milliseconds ms) { return from(clock::now(), ms); }
  /// `ms` after `start`, saturated as after().
  static deadline from(clock::time_point start, std::chrono::milliseconds ms) {
    if (ms.count() <= 0) return {start, ms};
    const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(clock::time_point::max() - start);
    return {ms >= room ? clock::time_point::max() : start + ms, ms};
  }
  int remaining_ms() const noexcept {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at - clock::now()).count();
    if (left <= 0) return 0;
    return left > INT_MAX ? INT_MAX : static_cast<int>(left);
  }
  bool expired() const noexcept { return clock::now() >= at; }
  /// The same deadline `by` later (saturated): for time the peer is not waited for.
  deadline later_by(clock::duration by) const noexcept {
    return {by >= clock::time_point::max() - at ? clock::time_point::max() : at + by, budget};
  }
};

inline std::string errno_text(int e) { return cat(std::strerror(e), " (errno ", e, ")"); }

/// Whether the peer closed (or reset) `fd`, seen without waiting: no byte is pending
/// and the connection reads as ended.
inline bool peer_closed(int fd) noexcept {
  char byte;
  const ssize_t r = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

[[noreturn]] inline void throw_system(const std::string& call, int e) {
  throw exchange_error(exchange_errc::system, cat(call, " failed: ", errno_text(e)), e);
}

/// Move-only owner of a file descriptor.
class socket_fd {
 public:
  socket_fd() = default;
  explicit socket_fd(int fd) noexcept : fd_(fd) {}
  socket_fd(socket_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  socket_fd& operator=(socket_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

/// Waits until `fd` is ready for `events` (errors and hang-ups count as ready: the next
/// call reports them). False when the deadline passes first.
inline bool wait_ready(int fd, short events, const deadline& d) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, d.remaining_ms());
    if (r > 0) return true;
    if (r == 0) {
      if (d.expired()) return false;
      continue;  // poll rounds down on some kernels; wait out the rest
    }
    if (errno != EINTR) throw_system("poll", errno);
  }
}

inline void set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) throw_system("fcntl(O_NONBLOCK)", errno);
}

inline std::string describe(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return cat(host, ":", port);
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    return cat("[", host, "]:", port);
  }
  return "?";
}

struct addrinfo_list {
  addrinfo* head = nullptr;
  addrinfo_list() = default;
  addrinfo_list(const addrinfo_list&) = delete;
  addrinfo_list& operator=(const addrinfo_list&) = delete;
  ~addrinfo_list() {
    if (head) ::freeaddrinfo(head);
  }
};

inline void resolve(addrinfo_list& out, const std::string& host, std::uint16_t port, bool passive) {
  // getaddrinfo reads up to a NUL: "127.0.0.1\0x" would be 127.0.0.1 (as cm_address refuses).
  if (host.find('\0') != std::string::npos)
    throw exchange_error(exchange_errc::address,
                         cat("the host \"", std::string_view(host.c_str()),
                             "...\" holds a NUL character: give the host name or address alone"));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = cat(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.head);
  if (rc != 0)
    throw exchange_error(exchange_errc::address,
                         cat("cannot resolve \"", host, "\" port ", service, ": ", ::gai_strerror(rc),
                             ": check the host name (or use a numeric address)"));
}

/// Whether `fd` is connected to itself. A connect to a local port nobody listens on can
/// take that very port as its source (it is in the ephemeral range listeners pick from
/// too), and Linux completes it by a simultaneous open: the client would read its own
/// record back as the server's.
inline bool connected_to_itself(int fd) noexcept {
  sockaddr_storage mine{}, peer{};
  socklen_t ml = sizeof mine, pl = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &ml) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 || mine.ss_family != peer.ss_family)
    return false;
  if (mine.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(mine);
    const auto& b = reinterpret_cast<const sockaddr_in&>(peer);
    return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
  }
  if (mine.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(mine);
    const auto& b = reinterpret_cast<const sockaddr_in6&>(peer);
    return a.sin6_port == b.sin6_port && std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof a.sin6_addr) == 0;
  }
  return false;
}

/// Connects to the first of `addrs` (a getaddrinfo list) that accepts, in order, all
/// within `d`; `target` names them in messages (host:port). See connect.
inline socket_fd connect_to(const addrinfo* addrs, const std::string& target, const deadline& d,
                            bool retry_refused) {
  std::size_t count = 0;
  for (const addrinfo* a = addrs; a; a = a->ai_next) ++count;
  for (;;) {
    int last_err = 0;
    std::string last_addr, silent;  // silent: the addresses that did not answer in their share
    std::size_t left = count;       // this one and those after it
    for (const addrinfo* a = addrs; a; a = a->ai_next, --left) {
      last_addr = describe(a->ai_addr);
      socket_fd s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      if (!s) {
        last_err = errno;
        continue;
      }
      int err = 0;
      if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
          const auto now = clock::now();
          const deadline share{left > 1 ? now + (d.at - now) / static_cast<clock::rep>(left) : d.at, d.budget};
          if (!wait_ready(s.get(), POLLOUT, share)) {
            last_err = ETIMEDOUT;
            silent += cat(silent.empty() ? "" : ", ", last_addr);
            continue;
          }
          socklen_t len = sizeof err;
          if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
      if (err == 0 && connected_to_itself(s.get())) {
        // Nobody listens there. Closed with a reset, so the port is free for the retry at
        // once (a close would hold it in TIME_WAIT for a minute).
        const linger reset{1, 0};
        ::setsockopt(s.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        err = ECONNREFUSED;
      }
      if (err == 0) {
        int one = 1;
        ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return s;
      }
      last_err = err;
    }
    if (last_err == ECONNREFUSED && retry_refused && d.remaining_ms() > 0) {
      ::poll(nullptr, 0, std::min(50, d.remaining_ms()));  // a pause: poll(2) with no descriptors, no <thread>
      continue;
    }
    const std::string unanswered = silent.empty() ? std::string() : cat("; no answer from ", silent);
    if (last_err == ECONNREFUSED)
      throw exchange_error(exchange_errc::connection_refused,
                           cat("connection refused by ", target, " (", last_addr, unanswered,
                               "): no server listens there: start the server first, or check the host and port"),
                           last_err);
    if (last_err == ETIMEDOUT || d.expired())
      throw exchange_error(exchange_errc::timeout,
                           cat("connecting to ", target, silent.empty() ? std::string() : cat(" (", silent, ")"),
                               ": no answer within ", d.budget.count(),
                               " ms: is the host reachable and the port not filtered?"),
                           ETIMEDOUT);
    throw exchange_error(exchange_errc::system,
                         cat("connecting to ", target, " (", last_addr, unanswered, ") failed: ", errno_text(last_err)),
                         last_err);
  }
}

/// Connects to host:port, trying the addresses the name resolves to in order, within
/// `d` in all (the caller's one timeout, not one per address): an address that does
/// not answer gets an equal share of the time left (divided among it and those after
/// it; the last gets all that remains), so one that is down, such as an IPv6 address
/// whose packets are dropped, leaves time for the next. A refusal or an error moves to
/// the next at once. With `retry_refused`, a refused connection (server not started
/// yet) is retried every 50 ms until the deadline.
inline socket_fd connect(const std::string& host, std::uint16_t port, const deadline& d, bool retry_refused) {
  addrinfo_list list;
  resolve(list, host, port, false);
  return connect_to(list.head, cat(host, ":", port), d, retry_refused);
}

/// A listening socket. An empty bind address listens on every interface (IPv6
/// dual-stack when available, else IPv4); port 0 picks a free port (see port()).
class listener {
 public:
  listener() = default;
  explicit listener(std::uint16_t port, const std::string& bind_address = {}) {
    if (bind_address.empty()) {
      if (!try_bind_any6(port)) bind_to("0.0.0.0", port);
    } else {
      bind_to(bind_address, port);
    }
    // The system's largest backlog: a burst of clients beyond a small one has its SYNs
    // dropped, each then waiting a 1 s retransmission before it is even queued.
    if (::listen(fd_.get(), SOMAXCONN) != 0) throw_system("listen", errno);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) throw_system("getsockname", errno);
    port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }

  /// Takes over `o`'s socket and waiting clients; `o` is left empty (port 0).
  listener(listener&& o) noexcept
      : fd_(std::move(o.fd_)), port_(std::exchange(o.port_, 0)), waiting_(std::exchange(o.waiting_, {})) {}
  listener& operator=(listener&& o) noexcept {
    fd_ = std::move(o.fd_);
    port_ = std::exchange(o.port_, 0);
    waiting_ = std::exchange(o.waiting_, {});
    return *this;
  }

  std::uint16_t port() const noexcept { return port_; }
  int native_handle() const noexcept { return fd_.get(); }
  /// False when moved from (or default-constructed): nothing listens.
  explicit operator bool() const noexcept { return static_cast<bool>(fd_); }

  /// Accepts one connection within `d`.
  socket_fd accept(const deadline& d) {
    if (socket_fd c = accept_within(d)) return c;
    throw_no_client_(d);
  }
  /// One connection accepted within `d`, or an empty socket when none came.
  socket_fd accept_within(const deadline& d) {
    for (;;) {
      if (!wait_ready(fd_.get(), POLLIN, d)) return socket_fd();
      int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c >= 0) {
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return socket_fd(c);
      }
      // The client may have given up between poll and accept: wait for the next one.
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
        continue;
      throw_system("accept", errno);
    }
  }

  /// A connected client and the deadline of its exchange (`timeout` from its accept).
  struct client {
    socket_fd fd;
    deadline d;
    clock::time_point accepted;
  };
  /// The next client to serve: the first, among the clients connected, whose whole first
  /// message came (`message_size(queued)`: how many bytes it takes, from those queued so
  /// far; peeked, not read), or who hung up, so that a connection that stays silent, or
  /// stalls part way, does not hold up those behind it. Served in order, each such one
  /// made every client behind it wait out a timeout, and fail with the same timeout. One
  /// whose deadline passed is served then (its exchange fails on that deadline, as
  /// before), and so is the oldest when `accept_d` passes with none ready; with none
  /// connected, no client came: a timeout error.
  template <class MessageSize>
  client next_client(const deadline& accept_d, std::chrono::milliseconds timeout, MessageSize message_size) {
    std::vector<pollfd> fds;
    // Clients an earlier call took in get this call's timeout from their accept: kept,
    // theirs bound this call (one of hours::max() for ever; audit 45).
    for (client& w : waiting_) w.d = deadline::from(w.accepted, timeout);
    for (;;) {
      take_in_(timeout);
      for (std::size_t i = 0; i < waiting_.size(); ++i)
        if (waiting_[i].d.expired()) return take_waiting_(i);
      fds.assign(1, pollfd{fd_.get(), POLLIN, 0});
      int wait_ms = accept_d.remaining_ms();
      for (const client& w : waiting_) {
        fds.push_back(pollfd{w.fd.get(), POLLIN | POLLRDHUP, 0});
        wait_ms = std::min(wait_ms, w.d.remaining_ms());
      }
      if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) throw_system("poll", errno);
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents != 0 && message_came_(fds[i], message_size)) return take_waiting_(i - 1);
      if (accept_d.expired() && fds[0].revents == 0) {
        if (!waiting_.empty()) return take_waiting_(0);
        throw_no_client_(accept_d);
      }
    }
  }
  /// Closes the connections of the clients waiting to be served (next_client took them
  /// in); how many.
  std::size_t drop_waiting() noexcept { return std::exchange(waiting_, {}).size(); }

 private:
  // Whether the client polled in `p` can be served: a hang-up or an error (its exchange
  // reports it), or its whole first message is queued. Otherwise poll wakes for it
  // again only once that many bytes are there (SO_RCVLOWAT; a hang-up wakes it too), so
  // a partial message is not polled in a busy loop. A close after part of a message is
  // POLLRDHUP alone: the socket is readable at EOF whatever SO_RCVLOWAT says, so it
  // would be polled again at once, until its timeout (audit 32, F2).
  template <class MessageSize>
  static bool message_came_(const pollfd& p, MessageSize& message_size) {
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) return true;
    char queued[peek_limit];
    const ssize_t r = ::recv(p.fd, queued, sizeof queued, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (r <= 0) return true;  // closed, or an error its exchange reports
    const std::size_t need = std::min(message_size(std::string_view(queued, static_cast<std::size_t>(r))), peek_limit);
    if (static_cast<std::size_t>(r) >= need) return true;
    const int lowat = static_cast<int>(need);
    return ::setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) != 0;  // else served now, as before
  }
  static constexpr std::size_t peek_limit = 2048;  // above the largest record (exchange_wire.hpp)

  // Takes in the connections the kernel has queued. At most max_waiting_ wait: the
  // oldest is closed to make room, so idle connections (a port scan that holds them,
  // stuck clients) cannot take every descriptor; took them all, every exchange() failed
  // in accept (EMFILE) and the clients whose records had come were never served (audit
  // 45). Out of descriptors or memory with clients waiting, those are served meanwhile.
  void take_in_(std::chrono::milliseconds timeout) {
    for (;;) {
      const int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c >= 0) {
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (waiting_.size() == max_waiting_) waiting_.erase(waiting_.begin());
        const auto now = clock::now();
        waiting_.push_back({socket_fd(c), deadline::from(now, timeout), now});
        continue;
      }
      const int e = errno;
      if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue;  // that client gave up: the next one
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      if (!waiting_.empty() && (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)) return;
      throw_system("accept", e);
    }
  }
  static constexpr std::size_t max_waiting_ = 64;



  client take_waiting_(std::size_t i) {
    client c = std::move(waiting_[i]);
    const int one = 1;  // reads after this one wake at the first byte again
    ::setsockopt(c.fd.get(), SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    return c;
  }
  [[noreturn]] void throw_no_client_(const deadline& d) const {
    throw exchange_error(exchange_errc::timeout,
                         cat("no client connected to port ", port_, " within ", d.budget.count(),
                             " ms: start the client (or raise the timeout)"),
                         ETIMEDOUT);
  }

  bool try_bind_any6(std::uint16_t port) {
    socket_fd s(::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s) return false;  // no IPv6 in this kernel
    int one = 1, zero = 0;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      if (errno == EADDRINUSE) throw_in_use(port);
      return false;  // e.g. IPv6 disabled: fall back to IPv4
    }
    fd_ = std::move(s);
    return true;
  }
  void bind_to(const std::string& host, std::uint16_t port) {
    addrinfo_list list;
    resolve(list, host, port, true);
    int last_err = EADDRNOTAVAIL;
    bool no_socket = false;  // the last failure was socket() out of descriptors or memory: not the address's
    for (addrinfo* a = list.head; a; a = a->ai_next) {
      socket_fd s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      no_socket = !s && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
      if (!s) {
        last_err = errno;
        continue;
      }
      int one = 1;
      ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(s.get(), a->ai_addr, a->ai_addrlen) == 0) {
        fd_ = std::move(s);
        return;
      }
      last_err = errno;
    }
    if (last_err == EADDRINUSE) throw_in_use(port);
    if (no_socket)
      throw_system(cat("socket() to listen on ", (host.empty() ? std::string_view("*") : host), ":", port), last_err);
    throw exchange_error(exchange_errc::address,
                         cat("cannot listen on ", (host.empty() ? std::string_view("*") : host), ":", port, ": ",
                             errno_text(last_err)),
                         last_err);
  }
  [[noreturn]] static void throw_in_use(std::uint16_t port) {
    throw exchange_error(exchange_errc::address,
                         cat("port ", port,
                             " is already in use (another server, e.g. an ibv_*_pingpong, listens there): "
                             "stop it or choose another port"),
                         EADDRINUSE);
  }

  socket_fd fd_;
  std::uint16_t port_ = 0;
  std::vector<client> waiting_;  // connected, not served yet: oldest first
};

/// Reads exactly `n` bytes within `d`. `what` names the data for messages.
inline void read_exact(int fd, void* buf, std::size_t n, const deadline& d, const std::string& what) {
  auto* p = static_cast<char*>(buf);
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0)
      throw exchange_error(exchange_errc::connection_closed,
                           cat("the peer closed the connection after ", got, " of ", n, " bytes of ", what,
                               ": it rejected our record or crashed (see its output), or it speaks another format"));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, d))
        throw exchange_error(exchange_errc::timeout,
                             cat("timed out after ", d.budget.count(), " ms waiting for ", what, " (got ", got,
                                 " of ", n,
                                 " bytes): the peer is silent or slow; is it the right program, port and wire "
                                 "format?"),
                             ETIMEDOUT);
      continue;
    }
    if (errno == ECONNRESET)
      throw exchange_error(exchange_errc::connection_closed,
                           cat("the peer reset the connection after ", got, " of ", n, " bytes of ", what,
                               ": it exited or refused our record (see its output), or a firewall cut it off"),
                           errno);
    throw_system("recv", errno);
  }
}

/// Writes all `n` bytes within `d`.
inline void write_all(int fd, const void* buf, std::size_t n, const deadline& d, const std::string& what) {
  auto* p = static_cast<const char*>(buf);
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = ::send(fd, p + done, n - done, MSG_NOSIGNAL);
    if (r >= 0) {
      done += static_cast<std::size_t>(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLOUT, d))
        throw exchange_error(exchange_errc::timeout,
                             cat("timed out after ", d.budget.count(), " ms sending ", what,
                                 ": the peer does not read"),
                             ETIMEDOUT);
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET)
      throw exchange_error(exchange_errc::connection_closed,
                           cat("the peer closed the connection before we could send ", what,
                               ": it rejected our record or gave up (see its output)"),
                           errno);
    throw_system("send", errno);
  }
}

/// True when the peer has sent more bytes that are already waiting (used to reject
/// oversized fixed-size records).
inline bool bytes_pending(int fd) noexcept {
  char c;
  ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r > 0;
}

}  // namespace detail::tcp
RDMAKIT_END_NAMESPACE
