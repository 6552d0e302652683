// Exception safety by allocation-failure injection: this program replaces the global
// operator new/delete (and aligned_alloc, asio's) with ones that can be told to fail the
// Nth allocation from now, on the calling thread only. Each scenario runs on a fresh mock
// fabric with N = 1, 2, 3, ... until a run no longer reaches its Nth allocation. For every
// N it must either complete or throw (std::bad_alloc or an rdmakit error); every object it
// made must destroy cleanly (ASan, LeakSanitizer); then a bystander queue pair made before
// must still work, each device must still give out its whole object limits, and the
// scenario run again without injection, on the same fabric, must succeed: nothing may be
// left half-registered. A scenario with a server thread hands the injection to it.
//
// Its own executable (test_allocation_failure): the replacement affects nothing else.
// RDMAKIT_OOM_FIRST=N starts each search at N, RDMAKIT_OOM_IN_A_ROW=K fails K allocations
// in a row each time; a std::terminate() prints where it was.
#include <rdmakit/async_completion_queue.hpp>
#include <rdmakit/async_queue_pair.hpp>
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/connection.hpp>
#include <rdmakit/connection_manager.hpp>
#include <rdmakit/device_events.hpp>
#include <rdmakit/event_loop.hpp>
#include <rdmakit/rdmakit.hpp>
#include <rdmakit/task.hpp>

#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <new>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

// ---------------------------------------------------------------------------------------
// The injecting allocator

