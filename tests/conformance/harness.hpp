#pragma once
// Fixture layer of the conformance suite: per backend, how to reach a device; RAII
// ownership of every verbs object a scenario creates; helpers to build QPs, bring
// them to RTS against each other over loopback, register buffers, post and poll
// with a bounded wait. Scenarios use only the verbs_backend concept through these.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/gid_choice.hpp>

#ifdef RDMAKIT_CONFORMANCE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#else
#include <rdmakit/backends/mock.hpp>
#endif

#include <doctest/doctest.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

// doctest prints enums through these.
namespace doctest {
template <>
struct StringMaker<rdmakit::wc_status> {
  static String convert(rdmakit::wc_status s) { return rdmakit::to_string(s); }
};
template <>
struct StringMaker<rdmakit::wc_opcode> {
  static String convert(rdmakit::wc_opcode o) { return rdmakit::to_string(o); }
};
template <>
struct StringMaker<rdmakit::qp_state> {
  static String convert(rdmakit::qp_state s) { return rdmakit::to_string(s); }
};
template <>
struct StringMaker<rdmakit::async_event_type> {
  static String convert(rdmakit::async_event_type t) { return rdmakit::to_string(t); }
};
}  // namespace doctest

namespace conf {
using namespace rdmakit;
using namespace std::chrono_literals;
// POSIX access() would make an unqualified `access` ambiguous in the test files.
using rdmakit::access;
using acc = rdmakit::access;

// ---------------------------------------------------------------------------
// Per-backend facts. `scope` lives for one scenario, before and after every object.
// A backend whose devices belong to the scope (the mock: its fabric) has
// `open(scope&)`; the fixture opens `device()` by name otherwise.

template <class B>
struct backend_traits;

#ifdef RDMAKIT_CONFORMANCE_IBVERBS
using backend_under_test = rdmakit::backends::ibverbs;

template <>
struct backend_traits<rdmakit::backends::ibverbs> {
  struct scope {};
  static std::string device() {
    const char* d = std::getenv("RDMAKIT_DEVICE");
    return d ? d : "";
  }
  /// RDMAKIT_GID_INDEX, else the GID rdmakit would choose (the RoCEv2 IPv4-mapped one on
  /// rxe, index 1 there; on InfiniBand or a NIC another index may be right).
  static int gid_index(rdmakit::backends::ibverbs::context ctx) {
    const char* g = std::getenv("RDMAKIT_GID_INDEX");
    if (!g || !*g) return rdmakit::detail::choose_gid<rdmakit::backends::ibverbs>(ctx, 1);
    int i = -1;
    const std::string_view v(g);
    if (auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i); ec != std::errc{} || end != v.data() + v.size() || i < 0)
      FAIL("RDMAKIT_GID_INDEX=" << std::string(v) << " is not a GID index: give a number from 0 (ibv_devinfo -v lists them)");
    return i;
  }
  /// Between two empty polls: the device progresses on its own.
  static void idle(scope&) { std::this_thread::sleep_for(1ms); }
  /// Lets in-flight work land without polling for it.
  static void settle(scope&) { std::this_thread::sleep_for(30ms); }
  /// Empty polls that prove "nothing arrives".
  static constexpr int quiet_polls = 30;
  /// The deviation table's rows this backend follows: the device, rxe in CI.
  static std::string_view profile() { return "rxe"; }
};
#else
using backend_under_test = rdmakit::backends::mock;

