// Random use of what random_use_test.cpp leaves alone, on the mock: UD queue pairs and
// address handles, shared receive queues, memory windows, qp_pools, memory regions and
// registered pools deregistered while work requests name them, a protection domain or
// device replaced under its children, reset(), and moves of every handle (out and back,
// or onto a live handle, which destroys what it held), in random orders, under wire
// latency or none, both device profiles, CQs large or too small, and each signaling
// policy. A seed is one run. What must hold whatever the order:
// - no completion is delivered twice, none carries a wr_id that was never posted (nor
//   one whose post was refused); an SRQ's receive completes on one of its queue pairs,
//   never flushed;
// - a WR that names memory gone when it was posted (or deregistered right after, while
//   outstanding) never succeeds: a region's lkey or rkey, a region of another protection
//   domain, a window freed or whose invalidation or rebind has completed, a type 2 window
//   reached through another queue pair than the one it was bound through;
// - no byte of caller-owned memory changes once its region is deregistered;
// - empty handles (moved from, destroyed) give usage_error at setup and a post_status on
//   the data path, as documented: stale_address through an address whose handle is
//   gone, recv_too_small for a small receive on an SRQ while a UD queue pair uses it;
// - posted_recvs() and (signal_all) send_credits() match what was posted and polled; no
//   CQ overflows; once every queue pair is destroyed and the CQs polled empty, nothing
//   stays reserved or flushing;
// - what is left healthy at the end still works: a WRITE each way on every connection, a
//   WRITE and a READ through every window still bound (bound again first when it can be),
//   a datagram from every UD queue pair.
// Under ASan+UBSan (CI) any read or write of freed memory fails the run too.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// (A namespace of its own: the misuse tests are built as a unity build.)
namespace random_resources {

using namespace rdmakit;
using namespace std::chrono_literals;
using B = backends::mock;

constexpr auto data_rights = access::local_write | access::remote_write | access::remote_read;
constexpr auto window_region_rights = data_rights | access::mw_bind;
constexpr auto granted = access::remote_write | access::remote_read;  // what windows give peers
using data_region = memory_region<B, data_rights>;
using buffer_pool = registered_pool<B, data_rights>;
using pool_slice = buffer_pool::slice;
using window_region = memory_region<B, window_region_rights>;
using descriptor = remote_region<granted>;
using window2 = memory_window<B, granted, mw_type::type2>;
using window1 = memory_window<B, granted, mw_type::type1>;

constexpr std::size_t chunk_bytes = 4096;  // a region over caller-owned bytes covers one chunk of its side's arena
constexpr std::size_t chunks = 6;
constexpr std::size_t window_region_bytes = 2048;
constexpr std::uint32_t grh = 40;
constexpr std::byte canary{0xA5};  // what a deregistered chunk holds until it is registered again
constexpr qp_cap qp_depths{.max_send_wr = 8, .max_recv_wr = 8};
constexpr qp_cap srq_qp_depths{.max_send_wr = 8, .max_recv_wr = 0};
// Short timers: a peer destroyed or an empty SRQ ends the requester in ERR soon (simulated time).
const connect_options quick{.timeout = 8, .retry_cnt = 1, .rnr_retry = 1, .min_rnr_timer = 1};

// A handle and the identity of the object it holds (0: none). Moves take the identity along.
template <class T>
struct slot {
  T h{};
  std::uint64_t id = 0;
};

template <class T>
bool holds(const T& h) noexcept {
  return static_cast<bool>(h);
}
template <class T, class S>
bool holds(const qp_pool<B, T, S, qp_state::rts>& p) noexcept {
  return p.size() != 0;
}

// What the test knows of a live object.
struct object {
  int side = 0;
  std::uint64_t pd = 0;    // the protection domain it was made in
  std::uint64_t peer = 0;  // a connected queue pair or pool: the one at the other end
  std::uint64_t srq = 0;   // a queue pair on an SRQ: that SRQ
  bool grh = false;        // a UD one: the SRQ refuses small receives meanwhile
  int chunk = -1;          // a region over caller-owned bytes: its chunk of the side's arena
  std::uint64_t registration = 0;  // a registered_pool or one of its slices: the registration it keeps
};
// An SRQ outlives its handle while queue pairs use it.
struct srq_model {
  std::uint64_t pd = 0, ctx = 0;
  int ud_users = 0;
  std::uint32_t max_wr = 0;
  std::uint32_t outstanding = 0;  // receives posted and not seen to complete
};
struct window_model {
  std::uint64_t pd = 0;
  bool type2 = true;
  bool ever_bound = false;     // remote() has a range
  bool bound = false;          // what the window believes: a bind posted, no invalidation since
  std::uint64_t through = 0;   // the queue pair of the last bind
  std::uint32_t gen = 0;       // binds posted; a descriptor taken after bind n is of generation n
  std::uint32_t ok_gen = 0;    // the last bind seen to complete successfully
  std::uint32_t dead_upto = 0; // descriptors of generations up to this one certainly grant nothing
  std::uint32_t key_changes = 0;  // the rkey's key byte wraps after 256: an old rkey would grant again
  std::uint32_t posted_ops = 0, ok_ops = 0;  // binds and invalidations posted, seen to succeed
};
// What the completion of a posted wr_id may be, and what its success tells.
struct expectation {
  const char* must_fail = nullptr;  // why it cannot succeed
  std::uint64_t responder = 0;      // unless this is destroyed first (must_fail is then the responder's check)
  std::uint64_t qp = 0;             // the queue pair whose queue it takes a slot of (0: not followed)
  bool recv = false;
  std::uint64_t srq = 0;            // a receive posted to this SRQ
  enum { none, bind, invalidation } effect = none;
  std::uint64_t window = 0;
  std::uint32_t gen = 0;
};
struct buffer {
  local_buffer b;
  std::uint64_t region = 0;
};
struct target {
  descriptor r;
  std::uint64_t region = 0;  // a data region's descriptor, or
  std::uint64_t window = 0;  // a window's, taken at generation gen, bound through `through`
  std::uint32_t gen = 0;
  std::uint64_t through = 0;
};
// The queue pair at the other end of a connection, when the test knows it.
struct responder {
  std::uint64_t id = 0;  // 0: one no window was ever bound through (a pool's)
  std::uint64_t pd = 0;
  std::uint64_t life = 0;  // the object whose destruction destroys it (itself, or its pool)
};
struct kept_address {
  ud_address<B> to;
  std::uint64_t ah = 0;  // 0: a default-constructed address
};

// One device with the objects of one side: the random steps reach them by slot.
struct side {
  side(mock::fabric& fab, const char* name, int cq_entries)
      : dev(fab, name), pd(dev.create_pd()), cq(dev.create_cq(cq_entries)) {}
  device<B> dev;
  protection_domain<B> pd;
  completion_queue<B> cq;
  std::uint64_t pd_id = 0, ctx_id = 0;
  std::vector<completion_queue<B>> retired_cqs;  // of replaced devices: their queue pairs still complete there
  std::vector<std::byte> arena = std::vector<std::byte>(chunks * chunk_bytes);
  std::array<bool, chunks> chunk_used{};  // registered now
  std::array<bool, chunks> chunk_dead{};  // registered once: it holds the canary while not in use
  std::array<slot<data_region>, 3> regions;
  slot<buffer_pool> pool;                 // one registration cut into slices,
  std::array<slot<pool_slice>, 3> slices; // which keep it registered after the pool is gone
  std::array<std::vector<buffer>, 2> buffers;  // sources and sinks taken earlier: their regions may be gone
  std::array<slot<address_handle<B>>, 2> ahs;
  std::vector<kept_address> addresses;  // taken from ahs: their handles may be gone
};

// S: the signaling policy of every queue pair.
template <class S>
class run {
  using rc_qp = queue_pair<B, rc, S, qp_state::rts>;
  using ud_qp = queue_pair<B, ud, S, qp_state::rts>;
  using srq_rc_qp = queue_pair<B, on_srq<rc>, S, qp_state::rts>;
  using srq_ud_qp = queue_pair<B, on_srq<ud>, S, qp_state::rts>;
  using rc_pool = qp_pool<B, rc, S, qp_state::rts>;
  using ud_pool = qp_pool<B, ud, S, qp_state::rts>;

 public:
  explicit run(unsigned seed) : rnd_(seed), fab_(config_(seed)) {
    for (auto& s : sides_) {
      s.pd_id = next_object_++;
      s.ctx_id = next_object_++;
    }
  }

  void go(int steps) {
    for (int step = 0; step < steps; ++step) {
      CAPTURE(step);
      one_step_();
      check_slots_();
      check_ledgers_();
      check_events_();
    }
    quiesce_();
    check_canaries_();
    rebind_windows_();
    check_windows_still_work_();
    check_connections_still_work_();
    check_ud_still_delivers_();
    quiesce_();
    check_canaries_();
    check_teardown_();
  }

 private:
  unsigned pick_(std::size_t n) { return static_cast<unsigned>(rnd_() % n); }

  // A signal asked now and then (signal_manual signals nothing else but the last slot's).
  // Nothing goes inline: a buffer whose region is gone is refused by its lkey, never read
  // at post.
  send_flags flags_() {
    return send_flags::no_auto_inline | (pick_(4) == 0 ? send_flags::signaled : send_flags::none);
  }

  mock::fabric_config config_(unsigned seed) {
    mock::fabric_config cfg;
    cfg.seed = seed;
    rxe_ = pick_(2);
    if (rxe_)
      cfg.profile = mock::device_profile::rxe;
    else if (pick_(2))
      cfg.reuse_qp_numbers = true;
    // Latency keeps WRs outstanding past their post, where destroying things gets interesting.
    // CQs with room for everything, or too small for all: creations and resets are then
    // refused now and then (usage_error), never a CQ overflowed.
    cq_entries_ = pick_(2) ? 2048 : 64 + static_cast<int>(pick_(192));
    latency_ = pick_(4) != 0;
    if (latency_) cfg.latency = std::chrono::microseconds(1 + pick_(5));
    return cfg;
  }

  // ---- identities ----------------------------------------------------------------------

