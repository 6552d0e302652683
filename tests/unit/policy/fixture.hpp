#pragma once
// Shared setup for the policy-layer tests: a fresh mock fabric with two RoCE devices
// ("mock0", "mock1") that each test makes and passes to its sides (`side x(fab, "mock0")`),
// one open device, PD and CQ per side, and helpers to pump a CQ.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace policy_test {

using B = rdmakit::backends::mock;
using namespace rdmakit;
constexpr auto rw_access = access::local_write | access::remote_read | access::remote_write;
constexpr auto all_access = rw_access | access::remote_atomic;

/// One device of `fab` with a PD and a busy-polled CQ, on backend Bk (the mock, or a
/// test backend derived from it).
template <class Bk>
struct basic_side {
  device<Bk> dev;
  protection_domain<Bk> pd;
  completion_queue<Bk> cq;
  basic_side(rdmakit::mock::fabric& fab, const char* name, int cq_entries = 1024)
      : dev(fab, name), pd(dev.create_pd()), cq(dev.create_cq(cq_entries)) {}
};
using side = basic_side<B>;

/// A copy of a completion's fields (the view points into a batch that is reused).
struct seen {
  std::uint64_t wr_id;
  wc_status status;
  wc_opcode op;
  std::uint32_t byte_len;
  std::uint32_t qp_num;
  bool recv;
  std::uint32_t imm;
  bool has_imm;
  std::uint32_t payload_offset;
};
template <class Bk>
seen copy(const completion<Bk>& c) {
  return {c.wr_id(), c.status(), c.opcode(), c.byte_len(), c.qp_num(), c.is_recv(), c.imm(), c.has_imm(),
          c.payload_offset()};
}

/// A fabric of two InfiniBand devices, "ib0" and "ib1" (LIDs, no GIDs), one port each.
inline mock::fabric_config two_ib_devices() {
  mock::fabric_config cfg;
  mock::device_config dc;
  dc.name = "ib0";
  mock::port_config pc;
  pc.layer = link_layer::infiniband;
  dc.ports = {pc};
  cfg.devices = {dc, dc};
  cfg.devices[1].name = "ib1";
  return cfg;
}

/// The wr_ids of `cs`, in order.
inline std::vector<std::uint64_t> wr_ids_of(const std::vector<seen>& cs) {
  std::vector<std::uint64_t> ids;
  for (const auto& c : cs) ids.push_back(c.wr_id);
  return ids;
}

/// Polls `cq` until `n` completions were seen (or a simulated-time-free spin limit).
template <class CQ>
std::vector<seen> collect(CQ& cq, std::size_t n, int max_polls = 10000) {
  std::vector<seen> out;
  for (int i = 0; i < max_polls && out.size() < n; ++i)
    (void)cq.poll([&](const auto& c) { out.push_back(copy(c)); });
  return out;
}

}  // namespace policy_test

namespace policy_test {

/// The mock with ports whose GID table is rxe's size (1024 entries; slots past the
/// mock's 16 repeat slot 1's GID): indexes above 255, which an address vector's 8-bit
/// sgid_index cannot hold.
struct big_gid_table : backends::mock {
  static port_attr query_port(context ctx, std::uint8_t port) {
    port_attr a = backends::mock::query_port(ctx, port);
    a.gid_tbl_len = 1024;
    return a;
  }
  static gid_entry query_gid(context ctx, std::uint8_t port, int index) {
    if (index < 16 || index >= 1024) return backends::mock::query_gid(ctx, port, index);
    gid_entry e = backends::mock::query_gid(ctx, port, 1);
    e.index = static_cast<std::uint32_t>(index);
    return e;
  }
};

/// The mock, recording the union of the send flags of every WR it was given: what
/// reached the device (rdmakit's own flags must not).
struct flag_recording : backends::mock {
  static inline send_flags seen = send_flags::none;
  static int post_send(qp q, send_wr* wr, send_wr** bad) noexcept {
    for (const send_wr* w = wr; w; w = w->next) seen = seen | w->flags;
    return backends::mock::post_send(q, wr, bad);
  }
};
static_assert(verbs_backend<flag_recording>);

/// Two sides of a fresh fabric and a 64-byte region on each (src on x, dst on y).
struct two_regions {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  memory_region<B, rw_access> src = x.pd.allocate<rw_access>(64);
  memory_region<B, rw_access> dst = y.pd.allocate<rw_access>(64);
};

/// Two connected (RC/UC) or active (UD) queue pairs, a on side x and b on side y.
template <class T, class S = signal_all, class Bk = B>
struct qp_pair {
  queue_pair<Bk, T, S, qp_state::rts> a;
  queue_pair<Bk, T, S, qp_state::rts> b;
};

template <class T, class S = signal_all, class Bk, class PX, class PY>
qp_pair<T, S, Bk> make_pair(const protection_domain<Bk>& pdx, completion_queue<Bk, PX>& cqx,
                            const protection_domain<Bk>& pdy, completion_queue<Bk, PY>& cqy, const qp_cap& caps,
                            const connect_options& co = {}) {
  auto x = pdx.template create_qp<T, S>(cqx, caps);
  auto y = pdy.template create_qp<T, S>(cqy, caps);
  if constexpr (T::connected) {
    auto ex = x.local_endpoint();
    auto a = std::move(x).connect(y.local_endpoint(), co);
    auto b = std::move(y).connect(ex, co);
    return {std::move(a), std::move(b)};
  } else {
    return {std::move(x).activate(), std::move(y).activate()};
  }
}

/// Two connected RC queue pairs of the flag-recording mock that take 64 inline bytes, a
/// target region and a buffer no region covers (lkey 0): a WR that reads it through its
/// lkey completes with LOC_PROT_ERR, one that went inline does not.
struct inline_pair {
  mock::fabric fab;
  basic_side<flag_recording> x{fab, "mock0"}, y{fab, "mock1"};
  qp_pair<rc, signal_all, flag_recording> p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 64});
  memory_region<flag_recording, rw_access> dst = y.pd.allocate<rw_access>(64);
  char stack_buf[16] = "unregistered";
  local_buffer unregistered{reinterpret_cast<std::uint64_t>(stack_buf), 12, 0};
  inline_pair() { flag_recording::seen = send_flags::none; }
};

