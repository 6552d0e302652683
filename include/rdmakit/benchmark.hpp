#pragma once
/// Google Benchmark helpers (Meson `rdmakit-bench`, pkg-config `rdmakit-bench`, CMake
/// `rdmakit::bench`; not part of `<rdmakit/rdmakit.hpp>`):
///  - `bench::register_grid<Transports, Signalings, Pollings>(name, loop)` registers
///    your loop once per combination of three `bench::list`s of policies, each a
///    separate instantiation named `name/RC/signal_every<16>/busy_poll<16>`;
///  - `bench::loopback` connects two queue pairs of one combination (RTS; UD: with
///    address handles) with their CQs and registered buffers, and keeps a bandwidth
///    loop's send queue full.
///
///     static const auto grid = bench::register_grid<bench::list<rc, uc>,
///         bench::list<signal_all, signal_every<16>>, bench::list<busy_poll<16>>>(
///         "write", [](auto cfg, benchmark::State& st) { ... }).Arg(64).Arg(4096);
#include <rdmakit/config.hpp>
#include <rdmakit/address_handle.hpp>
#include <rdmakit/completion.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/sge_list.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/device.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/polling.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/protection_domain.hpp>
#include <rdmakit/queue_pair.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <climits>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace bench {

/// One axis of a grid: a list of policy types (`bench::list<rc, uc, ud>`).
template <class... Policies>
struct list {};

namespace detail {
// The text of a template argument: integers (bool: true/false) and enumerations only.
template <class V>
constexpr bool printable_value = std::integral<V> || std::is_enum_v<V>;

template <auto V>
std::string value_text() {
  using T = decltype(V);
  if constexpr (std::same_as<T, bool>)
    return V ? "true" : "false";
  else if constexpr (std::is_enum_v<T>)
    return std::to_string(static_cast<std::underlying_type_t<T>>(V));
  else
    return std::to_string(V);
}

// "<a,b,c>": the arguments Vs... as text.
template <auto... Vs>
struct values_text {
  static std::string text() {
    std::string s;
    ((s += (s.empty() ? "" : ",") + value_text<Vs>()), ...);
    return "<" + s + ">";
  }
};

// "<a,b,c>" for a specialization of a template whose parameters are all values, where
// the compiler can match it against template <auto...> (P0522: GCC, Clang 19, or Clang
// with -frelaxed-template-template-args); "" otherwise.
template <class P>
struct value_args {
  static std::string text() { return {}; }
};
#if defined(__cpp_template_template_args) && __cpp_template_template_args >= 201611L
template <template <auto...> class X, auto... Vs>
  requires(sizeof...(Vs) > 0 && (printable_value<decltype(Vs)> && ...))
struct value_args<X<Vs...>> : values_text<Vs...> {};
#else
// rdmakit's own templates of values, matched exactly: their benchmarks are named alike
// by every compiler, so results of two compilers compare row by row.
template <std::uint32_t N>
struct value_args<signal_every<N>> : values_text<N> {};
template <int Batch>
struct value_args<busy_poll<Batch>> : values_text<Batch> {};
template <int Batch, unsigned AckBatch>
struct value_args<event_driven<Batch, AckBatch>> : values_text<Batch, AckBatch> {};
template <unsigned Spin, int Batch, unsigned AckBatch>
struct value_args<adaptive<Spin, Batch, AckBatch>> : values_text<Spin, Batch, AckBatch> {};
#endif

// The name of Policy in the axis Ps...: policy_name, plus "#<position>" (1-based) when
// an earlier policy of the axis has the same name.
template <class Policy, class... Ps>
std::string axis_name();
}  // namespace detail

/// The name of a policy in benchmark names: its `name`, followed by its template
/// arguments when it is a template of values (`RC`, `signal_manual`, `signal_every<16>`,
/// `adaptive<1024,16,16>`, and your own `my_poll<64>`); compilers without relaxed
/// template template arguments (Clang before 19) give it for rdmakit's own policies and
/// the `name` alone for yours, and the grid then tells same-named policies of one list
/// apart by position (`my_poll#2`).
template <class Policy>
std::string policy_name() {
  return std::string(std::string_view(Policy::name)) + detail::value_args<Policy>::text();
}

