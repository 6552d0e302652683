#include <rdmakit/connection.hpp>
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>  // the whole library alongside: no name clashes

#include <doctest/doctest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

using namespace rdmakit;
using namespace std::chrono_literals;
namespace tcp = rdmakit::detail::tcp;

#include "sample_records.hpp"

namespace {

exchange_options fast(wire_format f = wire_format::rdmakit) {
  exchange_options o;
  o.format = f;
  o.timeout = 200ms;
  o.accept_timeout = 2000ms;
  return o;
}

/// A raw client: connects to the listener and writes `bytes`, then optionally waits.
tcp::socket_fd raw_client(std::uint16_t port) {
  return tcp::connect("127.0.0.1", port, tcp::deadline::after(2000ms), false);
}
void raw_write(const tcp::socket_fd& s, std::string_view bytes) {
  tcp::write_all(s.get(), bytes.data(), bytes.size(), tcp::deadline::after(2000ms), "test bytes");
}

/// Runs a server exchange on `l` in a thread and returns its future.
std::future<connection_info> serve(exchange_listener& l, const connection_info& local, exchange_options o,
                                   on_peer_fn cb = {}) {
  return std::async(std::launch::async, [&l, local, o, cb] { return l.exchange(local, o, cb); });
}

/// A port nobody listens on (bound, read back, released).
std::uint16_t free_port() {
  tcp::listener l(0, "127.0.0.1");
  return l.port();
}

/// Runs `body` in a child process (for what changes the process: limits, namespaces) and
/// returns the exit status it returned.
template <class F>
int in_child(F&& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(body());
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/// A listener on 127.0.0.1 whose accept queue is full: the kernel drops a new SYN, so a
/// connect to it gets no answer, as from a host that is down (deterministic, no network).
struct unanswering {
  tcp::socket_fd l, filler;
  sockaddr_in addr{};
  unanswering() : l(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(l.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0);
    REQUIRE(::listen(l.get(), 0) == 0);  // one connection waiting to be accepted fills it
    REQUIRE(::getsockname(l.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    filler = raw_client(ntohs(addr.sin_port));
    pollfd p{l.get(), POLLIN, 0};  // queued (not just answered): the next SYN is dropped
    REQUIRE(::poll(&p, 1, 2000) == 1);
  }
};

/// A getaddrinfo-like list of IPv4 addresses, in order (what a name resolving to them gives).
struct address_list {
  std::vector<sockaddr_in> sa;
  std::vector<addrinfo> ai;
  explicit address_list(std::vector<sockaddr_in> addrs) : sa(std::move(addrs)), ai(sa.size()) {
    for (std::size_t i = 0; i < sa.size(); ++i) {
      ai[i].ai_family = AF_INET;
      ai[i].ai_socktype = SOCK_STREAM;
      ai[i].ai_addr = reinterpret_cast<sockaddr*>(&sa[i]);
      ai[i].ai_addrlen = sizeof sa[i];
      ai[i].ai_next = i + 1 < sa.size() ? &ai[i + 1] : nullptr;
    }
  }
  const addrinfo* head() const { return ai.data(); }
};

sockaddr_in loopback_address(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

/// Serves one exchange on `l` to a raw client that writes `bytes` and stays connected
/// until the server has decided; returns the server's error (its text: last_error).
exchange_errc serve_raw(exchange_listener& l, std::string_view bytes) {
  auto server = serve(l, sample_endpoint(), fast());
  auto s = raw_client(l.port());
  raw_write(s, bytes);
  CHECK(server.wait_for(2000ms) == std::future_status::ready);
  return error_of([&] { server.get(); });
}

/// A good exchange on `l` still completes (after a rejected one).
void check_still_serves(exchange_listener& l) {
  auto server = serve(l, sample_endpoint(), fast());
  CHECK(exchange_client("127.0.0.1", l.port(), other_endpoint(), fast()).ep == sample_endpoint());
  CHECK(server.get().ep == other_endpoint());
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Exchanges over loopback

TEST_CASE("loopback exchange in both formats, callbacks in protocol order") {
  for (auto fmt : {wire_format::rdmakit, wire_format::pingpong}) {
    CAPTURE(static_cast<int>(fmt));
    exchange_listener l(0, "127.0.0.1");
    REQUIRE(l.port() != 0);
    std::atomic<int> step{0};
    int server_saw_step = -1, client_saw_step = -1;
    connection_info server_local(sample_endpoint());
    connection_info client_local(other_endpoint());
    if (fmt == wire_format::rdmakit) client_local.region = region_descriptor{0x1000, 42, 4096, access::remote_write};
    auto server = serve(l, server_local, fast(fmt), [&](const connection_info&) { server_saw_step = step++; });
    auto client_got = exchange_client("127.0.0.1", l.port(), client_local, fast(fmt),
                                      [&](const connection_info&) { client_saw_step = step++; });
    auto server_got = server.get();
    CHECK(server_saw_step == 0);  // the server connects its QP before answering
    CHECK(client_saw_step == 1);
    if (fmt == wire_format::rdmakit) {
      CHECK(client_got == server_local);
      CHECK(server_got == client_local);
    } else {
      // No MTU on the wire: each side assumes its own.
      endpoint expect_at_client = server_local.ep;
      expect_at_client.mtu = client_local.ep.mtu;
      endpoint expect_at_server = client_local.ep;
      expect_at_server.mtu = server_local.ep.mtu;
      CHECK(client_got.ep == expect_at_client);
      CHECK(server_got.ep == expect_at_server);
    }
  }
}

TEST_CASE("the pingpong format refuses to carry a region") {
  exchange_listener l(0, "127.0.0.1");
  connection_info local(sample_endpoint(), region_descriptor{1, 2, 3, access::remote_read});
  CHECK(error_of([&] { exchange_client("127.0.0.1", l.port(), local, fast(wire_format::pingpong)); }) ==
        exchange_errc::invalid_argument);
}

// Our own record was found unsendable only once connected: a client with no server up
// got "connection refused" instead, and a server waited for a client (up to
// accept_timeout), which then saw only the server hang up.
TEST_CASE("a record that cannot be sent is refused before any socket work, on either side") {
  connection_info with_region(sample_endpoint(), region_descriptor{1, 2, 3, access::remote_read});
  endpoint wide = sample_endpoint();
  wide.psn = 1u << 24;  // beyond 24 bits
  for (const auto& [info, format] : {std::pair{with_region, wire_format::pingpong},
                                     std::pair{connection_info(wide), wire_format::rdmakit},
                                     std::pair{connection_info(wide), wire_format::pingpong}}) {
    const connection_info& local = info;  // captured below: clang 14 cannot capture a binding
    const wire_format fmt = format;
    CAPTURE(static_cast<int>(fmt));
    CHECK(error_of([&] { exchange_client("127.0.0.1", free_port(), local, fast(fmt)); }) ==
          exchange_errc::invalid_argument);
    exchange_listener l(0, "127.0.0.1");
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(error_of([&] { l.exchange(local, fast(fmt)); }) == exchange_errc::invalid_argument);
    CHECK(std::chrono::steady_clock::now() - t0 < 1000ms);  // accept_timeout is 2 s: it did not wait
  }
}

// An empty host resolved to this machine; port 0 was tried (and retried) as if a
// server could listen there.
TEST_CASE("exchange_client: an empty host and port 0 are refused, naming what to give") {
  exchange_options o = fast();
  o.retry_refused = true;
  o.timeout = 5000ms;
  CHECK(error_of([&] { exchange_client("", 18515, other_endpoint(), o); }) == exchange_errc::invalid_argument);
  CHECK(last_error.find("host is empty") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(error_of([&] { exchange_client("127.0.0.1", 0, other_endpoint(), o); }) == exchange_errc::invalid_argument);
  CHECK(last_error.find("port 0") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);  // not retried until the timeout (5 s)
}

// A server whose setup failed can send a waiting client away at once, rather than leave
// it waiting for a record until its timeout.
TEST_CASE("exchange_listener::turn_away: a client waiting for the server's record fails at once") {
  exchange_listener l(0, "127.0.0.1");
  exchange_options o = fast();
  o.timeout = 20'000ms;
  auto client = std::async(std::launch::async, [&] { return error_of([&] { exchange_client("127.0.0.1", l.port(), other_endpoint(), o); }); });
  // Turned away in short waits until the client's exchange has failed (it connects once).
  std::size_t turned = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (client.wait_for(0ms) != std::future_status::ready && std::chrono::steady_clock::now() - t0 < 10'000ms)
    turned += l.turn_away(50ms);
  CHECK(turned == 1);
  REQUIRE(client.wait_for(0ms) == std::future_status::ready);  // long before its 20 s timeout
  const exchange_errc e = client.get();
  CHECK(e != exchange_errc::timeout);
  CHECK((e == exchange_errc::connection_closed || e == exchange_errc::system));
  CHECK(l.turn_away() == 0);  // nobody waiting: returns at once
  check_still_serves(l);      // and it still serves
  exchange_listener moved(std::move(l));
  CHECK_THROWS_AS(l.turn_away(), usage_error);
}

TEST_CASE("a server callback that throws fails both sides cleanly") {
  exchange_listener l(0, "127.0.0.1");
  auto server = serve(l, sample_endpoint(), fast(), [](const connection_info&) { throw std::runtime_error("boom"); });
  CHECK(error_of([&] { exchange_client("127.0.0.1", l.port(), other_endpoint(), fast()); }) ==
        exchange_errc::connection_closed);
  CHECK_THROWS_AS(server.get(), std::runtime_error);
}

TEST_CASE("formats that differ are named in the error") {
  exchange_listener l(0, "127.0.0.1");
  auto server = serve(l, sample_endpoint(), fast(wire_format::rdmakit));
  CHECK(error_of([&] { exchange_client("127.0.0.1", l.port(), other_endpoint(), fast(wire_format::pingpong)); }) ==
        exchange_errc::connection_closed);
  CHECK(error_of([&] { server.get(); }) == exchange_errc::wrong_format);
}

// ---------------------------------------------------------------------------------------
// Timeouts and refusals: bounded, never a hang

TEST_CASE("nobody listening: connection refused, quickly") {
  const auto port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  exchange_options o = fast();
  o.timeout = 3000ms;
  CHECK(error_of([&] { exchange_client("127.0.0.1", port, other_endpoint(), o); }) ==
        exchange_errc::connection_refused);
  CHECK(std::chrono::steady_clock::now() - t0 < 1000ms);
  CHECK(last_error.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(last_error.find("start the server") != std::string::npos);
}

TEST_CASE("retry_refused waits for a server that starts late") {
  const auto port = free_port();
  exchange_options o = fast();
  o.timeout = 3000ms;
  o.retry_refused = true;
  auto client = std::async(std::launch::async, [&] { return exchange_client("127.0.0.1", port, other_endpoint(), o); });
  std::this_thread::sleep_for(150ms);
  exchange_listener l(port, "127.0.0.1");
  auto got = l.exchange(sample_endpoint(), o);
  CHECK(got.ep == other_endpoint());
  CHECK(client.get().ep == sample_endpoint());
}

// A connect to a local port nobody listens on may take that very port as its own: Linux
// then connects the socket to itself (a simultaneous open), and the client read its own
// record back as the server's (an audit; the ephemeral range covers the ports listeners
// pick). Shown in a child process in a network namespace of its own whose ephemeral
// range is that one port, so every retry meets it; without CAP_SYS_ADMIN, skipped.
TEST_CASE("retry_refused never takes the client's own socket for a server") {
  constexpr std::uint16_t port = 40002;
  const int status = in_child([] {  // 77: no namespace; 0: refused, as nobody listens; 1: "connected"
    if (::unshare(CLONE_NEWNET) != 0) return 77;
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq lo{};
    std::strcpy(lo.ifr_name, "lo");
    if (fd < 0 || ::ioctl(fd, SIOCGIFFLAGS, &lo) != 0) return 77;
    lo.ifr_flags = static_cast<short>(lo.ifr_flags | IFF_UP);
    if (::ioctl(fd, SIOCSIFFLAGS, &lo) != 0) return 77;
    std::FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "w");
    if (!range || std::fprintf(range, "%u %u", port, port) < 0 || std::fclose(range) != 0) return 77;
    exchange_options o = fast();
    o.timeout = 300ms;
    o.retry_refused = true;
    try {
      (void)exchange_client("127.0.0.1", port, sample_endpoint(), o);
      return 1;
    } catch (const exchange_error& e) {
      return e.code() == exchange_errc::connection_refused ? 0 : 2;
    } catch (...) {
      return 3;
    }
  });
  if (status == 77) {
    MESSAGE("skipped: no network namespace of its own here (needs CAP_SYS_ADMIN)");
    return;
  }
  CHECK(status == 0);
}

// A name resolving to an address that does not answer (an IPv6 one the host cannot
// reach, say) before one that does: the first timeout ended the connect, with the whole
// budget spent on it and the next address never tried.
TEST_CASE("connect: an address that does not answer gives way to the next one, within the timeout") {
  unanswering down;
  tcp::listener up(0, "127.0.0.1");
  const address_list addrs({down.addr, loopback_address(up.port())});
  const auto t0 = std::chrono::steady_clock::now();
  auto s = tcp::connect_to(addrs.head(), "twohomed:1", tcp::deadline::after(1000ms), false);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(s);
  CHECK(took >= 450ms);  // the first address's share of the budget: half of it
  CHECK(took < 1000ms);
}

TEST_CASE("connect: addresses that do not answer share the timeout, and the error names each") {
  unanswering a, b;
  const address_list addrs({a.addr, b.addr});
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(error_of([&] { tcp::connect_to(addrs.head(), "twohomed:1", tcp::deadline::after(400ms), false); }) ==
        exchange_errc::timeout);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 390ms);
  CHECK(took < 1000ms);  // 400 ms in all, not 400 per address
  CHECK(last_error.find("no answer within 400 ms") != std::string::npos);
  for (const auto* sa : {&a.addr, &b.addr})
    CHECK(last_error.find(tcp::describe(reinterpret_cast<const sockaddr*>(sa))) != std::string::npos);
}

// A refusal after an address that did not answer: both said, the refusal as the error.
TEST_CASE("connect: a refusal after an address that did not answer names both") {
  unanswering down;
  const auto port = free_port();
  const address_list addrs({down.addr, loopback_address(port)});
  CHECK(error_of([&] { tcp::connect_to(addrs.head(), "twohomed:1", tcp::deadline::after(400ms), false); }) ==
        exchange_errc::connection_refused);
  CHECK(last_error.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(last_error.find(tcp::describe(reinterpret_cast<const sockaddr*>(&down.addr))) != std::string::npos);
}

TEST_CASE("server: nobody connects within accept_timeout") {
  exchange_listener l(0, "127.0.0.1");
  exchange_options o = fast();
  o.accept_timeout = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(error_of([&] { l.exchange(sample_endpoint(), o); }) == exchange_errc::timeout);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 190ms);
  CHECK(took < 1500ms);
  CHECK(last_error.find("within 200 ms") != std::string::npos);
}

TEST_CASE("server: a client that connects but never writes times out, then the server accepts again") {
  exchange_listener l(0, "127.0.0.1");
  for (auto fmt : {wire_format::rdmakit, wire_format::pingpong}) {
    auto silent = raw_client(l.port());
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(error_of([&] { l.exchange(sample_endpoint(), fast(fmt)); }) == exchange_errc::timeout);
    CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
  }
  auto server = serve(l, sample_endpoint(), fast());
  CHECK(exchange_client("127.0.0.1", l.port(), other_endpoint(), fast()).ep == sample_endpoint());
  CHECK(server.get().ep == other_endpoint());
}

// The listener's backlog was 8: a burst of clients (or a scan) beyond it had its SYNs
// dropped, and each such client waited the kernel's 1 s retransmission before it was
// even queued (audit 32's note: 50 connects took 4.1 s on a loaded machine).
TEST_CASE("listener: a burst of 40 connections is queued at once, none dropped for the backlog") {
  tcp::listener l(0, "127.0.0.1");
  std::vector<tcp::socket_fd> clients;
  for (int i = 0; i < 40; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    clients.emplace_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(l.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    REQUIRE((r == 0 || errno == EINPROGRESS));
  }
  // The handshakes the kernel completed: the listener's accept queue (Linux reports its
  // length as a listening socket's tcpi_unacked). 40 within 5 s; a dropped SYN is never
  // in it before its retransmission.
  tcp_info info{};
  for (int tries = 0; tries < 500; ++tries) {
    socklen_t len = sizeof info;
    REQUIRE(::getsockopt(l.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0);
    if (info.tcpi_unacked >= 40) break;
    std::this_thread::sleep_for(10ms);
  }
  CHECK(info.tcpi_unacked == 40);
}

TEST_CASE("client: a server that accepts the connection but never answers times out") {
  for (auto fmt : {wire_format::rdmakit, wire_format::pingpong}) {
    tcp::listener mute(0, "127.0.0.1");  // listens (the kernel completes the handshake) but never accepts
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(error_of([&] { exchange_client("127.0.0.1", mute.port(), other_endpoint(), fast(fmt)); }) ==
          exchange_errc::timeout);
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took >= 190ms);
    CHECK(took < 1500ms);
  }
}

TEST_CASE("client: a server that answers but never acknowledges... is the client's last step; "
          "server: a client that never sends done times out") {
  exchange_listener l(0, "127.0.0.1");
  auto server = serve(l, sample_endpoint(), fast(wire_format::pingpong));
  auto s = raw_client(l.port());
  std::string rec = wire::format_pingpong(other_endpoint());
  rec.push_back('\0');
  raw_write(s, rec);
  char reply[52];
  tcp::read_exact(s.get(), reply, sizeof reply, tcp::deadline::after(2000ms), "reply");
  CHECK(wire::parse_pingpong(std::string_view(reply, 52)).qpn == sample_endpoint().qpn);
  // ...and no "done".
  CHECK(error_of([&] { server.get(); }) == exchange_errc::timeout);
}

// Out of descriptors, a listener's socket() failure was an `address` error, as if the
// address or port were at fault; the same in accept or connect is `system` (an audit).
TEST_CASE("a listener out of file descriptors is a system error, not an address error") {
  CHECK(in_child([] {  // 0: a system error; 1: another kind; 2: no error
          rlimit none{0, 0};
          ::getrlimit(RLIMIT_NOFILE, &none);
          none.rlim_cur = 0;
          if (::setrlimit(RLIMIT_NOFILE, &none) != 0) return 77;
          try {
            exchange_listener l(0, "127.0.0.1");
            return 2;
          } catch (const exchange_error& e) {
            return e.code() == exchange_errc::system ? 0 : 1;
          } catch (...) {
            return 3;
          }
        }) == 0);
}

// exchange() served the connections in the order they came and waited out `timeout` on
// each: two silent connections ahead of a good client made it fail, its own timeout
// spent in the queue (an audit: a port scan, or any stuck client, blocks a server).
TEST_CASE("server: silent connections ahead of a client do not hold it up") {
  exchange_listener l(0, "127.0.0.1");
  const exchange_options o = fast();  // the same timeout on both sides
  auto silent1 = raw_client(l.port());
  auto silent2 = raw_client(l.port());
  auto server = serve(l, sample_endpoint(), o);
  const auto t0 = std::chrono::steady_clock::now();
  const connection_info got = exchange_client("127.0.0.1", l.port(), other_endpoint(), o);
  CHECK(got.ep == sample_endpoint());
  CHECK(server.get().ep == other_endpoint());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(o.timeout) / 2);
  // The silent ones are still waiting: a later exchange serves one of them when it talks.
  auto later = serve(l, sample_endpoint(), o);
  raw_write(silent2, wire::encode(other_endpoint()));
  CHECK(error_of([&] { later.get(); }) == exchange_errc::timeout);  // it never acknowledges
}

// A silent connection taken in by one exchange() kept that call's deadline, so a later
// call was bound by it: 3 s for a call of 300 ms, and never returning after a call of
// hours::max() (audit 45). Each call gives the clients it serves its own timeout.
TEST_CASE("server: a later exchange() is bound by its own timeout, not by the call that took a silent client in") {
  using namespace std::chrono;
  exchange_listener l(0, "127.0.0.1");
  auto silent = raw_client(l.port());
  exchange_options first = fast();
  first.timeout = hours::max();
  auto server = serve(l, sample_endpoint(), first);
  CHECK(exchange_client("127.0.0.1", l.port(), other_endpoint(), fast()).ep == sample_endpoint());
  CHECK(server.get().ep == other_endpoint());  // the silent one stays queued
  const auto t0 = steady_clock::now();
  auto later = serve(l, sample_endpoint(), {.timeout = milliseconds(300), .accept_timeout = milliseconds(300)});
  const bool in_time = later.wait_for(seconds(5)) == std::future_status::ready;
  silent = {};  // (ends a call still waiting on it: the test fails, and does not hang)
  CHECK(in_time);
  CHECK(error_of([&] { later.get(); }) == exchange_errc::timeout);
  CHECK(steady_clock::now() - t0 < seconds(5));
}

// Every connection that came was taken in and kept until served: a burst of idle ones (a
// port scan that holds them, stuck clients) took every descriptor, and from then on each
// exchange() failed at once in accept (EMFILE), the client whose record had come never
// served (audit 45). At most 64 wait; the oldest is closed to make room.
TEST_CASE("server: a burst of idle connections holds at most 64 descriptors, and a client is still served") {
  auto open_fds = [] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.is_symlink() ? 1 : 0;
    return n;
  };
  exchange_listener l(0, "127.0.0.1");
  std::vector<tcp::socket_fd> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(raw_client(l.port()));
  std::this_thread::sleep_for(50ms);  // the handshakes done
  const int before = open_fds();
  const exchange_options o = fast();
  auto server = serve(l, sample_endpoint(), o);
  CHECK(exchange_client("127.0.0.1", l.port(), other_endpoint(), o).ep == sample_endpoint());
  CHECK(server.get().ep == other_endpoint());
  CHECK(open_fds() - before <= 64);  // 100 before: every idle connection taken in
}

// Only silent connections were passed over: one that sent part of its record and
// stalled was served, and held the clients behind it for its timeout (an audit's
// "left alone", s59). A client is served once its whole record is there.
TEST_CASE("server: clients stalled part way through their records do not hold up a client") {
  for (auto fmt : {wire_format::rdmakit, wire_format::pingpong}) {
    CAPTURE(fmt == wire_format::pingpong);
    exchange_listener l(0, "127.0.0.1");
    exchange_options o = fast(fmt);
    o.timeout = 1000ms;  // the stalled ones stay unexpired while the good one is served
    std::string rec = fmt == wire_format::pingpong ? wire::format_pingpong(other_endpoint()) + '\0'
                                                   : wire::encode(other_endpoint());
    auto in_header = raw_client(l.port());  // stops inside the rdmakit header (or the pingpong record)
    raw_write(in_header, std::string_view(rec).substr(0, 5));
    auto in_payload = raw_client(l.port());  // stops one byte short of its record
    raw_write(in_payload, std::string_view(rec).substr(0, rec.size() - 1));
    auto server = serve(l, sample_endpoint(), o);
    const auto t0 = std::chrono::steady_clock::now();
    const connection_info got = exchange_client("127.0.0.1", l.port(), other_endpoint(), o);
    CHECK(got.ep.qpn == sample_endpoint().qpn);  // (the pingpong record carries no MTU)
    CHECK(server.get().ep.qpn == other_endpoint().qpn);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(o.timeout) / 2);
    // The one that completes its record later is served then (and fails: no acknowledgement).
    auto later = serve(l, sample_endpoint(), o);
    raw_write(in_payload, std::string_view(rec).substr(rec.size() - 1));
    char reply[16];
    CHECK_NOTHROW(tcp::read_exact(in_payload.get(), reply, sizeof reply, tcp::deadline::after(o.timeout), "reply"));
    CHECK(error_of([&] { later.get(); }) == exchange_errc::timeout);
  }
}

// A close after part of a record sets neither POLLHUP nor POLLERR: polled for POLLIN
// alone, the socket stayed readable short of its SO_RCVLOWAT, and the server polled it
// in a busy loop until the client's timeout (audit 32, F2), then said "closed".
TEST_CASE("server: a client that closes part way through its record is answered at once, not at its timeout") {
  for (auto fmt : {wire_format::rdmakit, wire_format::pingpong}) {
    CAPTURE(fmt == wire_format::pingpong);
    exchange_listener l(0, "127.0.0.1");
    exchange_options o = fast(fmt);
    o.timeout = 4000ms;
    std::string rec = fmt == wire_format::pingpong ? wire::format_pingpong(other_endpoint()) + '\0'
                                                   : wire::encode(other_endpoint());
    {
      auto s = raw_client(l.port());
      raw_write(s, std::string_view(rec).substr(0, 20));
    }  // closed
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(error_of([&] { (void)l.exchange(sample_endpoint(), o); }) == exchange_errc::connection_closed);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(o.timeout) / 4);
  }
}

// The deadline started again in full after the on_peer callback (connect_server always
// passes one), so a client slow with its record and silent after it held the server for
// up to twice the timeout (an audit: 1740 ms for 1000). The callback's time is excluded;
// the peer's is not.
TEST_CASE("server: an on_peer callback does not give a slow client a second timeout") {
  exchange_listener l(0, "127.0.0.1");
  exchange_options o = fast();
  o.timeout = 400ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto server = serve(l, sample_endpoint(), o, [](const connection_info&) { std::this_thread::sleep_for(50ms); });
  auto s = raw_client(l.port());
  std::this_thread::sleep_for(300ms);  // the record comes late, within the timeout...
  raw_write(s, wire::encode(other_endpoint()));
  // ...and no acknowledgement after it.
  CHECK(error_of([&] { server.get(); }) == exchange_errc::timeout);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 450ms);  // the timeout and the callback's 50 ms
  CHECK(took < 650ms);   // restarted, it was 300 + 50 + 400
}

TEST_CASE("milliseconds::max() timeouts mean no practical limit, not an overflow") {
  // now() + milliseconds::max() overflowed the clock's nanoseconds: every wait expired at once.
  const auto forever = std::chrono::milliseconds::max();
  auto d = tcp::deadline::after(forever);
  CHECK_FALSE(d.expired());
  CHECK(d.remaining_ms() == INT_MAX);

  exchange_listener l(0, "127.0.0.1");
  exchange_options o;
  o.timeout = forever;
  o.accept_timeout = forever;
  int callbacks = 0;  // each callback restarts the deadline: that path too
  auto server = serve(l, sample_endpoint(), o, [&](const connection_info&) { ++callbacks; });
  CHECK(exchange_client("127.0.0.1", l.port(), other_endpoint(), o, [&](const connection_info&) { ++callbacks; })
            .ep == sample_endpoint());
  CHECK(server.get().ep == other_endpoint());
  CHECK(callbacks == 2);
}

TEST_CASE("zero or negative timeouts are refused up front, naming the option and the value") {
  exchange_listener l(0, "127.0.0.1");
  tcp::listener mute(0, "127.0.0.1");  // a client that took the options would connect here and wait
  struct bad_option {
    std::string field;
    long long ms;
  };
  // accept_timeout 0 is its documented default ("use timeout"): only negatives are wrong.
  const bad_option cases[] = {{"timeout", 0}, {"timeout", -5}, {"accept_timeout", -5}};
  for (const auto& c : cases) {
    CAPTURE(c.field);
    CAPTURE(c.ms);
    exchange_options o = fast();
    o.timeout = o.accept_timeout = 2000ms;  // the other field: long, so a wait would show
    (c.field == "timeout" ? o.timeout : o.accept_timeout) = std::chrono::milliseconds(c.ms);
    for (bool server_side : {true, false}) {
      CAPTURE(server_side);
      const auto t0 = std::chrono::steady_clock::now();
      CHECK(error_of([&] {
              if (server_side) l.exchange(sample_endpoint(), o);
              else exchange_client("127.0.0.1", mute.port(), other_endpoint(), o);
            }) == exchange_errc::invalid_argument);
      CHECK(std::chrono::steady_clock::now() - t0 < 100ms);
      CHECK(last_error.find("exchange_options::" + c.field + " must be positive") != std::string::npos);
      CHECK(last_error.find("(got " + std::to_string(c.ms) + " ms)") != std::string::npos);
    }
  }
  // accept_timeout 0: the server waits `timeout` for a client.
  exchange_options o = fast();
  o.accept_timeout = 0ms;
  CHECK(error_of([&] { l.exchange(sample_endpoint(), o); }) == exchange_errc::timeout);
  CHECK(last_error.find("within 200 ms") != std::string::npos);
}

// A negative accept_timeout finer than a millisecond was cut toward zero, to 0: the
// server took it for "use timeout" and waited for a client instead of refusing it.
// A NaN timeout was taken for 0: "must be positive (got 0 ms)", and a NaN
// accept_timeout silently for "use timeout" (audit 45).
TEST_CASE("a NaN timeout or accept_timeout is refused, named as a NaN") {
  exchange_listener l(0, "127.0.0.1");
  const auto nan = std::chrono::duration<double>(std::numeric_limits<double>::quiet_NaN());
  for (int which = 0; which < 2; ++which) {
    exchange_options o = fast();
    (which == 0 ? o.timeout : o.accept_timeout) = nan;
    const char* name = which == 0 ? "exchange_options::timeout is a NaN" : "exchange_options::accept_timeout is a NaN";
    CHECK_THROWS_WITH_AS(l.exchange(sample_endpoint(), o), doctest::Contains(name), exchange_error);
    CHECK_THROWS_WITH_AS(exchange_client("127.0.0.1", l.port(), other_endpoint(), o), doctest::Contains(name),
                         exchange_error);
  }
}

TEST_CASE("a negative accept_timeout under a millisecond is refused, not taken for 0") {
  exchange_listener l(0, "127.0.0.1");
  exchange_options o = fast();
  o.timeout = 2000ms;  // a wait would show
  o.accept_timeout = std::chrono::microseconds(-500);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(error_of([&] { l.exchange(sample_endpoint(), o); }) == exchange_errc::invalid_argument);
  CHECK(std::chrono::steady_clock::now() - t0 < 100ms);
  CHECK(last_error.find("exchange_options::accept_timeout must be positive") != std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Malformed input over the wire; the listener survives each

TEST_CASE("server rejects garbage, oversized, truncated and bad-GID records and keeps serving") {
  exchange_listener l(0, "127.0.0.1");
  const std::string good_pp = wire::format_pingpong(other_endpoint());
  struct bad_input {
    const char* name;
    wire_format fmt;
    std::string bytes;
    bool close_after;
    exchange_errc expect;
  };
  std::string bad_gid = good_pp;
  bad_gid[40] = 'z';
  std::string rdmakit_bad_gid = wire::encode(other_endpoint());
  rdmakit_bad_gid[rdmakit_bad_gid.find("gid=") + 10] = 'q';
  const bad_input cases[] = {
      {"pingpong garbage", wire_format::pingpong, std::string(52, 'x'), false, exchange_errc::malformed},
      // Shorter than a record: waited on to the timeout before (audit 45), refused now.
      {"pingpong from an HTTP client", wire_format::pingpong, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false,
       exchange_errc::malformed},
      {"pingpong from an rdmakit client", wire_format::pingpong, "rdmakit/01 0040\n", false,
       exchange_errc::wrong_format},
      {"pingpong too long", wire_format::pingpong, good_pp + "0000000000", false, exchange_errc::too_large},
      {"pingpong truncated", wire_format::pingpong, good_pp.substr(0, 20), true, exchange_errc::connection_closed},
      {"pingpong bad gid", wire_format::pingpong, bad_gid + '\0', false, exchange_errc::malformed},
      {"pingpong record then junk", wire_format::pingpong, good_pp + '\0' + "junk", false, exchange_errc::too_large},
      {"rdmakit garbage", wire_format::rdmakit, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, exchange_errc::malformed},
      {"rdmakit oversized", wire_format::rdmakit, "rdmakit/01 9999\n" + std::string(100, 'a'), false,
       exchange_errc::too_large},
      {"rdmakit truncated", wire_format::rdmakit, wire::encode(other_endpoint()).substr(0, 40), true,
       exchange_errc::connection_closed},
      {"rdmakit bad gid", wire_format::rdmakit, rdmakit_bad_gid, false, exchange_errc::malformed},
      {"rdmakit newer version", wire_format::rdmakit, "rdmakit/07 0000\n", false, exchange_errc::version_mismatch},
      {"rdmakit from a pingpong client", wire_format::rdmakit, good_pp + '\0', false, exchange_errc::wrong_format},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    auto server = serve(l, sample_endpoint(), fast(c.fmt));
    {
      auto s = raw_client(l.port());
      raw_write(s, c.bytes);
      if (!c.close_after) {
        // Wait for the server to decide, so it sees the bytes and not a closed socket.
        auto status = server.wait_for(2000ms);
        CHECK(status == std::future_status::ready);
      }
    }
    CHECK(error_of([&] { server.get(); }) == c.expect);
  }
  // Still serving.
  auto server = serve(l, sample_endpoint(), fast(wire_format::pingpong));
  CHECK(exchange_client("127.0.0.1", l.port(), other_endpoint(), fast(wire_format::pingpong)).ep.qpn ==
        sample_endpoint().qpn);
  CHECK(server.get().ep.qpn == other_endpoint().qpn);
}

TEST_CASE("client rejects a malformed answer") {
  tcp::listener raw(0, "127.0.0.1");
  auto fake = std::async(std::launch::async, [&] {
    auto c = raw.accept(tcp::deadline::after(2000ms));
    char rec[52];
    tcp::read_exact(c.get(), rec, sizeof rec, tcp::deadline::after(2000ms), "client record");
    std::string answer = "0011:00abcd:123456:NOT-A-GID-AT-ALL-NOT-A-GID-AT-AL";
    answer.push_back('\0');
    tcp::write_all(c.get(), answer.data(), answer.size(), tcp::deadline::after(2000ms), "answer");
    std::this_thread::sleep_for(100ms);
  });
  CHECK(error_of([&] { exchange_client("127.0.0.1", raw.port(), other_endpoint(), fast(wire_format::pingpong)); }) ==
        exchange_errc::malformed);
  fake.get();
}

TEST_CASE("rdmakit header: the length is four decimal digits, never hex") {
  // It was parsed like a payload number, so "0x53" passed as 83.
  CHECK(error_of([] { wire::parse_header("rdmakit/01 0x53\n"); }) == exchange_errc::malformed);
  CHECK(last_error.find("length LLLL") != std::string::npos);
  CHECK(error_of([] { wire::parse_header("rdmakit/01 0X00\n"); }) == exchange_errc::malformed);
  CHECK(error_of([] { wire::parse_header("rdmakit/01 00ff\n"); }) == exchange_errc::malformed);
  CHECK(wire::parse_header("rdmakit/01 0083\n") == 83);

  exchange_listener l(0, "127.0.0.1");
  const std::string payload = wire::encode(other_endpoint()).substr(wire::header_size);
  char hex_len[8];
  std::snprintf(hex_len, sizeof hex_len, "0x%02zx", payload.size());
  REQUIRE(std::strlen(hex_len) == 4);
  CHECK(serve_raw(l, "rdmakit/01 " + std::string(hex_len) + "\n" + payload) == exchange_errc::malformed);
  CHECK(last_error.find("length LLLL") != std::string::npos);

  // The acknowledgement is a header too: "rdmakit/01 0x00\n" is not the empty frame.
  {
    auto server = serve(l, sample_endpoint(), fast());
    auto s = raw_client(l.port());
    raw_write(s, wire::encode(other_endpoint()));
    std::string reply(wire::encode(sample_endpoint()).size(), '\0');
    tcp::read_exact(s.get(), reply.data(), reply.size(), tcp::deadline::after(2000ms), "reply");
    raw_write(s, "rdmakit/01 0x00\n");
    CHECK(error_of([&] { server.get(); }) == exchange_errc::malformed);
    CHECK(last_error.find("length LLLL") != std::string::npos);
  }
  check_still_serves(l);
}

TEST_CASE("rdmakit record: gid= is 32 hex digits, not the colon form") {
  std::string payload = wire::encode(other_endpoint()).substr(wire::header_size);
  payload.replace(payload.find("gid=") + 4, 32, "fe80:0000:0000:0000:0202:03ff:fe04:0506");
  CHECK(error_of([&] { wire::decode_payload(payload); }) == exchange_errc::malformed);
  CHECK(last_error.find("gid= must be 32 hex digits") != std::string::npos);

  exchange_listener l(0, "127.0.0.1");
  CHECK(serve_raw(l, wire::frame_header(payload.size()) + payload) == exchange_errc::malformed);
  CHECK(last_error.find("gid= must be 32 hex digits") != std::string::npos);
  CHECK(last_error.find("fe80:0000") != std::string::npos);  // what was received
  check_still_serves(l);
}

TEST_CASE("listening on a port in use is a clear error") {
  exchange_listener a(0, "127.0.0.1");
  CHECK(error_of([&] { exchange_listener b(a.port(), "127.0.0.1"); }) == exchange_errc::address);
}

// A moved-from listener kept the port its successor owns and waited on no socket: a
// timeout naming that port (even with a client connecting to it), or no end at all with
// accept_timeout = milliseconds::max().
TEST_CASE("a moved-from exchange_listener says it is empty, at once") {
  exchange_listener a(0, "127.0.0.1");
  const std::uint16_t port = a.port();
  exchange_listener b(std::move(a));
  CHECK(b.port() == port);
  CHECK(a.port() == 0);
  exchange_options o = fast();
  o.accept_timeout = std::chrono::milliseconds::max();
  CHECK_THROWS_WITH_AS(a.exchange(sample_endpoint(), o), doctest::Contains("exchange_listener::exchange(): this"),
                       usage_error);
  exchange_listener c(0, "127.0.0.1");
  c = std::move(b);
  CHECK(c.port() == port);
  CHECK(b.port() == 0);
  check_still_serves(c);
}

TEST_CASE("an unresolvable host is a clear error") {
  CHECK(error_of([] { exchange_client("no-such-host.invalid", 1, other_endpoint(), fast()); }) ==
        exchange_errc::address);
}

TEST_CASE("a host or bind address holding a NUL is refused, not cut at it") {
  // getaddrinfo reads up to the NUL: "127.0.0.1\0x" was 127.0.0.1 (cm_address refuses the same).
  const std::string host("127.0.0.1\0x", 11);
  try {
    exchange_client(host, 1, other_endpoint(), fast());
    FAIL("exchanged with a host holding a NUL");
  } catch (const exchange_error& e) {
    CHECK(e.code() == make_error_code(exchange_errc::address));
    CHECK_MESSAGE(std::string(e.what()).find("holds a NUL character") != std::string::npos, e.what());
  }
  CHECK(error_of([&] { exchange_listener l(0, host); }) == exchange_errc::address);
}

// ---------------------------------------------------------------------------------------
// Exchange, then connect: typed queue pairs on the mock, one thread per side

TEST_CASE("connect_client/connect_server: RC queue pairs connected over TCP, region typed again") {
  using B = backends::mock;
  mock::fabric fab;
  constexpr auto rw = access::local_write | access::remote_write;
  device<B> dx(fab, "mock0"), dy(fab, "mock1");
  auto pdx = dx.create_pd();
  auto pdy = dy.create_pd();
  auto cqx = dx.create_cq(64);
  auto cqy = dy.create_cq(64);
  auto target = pdy.allocate<rw>(256);
  auto source = pdx.allocate<rw>(256);
  for (std::size_t i = 0; i < 256; ++i) source.data()[i] = std::byte(i);
  auto qx = pdx.create_qp<rc>(cqx, qp_cap{8, 8, 1, 1, 0});
  auto qy = pdy.create_qp<rc>(cqy, qp_cap{8, 8, 1, 1, 0});
  const auto y_ep = qy.local_endpoint();
  const auto x_ep = qx.local_endpoint();

  exchange_listener l(0, "127.0.0.1");
  auto server = std::async(std::launch::async, [&] {
    return connect_server(std::move(qy), l, fast(), region_descriptor(target.remote()));
  });
  auto client = connect_client(std::move(qx), "127.0.0.1", l.port(), fast());
  auto srv = server.get();
  CHECK(client.peer.ep == y_ep);
  CHECK(srv.peer.ep == x_ep);
  CHECK_FALSE(srv.peer.region.has_value());
  REQUIRE(client.peer.region.has_value());
  CHECK(client.peer.region->rights == access::remote_write);
  CHECK(client.qp.query_state() == qp_state::rts);
  CHECK(srv.qp.query_state() == qp_state::rts);

  // The client writes into the server's region through the descriptor it received.
  auto dst = client.peer.region->as<access::remote_write>();
  REQUIRE(client.qp.write(source.local(), dst, 7).ok());
  int done = 0;
  for (int i = 0; i < 10000 && done == 0; ++i)
    (void)cqx.poll([&](const completion<B>& c) {
      CHECK(c.ok());
      CHECK(c.wr_id() == 7);
      ++done;
    });
  CHECK(done == 1);
  CHECK(std::memcmp(target.data(), source.data(), 256) == 0);
}

namespace {
// A mock device with a PD and a CQ, for queue pairs to connect through an exchange.
struct one_device {
  one_device() = default;
  // One device, "a", of one port as given.
  explicit one_device(const mock::port_config& port) : fab(mock::fabric_config{.devices = {{.name = "a", .ports = {port}}}}), dev(fab, "a") {}
  mock::fabric fab;
  device<backends::mock> dev{fab, "mock0"};
  protection_domain<backends::mock> pd = dev.create_pd();
  completion_queue<backends::mock> cq = dev.create_cq(16);
};
}  // namespace

TEST_CASE("connect_client: a peer that never answers leaves the queue pair unconnected, with a timeout") {
  one_device d;
  auto q = d.pd.create_qp<uc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  tcp::listener mute(0, "127.0.0.1");
  CHECK(error_of([&] { (void)connect_client(std::move(q), "127.0.0.1", mute.port(), fast()); }) ==
        exchange_errc::timeout);
  CHECK(static_cast<bool>(q));  // not consumed: connect() never ran
  CHECK(q.query_state() == qp_state::init);
}

// The peer's record named QP 0 or 1 (a zeroed or garbled record): connect() refused it
// with a usage_error, the error for the caller's own misuse, though the data came from
// the network. It is a malformed record now, and the queue pair stays the caller's.
namespace {
// connect_client against a server whose record is `peer`: the client's error (its text:
// last_error). The queue pair must stay the caller's, unconnected.
exchange_errc client_refusal_of(one_device& d, const endpoint& peer) {
  auto q = d.pd.create_qp<rc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  exchange_listener l(0, "127.0.0.1");
  auto server = std::async(std::launch::async, [&] {
    try {
      (void)l.exchange(connection_info(peer), fast());
    } catch (const exchange_error&) {  // no acknowledgement comes
    }
  });
  const exchange_errc e = error_of([&] { (void)connect_client(std::move(q), "127.0.0.1", l.port(), fast()); });
  server.get();
  CHECK(static_cast<bool>(q));
  CHECK(q.query_state() == qp_state::init);
  return e;
}
}  // namespace

TEST_CASE("connect_client: a peer record naming QP 0 or 1 is a malformed record; the queue pair is kept") {
  one_device d;
  auto other = d.pd.create_qp<rc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  for (std::uint32_t bad : {0u, 1u}) {
    CAPTURE(bad);
    endpoint e = other.local_endpoint();
    e.qpn = bad;
    CHECK(client_refusal_of(d, e) == exchange_errc::malformed);
  }
}

// Peer records that address nothing this port can reach, though they name a queue pair:
// - neither a LID nor a GID (ibv_rc_pingpong run on RoCE without -g), and a LID without
//   a GID on this RoCE port (an InfiniBand peer's, found by an audit): connect() refused
//   them as the caller's misuse (usage_error), though the data came from the network;
// - a multicast GID (a group's, never a port's): connect() took it, towards a group no
//   queue pair answers from.
TEST_CASE("connect_client: a peer record this port cannot address is a malformed record; the queue pair is kept") {
  one_device d;  // mock0: RoCE, LID 0
  auto other = d.pd.create_qp<rc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  endpoint e = other.local_endpoint();
  SUBCASE("neither a LID nor a GID") {
    e.lid = 0;
    e.gid = {};
    CHECK(client_refusal_of(d, e) == exchange_errc::malformed);
    CHECK(last_error.find("-g") != std::string::npos);
  }
  SUBCASE("a LID but no GID, on a RoCE port") {
    e.lid = 5;
    e.gid = {};
    CHECK(client_refusal_of(d, e) == exchange_errc::malformed);
    CHECK(last_error.find("LID 5 but no GID") != std::string::npos);
  }
  SUBCASE("a multicast GID") {
    REQUIRE(gid::parse("ff0e0000000000000000000000000001", e.gid));
    CHECK(client_refusal_of(d, e) == exchange_errc::malformed);
    CHECK(last_error.find("multicast") != std::string::npos);
    CHECK(last_error.find("ff0e:0000:") != std::string::npos);
  }
  // A RoCE peer's record (a GID, LID 0) at an InfiniBand port, which addresses by LID
  // (across subnets too: the GRH rides on a router's LID): connect() failed with a
  // verbs_error of the mock's, on a record the network brought.
  SUBCASE("a GID but no LID, on an InfiniBand port") {
    mock::port_config ib;
    ib.layer = link_layer::infiniband;
    ib.lid = 7;
    one_device ibd(ib);
    REQUIRE(e.lid == 0);
    REQUIRE_FALSE(e.gid.is_zero());
    CHECK(client_refusal_of(ibd, e) == exchange_errc::malformed);
    CHECK(last_error.find("no LID") != std::string::npos);
  }
  // A multicast LID, or the permissive one, names no port: connect() took it (an audit),
  // where the multicast GID beside it was refused.
  SUBCASE("a multicast or the permissive LID, on an InfiniBand port") {
    mock::port_config ib;
    ib.layer = link_layer::infiniband;
    ib.lid = 7;
    one_device ibd(ib);
    for (const std::uint16_t lid : {0xc001, 0xffff}) {
      CAPTURE(lid);
      e.lid = lid;
      CHECK(client_refusal_of(ibd, e) == exchange_errc::malformed);
      CHECK(last_error.find(lid == 0xffff ? "LID 0xffff, the permissive LID" : "LID 0xc001, a multicast") !=
            std::string::npos);
    }
  }
}

// connect_options::force_grh on an InfiniBand port, towards a peer without a GID: the
// refusal said the port was "RoCE (Ethernet)".
TEST_CASE("connect: force_grh towards a peer without a GID, on an InfiniBand port, names force_grh") {
  mock::port_config ib;
  ib.layer = link_layer::infiniband;
  ib.lid = 7;
  one_device d(ib);
  auto q = d.pd.create_qp<rc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  endpoint e = q.local_endpoint();
  e.gid = {};
  connect_options o;
  o.force_grh = true;
  try {
    (void)std::move(q).connect(e, o);
    FAIL("connected with a GRH towards no GID");
  } catch (const usage_error& x) {
    const std::string w = x.what();
    CHECK(w.find("is InfiniBand, and connect_options::force_grh asks a GRH") != std::string::npos);
    CHECK(w.find("RoCE") == std::string::npos);
  }
}

// A client that left after the server had connected its queue pair (before the
// acknowledgement) failed the exchange, and the connected queue pair died with it: the
// caller's variable was empty, and a server loop retrying with it got a usage_error
// about a moved-from queue pair.
TEST_CASE("connect_server: a client gone after the queue pair was connected gives it back reset, for a retry") {
  one_device d;
  auto other = d.pd.create_qp<rc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  auto q = d.pd.create_qp<rc>(d.cq, qp_cap{4, 4, 1, 1, 0});
  const std::uint32_t first_qpn = q.local_endpoint().qpn;
  exchange_listener l(0, "127.0.0.1");
  auto server = std::async(std::launch::async, [&] { return error_of([&] { (void)connect_server(std::move(q), l, fast()); }); });
  {  // a client that sends its record, reads the start of the server's, and leaves
    auto c = tcp::connect("127.0.0.1", l.port(), tcp::deadline::after(2s), false);
    const std::string rec = wire::encode(other.local_endpoint());
    tcp::write_all(c.get(), rec.data(), rec.size(), tcp::deadline::after(2s), "the record");
    char header[wire::header_size];
    tcp::read_exact(c.get(), header, sizeof header, tcp::deadline::after(2s), "the header");
  }
  CHECK(server.get() == exchange_errc::connection_closed);
  REQUIRE(static_cast<bool>(q));
  CHECK(q.query_state() == qp_state::init);
  CHECK(q.local_endpoint().qpn != first_qpn);  // a new queue pair: the connected one's peer is gone
}