template <>
struct backend_traits<rdmakit::backends::mock> {
  /// The device profile the mock runs as: RDMAKIT_MOCK_PROFILE=rxe, else spec. Its
  /// name is also the deviation table's row the scenarios expect.
  static std::string_view profile() {
    const char* p = std::getenv("RDMAKIT_MOCK_PROFILE");
    if (!p || std::string_view(p) == "spec") return "spec";
    if (std::string_view(p) == "rxe") return "rxe";
    FAIL("RDMAKIT_MOCK_PROFILE=" << std::string(p) << " is not a device profile: use spec or rxe");
    return "spec";
  }
  /// The fabric's one-way wire latency: RDMAKIT_MOCK_LATENCY_US=<microseconds>, else 0.
  /// The scenarios hold with a latency, as on a device: an RC WR completes a round trip
  /// after its post, and a SEND's or WRITE's bytes are read when its message arrives.
  static std::chrono::microseconds latency() {
    const char* l = std::getenv("RDMAKIT_MOCK_LATENCY_US");
    if (!l) return {};
    char* end = nullptr;
    const long us = std::strtol(l, &end, 10);
    if (end == l || *end || us < 0 || us > 1'000'000)
      FAIL("RDMAKIT_MOCK_LATENCY_US=" << std::string(l) << " is not a latency: microseconds, 0 to 1000000");
    return std::chrono::microseconds(us);
  }
  static rdmakit::mock::fabric_config profile_config() {
    rdmakit::mock::fabric_config c;
    c.profile = profile() == "rxe" ? rdmakit::mock::device_profile::rxe : rdmakit::mock::device_profile::spec;
    c.latency = latency();
    return c;
  }
  /// A fresh fabric per scenario, so no state leaks from one to the next.
  struct scope {
    scope() : fabric(profile_config()) {}
    /// A fabric of the caller's own configuration (the mock's unit tests).
    template <class... A>
      requires(sizeof...(A) > 0)
    explicit scope(A&&... a) : fabric(std::forward<A>(a)...) {}
    rdmakit::mock::fabric fabric;
  };
  static std::string device() { return "mock0"; }
  /// Opens device() from the scenario's own fabric (a fabric is never used implicitly).
  static rdmakit::backends::mock::context open(scope& s) {
    return rdmakit::backends::mock::open_device(s.fabric, device());
  }
  static int gid_index(rdmakit::backends::mock::context) { return 1; }
  /// An empty poll already moves the simulated clock to the next pending event.
  static void idle(scope&) {}
  static void settle(scope& s) { s.fabric.advance(10ms); }
  static constexpr int quiet_polls = 30;
};
#endif

/// Decorator for scenarios that fail because of a known mock bug: expected to
/// fail on the mock binary only (see the MOCK BUG comment at the scenario).
#ifdef RDMAKIT_CONFORMANCE_IBVERBS
#define CONF_MOCK_BUG doctest::may_fail(false)
#else
#define CONF_MOCK_BUG doctest::may_fail(true)
#endif

/// One scenario instantiated for the backend of this binary.
#define CONFORMANCE_CASE(name) TEST_CASE_TEMPLATE(name, B, ::conf::backend_under_test)

// ---------------------------------------------------------------------------
// Completions as plain values (printable, comparable).

struct completion {
  std::uint64_t wr_id = 0;
  wc_status status = wc_status::success;
  wc_opcode op = wc_opcode::send;
  std::uint32_t byte_len = 0;
  std::uint32_t qp_num = 0;
  std::uint32_t src_qp = 0;
  wc_flags flags = wc_flags::none;
  std::uint32_t imm = 0;  // network byte order
  std::uint32_t vendor_err = 0;
  std::uint16_t slid = 0;
  std::uint8_t sl = 0;
};

template <class B>
completion to_completion(const typename B::wc& w) {
  return {B::get_wr_id(w),   B::get_status(w), B::get_opcode(w),   B::get_byte_len(w),
          B::get_qp_num(w),  B::get_src_qp(w), B::get_wc_flags(w), B::get_imm(w),
          B::get_vendor_err(w), B::get_slid(w), B::get_sl(w)};
}

inline std::uint32_t to_be32(std::uint32_t v) {
  const std::uint8_t b[4] = {std::uint8_t(v >> 24), std::uint8_t(v >> 16), std::uint8_t(v >> 8), std::uint8_t(v)};
  std::uint32_t out;
  std::memcpy(&out, b, 4);
  return out;
}
inline std::uint32_t from_be32(std::uint32_t v) { return to_be32(v); }