/// One combination of a grid, the tag your loop receives: `decltype(cfg)::transport_policy`
/// (as in `queue_pair`), `signaling_policy`, `polling_policy`.
template <transport T, signaling S, polling P>
struct config {
  /// The transport policy (rc, uc, ud or your own).
  using transport_policy = T;
  /// The signaling policy.
  using signaling_policy = S;
  /// The polling policy of the completion queues.
  using polling_policy = P;
  /// "RC/signal_every<16>/busy_poll<16>": the policies' names joined by '/'.
  static std::string name() { return policy_name<T>() + "/" + policy_name<S>() + "/" + policy_name<P>(); }
};

namespace detail {
template <class... Ls>
struct concat {
  using type = list<>;
};
template <class... A>
struct concat<list<A...>> {
  using type = list<A...>;
};
template <class... A, class... B, class... Rest>
struct concat<list<A...>, list<B...>, Rest...> : concat<list<A..., B...>, Rest...> {};

// Whether no type is listed twice.
template <class... Ts>
struct distinct : std::true_type {};
template <class T, class... Rest>
struct distinct<T, Rest...> : std::bool_constant<(!std::is_same_v<T, Rest> && ...) && distinct<Rest...>::value> {};

// config<T, S, P> when the loop F can be called with it, else nothing.
template <class F, class T, class S, class P>
using keep = std::conditional_t<std::is_invocable_v<F&, config<T, S, P>, benchmark::State&>, list<config<T, S, P>>,
                                list<>>;

template <class F, class Ts, class Ss, class Ps>
struct product {
  static_assert(sizeof(F) == 0, "register_grid<Transports, Signalings, Pollings>: each is a bench::list<...>");
};
template <class F, class... Ts, class... Ss, class... Ps>
struct product<F, list<Ts...>, list<Ss...>, list<Ps...>> {
  // (An empty list left the grid without a combination, and the error blamed the loop.)
  static_assert(sizeof...(Ts) != 0, "register_grid: the transports list is empty: name at least one (bench::list<rc>)");
  static_assert(sizeof...(Ss) != 0,
                "register_grid: the signalings list is empty: name at least one (bench::list<signal_all>)");
  static_assert(sizeof...(Ps) != 0,
                "register_grid: the pollings list is empty: name at least one (bench::list<busy_poll<>>)");
  static_assert((transport<Ts> && ...), "the transports list holds a type that is not a transport policy");
  static_assert((signaling<Ss> && ...), "the signalings list holds a type that is not a signaling policy");
  static_assert((polling<Ps> && ...), "the pollings list holds a type that is not a polling policy");
  // (Twice in a list, a policy made two benchmarks of one name.)
  static_assert(distinct<Ts...>::value, "the transports list names a policy twice");
  static_assert(distinct<Ss...>::value, "the signalings list names a policy twice");
  static_assert(distinct<Ps...>::value, "the pollings list names a policy twice");
  template <class T, class S>
  using row = typename concat<keep<F, T, S, Ps>...>::type;
  template <class T>
  using plane = typename concat<row<T, Ss>...>::type;
  // Transport-major, in list order: the combinations the loop accepts.
  using type = typename concat<plane<Ts>...>::type;
  template <class T, class S, class P>
  static std::string name(std::string_view prefix) {
    std::string n(prefix);
    if (!n.empty()) n += '/';
    return n + axis_name<T, Ts...>() + "/" + axis_name<S, Ss...>() + "/" + axis_name<P, Ps...>();
  }
};

// One benchmark's run of the loop. What it throws (a loopback it could not make: a bad
// size or device) fails this benchmark, named, and the program's other ones still run:
// out of a Google Benchmark function it would end the program (std::terminate).
// A loop that left its timing loop early, with no error reported, would end the program
// too (Google Benchmark checks it returned after its last iteration): it fails instead.
template <class F, class Cfg>
void run_loop(F& loop, Cfg cfg, benchmark::State& st, const std::string& name) {
  try {
    std::invoke(loop, cfg, st);
  } catch (const std::exception& e) {
    return st.SkipWithError((name + ": " + e.what()).c_str());
  } catch (...) {
    return st.SkipWithError((name + ": an exception of a type not derived from std::exception").c_str());
  }
  if (!st.error_occurred() && st.iterations() < st.max_iterations)
    st.SkipWithError(rdmakit::detail::cat(name, ": the loop left `for (auto _ : state)` after ", st.iterations(), " of ",
                         st.max_iterations, " iterations with no error reported (Google Benchmark would end the "
                         "program): call lp.finish(st), which reports why a post failed, or st.SkipWithError(why) "
                         "before leaving it")
                         .c_str());
}

// The names register_grid gave benchmarks so far (registration runs on one thread,
// before benchmark::Initialize).
inline std::vector<std::string>& grid_names() {
  static std::vector<std::string> names;
  return names;
}

template <class Policy, class... Ps>
std::string axis_name() {
  const std::string names[] = {policy_name<Ps>()...};
  constexpr bool is[] = {std::is_same_v<Policy, Ps>...};
  std::size_t i = 0;
  while (!is[i]) ++i;
  for (std::size_t j = 0; j < i; ++j)
    if (names[j] == names[i]) return names[i] + "#" + std::to_string(i + 1);
  return names[i];
}
}  // namespace detail

