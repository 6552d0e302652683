#pragma once
// rdmakit-pingpong's protocol: the ibv_{rc,uc,ud}_pingpong exchange (one buffer, SQ
// depth 1, rx_depth receives kept posted, strict ping-pong of `size`-byte SENDs, the
// client sends first) on the policy layer: typed queue pairs (connect/activate), the
// signal_all policy, a busy_poll or event_driven completion queue. Generic over the
// backend, so the same code runs on the mock and on libibverbs.
#include "../common/loopback.hpp"

#include <rdmakit/connection.hpp>
#include <rdmakit/rdmakit.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace rdmakit_tools {

using namespace rdmakit;

struct pingpong_options {
  std::string device;             ///< device name ("" for the first one)
  std::uint8_t ib_port = 1;
  std::optional<int> gid_index{};  ///< unset: automatic (RoCEv2 IPv4-mapped first)
  std::uint32_t size = 4096;
  mtu path_mtu = mtu::mtu_1024;
  std::uint32_t rx_depth = 500;
  std::uint32_t iters = 1000;
  std::uint8_t sl = 0;
  bool events = false;            ///< sleep on CQ events instead of busy polling
  bool check = false;             ///< validate every received message's length
  bool server = true;
  std::chrono::milliseconds stall_timeout{10'000};  ///< no completion for this long: fail
};

/// Prints to stdout (flushed at once, scripts wait for lines) or collects into a string.
class printer {
 public:
  explicit printer(std::string* sink = nullptr) : sink_(sink) {}
  [[gnu::format(printf, 2, 3)]] void operator()(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (sink_) {
      *sink_ += buf;
    } else {
      std::fputs(buf, stdout);
      std::fflush(stdout);
    }
  }

 private:
  std::string* sink_;
};

/// Exchanges our record for the peer's; calls the callback with the peer's record
/// before the exchange completes (server: before answering).
using rdmakit_tools::exchange_fn;

class pingpong_failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A polling policy of the tool's own (any type with the `polling` facts is one): spin
/// like busy_poll, but yield the CPU after each empty poll. Used for the mock loopback,
/// where both ends are threads of one process and pure spinning starves the peer
/// thread on a loaded machine.
template <int Batch = 16>
struct yielding_poll {
  static constexpr std::string_view name = "yielding_poll";
  static constexpr int batch = Batch;
  static constexpr bool needs_channel = false;
  static constexpr unsigned ack_batch = 1;

  template <class Ops>
  static int wait(Ops& ops, std::chrono::milliseconds timeout) noexcept {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (int n = ops.poll(); n != 0) return n;
      if (std::chrono::steady_clock::now() >= deadline) return 0;
      std::this_thread::yield();
    }
  }
};
static_assert(polling<yielding_poll<>>);

inline constexpr std::uint64_t recv_wrid = 1;
inline constexpr std::uint64_t send_wrid = 2;