  std::uint64_t born_(const object& o) {
    objects_.emplace(next_object_, o);
    return next_object_++;
  }
  bool live_(std::uint64_t id) const { return id != 0 && objects_.count(id) != 0; }
  std::uint64_t pd_of_(std::uint64_t id) const { return live_(id) ? objects_.at(id).pd : 0; }

  // Called once the object is destroyed (never before: a verb may still run due work).
  void forget_(std::uint64_t id) {
    if (!live_(id)) return;
    const object o = objects_.at(id);
    objects_.erase(id);
    if (o.chunk >= 0) {
      // Deregistered: from now on the device must not write a byte of it.
      auto& s = sides_[o.side];
      std::fill_n(s.arena.begin() + static_cast<std::ptrdiff_t>(o.chunk * chunk_bytes), chunk_bytes, canary);
      s.chunk_used[o.chunk] = false;
      s.chunk_dead[o.chunk] = true;
    }
    if (o.grh) --srqs_model_[o.srq].ud_users;
    if (o.registration && --holders_[o.registration] == 0) forget_(o.registration);
  }

  // Puts `h` in the slot by move-assignment, destroying what the slot held.
  template <class T>
  void replace_(slot<T>& s, T&& h, std::uint64_t id) {
    const std::uint64_t gone = s.id;
    s.h = std::move(h);
    s.id = id;
    forget_(gone);
  }
  template <class T>
  void destroy_(slot<T>& s) {
    replace_(s, T{}, 0);
  }

  // A handle moved at a random point: out and back (move-construction, then move-
  // assignment onto the emptied handle), or onto another slot's live handle.
  template <class T, std::size_t N>
  void shuffle_(std::array<slot<T>, N>& slots) {
    auto& from = slots[pick_(N)];
    auto& to = slots[pick_(N)];
    if (&from == &to) {
      T moved(std::move(from.h));
      CHECK_MESSAGE(!holds(from.h), "a moved-from handle still holds its object");
      CHECK(holds(moved) == (from.id != 0));
      from.h = std::move(moved);
    } else {
      const std::uint64_t gone = to.id;
      to.h = std::move(from.h);
      to.id = std::exchange(from.id, 0);
      forget_(gone);
    }
  }
  template <class T>
  void shuffle_(slot<T>& s) {
    std::array<slot<T>, 1> one{std::move(s)};
    shuffle_(one);
    s = std::move(one[0]);
  }

  template <class T>
  static void check_slot_(const slot<T>& s, const char* what) {
    if (holds(s.h) != (s.id != 0))
      FAIL_CHECK(std::string(what) << ": the handle " << std::string(s.id ? "lost" : "gained") << " its object");
  }
  template <class T, std::size_t N>
  static void check_slots_in_(const std::array<slot<T>, N>& slots, const char* what) {
    for (const auto& s : slots) check_slot_(s, what);
  }
  void check_slots_() {
    for (const auto& s : sides_) {
      check_slots_in_(s.regions, "region");
      check_slots_in_(s.ahs, "address handle");
      check_slot_(s.pool, "registered_pool");
      check_slots_in_(s.slices, "registered_pool slice");
    }
    for (const auto& qps : ud_) check_slots_in_(qps, "UD queue pair");
    check_slots_in_(pair_a_, "RC queue pair");
    check_slots_in_(pair_b_, "RC queue pair");
    check_slots_in_(window_regions_, "window region");
    check_slots_in_(windows2_, "type 2 window");
    check_slots_in_(windows1_, "type 1 window");
    check_slots_in_(srqs_, "SRQ");
    check_slots_in_(srq_senders_, "RC queue pair");
    check_slots_in_(srq_receivers_, "queue pair on an SRQ");
    check_slot_(srq_ud_, "UD queue pair on an SRQ");
    check_slot_(ud_pool_, "UD qp_pool");
    check_slots_in_(pools_a_, "qp_pool");
    check_slots_in_(pools_b_, "qp_pool");
  }

  // ---- the ledger of work requests -----------------------------------------------------

  void note_(const post_result& r, std::uint64_t id, const char* must_fail, expectation e = {}) {
    if (!r.ok()) return;
    e.must_fail = must_fail;
    expected_.emplace(id, e);
    if (e.qp) ++(e.recv ? recvs_out_ : sends_out_)[e.qp];
  }

  // What the queue pairs say they hold matches what was posted and not yet polled: its
  // receives (posted_recvs()), and under signal_all, where every WR completes, its send
  // credits. Completions of a queue pair replaced by reset() never count on the new one.
  template <class Q>
  void check_ledger_(const slot<Q>& q, bool own_receives) {
    if (!q.id) return;
    if (own_receives && q.h.posted_recvs() != static_cast<std::uint32_t>(recvs_out_[q.id]))
      FAIL_CHECK("posted_recvs() is " << q.h.posted_recvs() << ", " << recvs_out_[q.id] << " receives are outstanding");
    // (A queue pair whose CQ handle was dropped has none: its posts are refused cq_gone.)
    if constexpr (std::is_same_v<S, signal_all>)
      if (!q.h.in_error() && !(dropped_cqs_ != 0 && q.h.send_credits() == 0) &&
          q.h.send_credits() != q.h.caps().max_send_wr - static_cast<std::uint32_t>(sends_out_[q.id]))
        FAIL_CHECK("send_credits() is " << q.h.send_credits() << ", " << sends_out_[q.id] << " of "
                                        << q.h.caps().max_send_wr << " send WRs are outstanding");
  }
  void check_ledgers_() {
    for (const auto& qps : ud_)
      for (const auto& q : qps) check_ledger_(q, true);
    for (const auto& q : pair_a_) check_ledger_(q, true);
    for (const auto& q : pair_b_) check_ledger_(q, true);
    for (const auto& q : srq_senders_) check_ledger_(q, true);
    for (const auto& q : srq_receivers_) check_ledger_(q, false);
    check_ledger_(srq_ud_, false);
  }

  // What a post on `q` returns when it is not ok: empty_handle, qp_error, or (ok) a full queue.
  template <class Q>
  static post_status refusal_for_(const Q& q) {
    if (!holds(q)) return post_status::empty_handle;
    return q.in_error() ? post_status::qp_error : post_status::ok;
  }
  static void check_post_(const post_result& r, post_status expected, const char* what) {
    if (expected != post_status::ok) {
      if (r.status != expected)
        FAIL_CHECK(std::string(what) << ": expected " << std::string(to_string(expected)) << ", got "
                                     << std::string(to_string(r.status)));
    } else if (!r.ok() && r.status != post_status::sq_full && r.status != post_status::rq_full &&
               r.status != post_status::cq_gone) {  // (a step may drop a CQ's handle before its queue pairs)
      FAIL_CHECK(std::string(what) << ": refused with " << std::string(to_string(r.status)) << " ("
                                   << std::string(r.message()) << ")");
    }
  }

  void on_completion_(const completion<B>& c, int si) {
    const std::uint64_t id = c.wr_id();
    if (si == 1 && c.is_recv()) notice_invalidation_(c);
    const auto it = expected_.find(id);
    if (it == expected_.end()) {
      if (delivered_.count(id))
        FAIL_CHECK("wr_id " << id << " delivered twice");
      else
        FAIL_CHECK("a completion of wr_id " << id << ", never posted (or refused)");
      return;
    }
    const expectation e = it->second;
    expected_.erase(it);
    if (e.qp && live_(e.qp)) --(e.recv ? recvs_out_ : sends_out_)[e.qp];
    if (e.srq) {
      --srqs_model_[e.srq].outstanding;
      // An SRQ's receive completes when a message takes it, on the queue pair it came
      // through; a queue pair in ERR does not flush it (it stays for the others).
      CHECK_MESSAGE(c.status() != wc_status::wr_flush_err, "a receive of an SRQ was flushed");
      CHECK_MESSAGE(srq_qpns_[e.srq].count(c.qp_num()), "an SRQ's receive completed on QP " << c.qp_num()
                                                                                        << ", not one of the SRQ's");
    }
    delivered_.emplace(id, c.status());
    // A responder destroyed before the request reached it proves nothing: the queue pair
    // that took its number may take the request for a duplicate and acknowledge it.
    if (e.must_fail && c.ok() && (!e.responder || live_(e.responder)))
      FAIL_CHECK("wr_id " << id << std::string(c.is_recv() ? " (a receive)" : " (a send-queue WR)") << " of QP "
                          << c.qp_num() << " succeeded, though " << std::string(e.must_fail));
    if (!e.window || !c.ok()) return;
    window_model& w = windows_[e.window];
    ++w.ok_ops;
    if (e.effect == expectation::bind) {
      w.ok_gen = std::max(w.ok_gen, e.gen);
      w.dead_upto = std::max(w.dead_upto, e.gen - 1);  // the rkey it replaced
    } else {
      w.dead_upto = std::max(w.dead_upto, e.gen);
    }
  }

  // The peer's send_inv, seen in a receive completion: the window is unbound.
  void notice_invalidation_(const completion<B>& c) {
    for (auto& w : windows2_)
      if (w.id && w.h.take_invalidation(c)) {
        window_model& m = windows_[w.id];
        CHECK_MESSAGE(m.bound, "take_invalidation() on a window that was not bound");
        m.bound = false;
        m.dead_upto = std::max(m.dead_upto, m.gen);
      }
  }

  int poll_side_(int si, bool wait) {
    side& s = sides_[si];
    auto f = [this, si](const completion<B>& c) { on_completion_(c, si); };
    int n = wait ? s.cq.wait(f, 0ms).count() : std::max(0, s.cq.poll(f));
    for (auto& old : s.retired_cqs) n += std::max(0, old.poll(f));
    return n;
  }

  void check_events_() {
    for (auto& s : sides_)
      while (auto ev = s.dev.next_event(0ms)) {
        CHECK_MESSAGE(ev->type != async_event_type::cq_err, "a CQ overflowed");
        for (auto& srq : srqs_)  // the limit fired: disarmed until armed again
          if (ev->type == async_event_type::srq_limit_reached && srq.h.raised(*ev)) CHECK(srq.h.limit() == 0);
      }
  }