/// The combinations one `register_grid` call registered (`Configs`: a `bench::list` of
/// `config`s, transport-major) and their Google Benchmark handles, to apply settings
/// to all of them: the usual ones are members; `each(f)` does anything else, and may
/// depend on the combination.
template <class Configs>
class family;

/// See above.
template <class... Configs>
class family<list<Configs...>> {
 public:
  /// The registered combinations, as a type: `bench::list<config<T, S, P>...>`.
  using configs = list<Configs...>;
  /// How many benchmarks were registered (the combinations the loop accepts).
  static constexpr std::size_t size() noexcept { return sizeof...(Configs); }

  /// Their names, as registered (Google Benchmark appends the arguments when it runs).
  const std::vector<std::string>& names() const noexcept { return names_; }

  /// For each registered benchmark `b` (a `benchmark::internal::Benchmark*`) calls
  /// `f(cfg, b)` with its combination's `config` tag when `f` takes one, else `f(b)`:
  /// `.each([](auto cfg, auto* b) { if constexpr (...) b->Arg(65536); })`.
  template <class F>
  family& each(F&& f) {
    std::size_t i = 0;
    (apply_<Configs>(f, members_[i++]), ...);
    return *this;
  }
  /// `Benchmark::Arg` on each: one run per value of `state.range(0)`.
  family& Arg(std::int64_t x) {
    return each([&](benchmark::internal::Benchmark* b) { b->Arg(x); });
  }
  /// `Benchmark::Args` on each.
  family& Args(const std::vector<std::int64_t>& args) {
    return each([&](benchmark::internal::Benchmark* b) { b->Args(args); });
  }
  /// `Benchmark::Range` on each (powers of the range multiplier, 8 by default).
  family& Range(std::int64_t start, std::int64_t limit) {
    return each([&](benchmark::internal::Benchmark* b) { b->Range(start, limit); });
  }
  /// `Benchmark::DenseRange` on each.
  family& DenseRange(std::int64_t start, std::int64_t limit, int step = 1) {
    return each([&](benchmark::internal::Benchmark* b) { b->DenseRange(start, limit, step); });
  }
  /// `Benchmark::RangeMultiplier` on each (before Range).
  family& RangeMultiplier(int multiplier) {
    return each([&](benchmark::internal::Benchmark* b) { b->RangeMultiplier(multiplier); });
  }
  /// `Benchmark::ArgName` on each.
  family& ArgName(const std::string& name) {
    return each([&](benchmark::internal::Benchmark* b) { b->ArgName(name); });
  }
  /// `Benchmark::Unit` on each.
  family& Unit(benchmark::TimeUnit unit) {
    return each([&](benchmark::internal::Benchmark* b) { b->Unit(unit); });
  }
  /// `Benchmark::MinTime` on each (seconds). Past Google Benchmark's own range (these
  /// three: above 0) usage_error, naming the setting: its check ends the program.
  family& MinTime(double seconds) {
    if (!(seconds > 0)) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", seconds);
      refuse_("MinTime", text, "seconds above 0");
    }
    return each([&](benchmark::internal::Benchmark* b) { b->MinTime(seconds); });
  }
  /// `Benchmark::Iterations` on each.
  family& Iterations(benchmark::IterationCount n) {
    if (n <= 0) refuse_("Iterations", std::to_string(n), "at least 1");
    return each([&](benchmark::internal::Benchmark* b) { b->Iterations(n); });
  }
  /// `Benchmark::Repetitions` on each.
  family& Repetitions(int n) {
    if (n <= 0) refuse_("Repetitions", std::to_string(n), "at least 1");
    return each([&](benchmark::internal::Benchmark* b) { b->Repetitions(n); });
  }
  /// `Benchmark::UseRealTime` on each (register_grid already did: rates are per second
  /// of wall-clock time).
  family& UseRealTime() {
    return each([](benchmark::internal::Benchmark* b) { b->UseRealTime(); });
  }

 private:
  template <class Ts, class Ss, class Ps, class F>
  friend auto register_grid(std::string_view name, F loop);

  [[noreturn]] void refuse_(const char* setting, const std::string& value, const char* want) const {
    throw usage_error(rdmakit::detail::cat("bench::family::", setting, "(", value, ") on the grid of ",
                                           names_.empty() ? std::string("no benchmark") : names_.front(),
                                           "...: give ", want, " (Google Benchmark would end the program)"));
  }
  template <class Cfg, class F>
  static void apply_(F& f, benchmark::internal::Benchmark* b) {
    if constexpr (std::is_invocable_v<F&, Cfg, benchmark::internal::Benchmark*>)
      std::invoke(f, Cfg{}, b);
    else
      std::invoke(f, b);
  }

  std::vector<benchmark::internal::Benchmark*> members_;
  std::vector<std::string> names_;
};