namespace oom {
// 0: disarmed; n > 0: the nth allocation from now on this thread fails, and with it the
// next in_a_row - 1 (a handler that reports a failed allocation may need one itself).
thread_local long countdown = 0;
thread_local long in_a_row = 1;
thread_local long streak = 0;  // failures still to come right after the nth
thread_local bool fired = false;

inline bool fail_now() noexcept {
  if (streak > 0) {
    --streak;
    return true;
  }
  if (countdown <= 0 || --countdown != 0) return false;
  fired = true;
  streak = in_a_row - 1;
  return true;
}
void* allocate(std::size_t n) {
  if (fail_now()) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* allocate(std::size_t n, std::align_val_t al) {
  if (fail_now()) throw std::bad_alloc();
  const auto a = std::max(static_cast<std::size_t>(al), sizeof(void*));
  void* p = nullptr;
  if (::posix_memalign(&p, a, n ? n : 1) == 0) return p;
  throw std::bad_alloc();
}
void* allocate_nothrow(std::size_t n) noexcept {
  if (fail_now()) return nullptr;
  return std::malloc(n ? n : 1);
}
void* allocate_nothrow(std::size_t n, std::align_val_t al) noexcept {
  if (fail_now()) return nullptr;
  const auto a = std::max(static_cast<std::size_t>(al), sizeof(void*));
  void* p = nullptr;
  return ::posix_memalign(&p, a, n ? n : 1) == 0 ? p : nullptr;
}

/// While it lives, no allocation of this thread counts (or fails).
class paused {
 public:
  paused() noexcept : saved_(std::exchange(countdown, 0)), saved_streak_(std::exchange(streak, 0)) {}
  paused(const paused&) = delete;
  paused& operator=(const paused&) = delete;
  ~paused() {
    countdown = saved_;
    streak = saved_streak_;
  }

 private:
  long saved_;
  long saved_streak_;
};

/// Moves this thread's armed injection (if any) to another thread: take() here,
/// adopt() there at its start, and give_back() there at its end, whose result is
/// returned() here (so the driver sees whether it fired).
struct handoff {
  long countdown = 0;
  long in_a_row = 1;
};
inline handoff take() noexcept { return {std::exchange(countdown, 0), in_a_row}; }
inline void adopt(handoff h) noexcept {
  fired = false;
  countdown = h.countdown;
  in_a_row = h.in_a_row;
  streak = 0;
}
inline bool give_back() noexcept {
  countdown = 0;
  streak = 0;
  return std::exchange(fired, false);
}
inline void returned(bool fired_there) noexcept {
  if (fired_there) fired = true;
}

/// Arms the injection on this thread: the nth allocation from now fails, and the
/// `row - 1` after it.
void arm(long n, long row = 1) noexcept {
  fired = false;
  countdown = n;
  in_a_row = row;
  streak = 0;
}
/// Disarms it; true when the armed failure happened.
bool disarm() noexcept {
  countdown = 0;
  streak = 0;
  return std::exchange(fired, false);
}
}  // namespace oom

void* operator new(std::size_t n) { return oom::allocate(n); }
void* operator new[](std::size_t n) { return oom::allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return oom::allocate(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return oom::allocate(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return oom::allocate_nothrow(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return oom::allocate_nothrow(n); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return oom::allocate_nothrow(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return oom::allocate_nothrow(n, a);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

// asio allocates its handlers' memory with std::aligned_alloc, not operator new: this
// program's definition takes the place of the C library's for the code linked into it.
extern "C" void* aligned_alloc(std::size_t align, std::size_t n) noexcept {
  if (oom::fail_now()) return nullptr;
  void* p = nullptr;
  return ::posix_memalign(&p, std::max(align, sizeof(void*)), n ? n : 1) == 0 ? p : nullptr;
}

// ---------------------------------------------------------------------------------------
// The driver

namespace {
using namespace rdmakit;
using namespace std::chrono_literals;
using rdmakit::access;

// The mock's data path (post, bind a type 1 window, poll, notify, events) is noexcept,
// and it allocates where hardware does not: it copies payloads, and its rings grow on
// first use. A failure injected there could only end in std::terminate(), which says
// nothing about rdmakit's own code; this backend is the mock with no injection inside
// those calls (each allocation there neither counts nor fails).
struct mock_data_path_exempt : backends::mock {
  using base = backends::mock;
  static int get_async_event(context c, std::chrono::milliseconds t, async_event& out) noexcept {
    oom::paused p;
    return base::get_async_event(c, t, out);
  }
  static int poll_cq(cq c, int n, wc* out) noexcept {
    oom::paused p;
    return base::poll_cq(c, n, out);
  }
  static int req_notify_cq(cq c, bool solicited_only) noexcept {
    oom::paused p;
    return base::req_notify_cq(c, solicited_only);
  }
  static int get_cq_event(channel ch, std::chrono::milliseconds t, cq& out) noexcept {
    oom::paused p;
    return base::get_cq_event(ch, t, out);
  }
  static void ack_cq_events(cq c, unsigned n) noexcept {
    oom::paused p;
    base::ack_cq_events(c, n);
  }
  static bool progress_pending(channel ch) noexcept {
    oom::paused p;
    return base::progress_pending(ch);
  }
  static int post_send(qp q, send_wr* wr, send_wr** bad) noexcept {
    oom::paused p;
    return base::post_send(q, wr, bad);
  }
  static int post_recv(qp q, recv_wr* wr, recv_wr** bad) noexcept {
    oom::paused p;
    return base::post_recv(q, wr, bad);
  }
  static int post_srq_recv(srq s, recv_wr* wr, recv_wr** bad) noexcept {
    oom::paused p;
    return base::post_srq_recv(s, wr, bad);
  }
  static int bind_mw(qp q, mw w, mr m, std::uint64_t addr, std::uint64_t length, access rights, std::uint64_t wr_id,
                     send_flags flags) noexcept {
    oom::paused p;
    return base::bind_mw(q, w, m, addr, length, rights, wr_id, flags);
  }
  static int arm_srq_limit(srq s, std::uint32_t limit) noexcept {
    oom::paused p;
    return base::arm_srq_limit(s, limit);
  }
};
static_assert(verbs_backend<mock_data_path_exempt>);
using B = mock_data_path_exempt;
constexpr access rw = access::local_write | access::remote_write | access::remote_read;

/// A scenario's own check failed: not an injected failure, a wrong result.
struct scenario_failed {
  const char* what;
};
void ensure(bool ok, const char* what) {
  if (!ok) throw scenario_failed{what};
}

/// How the runs of one scenario went.
struct outcome {
  long allocations = 0;  // the run without injection reached this many (the last N tried)
  long completed = 0;    // runs that completed although one allocation failed (swallowed)
  long bad_alloc = 0;    // runs that threw std::bad_alloc
  long rdmakit_error = 0;  // runs that threw usage_error, verbs_error, cm_error or exchange_error
};

constexpr long max_failures = 600;

// What runs now, for the terminate handler: an injected std::bad_alloc that reaches a
// noexcept function ends the program, and this says where the search was.
extern "C" [[gnu::weak]] void __sanitizer_print_stack_trace();  // ASan's, when linked
const char* current_scenario = "";
long current_n = 0;
[[noreturn]] void on_terminate() noexcept {
  oom::disarm();
  std::fprintf(stderr, "std::terminate() in scenario \"%s\" with allocation %ld failing\n", current_scenario,
               current_n);
  if (__sanitizer_print_stack_trace) __sanitizer_print_stack_trace();
  std::abort();
}
// RDMAKIT_OOM_FIRST=N starts each scenario's search at N (to look past a known failure).
// The warm-up run goes first all the same.
long first_n() {
  const char* e = std::getenv("RDMAKIT_OOM_FIRST");
  return e ? std::max(1L, std::atol(e)) : 1L;
}
// RDMAKIT_OOM_IN_A_ROW=K makes every scenario fail K allocations in a row (at least its own).
long in_a_row_at_least(long k) {
  const char* e = std::getenv("RDMAKIT_OOM_IN_A_ROW");
  return std::max(k, e ? std::atol(e) : 1L);
}

/// Two RoCE devices ("mock0" 10.0.0.1, "mock1" 10.0.0.2) with small object limits, and
/// made before any failure is injected, a bystander: an RC pair with a region on each
/// side. After an injected failure the bystander must still carry a WRITE (the fabric's
/// tables still find its objects), and each device must still give out its whole limit of
/// every kind of object (no count left taken by an object that was never made).
struct world {
  static constexpr std::uint32_t limit = 16;
  static mock::fabric_config config() {
    mock::fabric_config c;
    for (const char* name : {"mock0", "mock1"}) {
      mock::device_config d;
      d.name = name;
      d.limits.max_pd = d.limits.max_cq = d.limits.max_mr = d.limits.max_qp = limit;
      d.limits.max_ah = d.limits.max_srq = limit;
      c.devices.push_back(d);
    }
    return c;
  }
  struct end {
    explicit end(mock::fabric& fab, const char* name)
        : dev(fab, name), pd(dev.create_pd()), cq(dev.create_cq(16)), mr(pd.allocate<rw>(64)) {}
    device<B> dev;
    protection_domain<B> pd;
    completion_queue<B> cq;
    memory_region<B, rw> mr;
  };
  using live_qp = queue_pair<B, rc, signal_all, qp_state::rts>;

  mock::fabric fab{config()};
  end x{fab, "mock0"}, y{fab, "mock1"};
  std::pair<live_qp, live_qp> pair = connect_(x, y);
  std::uint64_t writes = 0;

  /// Throws scenario_failed when the fabric lost track of the bystander or of a count.
  void check() {
    ++writes;
    std::memcpy(x.mr.data(), &writes, sizeof writes);
    ensure(pair.first.write(x.mr.local(0, 8), y.mr.remote().sub(8, 8), writes).ok(), "bystander WRITE posted");
    std::optional<wc_status> st;
    for (int i = 0; i < 1000 && !st; ++i) (void)x.cq.poll([&](const auto& c) { st = c.status(); });
    ensure(st == wc_status::success, "bystander WRITE completed");
    ensure(std::memcmp(y.mr.data() + 8, &writes, sizeof writes) == 0, "bystander WRITE landed");
    for (end* e : {&x, &y}) probe_(*e);
  }

 private:
  static std::pair<live_qp, live_qp> connect_(end& x, end& y) {
    auto a = x.pd.create_qp<rc>(x.cq, qp_cap{4, 4});
    auto b = y.pd.create_qp<rc>(y.cq, qp_cap{4, 4});
    const endpoint ea = a.local_endpoint();
    auto la = std::move(a).connect(b.local_endpoint());
    return {std::move(la), std::move(b).connect(ea)};
  }
  // Makes as many objects of each kind as the device has left, beside the bystander's one
  // PD, CQ, MR and QP: it throws (scenario_failed) when a count is off.
  static void probe_(end& e) {
    try {
      std::vector<protection_domain<B>> pds;
      for (std::uint32_t i = 1; i < limit; ++i) pds.push_back(e.dev.create_pd());
      std::vector<completion_queue<B>> cqs;
      for (std::uint32_t i = 1; i < limit; ++i) cqs.push_back(e.dev.create_cq(limit * 4));
      std::vector<memory_region<B, rw>> mrs;
      for (std::uint32_t i = 1; i < limit; ++i) mrs.push_back(e.pd.allocate<rw>(8));
      std::vector<queue_pair<B, rc>> qps;
      for (std::uint32_t i = 1; i < limit; ++i) qps.push_back(e.pd.create_qp<rc>(cqs[0], qp_cap{1, 1}));
      std::vector<shared_receive_queue<B>> srqs;
      for (std::uint32_t i = 0; i < limit; ++i) srqs.push_back(e.pd.create_srq({.max_wr = 1, .max_sge = 1}));
      std::vector<address_handle<B>> ahs;
      for (std::uint32_t i = 0; i < limit; ++i) ahs.push_back(e.pd.create_ah(qps[0].local_endpoint()));
    } catch (const verbs_error&) {
      throw scenario_failed{"a device no longer gives out its whole limit of some object (a count leaked)"};
    }
  }
};

/// Runs `scenario(w)` once without injection, then for N = 1, 2, ... on a fresh world
/// `w` with the Nth allocation failing, until a run makes fewer than N allocations.
/// After each injected run, the world's check() and the scenario run again without
/// injection on the same world must succeed. Fails the test on anything but completion
/// or an expected exception.
template <class F>
outcome for_each_failure(const char* name, F&& scenario, long in_a_row = 1) {
  INFO("scenario: ", name);
  outcome out;
  std::set_terminate(on_terminate);
  current_scenario = name;
  {
    world w;  // warm-up: function-local statics, thread-locals, the harness's own state
    scenario(w);
    w.check();
  }
  for (long n = first_n();; ++n) {
    current_n = n;
    if (n > max_failures) {
      FAIL("more than ", max_failures, " allocations: raise max_failures or shrink the scenario");
      return out;
    }
    std::string failure;  // built only with the injection off
    std::optional<world> w;
    w.emplace();
    oom::arm(n, in_a_row_at_least(in_a_row));
    try {
      scenario(*w);
      const bool fired = oom::disarm();
      if (!fired) {
        out.allocations = n - 1;
        return out;
      }
      ++out.completed;
    } catch (const std::bad_alloc&) {
      oom::disarm();
      ++out.bad_alloc;
    } catch (const usage_error&) {
      oom::disarm();
      ++out.rdmakit_error;
    } catch (const verbs_error&) {
      oom::disarm();
      ++out.rdmakit_error;
    } catch (const cm_error&) {
      oom::disarm();
      ++out.rdmakit_error;
    } catch (const exchange_error&) {
      oom::disarm();
      ++out.rdmakit_error;
    } catch (const scenario_failed& e) {
      oom::disarm();
      failure = std::string("its check failed: ") + e.what;
    } catch (const std::exception& e) {
      oom::disarm();
      failure = std::string("it threw ") + typeid(e).name() + ": " + e.what();
    } catch (...) {
      oom::disarm();
      failure = "it threw something that is no std::exception";
    }
    if (!failure.empty()) {
      FAIL("with allocation ", n, " failing, ", failure);
      return out;
    }
    try {
      w->check();
      scenario(*w);
      w->check();
    } catch (const scenario_failed& e) {
      FAIL("after allocation ", n, " failed, the world or the scenario run again without injection failed: ",
           std::string(e.what));
      return out;
    } catch (const std::exception& e) {
      FAIL("after allocation ", n, " failed, the scenario run again without injection threw ", typeid(e).name(),
           ": ", e.what());
      return out;
    }
  }
}

void report(const char* name, const outcome& o) {
  MESSAGE(std::string(name), ": ", o.allocations, " allocations, each failing in turn: ", o.bad_alloc, " bad_alloc, ",
          o.rdmakit_error, " rdmakit errors, ", o.completed, " completed anyway");
  CHECK(o.allocations > 0);
}

/// Polls `cq` until one completion came (at most `max_polls` polls); its status.
template <class CQ>
std::optional<wc_status> one_completion(CQ& cq, int max_polls = 1000) {
  std::optional<wc_status> st;
  for (int i = 0; i < max_polls && !st; ++i) (void)cq.poll([&](const auto& c) { st = c.status(); });
  return st;
}

/// A scenario's two devices, with a PD and a CQ of 64 entries on each (made in that order).
template <polling PX = busy_poll<>, polling PY = busy_poll<>>
struct two_sides {
  explicit two_sides(mock::fabric& fab)
      : dx(fab, "mock0"), dy(fab, "mock1"), px(dx.create_pd()), py(dy.create_pd()),
        cx(dx.template create_cq<PX>(64)), cy(dy.template create_cq<PY>(64)) {}
  device<B> dx, dy;
  protection_domain<B> px, py;
  completion_queue<B, PX> cx;
  completion_queue<B, PY> cy;

  /// An RC pair connected across the two devices (4 WRs each way).
  std::pair<queue_pair<B, rc, signal_all, qp_state::rts>, queue_pair<B, rc, signal_all, qp_state::rts>> connect_rc() {
    auto a = px.template create_qp<rc>(cx, qp_cap{4, 4});
    auto b = py.template create_qp<rc>(cy, qp_cap{4, 4});
    const endpoint ea = a.local_endpoint();
    auto la = std::move(a).connect(b.local_endpoint());
    return {std::move(la), std::move(b).connect(ea)};
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// The verbs objects

TEST_CASE("allocation failure: device, PD, CQ, memory registration") {
  auto o = for_each_failure("setup", [&](world& w) {
    mock::fabric& fab = w.fab;
    device<B> dev(fab, "mock0");
    auto pd = dev.create_pd();
    auto cq = dev.create_cq(64);
    auto mr = pd.allocate<rw>(4096);
    std::vector<char> buf(256);
    auto mr2 = pd.register_memory<access::local_write>(buf.data(), buf.size());
    // Enough regions and queue pairs that the fabric's key and QP-number tables grow while
    // the bystander's entries are in them.
    std::vector<memory_region<B, access::local_write>> more;
    for (int i = 0; i < 8; ++i) more.push_back(pd.register_memory<access::local_write>(buf.data() + i, 8));
    std::vector<queue_pair<B, rc>> qps;
    for (int i = 0; i < 8; ++i) qps.push_back(pd.create_qp<rc>(cq, qp_cap{1, 1}));
    ensure(mr.remote().length() == 4096, "region length");
  });
  report("setup", o);
}

TEST_CASE("allocation failure: an RC pair connected, one WRITE and its completion") {
  auto o = for_each_failure("rc write", [&](world& w) {
    two_sides<> sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto src = px.allocate<rw>(64);
    auto dst = py.allocate<rw>(64);
    auto a = px.create_qp<rc>(cx, qp_cap{8, 8});
    auto b = py.create_qp<rc>(cy, qp_cap{8, 8});
    const endpoint ea = a.local_endpoint();
    auto la = std::move(a).connect(b.local_endpoint());
    auto lb = std::move(b).connect(ea);
    std::memcpy(src.data(), "injected", 8);
    ensure(la.write(src.local(0, 8), dst.remote().sub(0, 8), 1).ok(), "write posted");
    ensure(one_completion(cx) == wc_status::success, "write completed");
    ensure(std::memcmp(dst.data(), "injected", 8) == 0, "write landed");
  });
  report("rc write", o);
}

TEST_CASE("allocation failure: send_batch and prepared_send") {
  auto o = for_each_failure("batch", [&](world& w) {
    two_sides<> sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto src = px.allocate<rw>(64);
    auto dst = py.allocate<rw>(64);
    auto a = px.create_qp<rc, signal_every<2>>(cx, qp_cap{8, 8});
    auto b = py.create_qp<rc, signal_every<2>>(cy, qp_cap{8, 8});
    const endpoint ea = a.local_endpoint();
    auto la = std::move(a).connect(b.local_endpoint());
    auto lb = std::move(b).connect(ea);
    auto batch = la.make_batch<4>();
    ensure(batch.add(op::write{src.local(0, 8), dst.remote().sub(0, 8)}, 1), "batch add 1");
    ensure(batch.add(op::write{src.local(8, 8), dst.remote().sub(8, 8)}, 2), "batch add 2");
    ensure(la.post(batch).ok(), "batch posted");
    auto pw = la.prepare(op::write{src.local(16, 8), dst.remote().sub(16, 8)}, 3);
    ensure(la.post(pw).ok(), "prepared posted");
    ensure(la.post(pw, 4).ok(), "prepared posted again");
    int done = 0;
    for (int i = 0; i < 1000 && done < 2; ++i) done += cx.poll([&](const auto& c) {
      ensure(c.status() == wc_status::success, "batch completion ok");
    });
    ensure(done == 2, "two signaled completions");
  });
  report("batch", o);
}

TEST_CASE("allocation failure: a shared receive queue with two queue pairs") {
  auto o = for_each_failure("srq", [&](world& w) {
    two_sides<> sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto srq = py.create_srq({.max_wr = 8, .max_sge = 1});
    auto a1 = px.create_qp<rc>(cx, qp_cap{4, 0});
    auto a2 = px.create_qp<rc>(cx, qp_cap{4, 0});
    auto b1 = py.create_qp<rc>(cy, srq, qp_cap{4, 0});
    auto b2 = py.create_qp<rc>(cy, srq, qp_cap{4, 0});
    const endpoint e1 = a1.local_endpoint(), e2 = a2.local_endpoint();
    auto l1 = std::move(a1).connect(b1.local_endpoint());
    auto l2 = std::move(a2).connect(b2.local_endpoint());
    auto r1 = std::move(b1).connect(e1);
    auto r2 = std::move(b2).connect(e2);
    auto src = px.allocate<rw>(64);
    auto dst = py.allocate<rw>(256);
    ensure(srq.post_recv(dst.local(0, 64), 10).ok(), "srq recv 1");
    ensure(srq.post_recv(dst.local(64, 64), 11).ok(), "srq recv 2");
    std::uint64_t seen[2] = {0, 0};
    cy.on(r1, [&](const completion<B>& c) { seen[0] = c.wr_id(); });
    cy.on(r2, [&](const completion<B>& c) { seen[1] = c.wr_id(); });
    ensure(l1.send(src.local(0, 4), 1).ok(), "send 1");
    ensure(l2.send(src.local(0, 4), 2).ok(), "send 2");
    int sent = 0;
    for (int i = 0; i < 1000 && sent < 2; ++i) sent += cx.poll([](const auto&) {});
    ensure(sent == 2, "sends completed");
    for (int i = 0; i < 1000 && (!seen[0] || !seen[1]); ++i) (void)cy.dispatch();
    ensure(seen[0] == 10 && seen[1] == 11, "receives routed to each queue pair");
  });
  report("srq", o);
}

TEST_CASE("allocation failure: UD datagrams through an address handle") {
  auto o = for_each_failure("ud", [&](world& w) {
    two_sides<> sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto a = px.create_qp<ud>(cx, qp_cap{4, 4}).activate();
    auto b = py.create_qp<ud>(cy, qp_cap{4, 4}).activate();
    auto ah = px.create_ah(b.local_endpoint());
    auto tx = px.allocate<access::local_write>(256);
    auto rx = py.allocate<access::local_write>(256);
    std::memcpy(tx.data(), "datagram", 8);
    ensure(b.post_recv(rx.local(), 2).ok(), "ud recv");
    ensure(a.send(ah.to(b.qp_num()), tx.local(0, 8), 3).ok(), "ud send");
    ensure(one_completion(cy) == wc_status::success, "ud received");
    ensure(std::memcmp(rx.data() + 40, "datagram", 8) == 0, "ud payload after the GRH");
  });
  report("ud", o);
}

// A QP destroyed with receives posted may leave their flushes in its CQ (rxe does not
// clean it): their room stays held until they are polled, or a poll finds the CQ empty.
// Out of memory for the record of that, the room was let go at once: a new QP that did
// not fit beside the flushes was accepted, and on rxe the CQ could overrun.
TEST_CASE("allocation failure: a destroyed QP's completions keep their room in its CQ") {
  auto o = for_each_failure("departed", [&](world& w) {
    world::end& e = w.x;
    auto cq = e.dev.create_cq(8);
    const auto depth = static_cast<std::uint32_t>(cq.capacity()) / 2 + 1;  // two of them do not fit
    {
      auto a = e.pd.create_qp<rc>(cq, qp_cap{1, depth});
      for (std::uint32_t i = 0; i < depth; ++i) ensure(a.post_recv(e.mr.local(0, 8), i).ok(), "receive posted");
    }
    bool refused = false;
    try {
      auto b = e.pd.create_qp<rc>(cq, qp_cap{1, depth});
    } catch (const usage_error&) {
      refused = true;
    }
    ensure(refused, "a QP that does not fit beside a destroyed one's flushes is refused");
  });
  report("departed", o);
}

// A queue pair whose attach to its CQ ran out of memory (making the room for its record)
// had not added its entries to the CQ's reserve, but its destruction took them away:
// another queue pair's share was given back, and a queue pair that did not fit was
// accepted (on a device, the CQ could overrun).
TEST_CASE("allocation failure: a queue pair that could not attach to its CQ takes no other's room from it") {
  auto o = for_each_failure("attach", [&](world& w) {
    world::end& e = w.x;
    auto cq = e.dev.create_cq(8);
    const auto half = static_cast<std::uint32_t>(cq.capacity()) / 2;
    auto a = e.pd.create_qp<rc>(cq, qp_cap{half, 0});
    try {
      auto b = e.pd.create_qp<rc>(cq, qp_cap{1, 0});
    } catch (const std::bad_alloc&) {
    }
    bool refused = false;
    try {
      auto c = e.pd.create_qp<rc>(cq, qp_cap{static_cast<std::uint32_t>(cq.capacity()) - half + 1, 0});
    } catch (const usage_error&) {
      refused = true;
    }
    ensure(refused, "a queue pair that does not fit beside the first one is refused");
  });
  report("attach", o);
}

TEST_CASE("allocation failure: a queue-pair pool, a memory window, an event-driven CQ's wait") {
  auto o = for_each_failure("pool and window", [&](world& w) {
    two_sides<event_driven<>> sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto src = px.allocate<rw>(64);
    auto lent = py.allocate<rw | access::mw_bind>(4096);
    auto local = px.create_qp_pool<rc>(cx, 2, qp_cap{8, 8});
    auto peer = py.create_qp_pool<rc>(cy, 2, qp_cap{8, 8});
    const auto mine = local.local_endpoints(), theirs = peer.local_endpoints();
    auto pool = std::move(local).connect(theirs);
    auto peers = std::move(peer).connect(mine);
    auto win = py.alloc_window<access::remote_write, mw_type::type1>();
    ensure(win.bind(peers[0], lent, 1024, 1024, 1).ok(), "window bound");
    ensure(one_completion(cy) == wc_status::success, "bind completed");
    std::memcpy(src.data(), "windowed", 8);
    for (int i = 0; i < 2; ++i)
      ensure(pool.next().write(src.local(0, 8), win.remote().sub(8 * i, 8), 10 + i).ok(), "pool WRITE posted");
    int done = 0;
    for (int tries = 0; tries < 20 && done < 2; ++tries)
      (void)cx.wait([&](const completion<B>& c) { done += c.ok() && pool.find(c.qp_num()) != nullptr; }, 100ms);
    ensure(done == 2, "both pool WRITEs completed, each on a pool member");
    ensure(std::memcmp(lent.data() + 1032, "windowed", 8) == 0, "WRITE through the window landed");
  });
  report("pool and window", o);
}

// ---------------------------------------------------------------------------------------
// Replacing and taking back queue pairs

namespace {
// The data-path-exempt mock, except that it refuses the next `refuse_rts` RTR→RTS
// transitions after `allow_rts` more succeed (its refusal's own message may be the
// allocation that fails).
struct rts_refusing : mock_data_path_exempt {
  static inline int allow_rts = 0;
  static inline int refuse_rts = 0;
  static void modify_qp(qp q, const qp_attr& a, qp_attr_mask m) {
    if (a.state == qp_state::rts && refuse_rts > 0) {
      if (allow_rts > 0) {
        --allow_rts;
      } else {
        --refuse_rts;
        throw verbs_error("ibv_modify_qp", EINVAL, "injected: RTS refused");
      }
    }
    mock_data_path_exempt::modify_qp(q, a, m);
  }
};
static_assert(verbs_backend<rts_refusing>);

/// Runs `check` with the injection off; anything it throws is a failed check (not one of
/// the outcomes an injected failure may have).
template <class F>
void checked_after(const char* what, F&& check) {
  oom::paused off;
  try {
    check();
  } catch (const scenario_failed&) {
    throw;
  } catch (...) {
    throw scenario_failed{what};
  }
}

/// Completions of wr_id `id` polled from `cq` (each status counted).
template <class CQ>
std::vector<wc_status> completions_of(CQ& cq, std::uint64_t id) {
  std::vector<wc_status> got;
  for (int i = 0; i < 200; ++i) (void)cq.poll([&](const auto& c) { if (c.wr_id() == id) got.push_back(c.status()); });
  return got;
}
}  // namespace

// reset() promises that the old QP's outstanding WRs complete as flushes. Out of memory in
// the mock's move to ERR (its CQ ring grew for the flushes) lost them half-way while
// reset() returned a new QP; out of memory before anything changed emptied the handle and
// destroyed the old QP. Now: returned, the receive completes once as a flush; bad_alloc
// before the old QP changed, it is there as it was (the receive takes a message); bad_alloc
// making the new one, the handle is empty (documented).
TEST_CASE("allocation failure: reset() with a receive outstanding: flushed once, or nothing changed") {
  long kept = 0;
  auto o = for_each_failure("reset", [&](world& w) {
    two_sides sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto mx = px.allocate<rw>(64), my = py.allocate<rw>(64);
    auto [la, lb] = sides.connect_rc();
    ensure(la.post_recv(mx.local(0, 8), 900).ok(), "receive posted");
    std::optional<queue_pair<B, rc>> fresh;
    try {
      fresh.emplace(std::move(la).reset());
    } catch (const std::bad_alloc&) {
      if (la) {
        ++kept;
        checked_after("a reset() that ran out of memory left the queue pair as it was", [&, &lb = lb, &cx = cx] {
          ensure(lb.send(my.local(0, 8), 1).ok(), "a message to the kept queue pair posted");
          ensure(completions_of(cx, 900) == std::vector{wc_status::success}, "the kept receive took it, once");
        });
      }
      throw;
    }
    checked_after("a reset() that returned flushed the old receive", [&, &cx = cx] {
      ensure(completions_of(cx, 900) == std::vector{wc_status::wr_flush_err}, "the old receive flushed, once");
    });
  });
  report("reset", o);
  CHECK(kept > 0);
}

// A refused RTR→RTS takes the queue pair back to INIT (or replaces it, with receives
// posted). When the refusal's message ran out of memory, the bad_alloc went past that:
// the handle said INIT while the device had the QP in RTR, and connect could not be
// retried ("RTR->RTR: not a legal transition").
TEST_CASE("allocation failure: connect refused at RTR→RTS: the queue pair can connect again") {
  using R = rts_refusing;
  for (const bool with_receive : {false, true}) {
    CAPTURE(with_receive);
    auto o = for_each_failure(with_receive ? "refused connect, a receive posted" : "refused connect", [&](world& w) {
      device<R> dx(w.fab, "mock0"), dy(w.fab, "mock1");
      auto px = dx.create_pd(), py = dy.create_pd();
      auto cx = dx.create_cq(64), cy = dy.create_cq(64);
      auto mx = px.allocate<rw>(64), my = py.allocate<rw>(64);
      auto a = px.create_qp<rc>(cx, qp_cap{4, 4});
      auto b = py.create_qp<rc>(cy, qp_cap{4, 4});
      if (with_receive) ensure(a.post_recv(mx.local(0, 8), 900).ok(), "receive posted");
      R::refuse_rts = 1;
      std::exception_ptr refused;
      try {
        (void)std::move(a).connect(b.local_endpoint());
      } catch (...) {
        refused = std::current_exception();
      }
      R::refuse_rts = 0;
      ensure(refused != nullptr, "the refused connect threw");
      checked_after("the queue pair a refused connect left connects again", [&] {
        if (!a) return;  // the replacement could not be made: documented, the handle is empty
        auto again = a.in_error() ? std::move(a).reset() : std::move(a);
        auto la = std::move(again).connect(b.local_endpoint());
        auto lb = std::move(b).connect(la.local_endpoint());
        ensure(lb.write(my.local(0, 8), mx.remote().sub(0, 8), 2).ok(), "WRITE posted");
        ensure(one_completion(cy) == wc_status::success, "WRITE completed");
      });
    });
    report("refused connect", o);
  }
}

// A pool whose member's connect failed is emptied (the ones connected cannot go back).
// Out of memory there, only a verbs_error emptied it: the pool kept an empty member, one
// typed INIT in RTR, and a retry said "nothing was changed". (Out of memory before any
// member changed leaves it as it was.)
TEST_CASE("allocation failure: a pool whose member's connect is refused is left empty") {
  using R = rts_refusing;
  auto o = for_each_failure("refused pool", [&](world& w) {
    device<R> dx(w.fab, "mock0"), dy(w.fab, "mock1");
    auto px = dx.create_pd(), py = dy.create_pd();
    auto cx = dx.create_cq(64), cy = dy.create_cq(64);
    auto local = px.create_qp_pool<rc>(cx, 3, qp_cap{4, 4});
    auto peer = py.create_qp_pool<rc>(cy, 3, qp_cap{4, 4});
    const auto theirs = peer.local_endpoints();
    R::allow_rts = 1;  // the first member connects, the second is refused
    R::refuse_rts = 1;
    bool refused = false;
    try {
      (void)std::move(local).connect(theirs);
    } catch (...) {
      refused = true;
    }
    R::allow_rts = R::refuse_rts = 0;
    ensure(refused, "the refused pool connect threw");
    checked_after("the pool was emptied, or left as it was", [&] {
      if (local.size() == 0) return;
      // Out of memory before any member changed: a retry connects them all.
      auto pool = std::move(local).connect(theirs);
      ensure(pool.size() == 3, "the pool left as it was connects");
    });
  });
  report("refused pool", o);
}

// completion_queue::on() let go of the queue pair's handler before it made the new one:
// out of memory, the queue pair was left with none (its completions went to the fallback).
TEST_CASE("allocation failure: on() out of memory keeps the handler the queue pair had") {
  auto o = for_each_failure("on", [&](world& w) {
    two_sides sides(w.fab);
    auto& [dx, dy, px, py, cx, cy] = sides;
    auto mx = px.allocate<rw>(64), my = py.allocate<rw>(64);
    auto [la, lb] = sides.connect_rc();
    int first = 0, second = 0, fallback = 0;
    cx.on(la, [&](const completion<B>&) { ++first; });
    bool replaced = true;
    try {
      cx.on(la, [&](const completion<B>&) { ++second; });
    } catch (const std::bad_alloc&) {
      replaced = false;
    }
    checked_after("the queue pair's handler after on()", [&, &la = la, &cx = cx] {
      ensure(la.write(mx.local(0, 8), my.remote().sub(0, 8), 3).ok(), "WRITE posted");
      for (int i = 0; i < 100 && first + second + fallback == 0; ++i)
        (void)cx.dispatch([&](const completion<B>&) { ++fallback; });
      ensure(fallback == 0 && (replaced ? first == 0 && second == 1 : first == 1 && second == 0),
             "the handler in place took the completion");
    });
  });
  report("on", o);
}

// ---------------------------------------------------------------------------------------
// The coroutine layer

namespace {
using acq = async_completion_queue<B, event_driven<>>;
using rts = async_queue_pair<B, rc, signal_all, qp_state::rts>;

task<int> echo(rts& x, rts& y, memory_region<B, rw>& mx, memory_region<B, rw>& my) {
  auto r = y.recv(my.local(0, 64));
  std::memcpy(mx.data(), "coro", 4);
  wr_result<B> s = co_await x.send(mx.local(0, 4));
  wr_result<B> got = co_await std::move(r).within(1s);
  co_return s.ok() && got.ok() && std::memcmp(my.data(), "coro", 4) == 0 ? 4 : -1;
}
// Two devices' async queue pairs on `sched` (an event_loop or an asio_context),
// connected, with a region each.
struct async_pair {
  template <class Sched>
  async_pair(mock::fabric& fab, Sched& sched)
      : dx(fab, "mock0"), dy(fab, "mock1"), px(dx.create_pd()), py(dy.create_pd()),
        cx(sched, dx.create_cq<event_driven<>>(64)), cy(sched, dy.create_cq<event_driven<>>(64)),
        qps(connect_(px, cx, py, cy)), mx(px.allocate<rw>(64)), my(py.allocate<rw>(64)) {}
  device<B> dx, dy;
  protection_domain<B> px, py;
  acq cx, cy;
  std::pair<rts, rts> qps;
  memory_region<B, rw> mx, my;

 private:
  static std::pair<rts, rts> connect_(protection_domain<B>& px, acq& cx, protection_domain<B>& py, acq& cy) {
    async_queue_pair<B, rc> a(cx, px.create_qp<rc>(cx.queue(), qp_cap{8, 8}));
    async_queue_pair<B, rc> b(cy, py.create_qp<rc>(cy.queue(), qp_cap{8, 8}));
    const endpoint ea = a.local_endpoint(), eb = b.local_endpoint();
    return {std::move(a).connect(eb), std::move(b).connect(ea)};
  }
};
task<int> echo(async_pair& p) { return echo(p.qps.first, p.qps.second, p.mx, p.my); }
task<void> sleeper(event_loop& loop, int& woke) {
  co_await loop.sleep_for(1ms);
  ++woke;
}
}  // namespace

TEST_CASE("allocation failure: event_loop, async completion queues and queue pairs, a SEND/RECV") {
  auto o = for_each_failure("coro", [&](world& w) {
    event_loop loop;
    async_pair p(w.fab, loop);
    int woke = 0;
    loop.spawn(sleeper(loop, woke));
    ensure(loop.run(echo(p)) == 4, "echo");
    loop.run();
    ensure(woke == 1, "sleeper woke");
  });
  report("coro", o);
}

namespace {
// Four WRITEs made at once on a queue pair with two send credits: two wait for credits.
task<int> writes_beyond_credits(async_queue_pair<B, rc, signal_every<2>, qp_state::rts>& x,
                                memory_region<B, rw>& mx, memory_region<B, rw>& my) {
  auto w0 = x.write(mx.local(0, 8), my.remote().sub(0, 8));
  auto w1 = x.write(mx.local(8, 8), my.remote().sub(8, 8));
  auto w2 = x.write(mx.local(16, 8), my.remote().sub(16, 8));
  auto w3 = x.write(mx.local(24, 8), my.remote().sub(24, 8));
  int ok = 0;
  for (auto* a : {&w0, &w1, &w2, &w3}) ok += (co_await *a).ok();
  co_return ok;
}
}  // namespace

TEST_CASE("allocation failure: async WRITEs that wait for send credits") {
  auto o = for_each_failure("credits", [&](world& w) {
    mock::fabric& fab = w.fab;
    event_loop loop;
    device<B> dx(fab, "mock0"), dy(fab, "mock1");
    auto px = dx.create_pd();
    auto py = dy.create_pd();
    acq cx(loop, dx.create_cq<event_driven<>>(64));
    acq cy(loop, dy.create_cq<event_driven<>>(64));
    using qp_t = async_queue_pair<B, rc, signal_every<2>>;
    qp_t a(cx, px.create_qp<rc, signal_every<2>>(cx.queue(), qp_cap{2, 2}));
    qp_t b(cy, py.create_qp<rc, signal_every<2>>(cy.queue(), qp_cap{2, 2}));
    const endpoint ea = a.local_endpoint(), eb = b.local_endpoint();
    auto x = std::move(a).connect(eb);
    auto y = std::move(b).connect(ea);
    auto mx = px.allocate<rw>(64);
    auto my = py.allocate<rw>(64);
    for (int i = 0; i < 32; ++i) mx.data()[i] = static_cast<std::byte>(i + 1);
    ensure(loop.run(writes_beyond_credits(x, mx, my)) == 4, "four WRITEs, two after waiting for credits");
    ensure(std::memcmp(mx.data(), my.data(), 32) == 0, "WRITEs landed");
  });
  report("credits", o);
}

TEST_CASE("allocation failure: device_events on an event_loop") {
  auto o = for_each_failure("device_events", [&](world& w) {
    mock::fabric& fab = w.fab;
    event_loop loop;
    device<B> dev(fab, "mock0");
    struct port_back_up {  // also when the run throws
      mock::fabric& fab;
      ~port_back_up() {
        oom::paused p;  // cleanup, while a run of failures may still go on
        fab.set_port_up("mock0", 1, true);
      }
    } restore{fab};
    device_events<B> events(loop, dev);
    auto run = [&]() -> task<bool> {
      fab.set_port_up("mock0", 1, false);
      std::optional<async_event> down = co_await events.next(1s);
      fab.set_port_up("mock0", 1, true);
      std::optional<async_event> up = co_await events.next(1s);
      co_return down && down->type == async_event_type::port_err && up && up->type == async_event_type::port_active;
    };
    const bool ok = loop.run(run());
    ensure(ok, "port down and up seen");
  });
  report("device_events", o);
}

// ---------------------------------------------------------------------------------------
// The connection manager (the mock's CM), the server side on a std::async thread

namespace {
enum class armed_side { client, server };

// The server side of a two-sided scenario, on its own thread: `serve()` with the
// injection handed over in `h`; its result, and whether the injected failure fired here.
template <class R, class F>
std::pair<std::optional<R>, bool> serve_armed(const oom::handoff& h, F serve) {
  oom::adopt(h);
  std::optional<R> r;
  try {
    r.emplace(serve());
  } catch (...) {
    const bool fired = oom::give_back();  // first: what goes next runs uninjected
    r.reset();
    if (fired) throw std::bad_alloc();  // what it failed with, whatever it became
    throw;
  }
  return {std::move(r), oom::give_back()};
}

// Runs `client()` on this thread while `server` (serve_armed on a std::async thread)
// runs. When the client fails, `unblock()` ends a server wait for it and the server is
// joined before the failure goes on. Returns the server's result.
template <class R, class Client, class Unblock>
std::optional<R> with_server(std::future<std::pair<std::optional<R>, bool>>& server, Client client,
                             Unblock unblock) {
  try {
    client();
  } catch (...) {
    unblock();
    try {
      (void)server.get();
    } catch (...) {
    }
    throw;
  }
  std::pair<std::optional<R>, bool> s;
  try {
    s = server.get();
  } catch (...) {
    oom::returned(true);
    throw;
  }
  oom::returned(s.second);
  return std::move(s.first);
}

// Sets `done` when the client's attempt ends, however it ends: a server that failed
// sends the client away until then.
struct done_on_exit {
  std::atomic<bool>& done;
  ~done_on_exit() { done = true; }
};

// A connection through the mock's CM and a WRITE over it. The injection armed on this
// thread stays here (client) or moves to the server's thread. Every wait is short, so a
// side that fails ends the other's wait soon.
void cm_scenario(world& w, armed_side armed) {
  mock::fabric& fab = w.fab;
  device<B> ds(fab, "mock0"), dc(fab, "mock1");
  auto spd = ds.create_pd();
  auto cpd = dc.create_pd();
  auto scq = ds.create_cq(16);
  auto ccq = dc.create_cq(16);
  auto smr = spd.allocate<rw>(64);
  auto cmr = cpd.allocate<rw>(64);
  const qp_cap caps{4, 4};
  cm_options o;
  o.timeout = 1s;
  cm_listener<B> l(ds, cm_address::parse("10.0.0.1", 7471));
  const oom::handoff h = armed == armed_side::server ? oom::take() : oom::handoff{};
  std::atomic<bool> client_gave_up{false}, client_done{false};
  auto server = std::async(std::launch::async, [&] {
    return serve_armed<cm_connection<B, rc>>(h, [&] {
      try {
        for (;;) {
          try {
            auto req = l.next_request(20ms);
            return std::move(req).accept<rc>(spd, scq, caps, cm_region_data(smr.remote()), o);
          } catch (const cm_error& e) {
            if (e.code() != cm_errc::timeout || client_gave_up) throw;
          }
        }
      } catch (...) {
        // A server that fails rejects the client's request (dropped unanswered) until the
        // client is done, rather than leaving it to wait for its whole timeout.
        while (!client_done) try {
            (void)l.next_request(5ms);
          } catch (...) {  // a timeout, or memory still failing (in a row): again
          }
        throw;
      }
    });
  });
  std::optional<cm_connection<B, rc>> c;
  auto s = with_server(server,
                       [&] {
                         const done_on_exit done{client_done};
                         c.emplace(cm_connect<rc>(cpd, ccq, caps, l.address(), {}, o));
                       },
                       [&] { client_gave_up = true; });
  ensure(c && s, "both sides connected");
  auto dst = c->peer_region();
  ensure(dst.has_value(), "the server's region came with the accept");
  std::memcpy(cmr.data(), "over cm", 7);
  ensure(c->qp().write(cmr.local(0, 7), dst->as<access::remote_write>().sub(0, 7), 1).ok(), "cm WRITE posted");
  ensure(one_completion(ccq) == wc_status::success, "cm WRITE completed");
  ensure(std::memcmp(smr.data(), "over cm", 7) == 0, "cm WRITE landed");
}
}  // namespace

TEST_CASE("allocation failure: the connection manager, failures on the client's side") {
  report("cm client", for_each_failure("cm client", [](world& w) { cm_scenario(w, armed_side::client); }));
}

TEST_CASE("allocation failure: the connection manager, failures on the server's side") {
  report("cm server", for_each_failure("cm server", [](world& w) { cm_scenario(w, armed_side::server); }));
}

// Memory that runs out stays out for a while: the unwinding after the first failure
// destroys ids and rejects requests, and the mock's rdma_destroy_id, rdma_reject and
// rdma_get_cm_event (which cannot fail) allocated the events they queue for the peer:
// std::terminate(). Each channel now keeps room for every id's last event.
TEST_CASE("allocation failure: the connection manager, two allocations in a row failing") {
  report("cm client, two in a row",
         for_each_failure("cm client, two in a row", [](world& w) { cm_scenario(w, armed_side::client); }, 2));
  report("cm server, two in a row",
         for_each_failure("cm server, two in a row", [](world& w) { cm_scenario(w, armed_side::server); }, 2));
}

// ---------------------------------------------------------------------------------------
// The TCP endpoint exchange (connection.hpp) on 127.0.0.1, the server on a std::async thread

namespace {
// Connects to `port` and hangs up at once: a server waiting in accept then fails at once
// instead of at its timeout.
void knock(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  ::close(fd);
}

void tcp_scenario(world& w, armed_side armed) {
  mock::fabric& fab = w.fab;
  device<B> ds(fab, "mock0"), dc(fab, "mock1");
  auto spd = ds.create_pd();
  auto cpd = dc.create_pd();
  auto scq = ds.create_cq(16);
  auto ccq = dc.create_cq(16);
  auto smr = spd.allocate<rw>(64);
  auto cmr = cpd.allocate<rw>(64);
  auto sqp = spd.create_qp<rc>(scq, qp_cap{4, 4});
  auto cqp = cpd.create_qp<rc>(ccq, qp_cap{4, 4});
  exchange_options o;
  o.timeout = 1s;
  exchange_listener l(0, "127.0.0.1");
  using live = queue_pair<B, rc, signal_all, qp_state::rts>;
  const oom::handoff h = armed == armed_side::server ? oom::take() : oom::handoff{};
  // A server that fails sends the client away until it is done (its connect would sit in
  // the listener's backlog, or its read wait, for the whole timeout).
  std::atomic<bool> client_done{false};
  auto server = std::async(std::launch::async, [&] {
    return serve_armed<live>(h, [&] {
      try {
        return connect_server(std::move(sqp), l, o, region_descriptor(smr.remote())).qp;
      } catch (...) {
        while (!client_done) try {
            (void)l.turn_away(5ms);
          } catch (...) {  // memory still failing (in a row): try again
          }
        throw;
      }
    });
  });
  std::optional<exchanged<live>> c;
  auto s = with_server(server,
                       [&] {
                         const done_on_exit done{client_done};
                         c.emplace(connect_client(std::move(cqp), "127.0.0.1", l.port(), o));
                       },
                       [&] { knock(l.port()); });
  ensure(s.has_value() && c->peer.region.has_value(), "both sides connected, the region came along");
  const auto dst = c->peer.region->as<access::remote_write>();
  std::memcpy(cmr.data(), "over tcp", 8);
  ensure(c->qp.write(cmr.local(0, 8), dst.sub(0, 8), 1).ok(), "WRITE posted");
  ensure(one_completion(ccq) == wc_status::success, "WRITE completed");
  ensure(std::memcmp(smr.data(), "over tcp", 8) == 0, "WRITE landed");
}
}  // namespace

TEST_CASE("allocation failure: the TCP endpoint exchange, failures on the client's side") {
  report("tcp client", for_each_failure("tcp client", [](world& w) { tcp_scenario(w, armed_side::client); }));
}

TEST_CASE("allocation failure: the TCP endpoint exchange, failures on the server's side") {
  report("tcp server", for_each_failure("tcp server", [](world& w) { tcp_scenario(w, armed_side::server); }));
}

// ---------------------------------------------------------------------------------------
// The asio adapter (when standalone asio is installed)

#if __has_include(<asio.hpp>)
#include <rdmakit/asio_context.hpp>

// `run_again`: a failure out of io_context::run() must leave it usable, the waits armed
// as they were: run again (a few times), it finishes the task.
void asio_scenario(world& w, bool run_again) {
  ::asio::io_context io;
  asio_context rdma(io);
  async_pair p(w.fab, rdma);
  int got = 0;
  std::exception_ptr failed;  // the task's own exception (a failed allocation in it)
  bool spawn_failed = false;
  try {
    asio_spawn(rdma, echo(p), [&](std::exception_ptr e, int v) {
      failed = e;
      got = v;
    });
  } catch (const std::bad_alloc&) {
    spawn_failed = true;  // the io_context must still run, and return, as if never asked
  }
  bool reported = false;  // a failure came out of run()
  for (int runs = 0; runs < (run_again ? 4 : 1); ++runs) {
    try {
      // Bounded: waits left armed with no task to end them would keep run() from returning.
      io.run_for(2s);
      break;
    } catch (const std::bad_alloc&) {
      if (!run_again) throw;
      reported = true;
    }
  }
  ensure(io.stopped(), "io_context::run() returns once the spawned task finished (or was never started)");
  ensure(rdma.tasks() == 0, "the spawned task finished");
  if (spawn_failed || reported) throw std::bad_alloc();
  if (failed) std::rethrow_exception(failed);
  ensure(got == 4, "echo over asio");
}

TEST_CASE("allocation failure: asio_context, asio_spawn of a SEND/RECV on an io_context") {
  report("asio", for_each_failure("asio", [](world& w) { asio_scenario(w, false); }));
}

TEST_CASE("allocation failure: asio_spawn, io_context::run() again after a failure out of it") {
  report("asio, run again", for_each_failure("asio, run again", [](world& w) { asio_scenario(w, true); }));
}

// A task whose completion handler could not be posted reports that failure out of
// io_context::run(); the report itself allocated, so a second failure right after the
// first called std::terminate().
TEST_CASE("allocation failure: asio_spawn, two allocations in a row failing") {
  report("asio, two in a row", for_each_failure("asio, two in a row", [](world& w) { asio_scenario(w, false); }, 2));
}
#endif

// ---------------------------------------------------------------------------------------
// The mock's own data path (docs/mock.md: no allocation per message)

// A UD receive joined GRH and payload in a std::vector per datagram: an allocation on a
// noexcept path, per message, where docs/mock.md says there is none.
TEST_CASE("the mock's data path allocates nothing per message once its rings have grown (RC, UD)") {
  using M = backends::mock;  // not the exempt backend: its data path counts here
  mock::fabric fab;
  device<M> dx(fab, "mock0"), dy(fab, "mock1");
  auto px = dx.create_pd();
  auto py = dy.create_pd();
  auto cx = dx.create_cq(64);
  auto cy = dy.create_cq(64);
  auto src = px.allocate<rw>(256);
  auto dst = py.allocate<rw>(4096);
  auto a = px.create_qp<rc>(cx, qp_cap{8, 8});
  auto b = py.create_qp<rc>(cy, qp_cap{8, 8});
  const endpoint ea = a.local_endpoint();
  auto ra = std::move(a).connect(b.local_endpoint());
  auto rb = std::move(b).connect(ea);
  auto ua = px.create_qp<ud>(cx, qp_cap{8, 8}).activate();
  auto ub = py.create_qp<ud>(cy, qp_cap{8, 8}).activate();
  auto ah = px.create_ah(ub.local_endpoint());
  std::memcpy(src.data(), "payload!", 8);
  // The successful completions among the next `n` of `cq` (at most 1000 polls).
  auto successes = [](auto& cq, int n) {
    int seen = 0, good = 0;
    for (int i = 0; i < 1000 && seen < n; ++i)
      seen += cq.poll([&](const auto& c) { good += c.status() == wc_status::success; });
    return good;
  };
  int ok = 0;
  // An RC WRITE, an RC SEND into a posted receive and a UD datagram, every completion polled.
  auto round = [&] {
    ok += ra.write(src.local(0, 64), dst.remote().sub(0, 64), 1).ok();
    ok += rb.post_recv(dst.local(64, 64), 2).ok();
    ok += ra.send(src.local(0, 8), 3).ok();
    ok += ub.post_recv(dst.local(1024, 1024), 4).ok();
    ok += ua.send(ah.to(ub.qp_num()), src.local(0, 8), 5).ok();
    ok += successes(cx, 3);  // the WRITE, the SEND, the datagram sent
    ok += successes(cy, 2);  // the SEND and the datagram received
  };
  for (int i = 0; i < 4; ++i) round();  // the rings grow to their working size
  REQUIRE(ok == 40);
  constexpr long budget = 1'000'000;
  oom::arm(budget);
  for (int i = 0; i < 16; ++i) round();
  const long allocations = budget - oom::countdown;
  (void)oom::disarm();
  CHECK(ok == 40 + 160);
  CHECK(allocations == 0);
  CHECK(std::memcmp(dst.data() + 1024 + 40, "payload!", 8) == 0);  // after the GRH
}