// ---------------------------------------------------------------------------
// Attribute masks required per transition and transport (docs/semantics.md#modify-masks).

inline qp_attr_mask init_mask(qp_type t) {
  using m = qp_attr_mask;
  return t == qp_type::ud ? m::state | m::pkey_index | m::port | m::qkey
                          : m::state | m::pkey_index | m::port | m::access_flags;
}
inline qp_attr_mask rtr_mask(qp_type t) {
  using m = qp_attr_mask;
  switch (t) {
    case qp_type::rc:
      return m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic | m::min_rnr_timer;
    case qp_type::uc: return m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn;
    case qp_type::ud: return m::state;
  }
  return m::state;
}
inline qp_attr_mask rts_mask(qp_type t) {
  using m = qp_attr_mask;
  return t == qp_type::rc ? m::state | m::timeout | m::retry_cnt | m::rnr_retry | m::sq_psn | m::max_qp_rd_atomic
                          : m::state | m::sq_psn;
}

// ---------------------------------------------------------------------------
// Objects owned by a scenario.

/// A registered, 8-byte aligned buffer.
template <class B>
struct buffer {
  std::unique_ptr<std::uint64_t[]> storage;
  std::size_t size = 0;
  typename B::mr mr{};

  std::byte* data() const { return reinterpret_cast<std::byte*>(storage.get()); }
  std::uint64_t addr(std::size_t off = 0) const { return reinterpret_cast<std::uintptr_t>(data()) + off; }
  std::uint32_t lkey() const { return B::mr_lkey(mr); }
  std::uint32_t rkey() const { return B::mr_rkey(mr); }
  rdmakit::sge sge(std::size_t off, std::uint32_t len) const { return {addr(off), len, lkey()}; }
  rdmakit::sge whole() const { return sge(0, static_cast<std::uint32_t>(size)); }
  std::uint64_t u64(std::size_t off = 0) const {
    std::uint64_t v;
    std::memcpy(&v, data() + off, 8);
    return v;
  }
  void set_u64(std::size_t off, std::uint64_t v) { std::memcpy(data() + off, &v, 8); }
  /// Bytes i of the buffer become (seed + i) mod 251.
  void fill(unsigned seed, std::size_t off = 0, std::size_t len = SIZE_MAX) {
    len = std::min(len, size - off);
    for (std::size_t i = 0; i < len; ++i) data()[off + i] = std::byte((seed + i) % 251);
  }
  bool holds(unsigned seed, std::size_t off, std::size_t len, std::size_t src_off = 0) const {
    for (std::size_t i = 0; i < len; ++i)
      if (data()[off + i] != std::byte((seed + src_off + i) % 251)) return false;
    return true;
  }
  /// True when the `len` bytes at `off` are all 0 (as make_buffer leaves them).
  bool zero(std::size_t off, std::size_t len) const {
    for (std::size_t i = 0; i < len; ++i)
      if (data()[off + i] != std::byte{0}) return false;
    return true;
  }
  void clear(std::byte v = std::byte{0}) { std::memset(data(), int(v), size); }
};

/// A QP with its CQs and the capacities its create call granted.
template <class B>
struct endpoint {
  typename B::qp qp{};
  typename B::cq send_cq{};
  typename B::cq recv_cq{};
  qp_type type = qp_type::rc;
  qp_cap caps{};
  std::uint32_t num = 0;
};

struct qp_opts {
  qp_type type = qp_type::rc;
  qp_cap caps{16, 16, 1, 1, 0};
  bool sig_all = true;
  int cqe = 64;            ///< for CQs the helper creates
};