/// Registers `loop` with Google Benchmark once per combination of the three lists
/// (`bench::list`s of transport, signaling and polling policies), in transport-major
/// order, named `name/<transport>/<signaling>/<polling>` (policy_name; no `name/` when
/// `name` is empty). Each benchmark calls `loop(config<T, S, P>{}, state)`: write it as
/// a generic lambda `[](auto cfg, benchmark::State& st)` or as
/// `[]<class T, class S, class P>(bench::config<T, S, P>, benchmark::State& st)`.
/// Combinations the loop cannot be called with are not registered: constrain it to
/// leave some out (`requires T::supports_read`); an unconstrained loop that does not
/// compile for some combination is a compile error, never a silent gap, and so is a
/// loop that takes no combination, or a list that names a policy twice. What the loop
/// throws (a `bench::loopback` it could not make) fails its benchmark
/// (`SkipWithError`, named), and the others run. A name one of this program's grids
/// gave a benchmark already throws usage_error, before anything is registered. Each
/// benchmark measures wall-clock
/// time (`UseRealTime`), so its rates are per real second. Call it before
/// `benchmark::Initialize` (in main, or to initialize a namespace-scope variable).
template <class Transports, class Signalings, class Pollings, class F>
auto register_grid(std::string_view name, F loop) {
  using grid = detail::product<F, Transports, Signalings, Pollings>;
  // A loop that takes no combination registered nothing, silently: most often its
  // parameters are not (config, State&) (swapped, or a State*).
  static_assert(family<typename grid::type>::size() != 0,
                "register_grid: the loop takes none of these combinations: it is called as "
                "loop(bench::config<T, S, P>{}, benchmark::State&) (write [](auto cfg, benchmark::State& st)), "
                "and its constraints must leave at least one combination of the three lists");
  family<typename grid::type> fam;
  [&]<class... Cfgs>(list<Cfgs...>) {
    (fam.names_.push_back(grid::template name<typename Cfgs::transport_policy, typename Cfgs::signaling_policy,
                                              typename Cfgs::polling_policy>(name)),
     ...);
  }(typename grid::type{});
  // Two grids of one name made rows of one name, each another loop's, without a word.
  std::vector<std::string>& taken = detail::grid_names();
  for (const std::string& n : fam.names_)
    if (std::find(taken.begin(), taken.end(), n) != taken.end())
      throw usage_error(rdmakit::detail::cat("register_grid: a benchmark named \"", n,
                                             "\" is registered already, by an earlier register_grid call: give this "
                                             "grid a name of its own"));
  taken.insert(taken.end(), fam.names_.begin(), fam.names_.end());
  std::size_t i = 0;
  auto add = [&]<class Cfg>(Cfg) {
    const std::string& n = fam.names_[i++];
    // Rates per second of wall-clock time: a polling policy that sleeps (event_driven)
    // uses little CPU time, and per CPU second it ranked above busy polling.
    fam.members_.push_back(
        benchmark::RegisterBenchmark(n.c_str(), [loop, n](benchmark::State& st) mutable {
          detail::run_loop(loop, Cfg{}, st, n);
        })->UseRealTime());
  };
  [&]<class... Cfgs>(list<Cfgs...>) { (add(Cfgs{}), ...); }(typename grid::type{});
  return fam;
}

/// How a loopback pair is made.
struct loopback_options {
  /// Both queue pairs' capacities; each side's CQ holds max_send_wr + max_recv_wr.
  /// max_send_wr at least 1 (else the constructor throws usage_error).
  qp_cap caps{64, 64};
  /// RC/UC connection attributes (both directions).
  connect_options connect{};
  /// The longest wait for a completion in post() and finish(); positive (else the
  /// constructor throws usage_error).
  rdmakit::detail::ms_timeout timeout{std::chrono::milliseconds{1000}};
};