  // Polls until every CQ stayed empty a while (a poll that finds nothing runs the mock's
  // timers: retries, RNR waits, the wire).
  void quiesce_() {
    for (int quiet = 0, round = 0; quiet < 8 && round < 2000; ++round) {
      const int n = poll_side_(0, true) + poll_side_(1, true);
      quiet = n ? 0 : quiet + 1;
    }
    check_events_();
  }

  // ---- memory --------------------------------------------------------------------------

  // A region in a slot of side si: caller-owned bytes (a chunk of the arena) or allocated.
  void make_region_(int si) {
    side& s = sides_[si];
    auto& r = s.regions[pick_(s.regions.size())];
    if (pick_(2)) {
      const auto free = std::find(s.chunk_used.begin(), s.chunk_used.end(), false);
      if (free == s.chunk_used.end()) return;
      const int k = static_cast<int>(free - s.chunk_used.begin());
      const std::span<std::byte> bytes(s.arena.data() + k * chunk_bytes, chunk_bytes);
      check_chunk_(si, k);
      std::fill(bytes.begin(), bytes.end(), static_cast<std::byte>(k + 1));  // what it sends is not the canary
      s.chunk_used[k] = true;
      replace_(r, s.pd.register_memory<data_rights>(bytes), born_({.side = si, .pd = s.pd_id, .chunk = k}));
    } else {
      replace_(r, s.pd.allocate<data_rights>(chunk_bytes), born_({.side = si, .pd = s.pd_id}));
    }
  }

  // A chunk not registered now holds the canary (or the zeros it started with).
  void check_chunk_(int si, int k) {
    const std::byte* p = sides_[si].arena.data() + k * chunk_bytes;
    const std::byte expected = sides_[si].chunk_dead[k] ? canary : std::byte{0};
    const bool intact = std::all_of(p, p + chunk_bytes, [expected](std::byte b) { return b == expected; });
    CHECK_MESSAGE(intact, "the device wrote into caller-owned memory after its region was deregistered");
  }
  void check_canaries_() {
    for (int si = 0; si < 2; ++si)
      for (int k = 0; k < static_cast<int>(chunks); ++k)
        if (!sides_[si].chunk_used[k]) check_chunk_(si, k);
  }

  // What a local buffer is for. The device reads sources and writes sinks, and the two
  // never overlap, so a sink's bytes are those of one message (overlapping ranges are
  // conformance's: "posting: a WRITE or SEND whose target overlaps its source"). A
  // region or slice keeps its first half for sources, its second for sinks.
  enum class use { source, sink };

  // A buffer of `len` bytes on side si: a new one from a region slot or a slice of the
  // side's pool, or one taken earlier (its region may be gone). None when the slot is empty.
  std::optional<buffer> buffer_(int si, use u, std::uint32_t len) {
    side& s = sides_[si];
    auto& kept = s.buffers[static_cast<int>(u)];
    if (pick_(8) == 0 && !kept.empty()) {
      buffer b = kept[pick_(kept.size())];
      if (b.b.length >= len) {  // (first() refuses more than the buffer holds)
        b.b = b.b.first(len);
        return b;
      }
    }
    if (pick_(5) == 0) {
      auto& sl = s.slices[pick_(s.slices.size())];
      if (!sl.id) {
        CHECK_THROWS_AS((void)sl.h.local(len), usage_error);
        return std::nullopt;
      }
      const std::uint32_t half = static_cast<std::uint32_t>(sl.h.size() / 2);
      if (len > half) return std::nullopt;
      return buffer{sl.h.local().sub(u == use::sink ? half : 0, len), objects_.at(sl.id).registration};
    }
    auto& r = s.regions[pick_(s.regions.size())];
    if (!r.id) {
      CHECK_THROWS_AS((void)r.h.local(0, len), usage_error);
      return std::nullopt;
    }
    constexpr std::size_t half = chunk_bytes / 2;
    const buffer b{r.h.local((u == use::sink ? half : 0) + pick_(half - len + 1), len), r.id};
    if (kept.size() < 8)
      kept.push_back(b);
    else
      kept[pick_(8)] = b;
    return b;
  }
  // Why a WR of a queue pair in PD `pd` with this local buffer cannot succeed, or null.
  const char* local_fault_(const buffer& b, std::uint64_t pd) const {
    if (!live_(b.region)) return "its local buffer's region was deregistered before the post";
    if (objects_.at(b.region).pd != pd) return "its local buffer is in another protection domain";
    return nullptr;
  }
  // Why an access to `t` through responder `to` cannot succeed, or null. Only on an intact
  // connection: a requester whose peer is gone may reach the queue pair that took its
  // number (reuse_qp_numbers), which takes the request for a duplicate and acknowledges it
  // without executing it.
  const char* remote_fault_(const target& t, const std::optional<responder>& to) const {
    if (!to) return nullptr;
    if (t.region) {
      if (!live_(t.region)) return "the region it targets was deregistered before the post";
      if (to->pd != objects_.at(t.region).pd) return "the region it targets is in another protection domain";
      return nullptr;
    }
    if (!live_(t.window)) return "the window it targets was freed before the post";
    const window_model& w = windows_.at(t.window);
    if (t.gen <= w.dead_upto) return "the window's invalidation or rebind completed before the post";
    if (to->pd != w.pd) return "the window it targets is in another protection domain";
    if (w.type2 && to->id != t.through) return "its type 2 window was bound through another queue pair";
    return nullptr;
  }

  // A descriptor for the peer: one kept earlier (a window's or a region's, maybe gone
  // since), a window's now, or a data region's of side B now.
  std::optional<target> target_() {
    const unsigned from = pick_(3);
    if (from == 0 && !targets_.empty()) return targets_[pick_(targets_.size())];
    if (from == 1 && (pick_(3) ? give_to_peer_(windows2_[pick_(windows2_.size())]) : give_to_peer_(windows1_[0])))
      return targets_.back();
    if (pick_(5) == 0) {  // a slice of side B's registered pool
      auto& sl = sides_[1].slices[pick_(sides_[1].slices.size())];
      if (!sl.id) return std::nullopt;
      keep_(target{sl.h.remote(), objects_.at(sl.id).registration});
      return targets_.back();
    }
    auto& r = sides_[1].regions[pick_(sides_[1].regions.size())];
    if (!r.id) {
      CHECK_THROWS_AS((void)r.h.remote(), usage_error);
      return std::nullopt;
    }
    keep_(target{r.h.remote(), r.id});
    return targets_.back();
  }
  void keep_(const target& t) {
    if (targets_.size() >= 12) targets_.erase(targets_.begin() + pick_(targets_.size()));
    targets_.push_back(t);
  }

  // ---- RC connections: WRITE, READ, SEND, SEND with invalidate -------------------------

  template <class Q>
  std::optional<responder> responder_of_(const slot<Q>& b) const {
    if (!live_(b.id)) return std::nullopt;
    return responder{b.id, objects_.at(b.id).pd, b.id};
  }
  template <class QA, class QB>
  std::optional<responder> intact_(const slot<QA>& a, const slot<QB>& b) const {
    if (!live_(a.id) || !live_(b.id) || objects_.at(a.id).peer != b.id) return std::nullopt;
    return responder_of_(b);
  }

  // A queue pair to make again now and then, so that the steps keep reaching live ones:
  // gone, or in ERR (a fault injected by the steps themselves, a peer gone).
  template <class Q>
  static bool worn_(const slot<Q>& q) {
    return !q.id || q.h.in_error();
  }

  // One operation from `q` (side A, protection domain pd) to its peer `to`.
  void access_(rc_qp& q, std::uint64_t pd, const std::optional<responder>& to, std::uint64_t tracked = 0) {
    const std::uint64_t id = next_id_++;
    const post_status expected = refusal_for_(q);
    const unsigned kind = pick_(8);
    if (kind >= 6) {  // SEND, or SEND with invalidate naming a window: takes a receive at the peer
      const auto buf = buffer_(0, use::source, 1 + pick_(64));
      if (!buf) return;
      std::optional<target> t;
      if (kind == 7 && !targets_.empty()) t = targets_[pick_(targets_.size())];
      const post_result r = t ? q.post(op::send_inv{buf->b, t->r}, id, flags_()) : q.send(buf->b, id, flags_());
      check_post_(r, expected, t ? "send_inv" : "send");
      note_(r, id, local_fault_(*buf, pd), {.qp = tracked});
      return;
    }
    const auto t = target_();
    if (!t) return;
    const std::uint64_t at = pick_(t->r.length());
    const auto len = static_cast<std::uint32_t>(1 + pick_(std::min<std::uint64_t>(64, t->r.length() - at)));
    const bool read = kind < 2;
    const auto buf = buffer_(0, read ? use::sink : use::source, len);
    if (!buf) return;
    const post_result r = read ? q.read(buf->b, t->r.sub(at, len), id, flags_())
                               : q.write(buf->b, t->r.sub(at, len), id, flags_());
    check_post_(r, expected, read ? "read" : "write");
    if (const char* fault = local_fault_(*buf, pd))
      note_(r, id, fault, {.qp = tracked});
    else
      note_(r, id, remote_fault_(*t, to), {.responder = to ? to->life : 0, .qp = tracked});
    if (read && latency_) deregister_under_(r, id, 0, *buf);
  }

  // A receive on side B's queue pair `q` (its own receive queue).
  template <class Q>
  void receive_on_(Q& q, std::uint64_t pd, std::uint64_t tracked = 0) {
    const auto buf = buffer_(1, use::sink, 1 + pick_(128));
    if (!buf) return;
    const std::uint64_t id = next_id_++;
    const post_status expected = refusal_for_(q);
    const post_result r = q.post_recv(buf->b, id);
    check_post_(r, expected, "post_recv");
    note_(r, id, local_fault_(*buf, pd), {.qp = tracked, .recv = true});
    deregister_under_(r, id, 1, *buf);
  }

  // Now and then the region of a WR just posted is deregistered while the WR is
  // outstanding, before any verb could run it: a receive (taken by a later message) or a
  // READ (whose response comes after the wire's latency) then never succeeds and writes
  // nothing (docs/semantics.md, deregistration with outstanding WRs).
  void deregister_under_(const post_result& r, std::uint64_t id, int si, const buffer& b) {
    if (!r.ok() || pick_(6)) return;
    for (auto& region : sides_[si].regions)
      if (region.id == b.region) {
        destroy_(region);
        expected_.at(id).must_fail = "its buffer's region was deregistered while it was outstanding";
        return;
      }
  }