/// Attributes of the bring-up to RTS (the defaults are ibv_rc_pingpong's).
struct link_opts {
  mtu path_mtu = mtu::mtu_1024;
  std::uint8_t timeout = 14;
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 12;
  std::uint8_t max_rd_atomic = 16;
  std::uint8_t max_dest_rd_atomic = 16;
  access qp_access = access::remote_write | access::remote_read | access::remote_atomic;
  std::uint32_t qkey = default_qkey;
  std::uint32_t sq_psn = 0x1234;
  std::uint32_t rq_psn = 0x1234;  ///< must be the peer's sq_psn
  std::optional<ah_attr> av;      ///< the peer's address; default: this port's loopback
};

template <class B>
class fixture {
 public:
  using traits = backend_traits<B>;

  template <class... ScopeArgs>
  explicit fixture(ScopeArgs&&... scope_args) : scope_(std::forward<ScopeArgs>(scope_args)...) {
    // A backend whose scope owns its devices (the mock's fabric) opens from it; the
    // others open by name.
    if constexpr (requires { traits::open(scope_); })
      ctx = traits::open(scope_);
    else
      ctx = B::open_device(traits::device());
    REQUIRE_MESSAGE(ctx != typename B::context{}, "open_device(" << traits::device() << ")");
    on_cleanup([c = ctx] { B::close_device(c); });
    pd = make_pd();
    port = B::query_port(ctx, port_num);
    gid_index = traits::gid_index(ctx);
    gid = B::query_gid(ctx, port_num, gid_index);
  }
  ~fixture() { run_cleanup(); }
  fixture(const fixture&) = delete;
  fixture& operator=(const fixture&) = delete;

  typename traits::scope& scope() { return scope_; }

  /// Registers an action for teardown; actions run in reverse order.
  void on_cleanup(std::function<void()> f) { cleanup_.push_back(std::move(f)); }

  typename B::pd make_pd() {
    auto p = B::alloc_pd(ctx);
    on_cleanup([p] { CHECK_MESSAGE(B::dealloc_pd(p) == 0, "dealloc_pd at teardown"); });
    return p;
  }

  buffer<B>& make_buffer(std::size_t size, access acc = access::local_write | access::remote_write |
                                                        access::remote_read | access::remote_atomic,
                         typename B::pd in = {}) {
    auto& b = buffers_.emplace_back();
    b.size = size;
    b.storage.reset(new std::uint64_t[(size + 7) / 8 + 1]());
    b.mr = B::reg_mr(in == typename B::pd{} ? pd : in, b.data(), size, acc);
    on_cleanup([m = b.mr] { CHECK_MESSAGE(B::dereg_mr(m) == 0, "dereg_mr at teardown"); });
    return b;
  }

  typename B::channel make_channel() {
    auto ch = B::create_comp_channel(ctx);
    on_cleanup([ch] { CHECK_MESSAGE(B::destroy_comp_channel(ch) == 0, "destroy_comp_channel at teardown"); });
    return ch;
  }

  typename B::cq make_cq(int cqe, typename B::channel ch = {}) { return make_cq_on_vector(cqe, 0, ch); }

  typename B::cq make_cq_on_vector(int cqe, int comp_vector, typename B::channel ch = {}) {
    auto c = B::create_cq(ctx, cqe, ch, comp_vector);
    on_cleanup([c] { CHECK_MESSAGE(B::destroy_cq(c) == 0, "destroy_cq at teardown"); });
    return c;
  }

  /// A QP (and its CQs unless given) in RESET.
  endpoint<B> make_qp(const qp_opts& o = {}, typename B::cq send_cq = {}, typename B::cq recv_cq = {},
                      typename B::pd in = {}) {
    endpoint<B> e;
    e.type = o.type;
    e.send_cq = send_cq != typename B::cq{} ? send_cq : make_cq(o.cqe);
    e.recv_cq = recv_cq != typename B::cq{} ? recv_cq : make_cq(o.cqe);
    e.caps = o.caps;
    e.qp = B::create_qp(in == typename B::pd{} ? pd : in, e.send_cq, e.recv_cq, o.type, e.caps, o.sig_all);
    e.num = B::qp_num(e.qp);
    on_cleanup([q = e.qp] { CHECK_MESSAGE(B::destroy_qp(q) == 0, "destroy_qp at teardown"); });
    return e;
  }

