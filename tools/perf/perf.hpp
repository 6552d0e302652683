#pragma once
// rdmakit-perf: perftest-like bandwidth and latency tests on rdmakit's policy layer.
// Everything here is generic over the backend, the transport, the signaling policy and
// the polling policy; main.cpp turns the command line into one of the instantiated
// combinations (see dispatch.hpp) and prints the report.
#include "../common/loopback.hpp"

#include <rdmakit/connection.hpp>
#include <rdmakit/connection_manager.hpp>
#include <rdmakit/rdmakit.hpp>

#include <algorithm>
#include <limits>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace rdmakit_perf {

using namespace rdmakit;
using clock_type = std::chrono::steady_clock;

enum class test_kind { write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat, atomic_lat };
enum class op_kind { write, read, send, atomic };

struct test_desc {
  const char* name;
  test_kind kind;
  op_kind op;
  bool bw;
};
inline constexpr test_desc all_tests[] = {
    {"write_bw", test_kind::write_bw, op_kind::write, true},
    {"read_bw", test_kind::read_bw, op_kind::read, true},
    {"send_bw", test_kind::send_bw, op_kind::send, true},
    {"atomic_bw", test_kind::atomic_bw, op_kind::atomic, true},
    {"write_lat", test_kind::write_lat, op_kind::write, false},
    {"read_lat", test_kind::read_lat, op_kind::read, false},
    {"send_lat", test_kind::send_lat, op_kind::send, false},
    {"atomic_lat", test_kind::atomic_lat, op_kind::atomic, false},
};
inline const test_desc& describe(test_kind k) {
  for (const auto& t : all_tests)
    if (t.kind == k) return t;
  return all_tests[0];
}

/// Which signaling policy the options select.
enum class signal_choice { all, every16, every64, manual };

/// Everything a run needs, resolved (defaults applied) by the command line parser.
struct perf_options {
  test_kind test = test_kind::write_bw;
  std::string device;        ///< "" with mock = both ends in this process
  std::uint8_t ib_port = 1;
  std::optional<int> gid_index{};  ///< unset: automatic (RoCEv2 IPv4-mapped first)
  std::optional<mtu> path_mtu;
  std::uint32_t size = 65536;
  std::uint64_t iters = 5000;
  double duration = 0;       ///< seconds; > 0 replaces iters
  std::uint32_t tx_depth = 128;
  std::uint32_t rx_depth = 512;
  std::uint32_t cq_mod = 64;  ///< -Q: a completion every cq_mod WRs
  std::uint32_t post_list = 1;
  std::uint32_t inline_size = 0;
  bool inline_given = false;  ///< -I given: above the device's max_inline_data is refused, not lowered
  bool events = false;
  bool use_srq = false;      ///< send tests: the QPs take their receives from one SRQ of rx_depth
  std::uint32_t num_qps = 1;
  qp_type transport = qp_type::rc;
  bool cmp_swap = false;      ///< atomics: compare-and-swap instead of fetch-and-add
  signal_choice signal = signal_choice::every64;
  bool json = false;
  bool server = true;
  bool rdma_cm = false;      ///< -R: connect through the connection manager, not the TCP exchange
  std::uint32_t cm_ipv4 = 0;  ///< -R: the server's address (client), the one listened on (server; 0: all)
  std::uint16_t cm_port = 18515;
  bool yield_when_idle = false;  ///< both ends share the CPU (mock loopback): yield in spin loops
  bool mock_wrong_rkey = false;  ///< --mock-wrong-rkey: the client names a wrong rkey (its WRs fail)
  std::chrono::nanoseconds mock_latency{0};  ///< --mock-latency: the mock loopback fabric's one-way wire latency
  bool mock_rxe = false;                     ///< --mock-profile=rxe: the mock loopback's devices behave as rxe
  /// Mock loopback: set when the other side failed; this side's waits stop on it.
  const std::atomic<bool>* peer_failed = nullptr;
  bool progress = true;
  std::chrono::milliseconds timeout{10'000};          ///< exchange, and longest wait for a completion
  std::chrono::milliseconds accept_timeout{600'000};  ///< server waiting for the client
};

/// How long the server waits for the client's end-of-run message: the accept timeout,
/// counted from the start of the run, plus a -D run's duration (a run longer than the
/// accept timeout failed at its end, "no client connected").
inline std::chrono::milliseconds finish_timeout(const perf_options& o) {
  return o.accept_timeout + std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(o.duration * 1000.0)));
}

inline constexpr std::uint32_t max_post_list = 64;

struct bw_result {
  std::uint32_t bytes = 0;
  std::uint64_t iters = 0;
  double peak_mb = 0, avg_mb = 0, mpps = 0;
  double seconds = 0;
};
struct lat_result {
  std::uint32_t bytes = 0;
  std::uint64_t iters = 0;
  double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p999 = 0;
};

/// What a side measured and how it ran.
struct run_report {
  std::string transport, signaling, polling;
  std::uint32_t post_list = 1, inline_size = 0, qps = 1, tx_depth = 0, cq_mod = 1;
  std::string device, peer;
  std::optional<bw_result> bw;
  std::optional<lat_result> lat;
  std::string note;  ///< e.g. what the server saw

  std::string config_line() const {
    return "config: " + transport + " / " + signaling + " / " + polling + " / post list " +
           std::to_string(post_list);
  }
};

class perf_failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What a runner keeps for -R: named only for backends with a connection manager.
template <bool CM, class B, class T, class S>
struct cm_members {
  using listener = std::monostate;
  using connections = std::monostate;
};
template <class B, class T, class S>
struct cm_members<true, B, T, S> {
  using listener = cm_listener<B>;
  using connections = std::vector<cm_connection<B, T, S>>;
};

/// Exchanges our record for the peer's, calling the callback with the peer's record
/// before the exchange completes. `finish`: the end-of-run handshake.
using rdmakit_tools::exchange_fn;
struct peer_link {
  exchange_fn exchange;  ///< one call per queue pair
  exchange_fn finish;    ///< client: "done"; server: waits for it
  std::string peer;      ///< for messages: "host:port"
  /// Server: makes a `finish` waiting on another thread return now (by throwing), so a
  /// server that failed can join that thread instead of leaving it behind.
  std::function<void()> cancel_finish;
};

template <class S>
std::string signaling_name() {
  if constexpr (std::is_same_v<S, signal_all>)
    return "signal_all";
  else if constexpr (std::is_same_v<S, signal_manual>)
    return "signal_manual";
  else
    return "signal_every<" + std::to_string(S::interval) + ">";
}
template <class P>
std::string polling_name() {
  if constexpr (P::needs_channel)
    return "event_driven<" + std::to_string(P::batch) + ">";
  else
    return "busy_poll<" + std::to_string(P::batch) + ">";
}

// ---- statistics --------------------------------------------------------------------

/// A latency run's samples in microseconds: count, extremes, mean and deviation of all of
/// them, and for the percentiles all of them up to `most`, then a uniform sample of that
/// size (reservoir sampling): a long -D run kept one double per operation, without end
/// (20 MB/s in an audit).
class lat_samples {
 public:
  explicit lat_samples(std::size_t most) : most_(most) { kept_.reserve(most); }
  void add(double us) {
    ++n_;
    min_ = std::min(min_, us);
    max_ = std::max(max_, us);
    const double delta = us - mean_;  // Welford: no sum of squares to lose precision in
    mean_ += delta / static_cast<double>(n_);
    m2_ += delta * (us - mean_);
    if (kept_.size() < most_) {
      kept_.push_back(us);
      return;
    }
    rng_ ^= rng_ << 13;  // xorshift64: any fair draw of 0..n-1 will do
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    if (const std::uint64_t j = rng_ % n_; j < most_) kept_[j] = us;
  }
  /// The statistics (sorts what is kept).
  lat_result stats(std::uint32_t bytes) {
    lat_result r;
    r.bytes = bytes;
    r.iters = n_;
    if (n_ == 0) return r;
    std::sort(kept_.begin(), kept_.end());
    const std::size_t n = kept_.size();
    r.t_min = min_;
    r.t_max = max_;
    r.t_typical = kept_[n / 2];
    r.t_avg = mean_;
    r.t_stdev = std::sqrt(m2_ / static_cast<double>(n_));
    auto pct = [&](double p) {
      std::size_t i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
      return kept_[std::min(n - 1, i ? i - 1 : 0)];
    };
    r.p99 = pct(0.99);
    r.p999 = pct(0.999);
    return r;
  }

 private:
  std::vector<double> kept_;
  std::size_t most_;
  std::uint64_t n_ = 0;
  double min_ = std::numeric_limits<double>::infinity(), max_ = 0, mean_ = 0, m2_ = 0;
  std::uint64_t rng_ = 0x9e3779b97f4a7c15ull;
};