/// Two queue pairs of one grid combination connected to each other (RC/UC: connected;
/// UD: activated, each with an address handle to the other), each with its own
/// protection domain, completion queue (polled with P) and registered buffer, on one
/// device or two. `post` keeps side a's send queue full as a bandwidth test does, and
/// gives each SEND (or WRITE with immediate) a receive on side b first; `finish` waits
/// for what is outstanding, on both sides, and fails the benchmark when anything went
/// wrong: a refused post, a failed completion, a wait that timed out, or a message
/// that never reached b (UC and UD lose them without telling the sender; only one that
/// takes a receive, a SEND or a WRITE with immediate, can be missed).
///
///     bench::loopback lp(cfg, device<backends::mock>("mock0"), bytes);
///     for (auto _ : st)
///       if (!lp.post(op::write{lp.a.msg, lp.b.remote})) break;
///     lp.finish(st);
template <verbs_backend B, transport T, signaling S = signal_all, polling P = busy_poll<>>
class loopback {
 public:
  /// The access rights of both buffers: everything (local write, remote write, read, atomic).
  static constexpr access buffer_access =
      access::local_write | access::remote_write | access::remote_read | access::remote_atomic;

  /// One side of the pair.
  struct side {
    /// Its protection domain.
    protection_domain<B> pd;
    /// Its completion queue (sends and receives), polled with P.
    completion_queue<B, P> cq;
    /// Its registered buffer: `bytes` plus the receive offset of T (the 40-byte GRH on UD).
    memory_region<B, buffer_access> buf;
    /// Its queue pair, ready to send (RTS).
    queue_pair<B, T, S, qp_state::rts> qp;
    /// UD: the address handle reaching the other side (empty on RC/UC).
    address_handle<B> ah;
    /// UD: the other side's queue pair through `ah` (for op::ud_send).
    ud_address<B> to{};
    /// The first `bytes` bytes of `buf`: what this side sends or writes, or reads into.
    local_buffer msg{};
    /// The same bytes as the other side targets them (RDMA WRITE, READ, atomics).
    remote_region<buffer_access & remote_access_bits> remote{};
  };

  /// Side a (posts with `post`/`send`) and side b (receives with `refill`).
  /// @{
  side a, b;
  /// @}
  /// Refused posts and failed completions so far (finish() fails the benchmark if any).
  std::uint64_t failures = 0;
  /// Waits that found no completion within the timeout.
  std::uint64_t timeouts = 0;
  /// Successful receive completions this loopback reaped so far (a loop that polls
  /// b's CQ itself counts its own; finish() and post() count every completed receive).
  std::uint64_t received = 0;
  /// WRs posted on a that take one of b's receives (SENDs, WRITEs with immediate).
  std::uint64_t sent = 0;