  // Both ends of a connection reset() and connected again: new queue pairs (a window
  // bound through the old one is invalidated through it only), the old ones flushing.
  template <class QA, class QB>
  void reset_connection_(slot<QA>& a, slot<QB>& b) {
    if (!intact_(a, b)) return;
    const std::uint64_t pd_a = pd_of_(a.id), pd_b = pd_of_(b.id), srq = objects_.at(b.id).srq;
    try {
      auto ia = std::move(a.h).reset();
      auto ib = std::move(b.h).reset();
      const endpoint ea = ia.local_endpoint();
      QA na = std::move(ia).connect(ib.local_endpoint(), quick);
      QB nb = std::move(ib).connect(ea, quick);
      const std::uint64_t ida = born_({.side = 0, .pd = pd_a});
      const std::uint64_t idb = born_({.side = 1, .pd = pd_b, .peer = ida, .srq = srq});
      if (srq) srq_qpns_[srq].insert(nb.qp_num());
      objects_.at(ida).peer = idb;
      replace_(a, std::move(na), ida);
      replace_(b, std::move(nb), idb);
    } catch (const usage_error& e) {
      cq_room_refusal_(e);  // (the first reset may have gone through: both are given up)
      destroy_(a);
      destroy_(b);
    }
  }

  void make_pair_(std::size_t i) {
    try {
      auto qa = sides_[0].pd.create_qp<rc, S>(sides_[0].cq, qp_depths);
      auto qb = sides_[1].pd.create_qp<rc, S>(sides_[1].cq, qp_depths);
      const endpoint ea = qa.local_endpoint();
      rc_qp a = std::move(qa).connect(qb.local_endpoint(), quick);
      rc_qp b = std::move(qb).connect(ea, quick);
      const std::uint64_t ida = born_({.side = 0, .pd = sides_[0].pd_id});
      const std::uint64_t idb = born_({.side = 1, .pd = sides_[1].pd_id, .peer = ida});
      objects_.at(ida).peer = idb;
      replace_(pair_a_[i], std::move(a), ida);
      replace_(pair_b_[i], std::move(b), idb);
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
    }
  }
  static void cq_room_refusal_(const usage_error& e) {
    CHECK_MESSAGE(std::string(e.what()).find("entries") != std::string::npos, "unexpected usage_error: " << e.what());
  }

  void step_pairs_() {
    const std::size_t p = pick_(pair_a_.size());
    if ((worn_(pair_a_[p]) || worn_(pair_b_[p]) || !intact_(pair_a_[p], pair_b_[p])) && pick_(3) == 0)
      return make_pair_(p);
    switch (pick_(20)) {
      case 0: make_pair_(p); break;
      case 1: (pick_(2) ? destroy_(pair_a_[p]) : destroy_(pair_b_[p])); break;  // the peer is left alone
      case 2: pick_(2) ? shuffle_(pair_a_) : shuffle_(pair_b_); break;
      case 7: reset_connection_(pair_a_[p], pair_b_[p]); break;
      case 3: case 4: case 5: case 6: receive_on_(pair_b_[p].h, pd_of_(pair_b_[p].id), pair_b_[p].id); break;
      default: access_(pair_a_[p].h, pd_of_(pair_a_[p].id), intact_(pair_a_[p], pair_b_[p]), pair_a_[p].id); break;
    }
  }

  // ---- memory windows (side B; bound through pair_b_, reached from pair_a_) -------------

  template <class W, std::size_t N>
  void step_windows_(std::array<slot<W>, N>& windows) {
    auto& w = windows[pick_(N)];
    switch (!w.id && pick_(2) ? 0 : pick_(12)) {
      case 0: {
        const std::uint64_t id = born_({.side = 1, .pd = sides_[1].pd_id});
        windows_[id] = window_model{.pd = sides_[1].pd_id, .type2 = W::type == mw_type::type2};
        replace_(w, sides_[1].pd.alloc_window<granted, W::type>(), id);
        break;
      }
      case 1: destroy_(w); break;
      case 2: shuffle_(windows); break;
      case 3: case 4: case 5: case 6: bind_(w); break;
      case 7: case 8: invalidate_(w); break;
      case 9: if constexpr (W::type == mw_type::type2) peer_invalidates_(w); break;
      default: (void)give_to_peer_(w); break;
    }
  }

  template <class W>
  void bind_(slot<W>& w) {
    auto& qp = pair_b_[pick_(pair_b_.size())];
    auto& region = window_regions_[pick_(window_regions_.size())];
    const std::size_t at = pick_(window_region_bytes / 2);
    const std::size_t len = pick_(8) == 0 ? 0 : 1 + pick_(window_region_bytes / 2 + 64);  // sometimes empty or too long
    const std::uint64_t id = next_id_++;
    const std::uint64_t pd = live_(w.id) ? windows_[w.id].pd : 0;
    const bool refused = !w.id || !region.id || !qp.id || pd_of_(region.id) != pd || pd_of_(qp.id) != pd || len == 0 ||
                         at + len > window_region_bytes;
    if (refused) {
      CHECK_THROWS_AS((void)w.h.bind(qp.h, region.h, at, len, id), usage_error);
      return;
    }
    window_model& m = windows_[w.id];
    if (m.key_changes >= 200) return;  // (a window that old is freed by the other steps)
    // A bound type 2 window is refused before anything is posted (the device would refuse
    // it, MW_BIND_ERR, and the window could never be bound again).
    if (m.type2 && m.bound) {
      CHECK_THROWS_WITH_AS((void)w.h.bind(qp.h, region.h, at, len, id), doctest::Contains("invalidate() it first"),
                           usage_error);
      return;
    }
    const post_status expected = refusal_for_(qp.h);
    const post_result r = w.h.bind(qp.h, region.h, at, len, id, flags_());
    check_post_(r, expected, "bind");
    bound_(w, qp, r, id);
  }
  // What a bind posted (r) changes in the window's model.
  template <class W>
  void bound_(const slot<W>& w, const slot<rc_qp>& qp, const post_result& r, std::uint64_t id) {
    if (!r.ok()) return;
    window_model& m = windows_[w.id];
    m.ever_bound = m.bound = true;
    m.through = qp.id;
    ++m.gen;
    ++m.key_changes;
    ++m.posted_ops;
    note_(r, id, nullptr, {.qp = qp.id, .effect = expectation::bind, .window = w.id, .gen = m.gen});
  }

  template <class W>
  void invalidate_(slot<W>& w) {
    auto& qp = pair_b_[pick_(pair_b_.size())];
    const std::uint64_t id = next_id_++;
    const window_model* m = live_(w.id) ? &windows_[w.id] : nullptr;
    // Refused: an empty window, one never bound or not bound now, another queue pair than
    // the last bind's (an empty one, or one of another PD, included).
    if (!m || !m->bound || qp.id != m->through) {
      CHECK_THROWS_AS((void)w.h.invalidate(qp.h, id), usage_error);
      return;
    }
    if (m->key_changes >= 200) return;
    const post_status expected = refusal_for_(qp.h);
    const post_result r = w.h.invalidate(qp.h, id, flags_());
    check_post_(r, expected, "invalidate");
    if (!r.ok()) return;
    window_model& wm = windows_[w.id];
    wm.bound = false;
    ++wm.posted_ops;
    if constexpr (W::type == mw_type::type1) ++wm.key_changes;  // a zero-length bind
    note_(r, id, nullptr, {.qp = qp.id, .effect = expectation::invalidation, .window = w.id, .gen = wm.gen});
  }

  // The peer revokes a bound type 2 window with SEND with invalidate, through the queue
  // pair it was bound through; the receive completion tells the window (take_invalidation).
  void peer_invalidates_(slot<window2>& w) {
    if (!w.id || !windows_[w.id].bound) return;
    const window_model& m = windows_[w.id];
    for (std::size_t p = 0; p < pair_b_.size(); ++p) {
      if (pair_b_[p].id != m.through || !intact_(pair_a_[p], pair_b_[p])) continue;
      receive_on_(pair_b_[p].h, pd_of_(pair_b_[p].id), pair_b_[p].id);
      const auto buf = buffer_(0, use::source, 1 + pick_(32));
      if (!buf) return;
      const std::uint64_t id = next_id_++;
      const post_status expected = refusal_for_(pair_a_[p].h);
      const post_result r = pair_a_[p].h.post(op::send_inv{buf->b, w.h.remote()}, id, flags_());
      check_post_(r, expected, "send_inv");
      note_(r, id, local_fault_(*buf, pd_of_(pair_a_[p].id)), {.qp = pair_a_[p].id});
    }
  }

  // Keeps the window's descriptor for the peer: false (usage_error) when it has none.
  template <class W>
  bool give_to_peer_(slot<W>& w) {
    if (!w.id || !windows_[w.id].ever_bound) {
      CHECK_THROWS_AS((void)w.h.remote(), usage_error);
      return false;
    }
    const window_model& m = windows_[w.id];
    const descriptor d = w.h.remote();
    CHECK(d.rkey() == w.h.rkey());
    keep_(target{d, 0, w.id, m.gen, m.through});
    return true;
  }

  void step_window_regions_() {
    auto& r = window_regions_[pick_(window_regions_.size())];
    switch (r.id ? pick_(3) : 0) {
      case 0:
        replace_(r, sides_[1].pd.allocate<window_region_rights>(window_region_bytes),
                 born_({.side = 1, .pd = sides_[1].pd_id}));
        break;
      case 1: destroy_(r); break;  // a window bound to it keeps it registered
      default: shuffle_(window_regions_); break;
    }
  }

  // ---- shared receive queues (side B) --------------------------------------------------