  // --- shared receive queues (backends that model srq_backend) ---

  /// An SRQ destroyed at teardown (after the QPs made on it later); `attr` gets the grant.
  template <class S = B>
    requires srq_backend<S>
  typename S::srq make_srq(srq_attr& attr, typename B::pd in = {}) {
    auto s = S::create_srq(in == typename B::pd{} ? pd : in, attr);
    on_cleanup([s] { CHECK_MESSAGE(S::destroy_srq(s) == 0, "destroy_srq at teardown"); });
    return s;
  }
  /// A QP in RESET whose receives come from `srq` (its CQs made unless given).
  template <class S = B>
    requires srq_backend<S>
  endpoint<B> make_qp_on_srq(typename S::srq srq, const qp_opts& o = {}, typename B::cq send_cq = {},
                             typename B::cq recv_cq = {}) {
    endpoint<B> e;
    e.type = o.type;
    e.send_cq = send_cq != typename B::cq{} ? send_cq : make_cq(o.cqe);
    e.recv_cq = recv_cq != typename B::cq{} ? recv_cq : make_cq(o.cqe);
    e.caps = o.caps;
    e.qp = S::create_qp_on_srq(pd, e.send_cq, e.recv_cq, srq, o.type, e.caps, o.sig_all);
    e.num = B::qp_num(e.qp);
    on_cleanup([q = e.qp] { CHECK_MESSAGE(B::destroy_qp(q) == 0, "destroy_qp at teardown"); });
    return e;
  }
  /// Posts one receive to the SRQ.
  template <class S = B>
    requires srq_backend<S>
  int post_srq_recv(typename S::srq srq, std::uint64_t wr_id, std::vector<rdmakit::sge> sg) {
    std::vector<typename B::sge> s(sg.size());
    for (std::size_t i = 0; i < sg.size(); ++i) B::set_sge(s[i], sg[i].addr, sg[i].length, sg[i].lkey);
    typename B::recv_wr wr{};
    B::set_recv(wr, wr_id, s.data(), static_cast<int>(s.size()));
    typename B::recv_wr* bad = nullptr;
    return S::post_srq_recv(srq, &wr, &bad);
  }

  typename B::ah make_ah(const ah_attr& av, typename B::pd in = {}) {
    auto a = B::create_ah(in == typename B::pd{} ? pd : in, av);
    on_cleanup([a] { CHECK_MESSAGE(B::destroy_ah(a) == 0, "destroy_ah at teardown"); });
    return a;
  }

  /// The loopback address vector: GRH with this port's GID at the chosen index.
  ah_attr loopback_av() const {
    ah_attr av;
    av.is_global = true;
    av.grh.dgid = gid.value;
    av.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
    av.grh.hop_limit = 1;
    av.dlid = port.lid;
    av.port_num = port_num;
    return av;
  }

  // --- QP state steps (throw verbs_error like modify_qp) ---