  /// Both sides on `dev`, buffers of `bytes` (plus the GRH area on UD).
  loopback(const device<B>& dev, std::size_t bytes, const loopback_options& o = {}) : loopback(dev, dev, bytes, o) {}
  /// Side a on `dev_a`, side b on `dev_b`.
  loopback(const device<B>& dev_a, const device<B>& dev_b, std::size_t bytes, const loopback_options& o = {})
      : bytes_(bytes), opts_(o) {
    // 0 or less made every wait a few polls: a device's run failed on "timed out" waits.
    if (o.timeout.count() <= 0)
      throw usage_error(rdmakit::detail::cat("bench::loopback: loopback_options::timeout = ", o.timeout.count(),
                                             " ms: the longest wait for a completion must be positive; give it in "
                                             "milliseconds (default 1000), or milliseconds::max() for no limit"));
    // What the buffers and the CQs are made from, refused here by name: past them a
    // size wrapped (bytes + the GRH area) or a CQ size went negative in the int cast,
    // and the error named allocate() or create_cq(), which the caller never called.
    if (bytes == 0 || bytes > rdmakit::detail::max_message_bytes)
      throw usage_error(rdmakit::detail::cat(
          "bench::loopback: a message of ", bytes, " bytes: give 1 to 2^31 (the largest message verbs carry)",
          bytes > static_cast<std::size_t>(INT64_MAX) ? "; a negative Arg() converts to a size this large" : ""));
    // A UD message is one packet: above the MTU each completion failed, after buffers
    // of that size were allocated (gigabytes).
    if constexpr (T::needs_ah) {
      for (const device<B>* d : {&dev_a, &dev_b})
        if (const std::uint32_t mtu = mtu_bytes(d->port().active_mtu); bytes > mtu)
          throw usage_error(rdmakit::detail::cat("bench::loopback: a UD message of ", bytes, " bytes on ", d->name(),
                                                 ", whose port 1 carries at most ", mtu,
                                                 " bytes in one packet: give at most ", mtu));
    }
    // post() waits for a send credit: with no slot it waited out every timeout.
    if (o.caps.max_send_wr == 0)
      throw usage_error("bench::loopback: loopback_options::caps.max_send_wr = 0: side a posts, so its send queue "
                        "needs at least one slot (default 64)");
    if (std::uint64_t{o.caps.max_send_wr} + o.caps.max_recv_wr > static_cast<std::uint64_t>(INT_MAX))
      throw usage_error(rdmakit::detail::cat("bench::loopback: loopback_options::caps asks for ", o.caps.max_send_wr,
                                             " send and ", o.caps.max_recv_wr,
                                             " receive WRs, more than a CQ can count (each side's CQ holds both)"));
    // A CQ holds each side's sends and receives: past the device's largest, the error
    // named create_cq(), which the caller never called.
    for (const device<B>* d : {&dev_a, &dev_b})
      if (const std::uint64_t cqe = std::uint64_t{o.caps.max_send_wr} + o.caps.max_recv_wr; cqe > d->attr().max_cqe)
        throw usage_error(rdmakit::detail::cat(
            "bench::loopback: loopback_options::caps asks for ", o.caps.max_send_wr, " send and ",
            o.caps.max_recv_wr, " receive WRs, a CQ of ", cqe, " entries on each side (it holds both), and ",
            d->name(), "'s CQs hold at most ", d->attr().max_cqe, ": ask for fewer"));
    init_(a, dev_a);
    init_(b, dev_b);
    auto qa = rdmakit::create_qp<T, S>(a.pd, a.cq, o.caps);
    auto qb = rdmakit::create_qp<T, S>(b.pd, b.cq, o.caps);
    if constexpr (T::connected) {
      const endpoint ea = qa.local_endpoint(), eb = qb.local_endpoint();
      a.qp = std::move(qa).connect(eb, o.connect);
      b.qp = std::move(qb).connect(ea, o.connect);
    } else {
      a.qp = std::move(qa).activate();
      b.qp = std::move(qb).activate();
      address_(a, b);
      address_(b, a);
    }
  }
  /// As above for the combination `cfg` names (class template argument deduction:
  /// `bench::loopback lp(cfg, dev, bytes)`).
  loopback(config<T, S, P>, const device<B>& dev, std::size_t bytes, const loopback_options& o = {})
      : loopback(dev, dev, bytes, o) {}
  /// As above, side a on `dev_a` and side b on `dev_b`.
  loopback(config<T, S, P>, const device<B>& dev_a, const device<B>& dev_b, std::size_t bytes,
           const loopback_options& o = {})
      : loopback(dev_a, dev_b, bytes, o) {}

  /// The message size the buffers were made for.
  std::size_t bytes() const noexcept { return bytes_; }