/// The marks of a run: appending is a compare and a store inline, growing out of line.
/// (std::vector's emplace_back carries its reallocation, so GCC may keep it out of line
/// in the posting loop, a call per mark: 0.18 instructions per WRITE with lists of 32,
/// bench/README Part 2.)
template <class T>
class mark_vector {
 public:
  mark_vector() = default;
  mark_vector(mark_vector&& o) noexcept
      : data_(std::move(o.data_)), end_(std::exchange(o.end_, nullptr)), cap_(std::exchange(o.cap_, nullptr)) {}
  mark_vector& operator=(mark_vector&& o) noexcept {
    data_ = std::move(o.data_);
    end_ = std::exchange(o.end_, nullptr);
    cap_ = std::exchange(o.cap_, nullptr);
    return *this;
  }
  void reserve(std::size_t n) {
    if (n > capacity()) grow_(n);
  }
  std::size_t size() const noexcept { return static_cast<std::size_t>(end_ - data_.get()); }
  std::size_t capacity() const noexcept { return static_cast<std::size_t>(cap_ - data_.get()); }
  bool empty() const noexcept { return end_ == data_.get(); }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  const T& front() const noexcept { return data_[0]; }
  const T& back() const noexcept { return end_[-1]; }
  T* begin() noexcept { return data_.get(); }
  T* end() noexcept { return end_; }
  const T* begin() const noexcept { return data_.get(); }
  const T* end() const noexcept { return end_; }
  /// Keeps the first k (k <= size()).
  void resize(std::size_t k) noexcept { end_ = data_.get() + k; }
  template <class... A>
  RDMAKIT_ALWAYS_INLINE void emplace_back(A&&... a) {
    if (RDMAKIT_UNLIKELY(end_ == cap_)) grow_(std::max<std::size_t>(64, 2 * capacity()));
    *end_++ = T(std::forward<A>(a)...);
  }

 private:
  RDMAKIT_NOINLINE void grow_(std::size_t n) {
    auto bigger = std::make_unique<T[]>(n);
    const std::size_t k = size();
    std::copy(data_.get(), end_, bigger.get());
    data_ = std::move(bigger);
    end_ = data_.get() + k;
    cap_ = data_.get() + n;
  }
  std::unique_ptr<T[]> data_;
  T* end_ = nullptr;
  T* cap_ = nullptr;
};

/// Throughput marks: (when, operations completed so far), one per poll that made progress.
template <class Stamp>
struct marks_at {
  mark_vector<std::pair<Stamp, std::uint64_t>> v;
  std::uint64_t last = ~std::uint64_t{0};  // v.back()'s count, kept apart: one compare a mark
  RDMAKIT_ALWAYS_INLINE void add(Stamp t, std::uint64_t ops) {
    if (ops != last) push(t, ops);
  }
  /// A mark whose count is known to be past the last one's (after a wait that freed
  /// credits): no compare. (A repeated count is harmless, only a point more for bw_stats.)
  RDMAKIT_ALWAYS_INLINE void push(Stamp t, std::uint64_t ops) {
    last = ops;
    v.emplace_back(t, ops);
  }
  /// The most marks a run keeps: 16 MiB.
  static constexpr std::size_t most_kept = std::size_t{1} << 20;
  /// Keeps a run's marks under `most` (one per poll grew without end: 20 MB/s in an
  /// audit): at `most`, every other one goes, the last kept. Called outside the posting
  /// loop, where the deadline is checked. The peak is then found among fewer windows:
  /// never above what all the marks give.
  void bound(std::size_t most = most_kept) {
    if (v.size() < most) return;
    const std::size_t keep_last = (v.size() - 1) % 2;  // the parity of the last index, so it stays
    std::size_t k = 0;
    for (std::size_t i = keep_last; i < v.size(); i += 2) v[k++] = v[i];
    v.resize(k);
  }
};
using bw_marks = marks_at<clock_type::time_point>;

/// The bandwidth client's marks, one per poll, timed by a cheap counter: the x86
/// time-stamp counter (as perftest's get_cycles; one instruction, where
/// steady_clock::now() costs about 20 through the vDSO or libc), the steady clock's
/// nanoseconds elsewhere. to_time() maps them onto the steady clock, linearly between
/// two readings of both at the run's start and end.
struct tick_marks : marks_at<std::uint64_t> {
  static RDMAKIT_ALWAYS_INLINE std::uint64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count());
#endif
  }
  bw_marks to_time(clock_type::time_point t0, std::uint64_t k0, clock_type::time_point t1, std::uint64_t k1) const {
    bw_marks m;
    m.v.reserve(v.size());
    const double ns_per_tick =
        k1 > k0 ? static_cast<double>(std::chrono::nanoseconds(t1 - t0).count()) / static_cast<double>(k1 - k0) : 0;
    for (const auto& [k, ops] : v) {
      // Signed: a mark read on another core whose counter lags a little is not 2^64 ticks late.
      const auto ns = static_cast<std::int64_t>(static_cast<double>(static_cast<std::int64_t>(k - k0)) * ns_per_tick);
      m.add(t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::nanoseconds(ns)), ops);
    }
    return m;
  }
};

inline constexpr double bw_mb = 1024.0 * 1024.0;  // perftest's MB

/// A run of `ops` operations of r.bytes from `start` to `end`: its count, time, average
/// and rate in `r`; returns the rate in operations a second, where the peak's search
/// starts (0, nothing but the count and time set, when the run took no time).
inline double set_average(bw_result& r, clock_type::time_point start, clock_type::time_point end,
                          std::uint64_t ops) {
  r.iters = ops;
  const double secs = std::chrono::duration<double>(end - start).count();
  r.seconds = secs;
  if (secs <= 0) return 0;
  r.avg_mb = static_cast<double>(ops) * r.bytes / secs / bw_mb;
  r.mpps = static_cast<double>(ops) / secs / 1e6;
  return static_cast<double>(ops) / secs;
}

/// BW average over the whole run and peak over the best window of at least `window`
/// operations (MB = 2^20 bytes, as perftest).
inline bw_result bw_stats(const bw_marks& m, clock_type::time_point start, std::uint32_t bytes,
                          std::uint64_t window) {
  bw_result r;
  r.bytes = bytes;
  if (m.v.empty()) return r;
  double best = set_average(r, start, m.v.back().first, m.v.back().second);  // ops per second
  if (best == 0) return r;
  window = std::max<std::uint64_t>(window, 1);
  // Two pointers: for each end mark, the latest start mark at least `window` ops before it.
  std::size_t i = 0;
  auto t_of = [&](std::size_t k) { return k == 0 ? start : m.v[k - 1].first; };
  auto ops_of = [&](std::size_t k) { return k == 0 ? std::uint64_t{0} : m.v[k - 1].second; };
  for (std::size_t j = 1; j <= m.v.size(); ++j) {
    while (i + 1 < j && ops_of(j) - ops_of(i + 1) >= window) ++i;
    const std::uint64_t d = ops_of(j) - ops_of(i);
    if (d < window) continue;
    const double dt = std::chrono::duration<double>(t_of(j) - t_of(i)).count();
    if (dt > 0) best = std::max(best, static_cast<double>(d) / dt);
  }
  r.peak_mb = best * bytes / bw_mb;
  return r;
}

/// A receiver's marks (send_bw's server). It sees a message when a poll returns it, which
/// may be long after it arrived: a server that fell behind finds a full CQ and drains
/// it at the speed of its polls. So a window may end at any poll (`ends`: what was
/// received by then), but starts only where the CQ was seen empty (`starts`: the time
/// just before a poll that returned short, and the count after it), or at the run's
/// start: every message counted inside such a window arrived inside it, and the window
/// is never shorter than their arrivals took.
struct receive_marks {
  bw_marks ends, starts;
  /// One poll, timed `before` and `after` it, `total` received after it; `emptied`: it
  /// returned fewer completions than it asked for (poll_cq found the CQ empty).
  void polled(clock_type::time_point before, clock_type::time_point after, std::uint64_t total, bool emptied) {
    if (total != 0) ends.add(after, total);
    if (!emptied) return;
    if (!starts.v.empty() && starts.last == total)
      starts.v[starts.v.size() - 1].first = before;  // the same count: the later start, the shorter window
    else
      starts.push(before, total);
  }
  void bound(std::size_t most = bw_marks::most_kept) {
    ends.bound(most);
    starts.bound(most);
  }
};