  void to_init(const endpoint<B>& e, const link_opts& l = {}) {
    qp_attr a;
    a.state = qp_state::init;
    a.pkey_index = 0;
    a.port_num = port_num;
    a.qkey = l.qkey;
    a.access_flags = l.qp_access;
    B::modify_qp(e.qp, a, init_mask(e.type));
  }
  void to_rtr(const endpoint<B>& e, std::uint32_t remote_qpn, const link_opts& l = {}) {
    qp_attr a;
    a.state = qp_state::rtr;
    a.path_mtu = l.path_mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = l.rq_psn;
    a.max_dest_rd_atomic = l.max_dest_rd_atomic;
    a.min_rnr_timer = l.min_rnr_timer;
    a.av = l.av.value_or(loopback_av());
    B::modify_qp(e.qp, a, rtr_mask(e.type));
  }
  void to_rts(const endpoint<B>& e, const link_opts& l = {}) {
    qp_attr a;
    a.state = qp_state::rts;
    a.timeout = l.timeout;
    a.retry_cnt = l.retry_cnt;
    a.rnr_retry = l.rnr_retry;
    a.sq_psn = l.sq_psn;
    a.max_rd_atomic = l.max_rd_atomic;
    B::modify_qp(e.qp, a, rts_mask(e.type));
  }
  /// RESET → INIT → RTR → RTS against `remote_qpn` (UD ignores it).
  void bring_up(const endpoint<B>& e, std::uint32_t remote_qpn, const link_opts& l = {}) {
    to_init(e, l);
    to_rtr(e, remote_qpn, l);
    to_rts(e, l);
  }
  /// Connects two QPs of this device to each other and brings both to RTS.
  void connect(const endpoint<B>& a, const endpoint<B>& b, const link_opts& la = {}, link_opts lb = {}) {
    bring_up(a, b.num, la);
    bring_up(b, a.num, lb);
  }
  /// Two QPs of one transport, connected (UD: both in RTS, no peer).
  std::pair<endpoint<B>, endpoint<B>> make_pair(const qp_opts& o = {}, const link_opts& la = {},
                                                const link_opts& lb = {}) {
    auto a = make_qp(o);
    auto b = make_qp(o);
    connect(a, b, la, lb);
    return {a, b};
  }

  void move_to(const endpoint<B>& e, qp_state s) {
    qp_attr a;
    a.state = s;
    B::modify_qp(e.qp, a, qp_attr_mask::state);
  }

  // --- posting ---

  /// Posts one send WR; `extra(wr)` fills opcode-specific fields.
  template <class Extra>
  int post_send(const endpoint<B>& e, std::uint64_t wr_id, opcode op, std::vector<rdmakit::sge> sg,
                send_flags fl, Extra&& extra) {
    std::vector<typename B::sge> s(sg.size());
    for (std::size_t i = 0; i < sg.size(); ++i) B::set_sge(s[i], sg[i].addr, sg[i].length, sg[i].lkey);
    typename B::send_wr wr{};
    B::set_send(wr, wr_id, op, fl, s.data(), static_cast<int>(s.size()));
    extra(wr);
    typename B::send_wr* bad = nullptr;
    return B::post_send(e.qp, &wr, &bad);
  }
  int post_send(const endpoint<B>& e, std::uint64_t wr_id, opcode op, std::vector<rdmakit::sge> sg,
                send_flags fl = send_flags::signaled) {
    return post_send(e, wr_id, op, std::move(sg), fl, [](typename B::send_wr&) {});
  }
  int post_rdma(const endpoint<B>& e, std::uint64_t wr_id, opcode op, rdmakit::sge local, std::uint64_t raddr,
                std::uint32_t rkey, send_flags fl = send_flags::signaled, std::uint32_t imm_be = 0) {
    return post_send(e, wr_id, op, {local}, fl, [&](typename B::send_wr& w) {
      B::set_rdma(w, raddr, rkey);
      if (op == opcode::rdma_write_with_imm) B::set_imm(w, imm_be);
    });
  }
  int post_atomic(const endpoint<B>& e, std::uint64_t wr_id, opcode op, rdmakit::sge local, std::uint64_t raddr,
                  std::uint32_t rkey, std::uint64_t compare_add, std::uint64_t swap = 0) {
    return post_send(e, wr_id, op, {local}, send_flags::signaled,
                     [&](typename B::send_wr& w) { B::set_atomic(w, raddr, rkey, compare_add, swap); });
  }
  int post_ud(const endpoint<B>& e, std::uint64_t wr_id, typename B::ah ah, std::uint32_t remote_qpn,
              std::uint32_t qkey, std::vector<rdmakit::sge> sg, opcode op = opcode::send, std::uint32_t imm_be = 0,
              send_flags fl = send_flags::signaled) {
    return post_send(e, wr_id, op, std::move(sg), fl, [&](typename B::send_wr& w) {
      B::set_ud(w, ah, remote_qpn, qkey);
      if (op == opcode::send_with_imm) B::set_imm(w, imm_be);
    });
  }
  int post_recv(const endpoint<B>& e, std::uint64_t wr_id, std::vector<rdmakit::sge> sg) {
    std::vector<typename B::sge> s(sg.size());
    for (std::size_t i = 0; i < sg.size(); ++i) B::set_sge(s[i], sg[i].addr, sg[i].length, sg[i].lkey);
    typename B::recv_wr wr{};
    B::set_recv(wr, wr_id, s.data(), static_cast<int>(s.size()));
    typename B::recv_wr* bad = nullptr;
    return B::post_recv(e.qp, &wr, &bad);
  }