/// One side of a ping-pong, on `opened` when it is open (the mock loopback opens its
/// devices from its own fabric), else on the device o.device names. Returns 0 on
/// success; throws verbs_error, exchange_error or pingpong_failure with what went wrong.
template <verbs_backend B, transport T, polling P>
int run_pingpong(const pingpong_options& o, const exchange_fn& exchange, printer& out, device<B> opened = {}) {
  device<B> dev = opened ? std::move(opened) : device<B>(o.device);
  const port_attr pa = dev.port(o.ib_port);
  if constexpr (T::type == qp_type::ud) {
    if (o.size > mtu_bytes(pa.active_mtu))
      throw pingpong_failure("requested size " + std::to_string(o.size) + " is larger than the port MTU (" +
                             std::to_string(mtu_bytes(pa.active_mtu)) + "): UD messages are one packet");
  }
  if (pa.layer != link_layer::ethernet && pa.lid == 0)
    throw pingpong_failure("couldn't get the local LID: port " + std::to_string(o.ib_port) + " of " + dev.name() +
                           " has none (is the subnet manager running?)");

  auto pd = dev.create_pd();
  // One buffer, as in ibv_*_pingpong: receives land at its start (UD: GRH first),
  // sends go out of it after the GRH area.
  const std::size_t buf_len = std::size_t{o.size} + T::recv_offset;
  auto mr = [&] {
    try {
      return pd.template allocate<access::local_write>(buf_len);
    } catch (const std::bad_alloc&) {
      throw pingpong_failure("couldn't allocate the " + std::to_string(buf_len) + "-byte buffer of -s " +
                             std::to_string(o.size) + ": out of memory (or over this process's limit, ulimit -v): "
                             "lower -s");
    }
  }();
  std::memset(mr.data(), 0x7b, buf_len);
  const local_buffer recv_buf = mr.local();
  const local_buffer send_buf = mr.local(T::recv_offset, o.size);

  // The device's limits, named by the option that reaches them (the verbs' refusal names
  // a CQ size the user never typed).
  if (const device_attr& a = dev.attr(); o.rx_depth > a.max_qp_wr || o.rx_depth + std::uint64_t{1} > a.max_cqe)
    throw pingpong_failure("-r " + std::to_string(o.rx_depth) + ": " + dev.name() + " takes at most " +
                           std::to_string(std::min<std::uint64_t>(a.max_qp_wr, a.max_cqe - std::uint64_t{1})) +
                           " receives (its max_qp_wr " + std::to_string(a.max_qp_wr) + ", and max_cqe " +
                           std::to_string(a.max_cqe) + " for them and the send): lower -r");
  auto cq = dev.template create_cq<P>(static_cast<int>(o.rx_depth) + 1);
  qp_options qo;
  qo.port = o.ib_port;
  qo.gid_index = o.gid_index;
  qp_cap caps{1, o.rx_depth, 1, 1, 0};
  auto qp = pd.template create_qp<T, signal_all>(cq, caps, qo);

  std::uint32_t routs = 0;
  for (; routs < o.rx_depth; ++routs) {
    auto r = qp.post_recv(recv_buf, recv_wrid);
    if (!r) throw pingpong_failure("couldn't post receive " + std::to_string(routs) + ": " + r.message());
  }

  const endpoint local = qp.local_endpoint();
  out("  local address:  %s\n", wire::describe(local).c_str());

  using live_qp = queue_pair<B, T, signal_all, qp_state::rts>;
  std::optional<live_qp> live;
  std::optional<address_handle<B>> ah;
  connect_options co;
  co.path_mtu = o.path_mtu;
  co.sl = o.sl;
  const connection_info peer = exchange(local, [&](const connection_info& p) {
    check_peer_record(p.ep, local);
    if constexpr (T::connected) {
      live.emplace(std::move(qp).connect(p.ep, co));
    } else {
      live.emplace(std::move(qp).activate());
      ah.emplace(pd.create_ah(p.ep, {.port = o.ib_port, .gid_index = live->gid_index()}));
    }
  });
  out("  remote address: %s\n", wire::describe(peer.ep).c_str());

  // The loop of ibv_*_pingpong: a send is posted when both the previous send and the
  // previous receive completed; the client starts.
  std::uint32_t rcnt = 0, scnt = 0;
  unsigned pending = recv_wrid;
  std::string failure;
  auto post_send = [&]() noexcept {
    post_result r;
    if constexpr (T::needs_ah)
      r = live->send(ah->to(peer.ep.qpn), send_buf, send_wrid);
    else
      r = live->send(send_buf, send_wrid);
    if (!r) failure = std::string("couldn't post send: ") + r.message();
    return r.ok();
  };
  // -c as in rdma-core: the client marks the first payload byte of every page (with
  // 0, the value their check expects), the server finds the marks in its buffer at the
  // end (it received into the same buffer it echoes from).
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::byte* const payload = mr.data() + T::recv_offset;
  if (!o.server && o.check)
    for (std::size_t i = 0; i < o.size; i += page) payload[i] = std::byte{0};
  if (!o.server) {
    if (!post_send()) throw pingpong_failure(failure);
    pending |= send_wrid;
  }

  const auto start = std::chrono::steady_clock::now();
  auto on_completion = [&](const completion<B>& c) noexcept {
    if (!failure.empty()) return;
    if (!c.ok()) {
      failure = "Failed status " + std::string(to_string(c.status())) + " (" +
                std::to_string(static_cast<int>(c.status())) + ") for wr_id " + std::to_string(c.wr_id()) + ": " +
                explain(c.status());
      return;
    }
    switch (c.wr_id()) {
      case send_wrid: ++scnt; break;
      case recv_wrid:
        if (o.check && c.payload_len() != o.size) {
          failure = "received " + std::to_string(c.payload_len()) + " bytes, expected " + std::to_string(o.size) +
                    " (do both sides use the same -s?)";
          return;
        }
        if (--routs <= 1) {
          while (routs < o.rx_depth) {
            auto r = live->post_recv(recv_buf, recv_wrid);
            if (!r) {
              failure = "couldn't post receive (" + std::to_string(routs) + "): " + r.message();
              return;
            }
            ++routs;
          }
        }
        ++rcnt;
        break;
      default: failure = "completion for unknown wr_id " + std::to_string(c.wr_id()); return;
    }
    pending &= ~static_cast<unsigned>(c.wr_id());
    if (scnt < o.iters && !pending) {
      if (!post_send()) return;
      pending = recv_wrid | send_wrid;
    }
  };
  while (rcnt < o.iters || scnt < o.iters) {
    const auto r = cq.wait(on_completion, o.stall_timeout);
    if (!failure.empty()) throw pingpong_failure(failure);
    if (r.failed()) throw pingpong_failure("poll CQ failed: " + std::string(std::strerror(r.error())));
    if (r.timed_out())
      throw pingpong_failure("no completion for " + std::to_string(o.stall_timeout.count()) + " ms after " +
                             std::to_string(scnt) + " sends and " + std::to_string(rcnt) + " receives of " +
                             std::to_string(o.iters) + ": the peer stopped" +
                             (T::type == qp_type::rc ? std::string()
                                                     : std::string(", or a message was lost (") +
                                                           std::string(T::name) + " does not retransmit)"));
  }
  const auto end = std::chrono::steady_clock::now();

  const double usec = std::chrono::duration<double, std::micro>(end - start).count();
  const long long bytes = static_cast<long long>(o.size) * o.iters * 2;
  out("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1000000., bytes * 8. / usec);
  out("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1000000., usec / o.iters);
  bool valid = true;
  if (o.server && o.check)
    for (std::size_t i = 0; i < o.size; i += page)
      if (payload[i] != std::byte{0}) {
        out("invalid data in page %zu\n", i / page);
        valid = false;
      }
  // Completions still owed (none in a clean run) are flushed when the QP goes away.
  return valid ? 0 : 1;
}

}  // namespace rdmakit_tools