/// A receiver's bandwidth: the average over every message received from `start` (a
/// time no later than the sender's first post) to the poll that returned the last one;
/// the peak over the best window of at least `window` messages that starts at one of
/// `m.starts` (or `start`) and ends at one of `m.ends`. With no such window (a short
/// run, or a receiver that never caught up), the peak is the average.
inline bw_result receive_bw_stats(const receive_marks& m, clock_type::time_point start, std::uint32_t bytes,
                                  std::uint64_t window) {
  bw_result r;
  r.bytes = bytes;
  if (m.ends.v.empty()) return r;
  double best = set_average(r, start, m.ends.v.back().first, m.ends.v.back().second);  // ops per second
  if (best == 0) return r;
  window = std::max<std::uint64_t>(window, 1);
  // Two pointers: for each end, the latest start at least `window` messages before it
  // (start 0 is the run's start, with none received).
  const auto& st = m.starts.v;
  auto t_of = [&](std::size_t k) { return k == 0 ? start : st[k - 1].first; };
  auto ops_of = [&](std::size_t k) { return k == 0 ? std::uint64_t{0} : st[k - 1].second; };
  std::size_t i = 0;
  for (const auto& [t, n] : m.ends.v) {
    while (i < st.size() && ops_of(i + 1) + window <= n) ++i;
    if (ops_of(i) + window > n) continue;
    const double dt = std::chrono::duration<double>(t - t_of(i)).count();
    if (dt > 0) best = std::max(best, static_cast<double>(n - ops_of(i)) / dt);
  }
  r.peak_mb = best * bytes / bw_mb;
  return r;
}

/// "write_bw: 42% (2100/5000), 3.0 s" on stderr, once a second after the first 2 s.
class progress_meter {
 public:
  progress_meter(const char* test, bool enabled, clock_type::time_point start, std::uint64_t total, double duration)
      : test_(test), enabled_(enabled), start_(start), next_(start + std::chrono::seconds(2)), total_(total),
        duration_(duration) {}
  bool enabled() const noexcept { return enabled_; }
  void tick(clock_type::time_point now, std::uint64_t done) {
    if (!enabled_ || now < next_) return;
    next_ = now + std::chrono::seconds(1);
    const double el = std::chrono::duration<double>(now - start_).count();
    const double frac = duration_ > 0 ? el / duration_ : total_ ? static_cast<double>(done) / static_cast<double>(total_) : 0;
    std::fprintf(stderr, "rdmakit-perf: %s %3.0f%% (%llu operations, %.1f s)\n", test_, 100 * std::min(frac, 1.0),
                 static_cast<unsigned long long>(done), el);
  }

 private:
  const char* test_;
  bool enabled_;
  clock_type::time_point start_, next_;
  std::uint64_t total_;
  double duration_;
};

// ---- one side of a run -------------------------------------------------------------

/// One side (server or client) of one test with transport T, signaling S, polling P.
template <verbs_backend B, transport T, signaling S, polling P>
class runner {
  static constexpr rdmakit::access rights = rdmakit::access::local_write | remote_access_bits;
  using region_t = memory_region<B, rights>;
  using init_qp = queue_pair<B, T, S>;
  using live_qp = queue_pair<B, T, S, qp_state::rts>;
  using cq_t = completion_queue<B, P>;
  using remote_t = remote_region<remote_access_bits>;
  static constexpr std::uint64_t seq_mask = (std::uint64_t{1} << 48) - 1;
  // --use_srq: T is on_srq<X>, every QP takes its receives from srq_ (wr_id 0, slot 0).
  static constexpr bool srq_ = rdmakit::detail::shares_receives<T>;
  // -R: backends with a connection manager, for RC without an SRQ (the CM connects RC only).
  static constexpr bool cm_able_ = [] {
    if constexpr (cm_backend<B>) return std::is_same_v<T, rc>;
    return false;
  }();

 public:
  /// `dev`: the device to run on, or empty to open the one o.device names.
  runner(const perf_options& o, peer_link& link, device<B> dev = {})
      : o_(o), link_(link), t_(describe(o.test)), dev_(std::move(dev)) {}

  run_report run() {
    setup();
    run_report rep;
    rep.transport = T::type == qp_type::rc ? "rc" : T::type == qp_type::uc ? "uc" : "ud";
    if constexpr (srq_) rep.transport += "+srq";
    rep.signaling = signaling_name<S>();
    rep.polling = polling_name<P>();
    rep.post_list = t_.bw ? o_.post_list : 1;
    rep.inline_size = inline_;
    rep.qps = o_.num_qps;
    rep.tx_depth = sq_depth_;
    rep.cq_mod = o_.cq_mod;
    rep.device = dev_.name();
    rep.peer = link_.peer;
    if (o_.server)
      serve(rep);
    else
      drive(rep);
    return rep;
  }

 private:
  // ---- setup: device, buffers, CQ, QPs, exchange -------------------------------------

  std::uint64_t recv_off(std::uint32_t j) const { return std::uint64_t{2} * slot_ * j; }
  std::uint64_t send_off(std::uint32_t j) const { return recv_off(j) + slot_; }
  bool receives() const {
    return t_.op == op_kind::send && (t_.kind == test_kind::send_lat || o_.server);
  }

  void setup() {
    if (!dev_) dev_ = device<B>(o_.device);
    const port_attr pa = dev_.port(o_.ib_port);
    if constexpr (T::type == qp_type::ud) {
      if (o_.size > mtu_bytes(pa.active_mtu))
        throw perf_failure("-s " + std::to_string(o_.size) + " is larger than the port MTU (" +
                           std::to_string(mtu_bytes(pa.active_mtu)) + " bytes on " + dev_.name() +
                           "): UD messages are one packet");
    }
    if (t_.op == op_kind::atomic && !dev_.attr().atomics)
      throw perf_failure(dev_.name() + " does not support atomics (atomic_cap is NONE)");
    pd_ = dev_.create_pd();
    slot_ = static_cast<std::uint32_t>((std::uint64_t{o_.size} + T::recv_offset + 63) / 64 * 64);
    try {
      mr_ = pd_.template allocate<rights>(std::size_t{2} * slot_ * o_.num_qps);
    } catch (const std::bad_alloc&) {
      throw perf_failure("couldn't allocate the buffers of -s " + std::to_string(o_.size) + " with -q " +
                         std::to_string(o_.num_qps) + " (" + std::to_string(std::uint64_t{2} * slot_ * o_.num_qps) +
                         " bytes, 2 x -s per QP): out of memory (or over this process's limit, ulimit -v): lower -s "
                         "or -q");
    }
    std::memset(mr_.data(), 0, mr_.size());

    // Inline only for sends and writes (the parser refuses -I on the others). The default
    // is capped at what the device grants; a -I above it is refused, as perftest's QP
    // creation fails on it, rather than run with another size than asked for.
    inline_ = (t_.op == op_kind::write || t_.op == op_kind::send) ? o_.inline_size : 0;
    const std::uint32_t max_inline = dev_.attr().max_inline_data;
    if (o_.inline_given && inline_ > max_inline)
      throw perf_failure("-I " + std::to_string(inline_) + ": " + dev_.name() + " sends at most " +
                         std::to_string(max_inline) + " bytes inline (its max_inline_data): give -I " +
                         std::to_string(max_inline) + " or less, or leave -I out (220, capped by the device)");
    inline_ = std::min(inline_, max_inline);
    sq_depth_ = t_.bw ? o_.tx_depth : std::max(o_.tx_depth, o_.cq_mod);
    const std::uint32_t rq = receives() ? o_.rx_depth : 1;
    check_device_limits(rq);
    qp_options qo;
    qo.port = o_.ib_port;
    qo.gid_index = o_.gid_index;
    std::vector<init_qp> init;
    if constexpr (srq_) {
      // One SRQ of rx_depth receives for all QPs: the CQ holds it once, as many as it
      // takes (rxe: its ring's 2^k - 1, above rx_depth).
      srq_q_ = pd_.create_srq({.max_wr = rq, .max_sge = 1});
      cq_ = dev_.template create_cq<P>(static_cast<int>(o_.num_qps * sq_depth_ + srq_q_.caps().max_wr));
      const qp_cap caps{sq_depth_, 0, 1, 0, inline_};
      for (std::uint32_t j = 0; j < o_.num_qps; ++j)
        init.push_back(pd_.template create_qp<typename T::base, S>(cq_, srq_q_, caps, qo));
      if (receives()) {
        rbufs_.assign(o_.rx_depth, mr_.local(recv_off(0), slot_));
        auto r = srq_q_.post_recvs(rbufs_, recv_wr_id(0));
        if (!r) throw perf_failure("couldn't post " + std::to_string(o_.rx_depth) + " receives to the SRQ: " + r.message());
      }
    } else {
      cq_ = dev_.template create_cq<P>(static_cast<int>(o_.num_qps * (sq_depth_ + rq)));
      const qp_cap caps{sq_depth_, rq, 1, 1, inline_};
      if constexpr (cm_able_) {
        if (o_.rdma_cm) return setup_cm(caps);
      }
      for (std::uint32_t j = 0; j < o_.num_qps; ++j) init.push_back(pd_.template create_qp<T, S>(cq_, caps, qo));
    }
    if (!srq_ && receives()) {
      rbufs_.assign(o_.rx_depth, local_buffer{});
      for (std::uint32_t j = 0; j < o_.num_qps; ++j) {
        std::fill(rbufs_.begin(), rbufs_.end(), mr_.local(recv_off(j), slot_));
        if constexpr (!srq_) {
          auto r = init[j].post_recvs(rbufs_, recv_wr_id(j));
          if (!r) throw perf_failure("couldn't post " + std::to_string(o_.rx_depth) + " receives: " + r.message());
        }
      }
    }

    connect_options co;
    co.path_mtu = o_.path_mtu;
    if (t_.op == op_kind::send) co.rnr_retry = 7;  // as perftest: a sender may outrun the receiver's reposts
    for (std::uint32_t j = 0; j < o_.num_qps; ++j) {
      connection_info info(init[j].local_endpoint(), mr_.remote().sub(recv_off(j), slot_));
      connection_info peer = link_.exchange(info, [&](const connection_info& p) {
        check_peer_record(p.ep, info.ep);
        if constexpr (T::connected) {
          qps_.push_back(std::move(init[j]).connect(p.ep, co));
        } else {
          qps_.push_back(std::move(init[j]).activate());
          ahs_.push_back(pd_.create_ah(p.ep, {.port = o_.ib_port, .gid_index = qps_.back().gid_index()}));
        }
        // Before this side sends its record, which the client needs before it posts.
        client_may_post_ = clock_type::now();
      });
      peer_qpn_.push_back(peer.ep.qpn);
      if (j == 0) client_ep_ = peer.ep;  // (a server's peer: the one to end the run)
      if (!peer.region)
        throw perf_failure("the peer sent no memory region: is it rdmakit-perf running the same test?");
      take_peer_region(*peer.region);
    }
  }

