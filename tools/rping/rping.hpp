#pragma once
// rdma-core's rping protocol (librdmacm/examples/rping.c) on rdmakit's connection
// manager, over any cm_backend: the backend-independent part of rdmakit-rping.
//
// Per ping, the client advertises its "start" buffer (a 16-byte SEND: address, rkey,
// size, big-endian), the server RDMA READs it and answers with a 16-byte SEND (go
// ahead); the client advertises its "rdma" buffer, the server RDMA WRITEs what it read
// into it (strlen + 1 bytes) and answers again; the client compares the two buffers.
// The server serves until the client disconnects (-P: then waits for the next client,
// one at a time). Both sides keep one receive posted.
#include <rdmakit/connection_manager.hpp>
#include <rdmakit/rdmakit.hpp>

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rdmakit_tools {

using namespace std::chrono_literals;

/// What rping's options ask for.
struct rping_options {
  bool server = false;
  rdmakit::cm_address addr{};  ///< -a (and -p): listened on, or connected to
  rdmakit::cm_address source{};  ///< -I: the client's source address (0.0.0.0: the CM picks)
  bool persistent = false;       ///< -P: the server serves one client after another until killed
  bool self_qp = false;          ///< -q: the QP is made here (pd.create_qp) and moved with the CM's attributes
  int count = 0;               ///< -C: pings (client; 0: until interrupted)
  std::uint32_t size = 64;     ///< -S: ping data size (rping's range: 24 .. 65535)
  bool verbose = false;        ///< -v: print the ping data
  bool validate = false;       ///< -V: compare what came back
  bool debug = false;          ///< -d: say each step on stderr
  std::chrono::milliseconds timeout{10'000};  ///< rdmakit: bound on each wait (server: the first request 120 s)
};

inline constexpr std::uint32_t rping_max_size = 64 * 1024 - 1;
inline constexpr std::uint32_t rping_min_size = 24;  // rping: sizeof "2147483647" + sizeof "rdma-ping-%d: "

/// rping's advertisement: buffer address, rkey and size, big-endian, 16 bytes.
struct rping_info {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t size = 0;

  void write_to(char* p) const {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(addr >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i) p[8 + i] = static_cast<char>(rkey >> (24 - 8 * i));
    for (int i = 0; i < 4; ++i) p[12 + i] = static_cast<char>(size >> (24 - 8 * i));
  }
  static rping_info read_from(const char* p) {
    rping_info r;
    for (int i = 0; i < 8; ++i) r.addr = (r.addr << 8) | static_cast<std::uint8_t>(p[i]);
    for (int i = 0; i < 4; ++i) r.rkey = (r.rkey << 8) | static_cast<std::uint8_t>(p[8 + i]);
    for (int i = 0; i < 4; ++i) r.size = (r.size << 8) | static_cast<std::uint8_t>(p[12 + i]);
    return r;
  }
};

/// Fills rping's ping `n` into buf[0..size): "rdma-ping-<n>: " then letters from `start`
/// (65..122, wrapping), NUL-terminated at size - 1.
inline void rping_fill(char* buf, std::uint32_t size, int n, unsigned char start) {
  int cc = std::snprintf(buf, size, "rdma-ping-%d: ", n);
  unsigned char c = start;
  for (std::uint32_t i = static_cast<std::uint32_t>(cc); i < size; ++i) {
    buf[i] = static_cast<char>(c);
    if (++c > 122) c = 65;
  }
  buf[size - 1] = 0;
}

/// One side of rping on backend B: the buffers (registered), the CQ and the connection.
template <class B>
class rping_side {
 public:
  static constexpr rdmakit::access rw =
      rdmakit::access::local_write | rdmakit::access::remote_read | rdmakit::access::remote_write;

  rping_side(rdmakit::device<B> dev, const rping_options& o)
      : o_(o), dev_(std::move(dev)), pd_(dev_.create_pd()), cq_(dev_.create_cq(32)), mem_(16 + 16 + 2 * (o.size + 1)),
        mr_(pd_.template register_memory<rw>(mem_.data(), mem_.size())) {}

  /// Server: waits for a client (at most 120 s), then serves its pings until it disconnects.
  void serve(rdmakit::cm_listener<B>& l) { serve_one(l.next_request(120s)); }
  /// As above, waiting for the client until `stop()` returns true (checked every 200 ms);
  /// false if it never came.
  template <class Stop>
  bool serve(rdmakit::cm_listener<B>& l, Stop stop) {
    auto req = next_request(l, stop);
    if (!req) return false;
    serve_one(std::move(req));
    return true;
  }

  /// Server -P: serves clients one after another (rping -P runs a thread per client;
  /// here the next client waits in the listen backlog until the previous one is done),
  /// until `stop()` returns true (checked at least every 200 ms between clients). A
  /// client that fails is reported on stderr and the server goes on. Returns the
  /// number of clients served to the end.
  template <class Stop>
  int serve_persistent(rdmakit::cm_listener<B>& l, Stop stop) {
    int served = 0;
    for (;;) {
      auto req = next_request(l, stop);
      if (!req) return served;
      try {
        serve_one(std::move(req));
        ++served;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rdmakit-rping: a client failed: %s; waiting for the next one\n", e.what());
      }
      end_connection();
    }
  }

 private:
  void serve_one(rdmakit::cm_request<B> req) {
    say("connect request");
    if (o_.self_qp) {  // -q: the QP is ours; the CM only says how to move it
      auto qp = own_qp();
      conn_ = std::move(req).accept(std::move(qp), {}, cm_opts());
    } else {
      conn_ = std::move(req).template accept<rdmakit::rc>(pd_, cq_, caps(), {}, cm_opts(),
                                                          [&](auto& qp) { repost(qp); });
    }
    say("established");
    for (;;) {
      if (!wait_recv()) return;  // the client disconnected: done
      const rping_info src = rping_info::read_from(recv_buf());
      if (src.size > o_.size + 1)
        fail("the client advertised " + std::to_string(src.size) + " bytes, more than -S " + std::to_string(o_.size));
      say("read " + std::to_string(src.size) + " bytes");
      const auto from = rdmakit::region_descriptor(src.addr, src.rkey, src.size, rdmakit::access::remote_read)
                            .as<rdmakit::access::remote_read>();
      check(conn_.qp().read(mr_.local(rdma_off(), src.size), from, 3), "RDMA READ");
      wait_for(3);
      // A C string (rping's client ends it with a NUL): strlen on data without one
      // would run past the buffer.
      const auto* nul = static_cast<const char*>(std::memchr(rdma_buf(), 0, src.size));
      if (!nul)
        fail("the client's ping data has no NUL in its " + std::to_string(src.size) +
             " bytes: is it an rping client?");
      if (o_.verbose) std::printf("server ping data: %s\n", rdma_buf());
      go_ahead();
      if (!wait_recv()) return;
      const rping_info dst = rping_info::read_from(recv_buf());
      const auto len = static_cast<std::uint32_t>(nul - rdma_buf() + 1);
      if (len > dst.size) fail("the client's write buffer is too small");
      const auto to = rdmakit::region_descriptor(dst.addr, dst.rkey, dst.size, rdmakit::access::remote_write)
                          .as<rdmakit::access::remote_write>();
      check(conn_.qp().write(mr_.local(rdma_off(), len), to.sub(0, len), 4), "RDMA WRITE");
      wait_for(4);
      go_ahead();
    }
  }

  // The next connect request, waited for in 200 ms slices until `stop()` says so
  // (then an empty request).
  template <class Stop>
  static rdmakit::cm_request<B> next_request(rdmakit::cm_listener<B>& l, Stop& stop) {
    while (!stop()) {
      try {
        return l.next_request(200ms);
      } catch (const rdmakit::cm_error& e) {
        if (e.code() != rdmakit::cm_errc::timeout) throw;
      }
    }
    return {};
  }

  // Drops the connection and the completions its queue pair left (rxe keeps a
  // destroyed QP's flushed completions on the CQ), so the next client starts clean.
  void end_connection() {
    conn_ = {};
    while (cq_.poll([](const rdmakit::completion<B>&) {}) > 0) {
    }
  }

 public:
  /// Client: connects to `to`, pings `count` times (0: for ever), disconnects. Returns
  /// false on a data mismatch (-V).
  bool ping(const rdmakit::cm_address& to) {
    if (o_.self_qp)
      conn_ = rdmakit::cm_connect(own_qp(), to, {}, cm_opts());
    else
      conn_ = rdmakit::cm_connect<rdmakit::rc>(pd_, cq_, caps(), to, {}, cm_opts(), [&](auto& qp) { repost(qp); });
    say("established");
    unsigned char start = 65;
    for (int n = 0; o_.count == 0 || n < o_.count; ++n) {
      rping_fill(start_buf(), o_.size, n, start);
      if (++start > 122) start = 65;
      advertise(start_off());
      if (!wait_recv()) fail("the server disconnected");
      advertise(rdma_off());
      if (!wait_recv()) fail("the server disconnected");
      if (o_.validate && std::memcmp(start_buf(), rdma_buf(), o_.size) != 0) {
        std::fprintf(stderr, "data mismatch!\n");
        return false;
      }
      if (o_.verbose) std::printf("ping data: %s\n", rdma_buf());
      std::memset(rdma_buf(), 0, o_.size);
    }
    conn_.disconnect();
    conn_.wait_disconnected(2s);
    return true;
  }

 private:
  // Layout of mem_: [0,16) receive, [16,32) send, then the start and rdma buffers.
  static constexpr std::size_t recv_off() { return 0; }
  static constexpr std::size_t send_off() { return 16; }
  std::size_t start_off() const { return 32; }
  std::size_t rdma_off() const { return 32 + o_.size + 1; }
  char* recv_buf() { return mem_.data() + recv_off(); }
  char* start_buf() { return mem_.data() + start_off(); }
  char* rdma_buf() { return mem_.data() + rdma_off(); }

  static rdmakit::qp_cap caps() { return rdmakit::qp_cap{16, 2, 1, 1, 0}; }  // rping: RPING_SQ_DEPTH, 2 receives
  rdmakit::cm_options cm_opts() const {
    rdmakit::cm_options c;
    c.timeout = o_.timeout;
    c.source = o_.source;
    return c;
  }
  void say(const std::string& s) const {
    if (o_.debug) std::fprintf(stderr, "rdmakit-rping: %s\n", s.c_str());
  }
  [[noreturn]] static void fail(const std::string& what) { throw std::runtime_error(what); }
  static void check(const rdmakit::post_result& r, const char* what) {
    if (!r) fail(std::string("posting the ") + what + " failed: " + std::string(rdmakit::to_string(r.status)));
  }
  // -q: a QP made on the PD (INIT), its receive posted, for the CM to connect.
  rdmakit::queue_pair<B, rdmakit::rc> own_qp() {
    auto qp = pd_.template create_qp<rdmakit::rc>(cq_, caps());
    repost(qp);
    return qp;
  }
  template <class QP>
  void repost(QP& qp) {
    check(qp.post_recv(mr_.local(recv_off(), 16), 1), "receive");
  }

  void advertise(std::size_t off) {
    rping_info{reinterpret_cast<std::uintptr_t>(mem_.data() + off), mr_.rkey(), o_.size}.write_to(mem_.data() + send_off());
    check(conn_.qp().send(mr_.local(send_off(), 16), 2), "SEND");
  }
  void go_ahead() { check(conn_.qp().send(mr_.local(send_off(), 16), 2), "SEND"); }

  // Polls until the completion `wr_id` (1: a receive of 16 bytes, reposted); sends
  // complete on the way. False when the connection ended (flush or DISCONNECTED).
  bool wait_for(std::uint64_t wr_id) {
    const auto until = std::chrono::steady_clock::now() + o_.timeout;
    for (;;) {
      bool got = false, ended = false;
      std::string bad;
      cq_.poll([&](const rdmakit::completion<B>& c) {
        if (!c.ok()) {
          if (c.status() == rdmakit::wc_status::wr_flush_err) ended = true;
          else bad = std::string(rdmakit::to_string(c.status()));
          return;
        }
        if (c.wr_id() == 1 && c.byte_len() != 16) bad = "received " + std::to_string(c.byte_len()) + " bytes, not 16";
        if (c.wr_id() == wr_id) got = true;
      });
      if (!bad.empty()) fail("completion failed: " + bad);
      if (got) {
        if (wr_id == 1) repost(conn_.qp());
        return true;
      }
      if (ended) return false;
      pollfd p{conn_.event_fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) == 1 && conn_.wait_disconnected(0ms)) {
        say("disconnected");
        return false;
      }
      if (std::chrono::steady_clock::now() > until)
        fail("no completion within " + std::to_string(o_.timeout.count()) + " ms");
      std::this_thread::yield();
    }
  }
  bool wait_recv() { return wait_for(1); }

  rping_options o_;
  rdmakit::device<B> dev_;
  rdmakit::protection_domain<B> pd_;
  rdmakit::completion_queue<B> cq_;
  std::vector<char> mem_;
  rdmakit::memory_region<B, rw> mr_;
  rdmakit::cm_connection<B, rdmakit::rc> conn_;
};

}  // namespace rdmakit_tools