  /// One WR of a list.
  struct send_spec {
    std::uint64_t wr_id = 0;
    opcode op = opcode::send;
    std::vector<rdmakit::sge> sg;
    send_flags flags = send_flags::signaled;
    std::uint64_t remote_addr = 0;  ///< RDMA WRITE/READ
    std::uint32_t rkey = 0;
    std::uint32_t imm_be = 0;
  };
  struct recv_spec {
    std::uint64_t wr_id = 0;
    std::vector<rdmakit::sge> sg;
  };
  /// Result of posting a list: the errno and the index of bad_wr (-1: none, -2: not in the list).
  struct list_result {
    int rc = 0;
    int bad_index = -1;
  };

  /// Posts `specs` as one chained list with a single post_send call.
  list_result post_send_list(const endpoint<B>& e, const std::vector<send_spec>& specs) {
    std::vector<std::vector<typename B::sge>> sges(specs.size());
    std::vector<typename B::send_wr> wrs(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto& sp = specs[i];
      sges[i].resize(sp.sg.size());
      for (std::size_t k = 0; k < sp.sg.size(); ++k)
        B::set_sge(sges[i][k], sp.sg[k].addr, sp.sg[k].length, sp.sg[k].lkey);
      B::set_send(wrs[i], sp.wr_id, sp.op, sp.flags, sges[i].data(), static_cast<int>(sges[i].size()));
      if (sp.op == opcode::rdma_write || sp.op == opcode::rdma_write_with_imm || sp.op == opcode::rdma_read)
        B::set_rdma(wrs[i], sp.remote_addr, sp.rkey);
      if (sp.op == opcode::rdma_write_with_imm || sp.op == opcode::send_with_imm) B::set_imm(wrs[i], sp.imm_be);
      if (i > 0) B::set_next(wrs[i - 1], &wrs[i]);
    }
    typename B::send_wr* bad = nullptr;
    list_result r;
    r.rc = B::post_send(e.qp, wrs.data(), &bad);
    r.bad_index = bad == nullptr ? -1 : (bad >= wrs.data() && bad < wrs.data() + wrs.size()) ? int(bad - wrs.data()) : -2;
    return r;
  }
  list_result post_recv_list(const endpoint<B>& e, const std::vector<recv_spec>& specs) {
    std::vector<std::vector<typename B::sge>> sges(specs.size());
    std::vector<typename B::recv_wr> wrs(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      sges[i].resize(specs[i].sg.size());
      for (std::size_t k = 0; k < specs[i].sg.size(); ++k)
        B::set_sge(sges[i][k], specs[i].sg[k].addr, specs[i].sg[k].length, specs[i].sg[k].lkey);
      B::set_recv(wrs[i], specs[i].wr_id, sges[i].data(), static_cast<int>(sges[i].size()));
      if (i > 0) B::set_next(wrs[i - 1], &wrs[i]);
    }
    typename B::recv_wr* bad = nullptr;
    list_result r;
    r.rc = B::post_recv(e.qp, wrs.data(), &bad);
    r.bad_index = bad == nullptr ? -1 : (bad >= wrs.data() && bad < wrs.data() + wrs.size()) ? int(bad - wrs.data()) : -2;
    return r;
  }