  // The device's limits, checked against the options that reach them: the verbs'
  // refusal names a CQ size or a depth the user never typed.
  void check_device_limits(std::uint32_t rq) const {
    const device_attr& a = dev_.attr();
    const std::string on = " on " + dev_.name();
    if (sq_depth_ > a.max_qp_wr)
      throw perf_failure("-t " + std::to_string(sq_depth_) + ": a send queue of at most " +
                         std::to_string(a.max_qp_wr) + " WRs" + on + " (its max_qp_wr): lower -t");
    if (receives() && rq > (srq_ ? a.max_srq_wr : a.max_qp_wr))
      throw perf_failure("-r " + std::to_string(rq) + ": a receive queue of at most " +
                         std::to_string(srq_ ? a.max_srq_wr : a.max_qp_wr) + " WRs" + on +
                         (srq_ ? " (its max_srq_wr)" : " (its max_qp_wr)") + ": lower -r");
    const std::uint64_t q = o_.num_qps;
    const std::uint64_t cqe = srq_ ? q * sq_depth_ + rq : q * (sq_depth_ + std::uint64_t{rq});
    if (cqe > a.max_cqe) {
      const std::string t = "-t " + std::to_string(sq_depth_), r = receives() ? "-r " + std::to_string(rq) : "1";
      throw perf_failure("a CQ of " + std::to_string(cqe) + " entries (-q " + std::to_string(q) + " x " +
                         (srq_ ? t + " + " + r : "(" + t + " + " + r + ")") + ") is more than the " +
                         std::to_string(a.max_cqe) + on + " (its max_cqe): lower -q" +
                         (receives() ? ", -t or -r" : " or -t"));
    }
  }

  // The region the peer gave for the next QP (TCP exchange or -R's private data).
  template <class Region>
  void take_peer_region(const Region& given) {
    remote_t r = given.template as<remote_access_bits>();
    if (r.length() < o_.size)
      throw perf_failure("the peer's buffer holds " + std::to_string(r.length()) + " bytes, this side uses -s " +
                         std::to_string(o_.size) + ": give both sides the same -s");
    // --mock-wrong-rkey: a key the peer never gave, so the client's WRs fail at the
    // server's HCA and the run shows how a failed completion is reported.
    if (o_.mock_wrong_rkey && !o_.server) r = remote_t::unchecked(r.addr(), ~r.rkey(), r.length());
    remote_.push_back(r);
  }

  // ---- -R: the connection manager instead of the TCP exchange ------------------------

  // Each QP is made on its CM id and connected by it (receives posted while it is in
  // INIT); its region rides in the private data. The end-of-run handshake becomes the
  // client's disconnect, which the server waits for.
  void setup_cm(const qp_cap& caps) {
    if constexpr (cm_able_) {
      cm_options co;
      co.timeout = o_.timeout;
      co.responder_resources = 16;
      co.initiator_depth = 16;
      co.auto_inline = inline_ > 0;
      const cm_address addr{o_.cm_ipv4, o_.cm_port};
      auto prepare_for = [this](std::uint32_t j) {
        return [this, j](auto& qp) {
          if (!receives()) return;
          rbufs_.assign(o_.rx_depth, mr_.local(recv_off(j), slot_));
          auto r = qp.post_recvs(rbufs_, recv_wr_id(j));
          if (!r) throw perf_failure("couldn't post " + std::to_string(o_.rx_depth) + " receives: " + r.message());
        };
      };
      if (o_.server) listener_ = cm_listener<B>(dev_, addr);
      for (std::uint32_t j = 0; j < o_.num_qps; ++j) {
        const auto mine = cm_region_data(mr_.remote().sub(recv_off(j), slot_));
        if (o_.server) {
          auto req = listener_.next_request(j == 0 ? o_.accept_timeout : o_.timeout);
          client_may_post_ = clock_type::now();  // before the accept, which the client's connect waits for
          conns_.push_back(std::move(req).template accept<T, S>(pd_, cq_, caps, mine, co, prepare_for(j)));
        } else {
          // The client's receives go in after ESTABLISHED (its server sends only when
          // spoken to): a refused attempt's receives would flush into the CQ (librdmacm
          // moves a rejected QP to ERR) and look like a failure of this run.
          conns_.push_back(connect_retrying(addr, caps, mine, co, [](auto&) {}));
          prepare_for(j)(conns_.back().qp());
        }
        qps_.push_back(std::move(conns_.back().qp()));
        peer_qpn_.push_back(0);
        const auto region = conns_.back().peer_region();
        if (!region) throw perf_failure("the peer sent no memory region: is it rdmakit-perf -R running the same test?");
        take_peer_region(*region);
      }
      link_.finish = [this](const connection_info&, const on_peer_fn&) {
        if (!o_.server) {
          for (auto& c : conns_) c.disconnect();
          return connection_info{};
        }
        // In steps, so that cancel_finish is seen within one.
        const auto budget = finish_timeout(o_);
        const auto until = clock_type::now() + budget;
        while (!conns_[0].wait_disconnected(std::chrono::milliseconds{100})) {
          if (finish_cancelled_.load(std::memory_order_acquire)) throw perf_failure("stopped waiting for the client");
          if (clock_type::now() >= until)
            throw perf_failure("the client did not disconnect within " + std::to_string(budget.count()) + " ms");
        }
        return connection_info{};
      };
      link_.cancel_finish = [this] { finish_cancelled_.store(true, std::memory_order_release); };
    } else {
      (void)caps;
    }
  }

  // A client started before its server is refused (nobody listens yet): try again
  // until the timeout, as the TCP exchange's client does.
  template <class Prepare>
  auto connect_retrying(const cm_address& addr, const qp_cap& caps, const std::vector<std::byte>& mine,
                        const cm_options& co, Prepare prepare) {
    const auto until = clock_type::now() + o_.timeout;
    for (;;) {
      try {
        return cm_connect<T, S>(pd_, cq_, caps, addr, mine, co, prepare);
      } catch (const cm_error& e) {
        if (e.code() != cm_errc::rejected || e.status() != 8 || clock_type::now() >= until) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
      }
    }
  }

  // ---- completion plumbing ------------------------------------------------------------