  /// Posts `o` on side a; when a has no send credit left it first waits on a's CQ
  /// (policy P) until a completion returns one, up to the timeout (then the result is
  /// sq_full). A SEND or a WRITE with immediate takes one of b's receives: unless b has
  /// one that no message on the way will take, it is posted first, after waiting on
  /// b's CQ for room when b's receive queue is full (up to the timeout, then the result
  /// is rq_full: messages on the way were lost, or b stalled). A queue pair in ERR has
  /// nothing to wait for: the post says qp_error at once. A refused post or a failed
  /// completion counts in `failures`.
  template <operation Op>
  post_result post(const Op& o, std::uint64_t wr_id = 0, send_flags flags = send_flags::none) {
    if (RDMAKIT_UNLIKELY(a.qp.send_credits() == 0) && !wait_for_credit_()) return {post_status::sq_full, 0, 0};
    constexpr bool takes = takes_receive(Op::code);
    if constexpr (takes)
      if (!receives_for_next_(1)) return {post_status::rq_full, 0, 0};
    const post_result r = a.qp.post(o, wr_id, flags);
    if (!r)
      failed_(r.message());
    else if constexpr (takes)
      ++sent;
    return r;
  }
  /// Posts a WR made by `a.qp.prepare(...)`, as post(op) does.
  template <std::size_t Sges, bool SignalEach>
  post_result post(prepared_send<B, T, Sges, SignalEach>& w) {
    // (post(op)'s steps, the receive decided at run time. One helper taking the post as
    // a lambda cost bench/run_mock_rate.sh's WRITE loops 7 instructions a message.)
    if (RDMAKIT_UNLIKELY(a.qp.send_credits() == 0) && !wait_for_credit_()) return {post_status::sq_full, 0, 0};
    const bool takes = w.needs_receive();
    if (takes && !receives_for_next_(1)) return {post_status::rq_full, 0, 0};
    const post_result r = a.qp.post(w);
    if (!r)
      failed_(r.message());
    else if (takes)
      ++sent;
    return r;
  }
  /// Posts a list made by `decltype(lp.a.qp)::make_batch<N>()` on side a: waits on a's
  /// CQ while the send queue has fewer free slots than the list has WRs (up to the
  /// timeout, then the result is sq_full), after giving b a receive for each of its WRs
  /// that takes one (receives_needed(); more than caps.max_recv_wr is refused, rq_full).
  /// A refusal counts in `failures`, as post(op)'s.
  template <std::size_t Max, std::size_t SgePerWr, bool SignalEach>
  post_result post(send_batch<B, T, Max, SgePerWr, SignalEach>& list) {
    const std::size_t takes = list.receives_needed();
    if (takes != 0 && !receives_for_next_(takes)) return {post_status::rq_full, 0, 0};
    post_result r = a.qp.post(list);
    while (r.status == post_status::sq_full && wait_(a)) r = a.qp.post(list);
    if (r.ok()) {
      sent += takes;
    } else {
      sent += takes - list.receives_needed();  // the WRs posted before a refused one
      if (r.status != post_status::sq_full) failed_(r.message());  // (sq_full: a wait timed out)
    }
    return r;
  }
  /// SENDs `a.msg` to side b (UD: through `a.to`), as post() does.
  post_result send(std::uint64_t wr_id = 0, send_flags flags = send_flags::none) {
    if constexpr (T::needs_ah)
      return post(op::ud_send<B>{a.msg, a.to}, wr_id, flags);
    else
      return post(op::send<>{a.msg}, wr_id, flags);
  }
  /// Reaps side b's CQ and posts receives (the whole of `b.buf`) until b's receive
  /// queue is full again. Optional: post() gives each message a receive itself.
  void refill() {
    (void)b.cq.drain(reap_());
    const std::uint32_t want = opts_.caps.max_recv_wr;
    for (std::uint32_t n = b.qp.posted_recvs(); n < want; ++n, ++recvs_posted_)
      if (const post_result r = b.qp.post_recv(b.buf.local(), 0); !r) {
        failed_(r.message());
        break;
      }
  }
  /// Waits for every WR posted on side a to complete and for b to receive every
  /// message a sent, reaps both CQs, and calls `st.SkipWithError` when a post or
  /// completion failed, a wait timed out, or a message never arrived. Call it after the
  /// timing loop (its waits are not timed: with the default minimum time they are a
  /// small part of a run, with a few iterations a large one); true when nothing went
  /// wrong.
  bool finish(benchmark::State& st) {
    // The WRs after the last signaled one have no completion of their own, so their
    // failures were never seen: one more WR, signaled, completes after them (in order).
    if (a.qp.unsignaled_run() != 0 && !a.qp.in_error()) (void)post_signaled_();
    // Held slots belong to WRs not polled yet (in ERR their flushes are already there:
    // the drains below take them).
    while (a.qp.send_credits() < opts_.caps.max_send_wr && !a.qp.in_error())
      if (!wait_(a)) break;
    (void)a.cq.drain(reap_());
    // RC's messages are in b's CQ once a's completions are; UC's and UD's may still be
    // on the way, or lost (their sender completes without an acknowledgement).
    while (receives_done_() < sent && !b.qp.in_error() && b.cq.wait(reap_(), opts_.timeout)) {
    }
    (void)b.cq.drain(reap_());
    if (const std::uint64_t done = receives_done_(); done < sent)
      failed_(rdmakit::detail::cat(sent - done, " of the ", sent,
                                   " messages a sent never reached b (lost on the way, or failed), so a rate that "
                                   "counts them is wrong"));
    if (failures == 0 && timeouts == 0) return true;
    std::string why = "rdmakit::bench::loopback: " + std::to_string(failures) + " failed post(s) or completion(s), " +
                      std::to_string(timeouts) + " wait(s) timed out";
    if (!first_error_.empty()) why += "; first: " + first_error_;
    st.SkipWithError(why.c_str());
    return false;
  }