  void step_srqs_() {
    auto& srq = srqs_[pick_(srqs_.size())];
    const std::size_t i = pick_(srq_senders_.size());
    if ((worn_(srq_senders_[i]) || worn_(srq_receivers_[i]) || !intact_(srq_senders_[i], srq_receivers_[i])) &&
        pick_(4) == 0)
      return make_srq_pair_(srq, i);
    switch (!srq.id && pick_(2) ? 0 : pick_(20)) {
      case 0: {
        const std::uint64_t id = born_({.side = 1, .pd = sides_[1].pd_id});
        auto made = sides_[1].pd.create_srq({.max_wr = 4 + pick_(12), .max_sge = 1});
        srqs_model_[id] = {.pd = sides_[1].pd_id, .ctx = sides_[1].ctx_id, .max_wr = made.caps().max_wr};
        replace_(srq, std::move(made), id);
        break;
      }
      case 1: destroy_(srq); break;  // its queue pairs keep it
      case 2: shuffle_(srqs_); break;
      case 3: case 4: case 5: case 6: case 14: post_srq_recv_(srq); break;
      case 15: post_srq_recvs_(srq); break;
      case 7: make_srq_pair_(srq, i); break;
      case 8: destroy_(srq_senders_[i]); break;
      case 9: destroy_(srq_receivers_[i]); break;  // the SRQ's receives stay for the others
      case 10: pick_(2) ? shuffle_(srq_senders_) : shuffle_(srq_receivers_); break;
      case 16: reset_connection_(srq_senders_[i], srq_receivers_[i]); break;
      case 11: make_srq_ud_(srq); break;
      case 12: pick_(2) ? destroy_(srq_ud_) : pick_(2) ? shuffle_(srq_ud_) : reset_ud_(srq_ud_); break;
      case 13: arm_limit_(srq); break;
      default:
        access_(srq_senders_[i].h, pd_of_(srq_senders_[i].id), intact_(srq_senders_[i], srq_receivers_[i]),
                srq_senders_[i].id);
        break;
    }
  }

  // Several receives at once (post_recvs): the ones posted before a refusal count.
  void post_srq_recvs_(slot<shared_receive_queue<B>>& srq) {
    const std::size_t n = 1 + pick_(3);
    if (srq.id && srqs_model_[srq.id].outstanding + n > srqs_model_[srq.id].max_wr) return;
    const bool small = pick_(4) == 0;  // the last one smaller than the GRH area
    std::vector<buffer> bufs;
    std::vector<local_buffer> list;
    bool any_small = false;
    for (std::size_t k = 0; k < n; ++k)
      if (const auto buf = buffer_(1, use::sink, small && k == n - 1 ? 1 + pick_(grh - 1) : grh + pick_(128))) {
        bufs.push_back(*buf);
        list.push_back(buf->b);
        any_small = any_small || buf->b.length < grh;
      }
    if (bufs.empty()) return;
    const std::uint64_t first = next_id_;
    next_id_ += bufs.size();
    post_status expected = post_status::ok;
    if (!srq.id)
      expected = post_status::empty_handle;
    else if (any_small && srqs_model_[srq.id].ud_users > 0)
      expected = post_status::recv_too_small;  // checked for all before any is posted
    const post_result r = srq.h.post_recvs(list, first);
    check_post_(r, expected, "shared_receive_queue::post_recvs");
    CHECK(r.posted <= bufs.size());
    for (std::uint32_t k = 0; k < r.posted; ++k) {
      const char* fault = local_fault_(bufs[k], pd_of_(srq.id));
      if (fault && rxe_ && live_(bufs[k].region)) fault = nullptr;
      note_(post_result{}, first + k, fault, {.recv = true, .srq = srq.id});
      ++srqs_model_[srq.id].outstanding;
    }
  }

  void post_srq_recv_(slot<shared_receive_queue<B>>& srq) {
    const bool small = pick_(4) == 0;
    const auto buf = buffer_(1, use::sink, small ? 1 + pick_(grh - 1) : grh + pick_(128));
    if (!buf) return;
    // Refilled from the completions polled only (a CQ reserves an SRQ's max_wr once: more
    // receives taken before their completions are polled could overflow it).
    if (srq.id && srqs_model_[srq.id].outstanding >= srqs_model_[srq.id].max_wr) return;
    const std::uint64_t id = next_id_++;
    post_status expected = post_status::ok;
    if (!srq.id)
      expected = post_status::empty_handle;
    else if (small && srqs_model_[srq.id].ud_users > 0)
      expected = post_status::recv_too_small;
    const post_result r = srq.h.post_recv(buf->b, id);
    check_post_(r, expected, "shared_receive_queue::post_recv");
    const char* fault = local_fault_(*buf, pd_of_(srq.id));
    // (rxe checks a receive against the PD of the queue pair that takes it, not the SRQ's.)
    if (fault && rxe_ && live_(buf->region)) fault = nullptr;
    note_(r, id, fault, {.recv = true, .srq = srq.id});
    if (r.ok()) ++srqs_model_[srq.id].outstanding;
    deregister_under_(r, id, 1, *buf);
  }

  // Whether creating a queue pair on `srq` must throw: an empty handle, or an SRQ of a
  // device side B has replaced since.
  // An empty SRQ, or one of another PD than the side's current one (another device's
  // too): a queue pair is created on the SRQ's PD only (audit 34).
  bool srq_refuses_(const slot<shared_receive_queue<B>>& srq) {
    return !srq.id || srqs_model_[srq.id].pd != sides_[1].pd_id;
  }

  void make_srq_pair_(slot<shared_receive_queue<B>>& srq, std::size_t i) {
    auto& sa = sides_[0];
    auto& sb = sides_[1];
    if (srq_refuses_(srq)) {
      CHECK_THROWS((void)sb.pd.create_qp<rc>(sb.cq, srq.h, srq_qp_depths));
      return;
    }
    try {
      auto qa = sa.pd.create_qp<rc, S>(sa.cq, srq_qp_depths);
      auto qb = sb.pd.create_qp<rc, S>(sb.cq, srq.h, srq_qp_depths);
      const endpoint ea = qa.local_endpoint();
      rc_qp a = std::move(qa).connect(qb.local_endpoint(), quick);
      srq_rc_qp b = std::move(qb).connect(ea, quick);
      const std::uint64_t ida = born_({.side = 0, .pd = sa.pd_id});
      const std::uint64_t idb = born_({.side = 1, .pd = sb.pd_id, .peer = ida, .srq = srq.id});
      srq_qpns_[srq.id].insert(b.qp_num());
      objects_.at(ida).peer = idb;
      replace_(srq_senders_[i], std::move(a), ida);
      replace_(srq_receivers_[i], std::move(b), idb);
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
    }
  }

  void make_srq_ud_(slot<shared_receive_queue<B>>& srq) {
    auto& sb = sides_[1];
    if (srq_refuses_(srq)) {
      CHECK_THROWS((void)sb.pd.create_qp<ud>(sb.cq, srq.h, srq_qp_depths));
      return;
    }
    try {
      srq_ud_qp q = sb.pd.create_qp<ud, S>(sb.cq, srq.h, srq_qp_depths).activate();
      remember_endpoint_(q.local_endpoint());
      ++srqs_model_[srq.id].ud_users;
      srq_qpns_[srq.id].insert(q.qp_num());
      replace_(srq_ud_, std::move(q), born_({.side = 1, .pd = sb.pd_id, .srq = srq.id, .grh = true}));
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
    }
  }

  // A UD queue pair reset() and activated again: a new one in its place (a new number,
  // the same PD, CQs and SRQ), the old one flushing what it had outstanding.
  template <class Q>
  void reset_ud_(slot<Q>& q) {
    if (!q.id) return;
    const object o = objects_.at(q.id);
    try {
      Q fresh = std::move(q.h).reset().activate();
      if (o.grh) ++srqs_model_[o.srq].ud_users;
      if (o.srq) srq_qpns_[o.srq].insert(fresh.qp_num());
      remember_endpoint_(fresh.local_endpoint());
      replace_(q, std::move(fresh), born_(o));
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
      if (!holds(q.h)) destroy_(q);
    }
  }

  void arm_limit_(slot<shared_receive_queue<B>>& srq) {
    if (!srq.id) {
      CHECK_THROWS_AS(srq.h.arm_limit(1), usage_error);
      return;
    }
    const std::uint32_t max_wr = srq.h.caps().max_wr;
    if (pick_(2)) {
      CHECK_THROWS_AS(srq.h.arm_limit(max_wr + 1), usage_error);
    } else {
      const std::uint32_t limit = pick_(max_wr + 1);
      srq.h.arm_limit(limit);
      CHECK(srq.h.limit() == limit);  // (it fires when a receive is taken, not when armed)
    }
  }

  // ---- UD: queue pairs, address handles, addresses that outlive them -------------------

  void remember_endpoint_(const endpoint& e) {
    if (ud_endpoints_.size() >= 8) ud_endpoints_.erase(ud_endpoints_.begin() + pick_(ud_endpoints_.size()));
    ud_endpoints_.push_back(e);
  }

  void make_ud_(int si, slot<ud_qp>& into) {
    side& s = sides_[si];
    try {
      auto init = s.pd.create_qp<ud, S>(s.cq, qp_depths);
      // Receives posted in INIT, before activate().
      std::vector<std::pair<std::uint64_t, const char*>> early;
      for (unsigned k = pick_(3); k > 0; --k)
        if (const auto buf = buffer_(si, use::sink, grh + 1 + pick_(256))) {
          const std::uint64_t id = next_id_++;
          if (init.post_recv(buf->b, id).ok()) early.emplace_back(id, local_fault_(*buf, s.pd_id));
        }
      ud_qp q = std::move(init).activate();
      const std::uint64_t qid = born_({.side = si, .pd = s.pd_id});
      for (const auto& [id, fault] : early) note_(post_result{}, id, fault, {.qp = qid, .recv = true});
      remember_endpoint_(q.local_endpoint());
      replace_(into, std::move(q), qid);
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
    }
  }

  void make_ah_(int si) {
    side& s = sides_[si];
    std::optional<endpoint> peer;
    const auto& uds = ud_[pick_(2)];
    const auto& q = uds[pick_(uds.size())];
    if (pick_(2) && !ud_endpoints_.empty()) {
      peer = ud_endpoints_[pick_(ud_endpoints_.size())];  // its queue pair may be gone
    } else if (!q.id) {
      CHECK_THROWS_AS((void)q.h.local_endpoint(), usage_error);
      return;
    } else {
      peer = q.h.local_endpoint();
    }
    // An empty slot if there is one, else now and then over a live handle (its addresses go stale).
    auto* into = &s.ahs[pick_(s.ahs.size())];
    for (auto& ah : s.ahs)
      if (!ah.id) into = &ah;
    if (into->id && pick_(4)) return;
    replace_(*into, s.pd.create_ah(*peer), born_({.side = si, .pd = s.pd_id}));
  }