  // The CQ's poll and wait with handler f. credits_only_t's go through the calls
  // without a handler, which the CQ knows run no user code: it then skips what keeps a
  // batch's delivery safe from a handler that destroys its queue pair or CQ.
  template <class F>
  RDMAKIT_ALWAYS_INLINE int poll_with(F& f) {
    if constexpr (std::is_same_v<F, credits_only_t>)
      return cq_.poll();
    else
      return cq_.poll(f);
  }
  template <class F>
  RDMAKIT_ALWAYS_INLINE wait_result wait_with(F& f, std::chrono::milliseconds timeout) {
    if constexpr (std::is_same_v<F, credits_only_t>)
      return cq_.wait(timeout);
    else
      return cq_.wait(f, timeout);
  }

  template <class F>
  RDMAKIT_ALWAYS_INLINE int wait_some(F& f, std::chrono::milliseconds timeout) {
    // The poll protocol here: a count, 0 on a timeout, -errno.
    auto raw = [](wait_result r) { return r.failed() ? -r.error() : r.count(); };
    if constexpr (P::needs_channel) {
      return raw(wait_with(f, timeout));
    } else {
      if (!o_.yield_when_idle) return raw(wait_with(f, timeout));
      const auto deadline = clock_type::now() + timeout;
      for (unsigned i = 1;; ++i) {
        if (int n = poll_with(f); n != 0) return n;
        std::this_thread::yield();
        if (i % 16 == 0) {
          check_peer();
          if (clock_type::now() >= deadline) return 0;
        }
      }
    }
  }

  /// Waits for completions; throws on a failed completion, a poll error or a stall.
  template <class F>
  RDMAKIT_ALWAYS_INLINE void pump(F& f, const char* what) {
    const int n = wait_some(f, o_.timeout);
    // A handler that only counts credits records no failure (the caller looks at the
    // queue pair's error state instead): its waits skip that test.
    constexpr bool records_failures = !std::is_same_v<F, credits_only_t>;
    if (RDMAKIT_UNLIKELY(n <= 0 || (records_failures && !failure_.empty()))) pump_failed(n, what);
  }

  /// pump()'s way out: a failure recorded by a handler, a poll error or a stall.
  RDMAKIT_NOINLINE void pump_failed(int n, const char* what) {
    check_failure();
    if (n < 0) throw perf_failure(std::string("polling the CQ failed: ") + std::strerror(-n));
    if (n == 0)
      throw perf_failure("no completion for " + std::to_string(o_.timeout.count()) + " ms while " + what +
                         ": the peer (" + link_.peer + ") stopped" +
                         (T::type == qp_type::rc ? std::string()
                                                 : ", or a message was lost (" + std::string(T::name) +
                                                       " does not retransmit)"));
  }

  /// After a wait whose completions were only counted: queue pair j is in error, so one
  /// of its completions failed (the first failure's status is kept on the queue pair).
  [[noreturn]] RDMAKIT_NOINLINE void qp_failed(std::size_t j) {
    throw perf_failure("completion failed: " + std::string(to_string(qps_[j].first_error())) + " on QP " +
                       std::to_string(j) + " (its first failed completion; the rest were flushed)");
  }

  // Mock loopback: the other side failed, so what this side waits for will not come.
  void check_peer() const {
    if (o_.peer_failed && o_.peer_failed->load(std::memory_order_acquire))
      throw perf_failure(rdmakit_tools::peer_failed_message(o_.server));
  }

  void check_failure() {
    if (!failure_.empty()) throw perf_failure(failure_);
  }

  void record_failure(const completion<B>& c) noexcept {
    // -R: a flush on the server is the client's disconnect (the end of the run), which
    // the finish watch reports.
    if (cm_able_ && o_.rdma_cm && o_.server && c.status() == wc_status::wr_flush_err) return;
    if (failure_.empty()) {
      try {
        failure_ = "completion failed: " + c.status_message();
      } catch (...) {
        failure_ = "completion failed";
      }
    }
  }

  /// Posts up to `n` WRs of the test's operation on QP j (sequence numbers from `seq`).
  /// `last_seq`: the WR that must be signaled so the run's end is seen.
  post_result post_ops(std::uint32_t j, std::uint64_t seq, std::uint32_t n, std::uint64_t last_seq) noexcept {
    return post_ops(j, seq, n, last_seq, src_of(j), dst_of(j));
  }

  // QP j's source and destination buffers (bw_client computes them once, not per post).
  local_buffer src_of(std::uint32_t j) const { return mr_.local(send_off(j), t_.op == op_kind::atomic ? 8 : o_.size); }
  remote_t dst_of(std::uint32_t j) const { return remote_[j].sub(0, t_.op == op_kind::atomic ? 8 : o_.size); }

  // src and dst by value: copies the batch's stores cannot alias, so they stay in registers.
  post_result post_ops(std::uint32_t j, std::uint64_t seq, std::uint32_t n, std::uint64_t last_seq,
                       const local_buffer src, const remote_t dst) noexcept {
    auto flags_for = [&](std::uint64_t s) {
      bool want = s == last_seq;
      if constexpr (std::is_same_v<S, signal_manual>) want = want || (s + 1) % o_.cq_mod == 0;
      return want ? send_flags::signaled : send_flags::none;
    };
    auto id = [&](std::uint64_t s) { return std::uint64_t{j} << 48 | (s & seq_mask); };
    if (n == 1) return post_one(j, src, dst, id(seq), flags_for(seq));
    auto batch = live_qp::template make_batch<max_post_list>();
    add_ops(batch, j, src, dst, n, [&](std::uint32_t k) { return id(seq + k); },
            [&](std::uint32_t k) { return flags_for(seq + k); });
    return qps_[j].post(batch);
  }

  // Adds n WRs of the test's operation to `batch`: WR k with wr_id id(k) and flags fl(k).
  template <class Batch, class Id, class Flags>
  void add_ops(Batch& batch, std::uint32_t j, const local_buffer src, const remote_t dst, std::uint32_t n, Id id,
               Flags fl) noexcept {
    auto flags_for = fl;
    for (std::uint32_t s = 0; s < n; ++s) {
      switch (t_.op) {
        case op_kind::write:
          if constexpr (T::supports_write) (void)batch.write(src, dst, id(s), flags_for(s));
          break;
        case op_kind::read:
          if constexpr (T::supports_read) (void)batch.read(src, dst, id(s), flags_for(s));
          break;
        case op_kind::atomic:
          if constexpr (T::supports_atomic) {
            if (o_.cmp_swap)
              (void)batch.compare_swap(src, dst, 0, 0, id(s), flags_for(s));
            else
              (void)batch.fetch_add(src, dst, 1, id(s), flags_for(s));
          }
          break;
        case op_kind::send:
          if constexpr (T::needs_ah)
            (void)batch.send(ahs_[j].to(peer_qpn_[j]), src, id(s), flags_for(s));
          else
            (void)batch.send(src, id(s), flags_for(s));
          break;
      }
    }
  }

  // Posting as perftest posts (bw tests): QP j's WR, or its list of post_list WRs, built
  // once and posted again and again. Only where the policy decides every signal (not
  // signal_manual, whose -Q signals are asked per WR) and the WRs name no address handle
  // (not UD).
  static constexpr bool prepares = !std::is_same_v<S, signal_manual> && !T::needs_ah;
  using prepared_t = std::conditional_t<prepares, typename live_qp::template prepared_type<>, char>;  // (UD: never made)
  using list_t = decltype(live_qp::template make_batch<max_post_list>());

  prepared_t prepare_one(std::uint32_t j, const local_buffer src, const remote_t dst) const {
    auto& qp = qps_[j];
    const std::uint64_t id = std::uint64_t{j} << 48;
    switch (t_.op) {
      case op_kind::write:
        if constexpr (T::supports_write) return qp.prepare(op::write{src, dst}, id);
        break;
      case op_kind::read:
        if constexpr (T::supports_read) return qp.prepare(op::read{src, dst}, id);
        break;
      case op_kind::atomic:
        if constexpr (T::supports_atomic) {
          if (o_.cmp_swap) return qp.prepare(op::compare_swap{src, dst, 0, 0}, id);
          return qp.prepare(op::fetch_add{src, dst, 1}, id);
        }
        break;
      case op_kind::send:
        if constexpr (!T::needs_ah) return qp.prepare(op::send<>{src}, id);
        break;
    }
    throw perf_failure("internal: no operation to prepare for this test");
  }