 private:
  void init_(side& s, const device<B>& dev) {
    s.pd = dev.create_pd();
    s.cq = dev.template create_cq<P>(static_cast<int>(opts_.caps.max_send_wr + opts_.caps.max_recv_wr));
    s.buf = rdmakit::allocate<buffer_access>(s.pd, bytes_ + T::recv_offset);
    s.msg = s.buf.local(0, bytes_);
    s.remote = s.buf.remote().sub(0, bytes_);
  }
  static void address_(side& from, const side& to) {
    const endpoint e = to.qp.local_endpoint();
    from.ah = from.pd.create_ah(e);
    from.to = from.ah.to(e);
  }
  auto reap_() {
    return [this](const completion<B>& c) {
      if (!c.ok())
        failed_(c.status_message());
      else if (c.is_recv()) {
        ++received;
      }
    };
  }
  // True once b has `n` receives that no message on the way will take (posting them
  // while b's receive queue has room, else waiting on b's CQ for receives to complete);
  // false when none came within the timeout, or b refused a receive, or n is more than
  // b's queue holds. Messages lost on the way keep their receives counted as taken:
  // past max_recv_wr of them, the wait times out.
  bool receives_for_next_(std::size_t n) {
    if (n > opts_.caps.max_recv_wr) {
      failed_(opts_.caps.max_recv_wr == 0
                  ? std::string("a SEND or a WRITE with immediate needs a receive at b, and "
                                "loopback_options::caps.max_recv_wr is 0: give b a receive queue (the default is 64)")
                  : rdmakit::detail::cat("a post list of ", n, " WRs that take a receive at b, and "
                                         "loopback_options::caps.max_recv_wr is ", opts_.caps.max_recv_wr,
                                         ": post shorter lists, or give b a deeper receive queue"));
      return false;
    }
    for (;;) {
      const std::uint64_t on_the_way = sent - receives_done_();
      const std::uint32_t posted = b.qp.posted_recvs();
      if (posted >= on_the_way + n) return true;
      if (posted < opts_.caps.max_recv_wr) {
        if (const post_result r = b.qp.post_recv(b.buf.local(), 0); !r) {
          failed_(r.message());
          return false;
        }
        ++recvs_posted_;
      } else if (b.cq.drain(reap_()) == 0 && !wait_(b)) {
        return false;
      }
    }
  }
  // Receives of b completed, whoever polled them (the ledger counts them at the poll):
  // a latency loop reaps b's CQ itself. (Receives a loop posted on b itself hide some
  // from this count, never more than there are: at worst those this loopback reaped.)
  std::uint64_t receives_done_() const noexcept {
    const std::uint64_t pending = b.qp.posted_recvs();
    return pending <= recvs_posted_ ? std::max(received, recvs_posted_ - pending) : received;
  }
  // One WR posted signaled, of one byte: a WRITE to b (RC, UC), else a SEND.
  post_result post_signaled_() {
    if constexpr (T::needs_ah)
      return post(op::ud_send<B>{a.msg.first(1), a.to}, 0, send_flags::signaled);
    else if constexpr (T::supports_write)
      return post(op::write{a.msg.first(1), b.remote.sub(0, 1)}, 0, send_flags::signaled);
    else
      return post(op::send<>{a.msg.first(1)}, 0, send_flags::signaled);
  }
  // Waits on a's CQ until a send credit comes back (true), the timeout passes (false), or
  // a's queue pair is in ERR (true: its post says qp_error). Out of line: once per reap.
  RDMAKIT_NOINLINE bool wait_for_credit_() {
    while (a.qp.send_credits() == 0 && !a.qp.in_error())
      if (!wait_(a)) return false;
    return true;
  }
  bool wait_(side& s) {
    const wait_result r = s.cq.wait(reap_(), opts_.timeout);
    if (r.failed()) failed_("waiting on the completion queue failed (errno " + std::to_string(r.error()) + ")");
    if (r.timed_out()) ++timeouts;
    return bool(r);
  }
  void failed_(std::string why) {
    if (first_error_.empty()) first_error_ = std::move(why);
    ++failures;
  }

  std::size_t bytes_ = 0;
  loopback_options opts_;
  std::string first_error_;
  std::uint64_t recvs_posted_ = 0;  // receives this loopback posted on b
};

}  // namespace bench

RDMAKIT_END_NAMESPACE