  // Takes an address from one of side si's handles (or a default-constructed one) and
  // keeps it: false when the handle is empty (usage_error) or no endpoint is known.
  bool take_address_(int si) {
    auto& kept = sides_[si].addresses;
    if (ud_endpoints_.empty()) return false;
    if (kept.size() >= 8) {  // one whose handle is gone goes first
      auto gone = std::find_if(kept.begin(), kept.end(), [this](const kept_address& a) { return !live_(a.ah); });
      kept.erase(gone != kept.end() && pick_(4) ? gone : kept.begin() + pick_(kept.size()));
    }
    auto& ah = sides_[si].ahs[pick_(sides_[si].ahs.size())];
    const endpoint& peer = ud_endpoints_[pick_(ud_endpoints_.size())];
    if (pick_(8) == 0) {
      kept.push_back({ud_address<B>{}, 0});
    } else if (!ah.id) {
      CHECK_THROWS_AS((void)ah.h.to(peer), usage_error);
      return false;
    } else {
      kept.push_back({ah.h.to(peer), ah.id});
    }
    return true;
  }

  // An address for a queue pair of side si: one of that side's, now and then the other
  // side's (an address handle of another PD); a new one half the time, else one kept,
  // whose handle is gone a quarter of the time at most. Null when there is none.
  const kept_address* address_(int si) {
    const int from = pick_(8) ? si : 1 - si;
    const auto& kept = sides_[from].addresses;
    if (pick_(2) && take_address_(from)) return &kept.back();
    if (kept.empty()) return nullptr;
    const kept_address* a = &kept[pick_(kept.size())];
    for (int i = 0; i < 4 && !live_(a->ah) && pick_(4); ++i) a = &kept[pick_(kept.size())];
    return a;
  }

  // A datagram from `q` (PD pd) through a kept address, whose handle may be gone, be of
  // another PD, or name a queue pair destroyed since.
  void send_datagram_(ud_qp& q, std::uint64_t pd, int si, std::uint64_t tracked = 0) {
    const kept_address* to = address_(si);
    if (!to) return;
    const kept_address& a = *to;
    CHECK_MESSAGE(a.to.live() == live_(a.ah), "ud_address::live() disagrees with its handle's life");
    const auto buf = buffer_(si, use::source, 1 + pick_(256));
    if (!buf) return;
    const std::uint64_t id = next_id_++;
    post_status expected = refusal_for_(q);
    if (!live_(a.ah))
      expected = post_status::stale_address;  // checked first, before the queue pair
    else if (holds(q) && pd_of_(a.ah) != pd)
      expected = post_status::backend_error;  // an address handle of another PD: refused before the device
    const post_result r = pick_(2) ? q.send(a.to, buf->b, id, flags_())
                                   : q.send_imm(a.to, buf->b, static_cast<std::uint32_t>(id), id, flags_());
    check_post_(r, expected, "UD send");
    if (expected == post_status::backend_error) CHECK(r.rule == post_rule::address_pd);
    note_(r, id, local_fault_(*buf, pd), {.qp = tracked});
  }

  // A post list of datagrams, an address handle destroyed after its WR was added.
  void send_datagram_list_(int si) {
    auto& q = ud_[si][pick_(ud_[si].size())];
    auto list = ud_qp::template make_batch<4>();
    std::vector<std::pair<std::uint64_t, const char*>> wrs;
    std::vector<std::uint64_t> handles;
    for (unsigned k = 1 + pick_(3); k > 0; --k) {
      const kept_address* a = address_(si);
      const auto buf = buffer_(si, use::source, 1 + pick_(128));
      if (!a || !buf) continue;
      const std::uint64_t id = next_id_++;
      REQUIRE(list.add(op::ud_send{buf->b, a->to}, id, flags_()));
      wrs.emplace_back(id, local_fault_(*buf, pd_of_(q.id)));
      handles.push_back(a->ah);
    }
    if (wrs.empty()) return;
    if (pick_(4) == 0) {
      auto& ah = sides_[si].ahs[pick_(sides_[si].ahs.size())];
      destroy_(ah);
    }
    const bool any_stale = std::any_of(handles.begin(), handles.end(), [this](std::uint64_t h) { return !live_(h); });
    const bool other_pd = std::any_of(handles.begin(), handles.end(),
                                      [this, &q](std::uint64_t h) { return pd_of_(h) != pd_of_(q.id); });
    // Refused for an empty queue pair, one in ERR, too few credits, then a stale address.
    post_status expected = refusal_for_(q.h);
    if (expected == post_status::ok && any_stale)
      expected = post_status::stale_address;
    else if (expected == post_status::ok && other_pd)
      expected = post_status::backend_error;  // another PD's address handle: the list is refused before the device
    const post_result r = q.h.post(list);
    if (r.status == post_status::sq_full || r.status == post_status::cq_gone)
      CHECK(expected != post_status::empty_handle);  // (credits are checked before the addresses)
    else
      check_post_(r, expected, "UD post list");
    if (r.status == post_status::backend_error) CHECK(r.rule == post_rule::address_pd);
    CHECK(r.posted <= wrs.size());
    for (std::uint32_t k = 0; k < r.posted; ++k) note_(post_result{}, wrs[k].first, wrs[k].second, {.qp = q.id});
  }

  void step_ud_() {
    const int si = static_cast<int>(pick_(2));
    side& s = sides_[si];
    auto& q = ud_[si][pick_(ud_[si].size())];
    if (worn_(q) && pick_(3) == 0) return make_ud_(si, q);
    switch (pick_(24)) {
      case 0: make_ud_(si, q); break;
      case 1: destroy_(q); break;  // peers keep their addresses of it
      case 2: pick_(2) ? shuffle_(ud_[si]) : reset_ud_(q); break;
      case 3: case 4: make_ah_(si); break;
      case 5: destroy_(s.ahs[pick_(s.ahs.size())]); break;  // sends through it may be outstanding
      case 6: shuffle_(s.ahs); break;
      case 7: case 8: case 9: case 15: (void)take_address_(si); break;
      case 10: send_datagram_list_(si); break;
      case 11: case 12: case 13: {
        const bool small = pick_(6) == 0;
        const auto buf = buffer_(si, use::sink, small ? 1 + pick_(grh - 1) : grh + pick_(300));
        if (!buf) break;
        const std::uint64_t id = next_id_++;
        post_status expected = refusal_for_(q.h);
        if (small && expected != post_status::empty_handle) expected = post_status::recv_too_small;
        const post_result r = q.h.post_recv(buf->b, id);
        check_post_(r, expected, "UD post_recv");
        note_(r, id, local_fault_(*buf, pd_of_(q.id)), {.qp = q.id, .recv = true});
        deregister_under_(r, id, si, *buf);
        break;
      }
      default: send_datagram_(q.h, pd_of_(q.id), si, q.id); break;
    }
  }

  // ---- qp_pool --------------------------------------------------------------------------

  // Pools i of sides A and B, connected member by member; misuse on the way changes nothing.
  void make_pools_(std::size_t i) {
    const std::size_t n = 1 + pick_(3);
    try {
      auto pa = sides_[0].pd.create_qp_pool<rc, S>(sides_[0].cq, n, qp_depths);
      auto pb = sides_[1].pd.create_qp_pool<rc, S>(sides_[1].cq, n, qp_depths);
      const std::vector<endpoint> ea = pa.local_endpoints(), eb = pb.local_endpoints();
      if (pick_(3) == 0) {
        const std::vector<endpoint> fewer(eb.begin(), eb.end() - 1);
        CHECK_THROWS_AS((void)std::move(pa).connect(fewer, quick), usage_error);
        CHECK(pa.size() == n);
      }
      if (pick_(3) == 0) {
        const std::size_t k = pick_(n);
        auto out = std::move(pa[k]);
        CHECK_THROWS_AS((void)std::move(pa).connect(eb, quick), usage_error);
        CHECK(pa.size() == n);
        pa[k] = std::move(out);
      }
      rc_pool ca = std::move(pa).connect(eb, quick);
      CHECK(pa.size() == 0);
      rc_pool cb = std::move(pb).connect(ea, quick);
      const std::uint64_t ida = born_({.side = 0, .pd = sides_[0].pd_id});
      const std::uint64_t idb = born_({.side = 1, .pd = sides_[1].pd_id, .peer = ida});
      objects_.at(ida).peer = idb;
      replace_(pools_a_[i], std::move(ca), ida);
      replace_(pools_b_[i], std::move(cb), idb);
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
    }
  }

  void make_ud_pool_() {
    side& s = sides_[0];
    try {
      auto p = s.pd.create_qp_pool<ud, S>(s.cq, 1 + pick_(3), qp_depths);
      if (pick_(3) == 0) {
        auto out = std::move(p[0]);
        CHECK_THROWS_AS((void)std::move(p).activate(), usage_error);
        p[0] = std::move(out);
      }
      ud_pool active = std::move(p).activate();
      for (auto& q : active) remember_endpoint_(q.local_endpoint());
      replace_(ud_pool_, std::move(active), born_({.side = 0, .pd = s.pd_id}));
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
    }
  }

  // Member k of pool `a`, reached through the pool connected to it, when both still hold it.
  std::optional<responder> pool_peer_(const slot<rc_pool>& a, const slot<rc_pool>& b, std::size_t k) const {
    if (!live_(a.id) || !live_(b.id) || objects_.at(a.id).peer != b.id || k >= b.h.size() || !holds(a.h[k]) ||
        !holds(b.h[k]))
      return std::nullopt;
    return responder{0, objects_.at(b.id).pd, b.id};
  }