  // --- polling ---

  /// Polls `cq` until `n` completions arrived or the wait gives up (5 s wall, or
  /// many empty polls on the mock); on giving up the check fails and what arrived
  /// is returned.
  std::vector<completion> poll(typename B::cq cq, std::size_t n, const char* what = "completions") {
    std::vector<completion> out;
    typename B::wc wcs[16];
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    long empty = 0;
    while (out.size() < n) {
      int got = B::poll_cq(cq, static_cast<int>(std::min<std::size_t>(16, n - out.size())), wcs);
      if (got < 0) {
        FAIL_CHECK("poll_cq returned " << got << " while waiting for " << std::string(what));
        return out;
      }
      for (int i = 0; i < got; ++i) out.push_back(to_completion<B>(wcs[i]));
      if (got > 0) continue;
      if (++empty > 200000 || std::chrono::steady_clock::now() > deadline) {
        FAIL_CHECK("gave up waiting for " << std::string(what) << ": got " << out.size() << " of " << n);
        return out;
      }
      traits::idle(scope_);
    }
    return out;
  }
  completion poll_one(typename B::cq cq, const char* what = "a completion") {
    auto v = poll(cq, 1, what);
    return v.empty() ? completion{~std::uint64_t{0}, wc_status::general_err} : v.front();
  }
  /// Polls a few times and returns whatever arrived (for "nothing arrives" checks).
  std::vector<completion> drain(typename B::cq cq, int polls = traits::quiet_polls) {
    std::vector<completion> out;
    typename B::wc wcs[16];
    for (int i = 0; i < polls; ++i) {
      int got = B::poll_cq(cq, 16, wcs);
      for (int k = 0; k < got; ++k) out.push_back(to_completion<B>(wcs[k]));
      if (got <= 0) traits::idle(scope_);
    }
    return out;
  }
  void settle() { traits::settle(scope_); }

  /// Waits until the QP reaches `s` (errors reach the responder asynchronously on rxe).
  qp_state wait_state(const endpoint<B>& e, qp_state s) {
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    qp_state now = B::query_qp_state(e.qp);
    while (now != s && std::chrono::steady_clock::now() < deadline) {
      traits::settle(scope_);
      now = B::query_qp_state(e.qp);
    }
    return now;
  }

  typename B::context ctx{};
  typename B::pd pd{};
  std::uint8_t port_num = 1;
  port_attr port{};
  int gid_index = 1;
  gid_entry gid{};

 private:
  void run_cleanup() noexcept {
    while (!cleanup_.empty()) {
      auto f = std::move(cleanup_.back());
      cleanup_.pop_back();
      f();
    }
  }
  typename traits::scope scope_;
  std::deque<buffer<B>> buffers_;
  std::vector<std::function<void()>> cleanup_;
};

/// Runs `f` expecting a verbs_error; returns its errno (0 when nothing was thrown).
template <class F>
int errno_of(F&& f) {
  try {
    f();
  } catch (const verbs_error& e) {
    return e.errno_value();
  }
  return 0;
}

/// Checks a list of flush completions: wr_ids in order, WR_FLUSH_ERR, qp_num.
inline void check_flushes(const std::vector<completion>& got, const std::vector<std::uint64_t>& wr_ids,
                          std::uint32_t qp_num) {
  REQUIRE(got.size() == wr_ids.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].wr_id == wr_ids[i]);
    CHECK(got[i].status == wc_status::wr_flush_err);
    CHECK(got[i].qp_num == qp_num);
  }
}

}  // namespace conf