  post_result post_one(std::uint32_t j, const local_buffer& src, const remote_t& dst, std::uint64_t wr_id,
                       send_flags fl) noexcept {
    auto& qp = qps_[j];
    switch (t_.op) {
      case op_kind::write:
        if constexpr (T::supports_write) return qp.write(src, dst, wr_id, fl);
        break;
      case op_kind::read:
        if constexpr (T::supports_read) return qp.read(src, dst, wr_id, fl);
        break;
      case op_kind::atomic:
        if constexpr (T::supports_atomic) {
          if (o_.cmp_swap) return qp.compare_swap(src, dst, 0, 0, wr_id, fl);
          return qp.fetch_add(src, dst, 1, wr_id, fl);
        }
        break;
      case op_kind::send:
        if constexpr (T::needs_ah)
          return qp.send(ahs_[j].to(peer_qpn_[j]), src, wr_id, fl);
        else
          return qp.send(src, wr_id, fl);
    }
    return {post_status::backend_error, EINVAL, 0};  // refused before dispatch
  }

  void post_failed(const post_result& r, std::uint64_t seq) {
    throw perf_failure("couldn't post WR " + std::to_string(seq) + ": " + r.message() +
                       (r.status == post_status::backend_error ? " (errno " + std::to_string(r.err) + ")" : ""));
  }

  // ---- client ------------------------------------------------------------------------

  void drive(run_report& rep) {
    if (t_.bw)
      rep.bw = bw_client();
    else if (t_.kind == test_kind::write_lat)
      rep.lat = write_lat_client();
    else if (t_.kind == test_kind::send_lat)
      rep.lat = send_lat_client();
    else
      rep.lat = rtt_client();
    (void)link_.finish(connection_info(qps_[0].local_endpoint()), {});
  }