  void step_pools_() {
    const std::size_t i = pick_(pools_a_.size());
    auto& pa = pools_a_[i];
    if (!pool_peer_(pa, pools_b_[i], 0) && pick_(3) == 0) return make_pools_(i);
    if (!ud_pool_.id && pick_(6) == 0) return make_ud_pool_();
    switch (pick_(12)) {
      case 0: make_pools_(i); break;
      case 1: pick_(2) ? destroy_(pa) : destroy_(pools_b_[i]); break;
      case 2: pick_(2) ? shuffle_(pools_a_) : shuffle_(pools_b_); break;
      case 3: {  // a member moved out: next() then hands out its empty handle
        if (!pa.id) break;
        const std::size_t k = pick_(pa.h.size());
        rc_qp out = std::move(pa.h[k]);
        CHECK_FALSE(holds(pa.h[k]));
        if (pick_(2)) pa.h[k] = std::move(out);  // and sometimes put back
        break;
      }
      case 4: {  // a receive on a member of the peer pool (none: on an empty queue pair)
        auto& pb = pools_b_[i].h;
        receive_on_(pb.size() ? pb[pick_(pb.size())] : empty_qp_, pd_of_(pools_b_[i].id));
        break;
      }
      case 5: make_ud_pool_(); break;
      case 6: pick_(2) ? destroy_(ud_pool_) : shuffle_(ud_pool_); break;
      case 7: {
        if (!ud_pool_.id) {
          CHECK_THROWS_AS((void)ud_pool_.h.next(), usage_error);
          break;
        }
        send_datagram_(ud_pool_.h.next(), pd_of_(ud_pool_.id), 0);
        break;
      }
      default: {
        if (!pa.id) {
          CHECK_THROWS_AS((void)pa.h.next(), usage_error);
          break;
        }
        rc_qp& q = pa.h.next();
        const auto k = static_cast<std::size_t>(&q - &pa.h[0]);
        if (holds(q)) CHECK(pa.h.find(q.qp_num()) == &q);
        access_(q, pd_of_(pa.id), pool_peer_(pa, pools_b_[i], k));
        break;
      }
    }
  }

  // ---- regions, and the handles every object comes from ---------------------------------

  void step_regions_() {
    const int si = static_cast<int>(pick_(2));
    side& s = sides_[si];
    auto& sl = s.slices[pick_(s.slices.size())];
    switch (pick_(12)) {
      case 0: case 1: case 2: make_region_(si); break;
      case 3: case 4: destroy_(s.regions[pick_(s.regions.size())]); break;  // WRs naming it may be outstanding
      case 5: shuffle_(s.regions); break;
      case 6: {  // a registered pool over the live one: slices out keep its registration
        const std::uint64_t reg = born_({.side = si, .pd = s.pd_id});
        holders_[reg] = 1;
        replace_(s.pool, s.pd.create_pool<data_rights>(256, 4),
                 born_({.side = si, .pd = s.pd_id, .registration = reg}));
        break;
      }
      case 7: case 8: {
        pool_slice taken = s.pool.h.acquire();
        if (!s.pool.id) {
          CHECK_FALSE_MESSAGE(taken, "an empty registered_pool handed out a slice");
        } else if (!taken) {
          CHECK(s.pool.h.available() == 0);
        } else {
          const std::uint64_t reg = objects_.at(s.pool.id).registration;
          ++holders_[reg];
          replace_(sl, std::move(taken), born_({.side = si, .pd = objects_.at(reg).pd, .registration = reg}));
        }
        break;
      }
      case 9: pick_(2) ? destroy_(s.pool) : shuffle_(s.pool); break;
      case 10: destroy_(sl); break;  // its slot goes back (or, the pool gone, maybe the registration)
      default: shuffle_(s.slices); break;
    }
  }

  // The device, PD or CQ moved out and back: meanwhile the empty handle refuses setup.
  // Or a new PD (or device, PD and CQ) assigned over the live handle: the old ones live
  // on in their children, and objects of the two meet (another PD, another device).
  void step_base_handles_() {
    const int si = static_cast<int>(pick_(2));
    side& s = sides_[si];
    switch (pick_(8)) {
      case 0: {
        device<B> moved(std::move(s.dev));
        CHECK_THROWS_AS((void)s.dev.create_pd(), usage_error);
        CHECK_THROWS_AS((void)s.dev.create_cq(8), usage_error);
        s.dev = std::move(moved);
        break;
      }
      case 1: {
        protection_domain<B> moved(std::move(s.pd));
        CHECK_THROWS_AS((void)s.pd.allocate<data_rights>(64), usage_error);
        CHECK_THROWS_AS((void)s.pd.create_qp<ud>(s.cq, qp_depths), usage_error);
        CHECK_THROWS_AS((void)s.pd.create_srq({.max_wr = 4, .max_sge = 1}), usage_error);
        CHECK_THROWS_AS((void)s.pd.alloc_window<granted>(), usage_error);
        CHECK_THROWS_AS((void)s.pd.create_qp_pool<rc>(s.cq, 1, qp_depths), usage_error);
        if (!ud_endpoints_.empty()) CHECK_THROWS_AS((void)s.pd.create_ah(ud_endpoints_.front()), usage_error);
        s.pd = std::move(moved);
        break;
      }
      case 2: {
        completion_queue<B> moved(std::move(s.cq));
        CHECK(s.cq.poll([](const completion<B>&) {}) == -EBADF);
        CHECK(s.cq.wait([](const completion<B>&) {}, 0ms).error() == EBADF);
        CHECK_THROWS_AS((void)s.pd.create_qp<rc>(s.cq, qp_depths), usage_error);
        s.cq = std::move(moved);
        break;
      }
      case 3:
        if (pick_(2)) break;
        s.pd = s.dev.create_pd();
        s.pd_id = next_object_++;
        break;
      case 4:
        if (restarts_ >= 2) break;
        ++restarts_;
        s.retired_cqs.push_back(std::move(s.cq));
        s.dev = device<B>(fab_, si == 0 ? "mock0" : "mock1");
        s.pd = s.dev.create_pd();
        s.cq = s.dev.create_cq(cq_entries_);
        s.pd_id = next_object_++;
        s.ctx_id = next_object_++;
        break;
      case 5:  // a CQ handle dropped before the queue pairs attached to it (they keep it)
        if (!s.retired_cqs.empty()) s.retired_cqs.erase(s.retired_cqs.begin()), ++dropped_cqs_;
        break;
      default: step_regions_(); break;
    }
  }

  void one_step_() {
    const unsigned op = pick_(100);
    if (op < 18)
      step_ud_();
    else if (op < 32)
      step_srqs_();
    else if (op < 44)
      step_pairs_();
    else if (op < 52)
      step_windows_(windows2_);
    else if (op < 56)
      step_windows_(windows1_);
    else if (op < 58)
      step_window_regions_();
    else if (op < 66)
      step_pools_();
    else if (op < 72)
      step_regions_();
    else if (op < 74)
      step_base_handles_();
    else
      poll_some_();
  }
  void poll_some_() {
    const int si = static_cast<int>(pick_(2));
    (void)poll_side_(si, pick_(2));
  }

  // ---- what still works at the end -----------------------------------------------------

  // Posts with `post(id)` and waits for that wr_id's completion: its status, or none.
  template <class Post>
  std::optional<wc_status> run_to_completion_(Post post, const char* what) {
    const std::uint64_t id = next_id_++;
    post_result r{post_status::sq_full};
    for (int i = 0; i < 100 && r.status == post_status::sq_full; ++i) {
      r = post(id);
      if (r.status == post_status::sq_full) quiesce_();
    }
    if (!r.ok()) {
      FAIL_CHECK(std::string(what) << ": refused with " << std::string(to_string(r.status)));
      return std::nullopt;
    }
    if (!expected_.count(id)) note_(r, id, nullptr);
    for (int i = 0; i < 2000 && !delivered_.count(id); ++i) (void)(poll_side_(0, true) + poll_side_(1, true));
    if (!delivered_.count(id)) {
      FAIL_CHECK(std::string(what) << ": never completed");
      return std::nullopt;
    }
    return delivered_.at(id);
  }

  template <class Q>
  static bool healthy_(const Q& q) {
    return holds(q) && !q.in_error() && q.query_state() == qp_state::rts;
  }

  // Every window not bound, whose binds and invalidations all succeeded (a failed one
  // leaves it an rkey the device never gave it: it can never be bound again), is bound
  // through a healthy connection to a region whose handle goes at once: the window keeps
  // it registered.
  void rebind_windows_() {
    auto rebind = [this](auto& windows) {
      for (auto& w : windows) {
        if (!w.id) continue;
        const window_model& m = windows_[w.id];
        if (m.posted_ops != m.ok_ops || m.pd != sides_[1].pd_id || m.key_changes >= 200 || (m.type2 && m.bound))
          continue;
        for (std::size_t p = 0; p < pair_b_.size(); ++p) {
          if (!intact_(pair_a_[p], pair_b_[p]) || pd_of_(pair_b_[p].id) != m.pd || !healthy_(pair_a_[p].h) ||
              !healthy_(pair_b_[p].h))
            continue;
          const auto region = sides_[1].pd.allocate<window_region_rights>(window_region_bytes);
          const auto status = run_to_completion_(
              [&](std::uint64_t id) {
                const post_result r = w.h.bind(pair_b_[p].h, region, 64, 256, id, send_flags::signaled);
                bound_(w, pair_b_[p], r, id);
                return r;
              },
              "a bind after the random steps");
          CHECK_MESSAGE((status == wc_status::success), "a window whose binds all succeeded could not be bound again");
          break;
        }
      }
    };
    rebind(windows2_);
    rebind(windows1_);
  }