/// A CQ of 20 entries on mock0 that a busy RC pair keeps from being found empty, and a
/// queue pair of 4 + 4 destroyed there with its 4 receives outstanding (the mock cleans
/// them out, as most devices; the layer holds their room in flushing() all the same).
/// drain() polls it once with fewer completions than a batch: a poll that drained it.
struct destroyed_beside_busy {
  mock::fabric fab;
  side x{fab, "mock0"}, y{fab, "mock1"};
  completion_queue<B> cq = x.dev.create_cq(20);
  memory_region<B, rw_access> mr = x.pd.allocate<rw_access>(256);
  memory_region<B, rw_access> src = y.pd.allocate<rw_access>(64);
  qp_pair<rc> busy = make_pair<rc>(x.pd, cq, y.pd, y.cq, qp_cap{2, 2});
  destroyed_beside_busy() {
    auto q = x.pd.create_qp<rc>(cq, qp_cap{4, 4});
    for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(q.post_recv(mr.local(8 * i, 8), i).ok());
  }
  void drain() {
    REQUIRE(busy.a.post_recv(mr.local(128, 8), 100).ok());
    REQUIRE(busy.b.send(src.local(0, 8), 1).ok());
    REQUIRE(collect(y.cq, 1).size() == 1);
    REQUIRE(cq.poll() == 1);  // fewer than a batch: drained
  }
};

/// The mock lending contexts as librdmacm does (backends::rdmacm): one per device of a
/// fabric, whatever the number of device objects that open it (shares_contexts).
struct shared_context_mock : backends::mock {
  static constexpr bool shares_contexts = true;
  using backends::mock::open_device;  // the other sources: not lent (the tests open from a fabric)
  static context open_device(rdmakit::mock::fabric& fab, std::string_view name) {
    auto& [mu, lent] = loans();
    std::lock_guard lk(mu);
    for (loan& l : lent)
      if (l.fab == &fab && l.name == name) {
        ++l.borrows;
        return l.ctx;
      }
    const context ctx = backends::mock::open_device(fab, name);
    lent.push_back({&fab, std::string(name), ctx, 1});
    return ctx;
  }
  static void close_device(context ctx) noexcept {
    auto& [mu, lent] = loans();
    std::lock_guard lk(mu);
    for (std::size_t i = 0; i < lent.size(); ++i)
      if (lent[i].ctx == ctx) {
        if (--lent[i].borrows == 0) {
          backends::mock::close_device(ctx);
          lent.erase(lent.begin() + static_cast<std::ptrdiff_t>(i));
        }
        return;
      }
  }

 private:
  struct loan {
    const rdmakit::mock::fabric* fab;
    std::string name;
    context ctx;
    int borrows;
  };
  struct loan_book {
    std::mutex mu;
    std::vector<loan> lent;
  };
  // Never destroyed, as librdmacm's own: a device object of static storage duration
  // closes its context at exit, after this file's statics would be gone.
  static loan_book& loans() {
    static loan_book* book = new loan_book;
    return *book;
  }
};

/// The mock, logging the native QPs and windows it frees, in order: the teardown tests
/// check which goes first. Under a lock: some destroy on two threads.
struct freeing_log : backends::mock {
  struct freed {
    std::string_view verb;
    const void* handle;
  };
  static inline std::mutex mu;
  static inline std::vector<freed> log;
  static int destroy_qp(qp q) noexcept {
    record("destroy_qp", q);
    return backends::mock::destroy_qp(q);
  }
  static int dealloc_mw(mw w) noexcept {
    record("dealloc_mw", w);
    return backends::mock::dealloc_mw(w);
  }
  /// The verbs logged so far, in order.
  static std::vector<std::string_view> verbs() {
    std::lock_guard lk(mu);
    std::vector<std::string_view> out;
    for (const freed& f : log) out.push_back(f.verb);
    return out;
  }
  /// Forgets the log, with room for n entries (a test's frees then allocate nothing).
  static void clear(std::size_t n) {
    std::lock_guard lk(mu);
    log.clear();
    log.reserve(n);
  }

 private:
  static void record(std::string_view verb, const void* handle) noexcept {
    std::lock_guard lk(mu);
    log.push_back({verb, handle});
  }
};

}  // namespace policy_test