  bw_result bw_client() {
    const std::uint32_t q = o_.num_qps;
    const bool timed = o_.duration > 0;
    const std::uint64_t per_qp = timed ? seq_mask : o_.iters;
    std::vector<std::uint64_t> posted(q, 0), done(q, 0);
    std::vector<local_buffer> srcs;
    std::vector<remote_t> dsts;
    for (std::uint32_t j = 0; j < q; ++j) {
      srcs.push_back(src_of(j));
      dsts.push_back(dst_of(j));
    }
    // Progress is counted from the credits (a WR is done when the ledger gave its slot
    // back: posted - held), not from wr_ids, so prepared WRs may repeat theirs.
    std::vector<std::uint32_t> depth(q);
    for (std::uint32_t j = 0; j < q; ++j) depth[j] = qps_[j].send_credits();
    std::vector<std::unique_ptr<prepared_t>> one(q);
    std::vector<std::unique_ptr<list_t>> list(q);
    if constexpr (prepares) {
      for (std::uint32_t j = 0; j < q; ++j) {
        if (o_.post_list == 1) {
          one[j].reset(new prepared_t(prepare_one(j, srcs[j], dsts[j])));
        } else {
          list[j].reset(new list_t(live_qp::template make_batch<max_post_list>()));
          list[j]->reuse();
          add_ops(*list[j], j, srcs[j], dsts[j], o_.post_list, [j](std::uint32_t) { return std::uint64_t{j} << 48; },
                  [](std::uint32_t) { return send_flags::none; });
        }
      }
    }
    std::uint64_t total = 0;
    credits_only_t credits_only;
    // After each wait: what the credits say is done, and whether a queue pair failed.
    auto count_done = [&] {
      total = 0;
      for (std::uint32_t j = 0; j < q; ++j) {
        auto& qp = qps_[j];
        if (RDMAKIT_UNLIKELY(qp.in_error())) qp_failed(j);
        done[j] = posted[j] - (depth[j] - qp.send_credits());
        total += done[j];
      }
    };
    tick_marks marks;
    marks.v.reserve(timed ? 1 << 16 : static_cast<std::size_t>(std::min<std::uint64_t>(o_.iters * q, 1 << 22)));
    const auto start = clock_type::now();
    const std::uint64_t start_ticks = tick_marks::ticks();
    const auto deadline = start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o_.duration));
    progress_meter pm(t_.name, o_.progress, start, per_qp * q, o_.duration);
    // The prepared WR (or list) is posted up to here; the rest is built (below), the
    // run's last WR signaled so that its end is seen. When the run is whole lists and the
    // policy signals that WR anyway, the prepared one goes to the end and nothing is built.
    const bool prepared_to_end = !timed && per_qp % o_.post_list == 0 && signals_of_itself(per_qp);
    const std::uint64_t prepared_end =
        prepared_to_end ? per_qp : per_qp - std::min<std::uint64_t>(per_qp, o_.post_list);
    if constexpr (prepares) {
      // One queue pair, a count of WRs, no meter (the usual run): up to the tail, a loop
      // of its own without the per-QP vectors and tests of the general one below.
      if (q == 1 && !timed && !pm.enabled()) {
        posted[0] = o_.post_list == 1 ? post_prepared_one_qp(*one[0], prepared_end, 1, depth[0], marks)
                                      : post_prepared_one_qp(*list[0], prepared_end, o_.post_list, depth[0], marks);
        count_done();
      }
    }
    for (;;) {
      for (std::uint32_t j = 0; j < q; ++j) {
        auto& qp = qps_[j];
        std::uint64_t p = posted[j];  // in a register for the loops below
        if constexpr (prepares) {
          // The prepared WR or list, posted until the SQ refuses it for credits, except
          // for a shorter last list and the run's last WR (below).
          if (o_.post_list == 1)
            p = post_until_full(qp, *one[j], p, prepared_end, 1);
          else
            p = post_until_full(qp, *list[j], p, prepared_end, o_.post_list);
        }
        // Built on each post: every WR without a prepared one, the last list (which may
        // be shorter) and the run's last WR, posted signaled so that its end is seen.
        // Not tried when the prepared posts stopped early: the SQ is full.
        while (p < per_qp && (!prepares || p >= prepared_end)) {
          const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(o_.post_list, per_qp - p));
          if (qp.send_credits() < n) break;
          const post_result r = post_ops(j, p, n, per_qp - 1, srcs[j], dsts[j]);
          if (!r) post_failed(r, p);
          p += n;
        }
        posted[j] = p;
      }
      if (!timed && total == per_qp * q) break;
      pump(credits_only, "waiting for send completions");
      count_done();
      marks.add(tick_marks::ticks(), total);
      if (timed || pm.enabled()) {  // the steady clock only where a deadline or the meter needs it
        const auto now = clock_type::now();
        pm.tick(now, total);
        if (timed && now >= deadline) break;
        if (timed) marks.bound();
      }
    }
    const auto end = clock_type::now();
    const std::uint64_t end_ticks = tick_marks::ticks();
    return bw_stats(marks.to_time(start, start_ticks, end, end_ticks), start, t_.op == op_kind::atomic ? 8 : o_.size,
                    std::max<std::uint64_t>(std::uint64_t{q} * o_.tx_depth, total / 20));
  }

  /// bw_client's completion handler. Completions are only counted for their credits, as
  /// the raw loop does: the CQ checks every status itself and puts a queue pair whose WR
  /// failed in error (first_error()), which bw_client looks at after each wait. Looking
  /// at each completion cost 0.6 instructions per WR on rxe (bench/README,
  /// "Instructions per WRITE on rxe").
  struct credits_only_t {
    void operator()(const completion<B>&) const noexcept {}
  };

  /// Posts the prepared WR or reused list `w` (`step` WRs) on `qp` from sequence number
  /// `p` until `end` or until the send queue refuses it for credits; returns where it
  /// stopped. Out of bw_client, whose many live values pushed `p` out of a register.
  /// (Reading the room first, as raw verbs loops count it, cost more on rxe with one WR
  /// per post: +1 to +5 instructions per WR, by where GCC then kept the loop's values.)
  template <class W>
  [[gnu::noinline]] std::uint64_t post_until_full(live_qp& qp, W& w, std::uint64_t p, std::uint64_t end,
                                                  std::uint64_t step) {
    return post_until_full_inline(qp, w, p, end, step);
  }
  /// The same loop inline, for a caller with registers to spare (post_prepared_one_qp's lists).
  template <class W>
  RDMAKIT_ALWAYS_INLINE std::uint64_t post_until_full_inline(live_qp& qp, W& w, std::uint64_t p, std::uint64_t end,
                                                             std::uint64_t step) {
    for (; p < end; p += step) {
      const post_result r = qp.post(w);
      if (RDMAKIT_UNLIKELY(!r)) {
        if (r.status == post_status::sq_full) break;
        post_failed(r, p);
      }
    }
    return p;
  }

  /// Whether the signaling policy signals the WR at `position` of a queue pair (1: its
  /// first WR) without being asked: signal_all every WR, signal_every<N> the multiples of
  /// N; for a policy that counts otherwise it is not known ahead. bw_client's queue pairs
  /// post nothing before the run, so its WR s is at position s + 1.
  static constexpr bool signals_of_itself(std::uint64_t position) noexcept {
    if constexpr (rdmakit::detail::signals_every_wr<S>)
      return true;
    else if constexpr (requires { S::signal_at(false, position); })
      return S::signal_at(false, position);
    else
      return false;
  }

  /// bw_client on one queue pair: posts the prepared WR or reused list `w` (`step` WRs)
  /// until `end`, waiting for completions whenever the send queue refuses it for
  /// credits, and marks the WRs done after each wait (`depth`: the queue pair's credits
  /// when none is held); returns `end`. The general loop's vectors, per-QP loops and
  /// tests cost about 60 instructions a wait on rxe (bench/README, round s34).
  template <class W>
  [[gnu::noinline]] std::uint64_t post_prepared_one_qp(W& w, std::uint64_t end, std::uint64_t step,
                                                       std::uint32_t depth, tick_marks& marks) {
    auto& qp = qps_[0];
    credits_only_t credits_only;
    for (std::uint64_t p = 0;;) {
      // One WR per post: in a function of its own, where the counter stays in a register.
      // A list: here (the call and its register saves cost 21 instructions a wait).
      if constexpr (requires { w.reused(); })
        p = post_until_full_inline(qp, w, p, end, step);
      else
        p = post_until_full(qp, w, p, end, step);
      if (p >= end) return p;
      pump(credits_only, "waiting for send completions");
      if (RDMAKIT_UNLIKELY(qp.in_error())) qp_failed(0);
      // The wait returned completions of this queue pair's signaled WRs, which free
      // credits: the count moved (a mark of the same count would only be one more point).
      marks.push(tick_marks::ticks(), p - (depth - qp.send_credits()));
    }
  }

  /// Ensures QP 0 has a send credit, polling with `f`.
  template <class F>
  void credit(F& f) {
    while (qps_[0].send_credits() == 0) pump(f, "waiting for a send credit");
  }

  std::uint64_t lat_iters() const { return o_.duration > 0 ? seq_mask : o_.iters; }
  /// Samples kept for the percentiles: every one up to 2^24 (128 MiB), a uniform sample past it.
  std::size_t lat_kept() const { return static_cast<std::size_t>(std::min<std::uint64_t>(lat_iters(), 1 << 24)); }

  /// read_lat, atomic_lat: one operation at a time, timed from post to completion.
  lat_result rtt_client() {
    lat_samples us(lat_kept());
    std::uint64_t done = 0;
    auto on_wc = [&](const completion<B>& c) noexcept {
      if (!c.ok()) return record_failure(c);
      if (c.is_send()) done = (c.wr_id() & seq_mask) + 1;
    };
    const auto start = clock_type::now();
    progress_meter pm(t_.name, o_.progress, start, lat_iters(), o_.duration);
    for (std::uint64_t i = 0; i < lat_iters(); ++i) {
      credit(on_wc);
      const auto t0 = clock_type::now();
      auto r = post_ops(0, i, 1, i);  // every operation signaled: its completion ends the sample
      if (!r) post_failed(r, i);
      while (done <= i) pump(on_wc, "waiting for an operation to complete");
      const auto t1 = clock_type::now();
      us.add(std::chrono::duration<double, std::micro>(t1 - t0).count());
      pm.tick(t1, i + 1);
      if (o_.duration > 0 && t1 - start >= std::chrono::duration<double>(o_.duration)) break;
    }
    return us.stats(t_.op == op_kind::atomic ? 8 : o_.size);
  }

  /// send_lat: ping-pong of SENDs; half the round trip.
  lat_result send_lat_client() {
    lat_samples us(lat_kept());
    std::uint64_t recvd = 0;
    auto on_wc = [&](const completion<B>& c) noexcept { on_lat_recv(c, recvd); };
    const auto start = clock_type::now();
    progress_meter pm(t_.name, o_.progress, start, lat_iters(), o_.duration);
    for (std::uint64_t i = 0; i < lat_iters(); ++i) {
      credit(on_wc);
      const auto t0 = clock_type::now();
      auto r = post_ops(0, i, 1, o_.duration > 0 ? seq_mask : o_.iters - 1);
      if (!r) post_failed(r, i);
      while (recvd <= i) pump(on_wc, "waiting for the reply");
      const auto t1 = clock_type::now();
      us.add(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
      pm.tick(t1, i + 1);
      if (o_.duration > 0 && t1 - start >= std::chrono::duration<double>(o_.duration)) break;
    }
    return us.stats(o_.size);
  }

  void on_lat_recv(const completion<B>& c, std::uint64_t& recvd) noexcept {
    if (!c.ok()) return record_failure(c);
    if (!c.is_recv()) return;
    ++recvd;
    post_result r;
    if constexpr (srq_)
      r = srq_q_.post_recv(mr_.local(recv_off(0), slot_), 0);
    else
      r = qps_[0].post_recv(mr_.local(recv_off(0), slot_), 0);
    if (!r && failure_.empty()) failure_ = std::string("couldn't repost a receive: ") + r.message();
  }

  /// Spins until the last byte of our receive slot is `v`; polls the CQ now and then.
  /// Returns false when `stop` became true first.
  template <class F>
  bool spin_for(std::uint8_t v, F& f, const std::atomic<bool>* stop) {
    const volatile std::uint8_t* p = reinterpret_cast<volatile std::uint8_t*>(mr_.data() + recv_off(0) + o_.size - 1);
    auto last_progress = clock_type::now();
    for (unsigned i = 1; *p != v; ++i) {
      if (i % 64 == 0) {
        (void)poll_with(f);
        check_failure();
        if (stop && stop->load(std::memory_order_acquire)) return false;
        check_peer();
        if (i % 4096 == 0) {
          const auto now = clock_type::now();
          if (now - last_progress > o_.timeout)
            throw perf_failure("no write from the peer (" + link_.peer + ") for " + std::to_string(o_.timeout.count()) +
                               " ms: it stopped" +
                               (T::type == qp_type::rc ? std::string() : std::string(", or a write was lost (UC)")));
        }
      }
      if (o_.yield_when_idle) std::this_thread::yield();
    }
    return true;
  }

  /// write_lat: ping-pong of RDMA WRITEs; each side spins on the last byte; half the round trip.
  lat_result write_lat_client() {
    if constexpr (!T::supports_write) {
      throw perf_failure("write_lat needs RDMA WRITE");
    } else {
      lat_samples us(lat_kept());
      auto on_wc = [&](const completion<B>& c) noexcept {
        if (!c.ok()) record_failure(c);
      };
      std::uint8_t* out = reinterpret_cast<std::uint8_t*>(mr_.data() + send_off(0) + o_.size - 1);
      const auto start = clock_type::now();
      progress_meter pm(t_.name, o_.progress, start, lat_iters(), o_.duration);
      for (std::uint64_t i = 0; i < lat_iters(); ++i) {
        const auto v = static_cast<std::uint8_t>(i % 255 + 1);
        *out = v;
        credit(on_wc);
        const auto t0 = clock_type::now();
        auto r = post_ops(0, i, 1, o_.duration > 0 ? seq_mask : o_.iters - 1);
        if (!r) post_failed(r, i);
        spin_for(v, on_wc, nullptr);
        const auto t1 = clock_type::now();
        us.add(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
        pm.tick(t1, i + 1);
        if (o_.duration > 0 && t1 - start >= std::chrono::duration<double>(o_.duration)) break;
      }
      return us.stats(o_.size);
    }
  }

  // ---- server ------------------------------------------------------------------------

  /// The end-of-run handshake on its own thread, so the data loop can watch for it.
  struct finish_watch {
    struct state {
      std::atomic<bool> done{false};
      std::exception_ptr error;
    };
    std::shared_ptr<state> st = std::make_shared<state>();
    std::thread th;
    template <class Wait>
    void start(Wait wait) {
      th = std::thread([s = st, wait] {
        try {
          wait();
        } catch (...) {
          s->error = std::current_exception();
        }
        s->done.store(true, std::memory_order_release);
      });
    }
    void join() {
      if (th.joinable()) th.join();
    }
    ~finish_watch() { join(); }
  };

  // Waits for the client's end-of-run record. Only this run's client (the peer of the
  // first queue pair, from the TCP exchange) ends the run: a record from another queue
  // pair, a second client on this port, is answered and reported, and the wait goes on.
  // (Taken as the end, it stopped the server, and the real client's WRs then failed with
  // "retry counter exceeded", far from the cause.) -R's finish waits for the connection's
  // own disconnect and names no peer.
  void await_client_done(const connection_info& me) {
    for (;;) {
      const connection_info peer = link_.finish(me, {});
      if (!client_ep_ || (peer.ep.qpn == client_ep_->qpn && peer.ep.lid == client_ep_->lid &&
                          peer.ep.gid == client_ep_->gid))
        return;
      std::fprintf(stderr,
                   "rdmakit-perf: server: ignored an end-of-run message from QP %u at %s, which is not this run's "
                   "client (QP %u at %s): is another client using this server's port?\n",
                   peer.ep.qpn, peer.ep.gid.to_string().c_str(), client_ep_->qpn, client_ep_->gid.to_string().c_str());
    }
  }

  void serve(run_report& rep) {
    const connection_info me(qps_[0].local_endpoint());
    if (t_.kind != test_kind::send_bw && t_.kind != test_kind::send_lat && t_.kind != test_kind::write_lat) {
      // One-sided tests: the client does everything; wait until it says it is done.
      await_client_done(me);
      rep.note = "server: passive side of " + std::string(t_.name) + " (results on the client)";
      return;
    }
    finish_watch w;
    w.start([this, me] { await_client_done(me); });
    try {
      if (t_.kind == test_kind::send_bw)
        send_bw_server(rep, w.st->done);
      else if (t_.kind == test_kind::send_lat)
        send_lat_server(rep, w.st->done);
      else
        write_lat_server(rep, w.st->done);
    } catch (...) {
      // The watcher may wait for the client's handshake as long as the accept timeout:
      // wake it, then join it (left running, it would outlive this runner and link_).
      if (link_.cancel_finish) link_.cancel_finish();  // (without one, join waits for the timeout)
      w.join();
      throw;
    }
    w.join();
    if (w.st->error) std::rethrow_exception(w.st->error);
  }

  // A send test's receives of QP j (the SRQ's: j = 0) have wr_ids j * rx_depth onwards:
  // post_recvs numbers its buffers from the first, and a QP never holds more than
  // rx_depth, so a completion's wr_id names its QP (its slot's offset does not).
  std::uint64_t recv_wr_id(std::uint32_t j) const noexcept { return std::uint64_t{j} * o_.rx_depth; }
  std::uint32_t recv_qp_of(std::uint64_t wr_id) const noexcept {
    return static_cast<std::uint32_t>(wr_id / o_.rx_depth);
  }

  void send_bw_server(run_report& rep, const std::atomic<bool>& finished) {
    const std::uint32_t q = o_.num_qps;
    std::vector<std::uint32_t> consumed(q, 0);
    std::uint64_t recvd = 0;
    auto on_wc = [&](const completion<B>& c) noexcept {
      if (!c.ok()) return record_failure(c);
      if (!c.is_recv()) return;
      const auto j = recv_qp_of(c.wr_id());  // the SRQ's: 0
      if (j < q) ++consumed[j];
      ++recvd;
    };
    receive_marks marks;
    auto last_progress = clock_type::now();
    // Messages the client sent before its end-of-run message may still be on the wire
    // after it: a UC or UD send may complete at its post (the mock's rxe profile, a
    // message a fault hits; a device once it is sent). With --mock-latency (0 on a device)
    // that is milliseconds, and a drain that stopped at the first empty poll counted none
    // of them; it goes on for two one-way latencies after the end-of-run message.
    std::optional<clock_type::time_point> drain_until;
    for (bool draining = false;;) {
      const bool fin = finished.load(std::memory_order_acquire);
      if (fin && !drain_until)
        drain_until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(2 * o_.mock_latency);
      const auto before = clock_type::now();
      const int n = fin ? cq_.poll(on_wc) : wait_some(on_wc, std::chrono::milliseconds(100));
      check_failure();
      if (n < 0) throw perf_failure(std::string("polling the CQ failed: ") + std::strerror(-n));
      const auto now = clock_type::now();
      // A poll returns one batch: fewer than P::batch, and poll_cq found the CQ empty
      // (the server has no WRs of its own here, whose completions it might not be given).
      marks.polled(before, now, recvd, n < static_cast<int>(P::batch));
      if (n > 0) {
        marks.bound();  // however long the run
        last_progress = now;
      } else if (!fin && recvd > 0 && now - last_progress > o_.timeout) {
        throw perf_failure("no message from the client (" + link_.peer + ") for " +
                           std::to_string(o_.timeout.count()) + " ms after " + std::to_string(recvd) + " receives");
      }
      for (std::uint32_t j = 0; j < q; ++j) {
        if (consumed[j] == 0) continue;
        std::fill_n(rbufs_.begin(), consumed[j], mr_.local(recv_off(j), slot_));
        post_result r;
        if constexpr (srq_)
          r = srq_q_.post_recvs(std::span(rbufs_.data(), consumed[j]), recv_wr_id(j));  // j is 0
        else
          r = qps_[j].post_recvs(std::span(rbufs_.data(), consumed[j]), recv_wr_id(j));
        if (!r) throw perf_failure(std::string("couldn't repost receives: ") + r.message());
        consumed[j] = 0;
      }
      if (draining && n == 0) {
        if (clock_type::now() >= *drain_until) break;
        if (o_.yield_when_idle) std::this_thread::yield();
      }
      if (fin) draining = true;
    }
    if (recvd > 0) {
      // Every message received, from a moment before the client could post the first
      // one: the server cannot see when the client started, nor when a message it finds
      // in the CQ arrived (receive_marks).
      rep.bw = receive_bw_stats(marks, client_may_post_, o_.size,
                                std::max<std::uint64_t>(std::uint64_t{q} * o_.tx_depth, recvd / 20));
    }
    rep.note = "server: received " + std::to_string(recvd) + " messages";
  }

  void send_lat_server(run_report& rep, const std::atomic<bool>& finished) {
    std::uint64_t recvd = 0, replied = 0;
    auto on_wc = [&](const completion<B>& c) noexcept { on_lat_recv(c, recvd); };
    auto last_progress = clock_type::now();
    while (!finished.load(std::memory_order_acquire)) {
      const int n = wait_some(on_wc, std::chrono::milliseconds(100));
      check_failure();
      if (n < 0) throw perf_failure(std::string("polling the CQ failed: ") + std::strerror(-n));
      const auto now = clock_type::now();
      if (n > 0) last_progress = now;
      else if (recvd > 0 && now - last_progress > o_.timeout)
        throw perf_failure("no message from the client (" + link_.peer + ") for " +
                           std::to_string(o_.timeout.count()) + " ms");
      while (replied < recvd) {
        credit(on_wc);
        auto r = post_ops(0, replied, 1, seq_mask);
        if (!r) post_failed(r, replied);
        ++replied;
      }
    }
    rep.note = "server: answered " + std::to_string(replied) + " messages";
  }

  void write_lat_server(run_report& rep, const std::atomic<bool>& finished) {
    if constexpr (T::supports_write) {
      auto on_wc = [&](const completion<B>& c) noexcept {
        if (!c.ok()) record_failure(c);
      };
      std::uint8_t* out = reinterpret_cast<std::uint8_t*>(mr_.data() + send_off(0) + o_.size - 1);
      std::uint64_t i = 0;
      for (;; ++i) {
        const auto v = static_cast<std::uint8_t>(i % 255 + 1);
        if (!spin_for(v, on_wc, &finished)) break;
        *out = v;
        credit(on_wc);
        auto r = post_ops(0, i, 1, seq_mask);
        if (!r) post_failed(r, i);
      }
      rep.note = "server: answered " + std::to_string(i) + " writes";
    }
  }

  const perf_options& o_;
  peer_link& link_;
  const test_desc& t_;
  // Destruction runs bottom-up: QPs, AHs, CQ, memory, PD, device.
  device<B> dev_;
  protection_domain<B> pd_;
  region_t mr_;
  cq_t cq_;
  std::conditional_t<srq_, shared_receive_queue<B>, std::monostate> srq_q_;
  std::vector<address_handle<B>> ahs_;
  typename cm_members<cm_able_, B, T, S>::listener listener_;
  // -R: each connection's CM id (its queue pair is in qps_); destroyed after them.
  typename cm_members<cm_able_, B, T, S>::connections conns_;
  std::vector<live_qp> qps_;
  std::vector<std::uint32_t> peer_qpn_;
  std::optional<endpoint> client_ep_;  // server, TCP exchange: its first queue pair's peer
  // Server: a moment before the client could post its first WR, from the last queue
  // pair's exchange (after the client's record came, before this side's went out) or,
  // with -R, its connection request (before the accept). Where send_bw's server clock
  // starts: it cannot see when the client started.
  clock_type::time_point client_may_post_{};
  std::vector<remote_t> remote_;
  std::atomic<bool> finish_cancelled_{false};  // -R server: link_.cancel_finish was called
  std::vector<local_buffer> rbufs_;
  std::uint32_t slot_ = 0, inline_ = 0, sq_depth_ = 0;
  std::string failure_;
};

}  // namespace rdmakit_perf