  // Through every window still bound (its bind seen to succeed) and reached through the
  // queue pair it was bound through: a WRITE and a READ back, even if its region's handle is gone.
  void check_windows_still_work_() {
    auto check = [this](auto& windows) {
      for (auto& w : windows) {
        if (!w.id) continue;
        const window_model& m = windows_[w.id];
        if (!m.bound || m.ok_gen != m.gen) continue;
        for (std::size_t p = 0; p < pair_b_.size(); ++p) {
          if (pair_b_[p].id != m.through || !intact_(pair_a_[p], pair_b_[p])) continue;
          rc_qp& a = pair_a_[p].h;
          if (!healthy_(a) || !healthy_(pair_b_[p].h) || pd_of_(pair_a_[p].id) != sides_[0].pd_id) continue;
          auto mem = sides_[0].pd.allocate<data_rights>(64);
          const descriptor d = w.h.remote().sub(0, 8);
          std::memcpy(mem.data(), "window!!", 8);
          const auto n = static_cast<std::uint32_t>(d.length());
          const auto wrote = run_to_completion_(
              [&](std::uint64_t id) { return a.write(mem.local(0, n), d, id, send_flags::signaled); },
              "WRITE through a window");
          CHECK_MESSAGE((wrote == wc_status::success), "a WRITE through a bound window failed");
          const auto read = run_to_completion_(
              [&](std::uint64_t id) { return a.read(mem.local(32, n), d, id, send_flags::signaled); },
              "READ through a window");
          CHECK_MESSAGE((read == wc_status::success), "a READ through a bound window failed");
          CHECK(std::memcmp(mem.data(), mem.data() + 32, n) == 0);
        }
      }
    };
    check(windows2_);
    check(windows1_);
  }

  // A WRITE each way on every connection left healthy whose ends are on the current PDs.
  template <class QA, class QB>
  void check_connection_(QA& a, std::uint64_t pd_a, QB& b, std::uint64_t pd_b) {
    if (!healthy_(a) || !healthy_(b) || pd_a != sides_[0].pd_id || pd_b != sides_[1].pd_id) return;
    auto ma = sides_[0].pd.allocate<data_rights>(64);
    auto mb = sides_[1].pd.allocate<data_rights>(64);
    std::memcpy(ma.data(), "a-to-b!!", 8);
    std::memcpy(mb.data() + 32, "b-to-a!!", 8);
    const auto there = run_to_completion_(
        [&](std::uint64_t id) { return a.write(ma.local(0, 8), mb.remote().sub(0, 8), id, send_flags::signaled); },
        "WRITE on a healthy connection");
    CHECK_MESSAGE((there == wc_status::success), "a WRITE on a healthy connection failed");
    const auto back = run_to_completion_(
        [&](std::uint64_t id) { return b.write(mb.local(32, 8), ma.remote().sub(32, 8), id, send_flags::signaled); },
        "WRITE back on a healthy connection");
    CHECK_MESSAGE((back == wc_status::success), "a WRITE back on a healthy connection failed");
    CHECK(std::memcmp(mb.data(), "a-to-b!!", 8) == 0);
    CHECK(std::memcmp(ma.data() + 32, "b-to-a!!", 8) == 0);
  }
  void check_connections_still_work_() {
    for (std::size_t p = 0; p < pair_a_.size(); ++p)
      if (intact_(pair_a_[p], pair_b_[p]))
        check_connection_(pair_a_[p].h, pd_of_(pair_a_[p].id), pair_b_[p].h, pd_of_(pair_b_[p].id));
    for (std::size_t i = 0; i < srq_senders_.size(); ++i)
      if (intact_(srq_senders_[i], srq_receivers_[i]))
        check_connection_(srq_senders_[i].h, pd_of_(srq_senders_[i].id), srq_receivers_[i].h,
                          pd_of_(srq_receivers_[i].id));
    for (std::size_t i = 0; i < pools_a_.size(); ++i)
      for (std::size_t k = 0; k < pools_a_[i].h.size(); ++k)
        if (pool_peer_(pools_a_[i], pools_b_[i], k))
          check_connection_(pools_a_[i].h[k], pd_of_(pools_a_[i].id), pools_b_[i].h[k], pd_of_(pools_b_[i].id));
  }

  // A datagram from every healthy UD queue pair on the current PDs reaches a new receiver.
  template <class Q>
  void check_datagram_(Q& q, std::uint64_t pd, int si) {
    if (!healthy_(q) || pd != sides_[si].pd_id) return;
    side& other = sides_[1 - si];
    std::optional<queue_pair<B, ud, signal_all, qp_state::rts>> made;
    try {
      made.emplace(other.pd.create_qp<ud>(other.cq, qp_cap{.max_send_wr = 1, .max_recv_wr = 1}).activate());
    } catch (const usage_error& e) {
      cq_room_refusal_(e);
      return;
    }
    auto& receiver = *made;
    const auto ah = sides_[si].pd.create_ah(receiver.local_endpoint());
    const ud_address<B> dest = ah.to(receiver.local_endpoint());
    auto tx = sides_[si].pd.allocate<data_rights>(64);
    auto rx = other.pd.allocate<data_rights>(grh + 64);
    std::memcpy(tx.data(), "datagram", 8);
    const std::uint64_t rid = next_id_++;
    note_(receiver.post_recv(rx.local(), rid), rid, nullptr);
    const auto sent = run_to_completion_(
        [&](std::uint64_t id) { return q.send(dest, tx.local(0, 8), id, send_flags::signaled); },
        "a datagram from a healthy UD queue pair");
    CHECK_MESSAGE((sent == wc_status::success), "a datagram from a healthy UD queue pair failed");
    for (int i = 0; i < 2000 && !delivered_.count(rid); ++i) (void)(poll_side_(0, true) + poll_side_(1, true));
    CHECK_MESSAGE((delivered_.count(rid) && delivered_.at(rid) == wc_status::success), "the datagram never arrived");
    CHECK(std::memcmp(rx.data() + grh, "datagram", 8) == 0);
  }

  void check_ud_still_delivers_() {
    for (int si = 0; si < 2; ++si)
      for (auto& q : ud_[si]) check_datagram_(q.h, pd_of_(q.id), si);
    if (ud_pool_.id)
      for (auto& q : ud_pool_.h) check_datagram_(q, pd_of_(ud_pool_.id), 0);
  }

  // Every queue pair and window destroyed, in a random order, and the CQs polled until
  // empty: no entry stays reserved or held for flushes. (A type 2 window keeps the QPs
  // it was bound through, in ERR, and their CQs hold room for their flushes until the
  // window lets them be destroyed: memory.md.)
  void check_teardown_() {
    std::vector<std::function<void()>> destroy;
    for (auto& w : windows2_) destroy.push_back([this, &w] { destroy_(w); });
    for (auto& w : windows1_) destroy.push_back([this, &w] { destroy_(w); });
    for (auto& qps : ud_)
      for (auto& q : qps) destroy.push_back([this, &q] { destroy_(q); });
    for (auto* qps : {&pair_a_, &pair_b_})
      for (auto& q : *qps) destroy.push_back([this, &q] { destroy_(q); });
    for (auto& q : srq_senders_) destroy.push_back([this, &q] { destroy_(q); });
    for (auto& q : srq_receivers_) destroy.push_back([this, &q] { destroy_(q); });
    for (auto* pools : {&pools_a_, &pools_b_})
      for (auto& p : *pools) destroy.push_back([this, &p] { destroy_(p); });
    destroy.push_back([this] { destroy_(srq_ud_); });
    destroy.push_back([this] { destroy_(ud_pool_); });
    std::shuffle(destroy.begin(), destroy.end(), rnd_);
    for (auto& d : destroy) d();
    quiesce_();
    for (auto& s : sides_) {
      auto check = [](const completion_queue<B>& cq) {
        CHECK(cq.attached() == 0);
        CHECK_MESSAGE(cq.reserved() == 0, "entries still reserved with no queue pair attached");
        CHECK_MESSAGE(cq.flushing() == 0, "entries still held for flushes after the CQ was polled empty");
      };
      check(s.cq);
      for (const auto& old : s.retired_cqs) check(old);
    }
  }

  std::minstd_rand rnd_;
  bool rxe_ = false;
  bool latency_ = false;
  int cq_entries_ = 0;
  mock::fabric fab_;
  std::array<side, 2> sides_{side(fab_, "mock0", cq_entries_), side(fab_, "mock1", cq_entries_)};
  int restarts_ = 0;
  int dropped_cqs_ = 0;  // CQ handles dropped before their queue pairs (step 5)

  std::uint64_t next_object_ = 1;
  std::unordered_map<std::uint64_t, object> objects_;  // live objects
  std::unordered_map<std::uint64_t, srq_model> srqs_model_;
  std::unordered_map<std::uint64_t, window_model> windows_;
  std::unordered_map<std::uint64_t, int> holders_;  // a pool's registration: the pool and its slices
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, expectation> expected_;   // posted, not completed yet
  std::unordered_map<std::uint64_t, wc_status> delivered_;   // completed
  std::unordered_map<std::uint64_t, int> sends_out_, recvs_out_;  // per queue pair: posted, not polled yet
  std::unordered_map<std::uint64_t, std::unordered_set<std::uint32_t>> srq_qpns_;  // per SRQ: its queue pairs' numbers

  std::vector<target> targets_;            // descriptors handed to the peer (side A)
  std::vector<endpoint> ud_endpoints_;     // UD queue pairs, some destroyed since

  std::array<std::array<slot<ud_qp>, 2>, 2> ud_;  // side A's, side B's
  // Pair p: pair_a_[p] (side A) connected to pair_b_[p] (side B); windows bind through pair_b_.
  std::array<slot<rc_qp>, 2> pair_a_, pair_b_;
  std::array<slot<window_region>, 2> window_regions_;
  std::array<slot<window2>, 2> windows2_;
  std::array<slot<window1>, 1> windows1_;
  std::array<slot<shared_receive_queue<B>>, 2> srqs_;
  std::array<slot<rc_qp>, 3> srq_senders_;          // side A, each connected to
  std::array<slot<srq_rc_qp>, 3> srq_receivers_;    // side B, on an SRQ
  slot<srq_ud_qp> srq_ud_;                          // side B, UD on an SRQ
  std::array<slot<rc_pool>, 2> pools_a_, pools_b_;  // pool i of side A connected to pool i of side B
  slot<ud_pool> ud_pool_;                           // side A
  rc_qp empty_qp_;                                  // an empty queue pair, to post on
};

}  // namespace random_resources

TEST_CASE_TEMPLATE("random resources: UD and address handles, SRQs, windows, pools, regions gone, moves",
                   S, rdmakit::signal_all, rdmakit::signal_every<4>, rdmakit::signal_manual) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    random_resources::run<S>(seed).go(3000);
  }
}
