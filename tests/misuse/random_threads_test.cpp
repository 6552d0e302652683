// Random use, from 2 to 4 threads at once, of what docs/ownership-and-threads.md
// ("Threads") lets threads share, on one mock fabric. Each thread owns its CQs and queue
// pairs (a queue pair and the CQ that accounts its credits stay on one thread). The
// threads share the devices, the protection domains, a shared receive queue, memory
// regions, a registered pool (single-threaded, says docs/memory.md: every use holds its
// mutex) and the PD of their address handles, and connect their RC and UC queue pairs to
// other threads' (endpoints exchanged through a mailbox). One thread drops the last
// handles of a device, a PD, the SRQ and the fabric at a random step while every thread
// holds their children. A seed fixes each thread's steps, not the interleaving; for any:
// - no completion comes twice or with a wr_id never posted; each comes on the queue pair
//   it was posted on (an SRQ's receive: on one of the polling thread's queue pairs on the
//   SRQ, never flushed), with a documented status;
// - a successful receive or READ brings tagged bytes a sender exposed, nothing else;
// - posts, setup calls and connect() fail only as documented (stale_address, empty_handle,
//   usage_error for a dropped handle or a full CQ, a connect refused at RTR→RTS);
// - once the steps stop, every signaled WR of a queue pair still held completes within
//   its retry budget, and every connection both ends report healthy (one made after the
//   steps among them) carries a READ each way;
// - a thread's CQs polled empty after its queue pairs are gone hold nothing reserved or
//   flushing; and no data race (CI's ThreadSanitizer stage), crash or hang.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// (A namespace of its own: the misuse tests are built as a unity build.)
namespace random_threads {

using namespace rdmakit;
using namespace std::chrono_literals;
using B = backends::mock;
using S = signal_all;
using wall = std::chrono::steady_clock;
using pd_t = protection_domain<B>;

constexpr auto target_rights = access::local_write | access::remote_write | access::remote_read;
constexpr auto source_rights = access::remote_read;  // filled once, before any peer learns its rkey
constexpr auto sink_rights = access::local_write;    // read by the CPU only once the WR that filled it completed
using target_region = memory_region<B, target_rights>;
using source_remote = remote_region<access::remote_read>;
using buffer_pool = registered_pool<B, target_rights>;
template <class T>
using live_qp = queue_pair<B, T, S, qp_state::rts>;
template <class T>
using new_qp = queue_pair<B, T, S, qp_state::init>;
using srq_rc = on_srq<rc>;

constexpr int pds = 3;  // 0, 1: for the whole run (mock0, mock1); 2: the doomed one (mock1 opened again)
constexpr int doomed = 2;
constexpr qp_cap depths{.max_send_wr = 8, .max_recv_wr = 8};
constexpr qp_cap srq_depths{.max_send_wr = 8, .max_recv_wr = 0};
constexpr int cq_entries = 256;
constexpr std::uint32_t srq_max_wr = 48, max_msg = 256, grh = 40;
constexpr std::size_t slot_bytes = 512, slots = 64;  // a thread's receive and READ sinks, per PD
constexpr std::size_t source_bytes = 4096, target_bytes = 2048;
constexpr std::uint64_t srq_tag = 0xFF;     // wr_id bits 40..47: the posting thread + 1, or this (the SRQ's receives)
constexpr std::size_t max_connections = 3;  // of each kind, per thread, during the steps
// A dead or silent peer fails an RC requester within ~70 ms (simulated time follows the
// wall clock while several threads use the fabric).
const connect_options quick{.timeout = 12, .retry_cnt = 3, .rnr_retry = 3, .min_rnr_timer = 12};

// What an offer connects: an RC queue pair to an RC one, or to one on the SRQ; UC to UC.
enum class link_kind { rc, rc_to_srq, uc };

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  return o.str();
}

// What SENDs and READs carry: 8-byte words of a tag and consecutive counts. Any run of
// them is recognized; bytes of another message, a stale buffer or a wrong offset are not.
constexpr std::uint64_t tag = 0x7A6B000000000000, tag_mask = 0xFFFF000000000000;
void fill_tagged(std::byte* p, std::size_t bytes, std::uint64_t first) {
  for (std::size_t i = 0; i < bytes / 8; ++i) {
    const std::uint64_t word = tag | (first + i);
    std::memcpy(p + 8 * i, &word, 8);
  }
}
bool tagged(const std::byte* p, std::size_t bytes) {
  std::uint64_t prev = 0, word = 0;
  for (std::size_t i = 0; i < bytes / 8; prev = word, ++i) {
    std::memcpy(&word, p + 8 * i, 8);
    if ((word & tag_mask) != tag || (i != 0 && word != prev + 1)) return false;
  }
  return bytes % 8 == 0;
}

bool documented(wc_status s, bool rxe) {
  using enum wc_status;
  for (const wc_status d : {success, wr_flush_err, loc_prot_err, loc_len_err, loc_access_err, rem_access_err,
                            rem_op_err, rem_inv_req_err, retry_exc_err, rnr_retry_exc_err})
    if (s == d) return true;
  return rxe && s == loc_qp_op_err;  // rxe's responder errors (docs/semantics.md §13)
}

// A slice of the shared pool. A pool is single-threaded (docs/memory.md): a slice is
// taken and given back, on whichever thread, under the pool's mutex.
struct give_back {
  std::mutex* mu = nullptr;
  void operator()(buffer_pool::slice* s) const {
    std::lock_guard lock(*mu);
    delete s;
  }
};
using shared_slice = std::unique_ptr<buffer_pool::slice, give_back>;

// ---- what the threads share ---------------------------------------------------------

struct hello {  // an offer (an INIT queue pair's endpoint) or its answer (the connected peer's)
  std::uint64_t conn = 0;
  unsigned from = 0, to = 0;
  link_kind kind = link_kind::rc;
  int pd = 0;
  endpoint ep;
  source_remote source;  // the sender's tagged bytes in that PD
};
struct published_target {
  remote_region<access::remote_write | access::remote_read> r;
  int pd = 0;
  std::uint64_t region = 0;
};
struct churn_slot {  // a region of any PD that peers target, deregistered at any time
  target_region r;
  int pd = 0;
  std::uint64_t region = 0;
};

mock::fabric_config config_for(std::minstd_rand& rnd) {
  mock::fabric_config cfg;
  cfg.seed = rnd();
  if (rnd() % 3 == 0) cfg.profile = mock::device_profile::rxe;  // a destroyed QP's completions stay in its CQ
  if (rnd() % 2) cfg.latency = std::chrono::microseconds(1 + rnd() % 4);
  return cfg;
}

struct world {
  world(std::minstd_rand& rnd, unsigned n)
      : cfg(config_for(rnd)), threads(n), doomed_thread(rnd() % n), doomed_step(static_cast<int>(rnd() % 250)),
        doomed_what((1 + rnd() % 3) | (rnd() % 4 == 0 ? 4 : 0) | (rnd() % 2 ? 8 : 0)), phase(n) {
    if (rnd() % 4 == 0)
      fab->inject({.kind = rnd() % 2 ? mock::fault_kind::drop : mock::fault_kind::delay, .count = 0,
                   .probability = 0.05, .delay = 50us});
  }
  const mock::fabric_config cfg;
  const unsigned threads;
  const bool rxe = cfg.profile == mock::device_profile::rxe;
  // Handles one thread drops while the others use them: every use holds handles_mu
  // shared, the drop holds it exclusively (it guards the handle objects, not what they own).
  std::shared_mutex handles_mu;
  std::optional<mock::fabric> fab{std::in_place, cfg};  // its devices keep its state alive
  device<B> dev0{*fab, "mock0"}, dev1{*fab, "mock1"};
  pd_t pd0 = dev0.create_pd(), pd1 = dev1.create_pd();
  device<B> doomed_dev{*fab, "mock1"};
  pd_t doomed_pd = doomed_dev.create_pd();
  shared_receive_queue<B> srq = pd1.create_srq({.max_wr = srq_max_wr, .max_sge = 1});
  const unsigned doomed_thread;
  const int doomed_step;
  const unsigned doomed_what;  // bits: 1 the PD, 2 the device, 4 the SRQ, 8 the fabric
  std::mutex pool_mu;
  buffer_pool pool = pd1.create_pool<target_rights>(slot_bytes, 80);  // in the SRQ's PD
  // Receives posted to the SRQ (they complete on any thread's CQ), each with its slice.
  std::mutex srq_mu;  // taken before pool_mu, never after
  std::unordered_map<std::uint64_t, shared_slice> srq_out;
  std::uint64_t srq_next = 1;
  std::mutex mail_mu;
  std::vector<hello> offers, answers;
  std::vector<published_target> targets;
  std::vector<endpoint> ud_peers;
  std::unordered_map<std::uint64_t, int> healthy;  // connection → its ends that reported it healthy
  std::atomic<std::uint64_t> next_conn{1}, next_region{1};
  std::barrier<> phase;
  // What the checks saw, so that none runs on nothing: READs over connections healthy at
  // both ends, payloads checked (receive queues and READs), stale addresses refused.
  std::atomic<int> healthy_reads{0}, payloads{0}, stale_refused{0};
};

// ---- one thread ---------------------------------------------------------------------

// P: the polling policy of every CQ (event_driven: waits sleep on completion channels).
template <class P>
class worker {
  using cq_t = completion_queue<B, P>;

 public:
  worker(world& w, unsigned me, unsigned seed) : w_(w), me_(me), rnd_(seed * 977 + me) {}
  std::vector<std::string> failures;

  // The phases, each ended by a barrier every thread reaches, whatever happened. After the
  // steps, what was posted completes; then one more connection, made after all the churn,
  // to the next thread: offered, answered, collected.
  void run(int steps) {
    phase_([&] { setup_(); });
    phase_([&] { for (step_ = 0; step_ < steps; ++step_) one_step_(); });
    phase_([&] { churning_ = false; settle_(); offer_((me_ + 1) % w_.threads, link_kind(pick_(2)), pick_(pds)); });
    phase_([&] { answer_offers_(); });
    phase_([&] { collect_answers_(); report_healthy_(); });
    phase_([&] { read_over_healthy_connections_(); });  // after it, nobody reads a peer's source
    guarded_([&] { teardown_(); });
  }

 private:
  template <class T>
  struct conn {
    live_qp<T> qp;
    std::uint64_t id = 0;    // the connection, known to both ends
    std::uint64_t life = 0;  // this end's queue pair, through moves and reset()
    int pd = 0, peer_pd = 0;
    unsigned peer = 0;
    source_remote peer_source;
    bool peer_on_srq = false;  // its SENDs take the shared SRQ's receives
  };
  struct pending {  // an INIT queue pair offered to a peer, waiting for its answer
    new_qp<rc> rc_qp{};
    new_qp<uc> uc_qp{};
    std::uint64_t id = 0, life = 0;
    int pd = 0;
    unsigned peer = 0;
    link_kind kind = link_kind::rc;
  };
  struct life_info {  // a queue pair's, through moves and reset()
    std::uint64_t cq = 0;  // the CQ handle it completes in
    bool alive = true;
  };
  struct outstanding {  // a posted WR whose completion was not seen yet
    std::uint64_t life = 0;
    std::uint32_t qpn = 0;
    bool recv = false;
    bool check = false;  // on success its sink slot holds a tagged run (a receive's, or `len` READ bytes)
    int rx_pd = -1, rx_slot = -1;
    std::uint32_t offset = 0, len = 0;
    shared_slice slice{};  // the send's source, given back with it
  };
  struct kept_address {  // an address, and its handle's slot and that slot's generation then
    ud_address<B> to;
    std::size_t ah = 0;
    std::uint64_t gen = 0;
  };
  struct retired_cq {  // a CQ replaced, still polled
    cq_t cq;
    std::uint64_t id = 0;
  };

  unsigned pick_(std::size_t n) { return static_cast<unsigned>(rnd_() % n); }
  std::uint64_t next_id_() { return (std::uint64_t{me_} + 1) << 40 | next_wr_++; }
  void fail_(const std::string& what) {
    if (failures.size() < 20)
      failures.push_back(cat("thread ", me_, churning_ ? cat(", step ", step_) : ", after the steps", ": ", what));
  }
  template <class F>
  void guarded_(F f) {
    try {
      f();
    } catch (const std::exception& e) {
      fail_(cat("unexpected exception: ", e.what()));
    }
  }
  template <class F>
  void phase_(F f) {
    guarded_(f);
    w_.phase.arrive_and_wait();
  }
  template <class F>
  void expect_usage_error_(const char* what, F f) {
    try {
      f();
      fail_(cat(what, " did not throw"));
    } catch (const usage_error&) {
    }
  }
  // A queue pair the CQ has no room for is refused before anything changes (documented).
  void cq_room_(const usage_error& e) {
    if (std::string(e.what()).find("entries") == std::string::npos) fail_(cat("unexpected usage_error: ", e.what()));
  }
  void check_post_(const post_result& r, const char* what) {
    using enum post_status;
    // (cq_gone: the queue pair's CQ handle went, which a step may do before its queue pairs)
    if (!r.ok() && r.status != sq_full && r.status != rq_full && r.status != qp_error && r.status != cq_gone)
      fail_(cat(what, ": refused with ", to_string(r.status), " (", r.message(), ")"));
  }
  // Records the WR a post took; a refused one gives its sink and slice back at once.
  void note_(const post_result& r, const char* what, std::uint64_t id, outstanding e) {
    check_post_(r, what);
    if (r.ok())
      ledger_.emplace(id, std::move(e));
    else
      free_(e);
  }
  // A random 8-aligned offset for `len` bytes within `size`.
  std::uint32_t at_(std::size_t size, std::uint32_t len) { return 8 * pick_((size - len) / 8 + 1); }

  // make(pd) on protection domain p; the doomed one under the handles' lock. Once its
  // handle was dropped the call must throw usage_error, and the result is empty.
  template <class F>
  auto on_pd_(int p, F make) -> decltype(make(std::declval<const pd_t&>())) {
    if (p != doomed) return make(p == 0 ? w_.pd0 : w_.pd1);
    std::shared_lock lock(w_.handles_mu);
    if (w_.doomed_pd) return make(w_.doomed_pd);
    expect_usage_error_("a setup call on a dropped protection_domain", [&] { (void)make(w_.doomed_pd); });
    return {};
  }
  // A queue pair in PD p on this thread's CQ for that PD (srq_rc: on the SRQ too, in PD 1),
  // or none when refused as documented: a dropped handle, no room in the CQ.
  template <class T>
  new_qp<T> make_qp_(int p) {
    try {
      return on_pd_(p, [&](const pd_t& pd) {
        if constexpr (std::is_same_v<T, srq_rc>) {
          std::shared_lock lock(w_.handles_mu);
          if (w_.srq) return pd.create_qp<rc, S>(cqs_[p], w_.srq, srq_depths);
          expect_usage_error_("create_qp on a dropped SRQ", [&] { (void)pd.create_qp<rc, S>(cqs_[p], w_.srq, srq_depths); });
          return new_qp<T>{};
        } else {
          return pd.create_qp<T, S>(cqs_[p], depths);
        }
      });
    } catch (const usage_error& e) {
      cq_room_(e);
      return {};
    }
  }
  cq_t make_cq_(int p) {
    if (p != doomed) return (p == 0 ? w_.dev0 : w_.dev1).template create_cq<P>(cq_entries);
    std::shared_lock lock(w_.handles_mu);
    if (w_.doomed_dev) return w_.doomed_dev.template create_cq<P>(cq_entries);
    expect_usage_error_("create_cq on a dropped device", [&] { (void)w_.doomed_dev.template create_cq<P>(8); });
    return {};
  }

  std::uint64_t born_(int p) {
    lives_.emplace(next_life_, life_info{cq_ids_[p]});
    return next_life_++;
  }
  // A queue pair destroyed: the device drops its WRs, so their sinks and slices are free.
  // Their completions may still come (rxe profile), never with a payload to check.
  void end_life_(std::uint64_t life) {
    lives_[life].alive = false;
    for (auto& [id, e] : ledger_)
      if (e.life == life) free_(e);
  }
  template <class Q>
  void destroy_(Q& q, std::uint64_t life) {
    q = {};
    end_life_(life);
  }
  void free_(outstanding& e) {
    if (e.rx_slot >= 0) rx_used_[e.rx_pd][e.rx_slot] = false;
    e.rx_slot = -1;
    e.check = false;
    e.slice.reset();
  }
  cq_t* cq_by_id_(std::uint64_t id) {
    for (int p = 0; p < pds; ++p)
      if (cq_ids_[p] == id) return &cqs_[p];
    for (auto& r : retired_)
      if (r.id == id) return &r.cq;
    return nullptr;
  }
  // A free sink slot of rx_[p], cleared (what lands there is checked), or -1.
  int take_slot_(int p) {
    for (std::size_t i = 0; rx_[p] && i < slots; ++i)
      if (!rx_used_[p][i]) {
        rx_used_[p][i] = true;
        std::memset(rx_[p].data() + i * slot_bytes, 0, slot_bytes);
        return static_cast<int>(i);
      }
    return -1;
  }
  local_buffer slot_(int p, int slot, std::uint32_t len) const {
    return rx_[p].local(static_cast<std::size_t>(slot) * slot_bytes, len);
  }
  shared_slice take_slice_() {
    std::lock_guard lock(w_.pool_mu);
    buffer_pool::slice s = w_.pool.acquire();
    return s ? shared_slice(new buffer_pool::slice(std::move(s)), give_back{&w_.pool_mu}) : nullptr;
  }
  std::vector<hello> take_mail_(std::vector<hello>& box) {
    std::lock_guard lock(w_.mail_mu);
    const auto mine = std::stable_partition(box.begin(), box.end(), [&](const hello& h) { return h.to != me_; });
    std::vector<hello> taken(mine, box.end());
    box.erase(mine, box.end());
    return taken;
  }

  // ---- setup and the steps -------------------------------------------------------------
  void setup_() {
    for (int p = 0; p < pds; ++p) {
      cq_ids_[p] = next_cq_++;
      cqs_[p] = make_cq_(p);
      src_[p] = on_pd_(p, [](const pd_t& pd) { return pd.allocate<source_rights>(source_bytes); });
      fill_tagged(src_[p].data(), source_bytes, std::uint64_t{me_} << 32 | std::uint64_t(p) << 24);
      rx_[p] = on_pd_(p, [](const pd_t& pd) { return pd.allocate<sink_rights>(slots * slot_bytes); });
      rx_used_[p].assign(slots, false);
    }
  }

  void one_step_() {
    if (me_ == w_.doomed_thread && step_ == w_.doomed_step) drop_doomed_handles_();
    // Answers are taken up soon, as a peer waits in RTS meanwhile (its retry budget burns).
    if (pick_(2)) collect_answers_();
    const unsigned op = pick_(100);
    if (op < 8) {
      if (pending_.size() < 2) offer_((me_ + 1 + pick_(w_.threads - 1)) % w_.threads, link_kind(pick_(3)), pick_(pds));
    } else if (op < 15) answer_offers_();
    else if (op < 46) traffic_();
    else if (op < 54) post_srq_recv_();
    else if (op < 65) poll_some_();
    else if (op < 67) destroy_connection_();
    else if (op < 70) pick_(2) ? reset_(rcs_) : reset_(ucs_);
    else if (op < 73) move_handles_();
    else if (op < 76) churn_cqs_();
    else if (op < 82) churn_regions_();
    else if (op < 84) replace_pool_();
    else step_ud_();
  }

  // The last handles of the doomed device, PD and SRQ, and the fabric object: their
  // children, on every thread, keep them alive (docs/ownership-and-threads.md).
  void drop_doomed_handles_() {
    std::unique_lock lock(w_.handles_mu);
    const unsigned what = w_.doomed_what;
    if (what & 4) w_.srq = {};
    if (what & 8) w_.fab.reset();
    if ((what & 1) && pick_(2)) w_.doomed_pd = {};  // before or after the device
    if (what & 2) w_.doomed_dev = {};
    if (what & 1) w_.doomed_pd = {};
  }

  // ---- connections ----------------------------------------------------------------------
  // A receive into a cleared sink slot (checked), or now and then into a churn region of
  // the same PD (not checked: peers write there; it may be deregistered meanwhile).
  template <class Q>
  void post_recv_(Q& q, std::uint64_t life, int p, unsigned n = 1) {
    constexpr bool ud_qp = std::is_same_v<Q, live_qp<ud>>;
    const std::uint32_t len = max_msg + (ud_qp ? grh : 0);
    for (unsigned i = 0; i < n; ++i) {
      outstanding e{.life = life, .qpn = q.qp_num(), .recv = true};
      local_buffer buf;
      const churn_slot& c = churn_[pick_(churn_.size())];
      if (!ud_qp && pick_(5) == 0 && c.r && c.pd == p) {
        buf = c.r.local(at_(target_bytes, len), len);
      } else {
        if ((e.rx_slot = take_slot_(p)) < 0) return;
        e.rx_pd = p;
        e.check = true;
        e.offset = ud_qp ? grh : 0;
        buf = slot_(p, e.rx_slot, len);
      }
      const std::uint64_t id = next_id_();
      note_(q.post_recv(buf, id), "post_recv", id, std::move(e));
    }
  }

  // A new queue pair in PD p, offered to thread `peer`.
  void offer_(unsigned peer, link_kind kind, int p) {
    pending pe;
    if (kind == link_kind::uc)
      pe.uc_qp = make_qp_<uc>(p);
    else
      pe.rc_qp = make_qp_<rc>(p);
    if (!pe.rc_qp && !pe.uc_qp) return;
    pe.life = born_(p);
    offer_to_(peer, kind, p, std::move(pe));
  }
  // Publishes `pe`'s endpoint to `peer`, some receives posted first (in INIT already).
  void offer_to_(unsigned peer, link_kind kind, int p, pending pe) {
    pe.id = w_.next_conn++;
    pe.pd = p;
    pe.peer = peer;
    pe.kind = kind;
    pe.rc_qp ? post_recv_(pe.rc_qp, pe.life, p, pick_(3)) : post_recv_(pe.uc_qp, pe.life, p, pick_(3));
    const endpoint ep = pe.rc_qp ? pe.rc_qp.local_endpoint() : pe.uc_qp.local_endpoint();
    {
      std::lock_guard lock(w_.mail_mu);
      w_.offers.push_back({pe.id, me_, peer, kind, p, ep, src_[p].remote()});
    }
    pending_.push_back(std::move(pe));
  }

  void answer_offers_() {
    for (const hello& o : take_mail_(w_.offers)) {
      const int p = o.kind == link_kind::rc_to_srq ? 1 : static_cast<int>(pick_(pds));  // on the SRQ: in its PD
      if (o.kind == link_kind::uc)
        accept_(ucs_, o, p);
      else if (o.kind == link_kind::rc_to_srq)
        accept_(srqs_, o, p);
      else
        accept_(rcs_, o, p);
    }
  }
  // Connects a new queue pair to the offer and answers it.
  template <class T>
  void accept_(std::vector<conn<T>>& into, const hello& o, int p) {
    if (churning_ && into.size() >= max_connections) return;
    new_qp<T> q = make_qp_<T>(p);
    if (!q) return;
    const std::uint64_t life = born_(p);
    if constexpr (std::is_same_v<T, srq_rc>)
      srq_qpns_.insert(q.qp_num());
    else
      post_recv_(q, life, p, pick_(4));
    const endpoint ep = q.local_endpoint();
    live_qp<T> live = connect_(q, o.ep);
    if (!live) return destroy_(q, life);
    into.push_back({std::move(live), o.conn, life, p, o.pd, o.from, o.source});
    std::lock_guard lock(w_.mail_mu);
    w_.answers.push_back({o.conn, me_, o.from, o.kind, p, ep, src_[p].remote()});
  }

  void collect_answers_() {
    for (const hello& a : take_mail_(w_.answers)) {
      const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const pending& pe) { return pe.id == a.conn; });
      if (it == pending_.end()) continue;  // destroyed meanwhile: the peer's end fails alone
      pending pe = std::move(*it);
      pending_.erase(it);
      if (live_qp<rc> live = pe.rc_qp ? connect_(pe.rc_qp, a.ep) : live_qp<rc>{})
        rcs_.push_back({std::move(live), pe.id, pe.life, pe.pd, a.pd, pe.peer, a.source, pe.kind == link_kind::rc_to_srq});
      else if (live_qp<uc> live_uc = pe.uc_qp ? connect_(pe.uc_qp, a.ep) : live_qp<uc>{})
        ucs_.push_back({std::move(live_uc), pe.id, pe.life, pe.pd, a.pd, pe.peer, a.source});
      else
        destroy_(pe, pe.life);
    }
  }

  // connect(), which the device may refuse at RTR→RTS: a message reaching the queue pair
  // in RTR (the peer, in RTS already, retransmitting) can move it to ERR first. The
  // handle is then left an INIT queue pair (docs/ownership-and-threads.md, "Connecting"),
  // which the caller destroys.
  template <class T>
  live_qp<T> connect_(new_qp<T>& q, const endpoint& to) {
    try {
      return std::move(q).connect(to, quick);
    } catch (const verbs_error& e) {
      const qp_transition_failure* t = e.transition();
      if (!t || t->to != qp_state::rts || !q || q.query_state() != qp_state::init)
        fail_(cat("connect() failed, not as documented: ", e.what()));
      return {};
    }
  }

  // A target some thread published, in PD `pd` most of the time (one of another PD, or
  // deregistered since, fails the WR; on RC the responder goes to ERR too).
  std::optional<published_target> target_(int pd) {
    std::lock_guard lock(w_.mail_mu);
    if (w_.targets.empty()) return std::nullopt;
    for (int tries = 0; tries < 4 && pick_(8) != 0; ++tries)
      if (const published_target& t = w_.targets[pick_(w_.targets.size())]; t.pd == pd) return t;
    return w_.targets[pick_(w_.targets.size())];
  }
  template <class T>
  void traffic_on_(conn<T>& c) {
    const unsigned what = pick_(10);
    if constexpr (!std::is_same_v<T, srq_rc>)
      if (what < 3) return post_recv_(c.qp, c.life, c.pd);
    if (what < 6 || (c.peer_on_srq && what < 8)) return send_(c);
    if constexpr (T::supports_read)
      if (what >= 8) return read_(c);
    write_(c);
  }
  void traffic_() {
    std::size_t i = pick_(rcs_.size() + ucs_.size() + srqs_.size() + 1);
    if (i < rcs_.size()) return traffic_on_(rcs_[i]);
    if ((i -= rcs_.size()) < ucs_.size()) return traffic_on_(ucs_[i]);
    if ((i -= ucs_.size()) < srqs_.size()) traffic_on_(srqs_[i]);
  }

  // A SEND of tagged bytes: from this thread's source in the queue pair's PD, or from a
  // slice of the shared pool (PD 1) tagged now and given back with the completion.
  template <class T>
  void send_(conn<T>& c) {
    const std::uint32_t len = 8 * pick_(max_msg / 8 + 1);
    outstanding e{.life = c.life, .qpn = c.qp.qp_num()};
    local_buffer src = src_[c.pd].local(at_(source_bytes, len), len);
    if (c.pd == 1 && pick_(3) == 0)
      if (shared_slice s = take_slice_()) {
        fill_tagged(s->data(), len, rnd_());
        src = s->local(len);
        e.slice = std::move(s);
      }
    const std::uint64_t id = next_id_();
    note_(c.qp.send(src, id), "send", id, std::move(e));
  }
  // A WRITE to a published target, from this thread's source or one of its churn regions.
  template <class T>
  void write_(conn<T>& c) {
    const auto t = target_(c.peer_pd);
    if (!t) return;
    const std::uint32_t len = 8 * pick_(max_msg / 8 + 1);
    const churn_slot& mine = churn_[pick_(churn_.size())];
    const local_buffer src = mine.r && mine.pd == c.pd && pick_(2) ? mine.r.local(0, len) : src_[c.pd].local(0, len);
    const std::uint64_t id = next_id_();
    note_(c.qp.write(src, t->r.sub(at_(target_bytes, len), len), id), "write", id, {.life = c.life, .qpn = c.qp.qp_num()});
  }
  // A READ of the peer's source (tagged: checked on success) or of a published target.
  template <class T>
  void read_(conn<T>& c) {
    const std::uint32_t len = 8 + 8 * pick_(max_msg / 8);
    outstanding e{.life = c.life, .qpn = c.qp.qp_num(), .rx_pd = c.pd, .len = len};
    std::optional<published_target> t;
    if ((pick_(2) && !(t = target_(c.peer_pd))) || (e.rx_slot = take_slot_(c.pd)) < 0) return;
    e.check = !t;
    const local_buffer sink = slot_(c.pd, e.rx_slot, len);
    const std::uint64_t id = next_id_();
    note_(t ? c.qp.read(sink, t->r.sub(at_(target_bytes, len), len), id)
            : c.qp.read(sink, c.peer_source.sub(at_(source_bytes, len), len), id),
          "read", id, std::move(e));
  }

  // A receive on the shared SRQ into a slice of the shared pool, posted and completed on
  // any thread. At most max_wr wait or sit unpolled: the CQs reserve max_wr once each.
  void post_srq_recv_() {
    shared_slice s = take_slice_();
    if (!s) return;
    std::memset(s->data(), 0, s->size());
    const local_buffer buf = s->local(max_msg);
    std::uint64_t id = 0;
    {
      std::lock_guard lock(w_.srq_mu);
      if (w_.srq_out.size() >= srq_max_wr) return;
      id = srq_tag << 40 | w_.srq_next++;
      w_.srq_out.emplace(id, std::move(s));  // before the post: another thread may poll its completion first
    }
    std::shared_lock handles(w_.handles_mu);
    const post_result r = w_.srq.post_recv(buf, id);
    if (w_.srq)
      check_post_(r, "shared_receive_queue::post_recv");
    else if (r.status != post_status::empty_handle)
      fail_(cat("a post on a dropped SRQ handle returned ", to_string(r.status)));
    if (r.ok()) return;
    std::lock_guard lock(w_.srq_mu);
    w_.srq_out.erase(id);
  }

  // ---- completions ----------------------------------------------------------------------
  void on_completion_(const completion<B>& c) {
    const std::uint64_t id = c.wr_id();
    if (!documented(c.status(), w_.rxe))
      fail_(cat("wr_id ", id, " completed with an undocumented status: ", to_string(c.status())));
    if (id >> 40 == srq_tag) return on_srq_completion_(c);
    const auto it = ledger_.find(id);
    if (it == ledger_.end())
      return fail_(delivered_.count(id) ? cat("wr_id ", id, " delivered twice") : cat("wr_id ", id, ", never posted here"));
    outstanding e = std::move(it->second);
    ledger_.erase(it);
    delivered_.emplace(id, c.status());
    if (c.qp_num() != e.qpn) fail_(cat("wr_id ", id, " posted on QP ", e.qpn, " completed on QP ", c.qp_num()));
    if (c.is_recv() != e.recv) fail_(cat("wr_id ", id, " completed as a ", c.is_recv() ? "receive" : "send"));
    if (c.ok() && e.check) {
      const std::byte* p = rx_[e.rx_pd].data() + static_cast<std::size_t>(e.rx_slot) * slot_bytes + e.offset;
      const std::uint32_t n = e.recv ? c.byte_len() - std::min(c.byte_len(), e.offset) : e.len;
      if (!tagged(p, n)) fail_(cat("wr_id ", id, ": the ", n, " bytes it brought are not a tagged run"));
      ++w_.payloads;
    }
    free_(e);
  }
  void on_srq_completion_(const completion<B>& c) {
    const std::uint64_t id = c.wr_id();
    if (!c.is_recv() || !srq_qpns_.count(c.qp_num()))
      fail_(cat("SRQ receive ", id, " completed on QP ", c.qp_num(), ", not one of ours on the SRQ"));
    if (c.status() == wc_status::wr_flush_err) fail_(cat("SRQ receive ", id, " was flushed"));
    shared_slice s;
    {
      std::lock_guard lock(w_.srq_mu);
      const auto it = w_.srq_out.find(id);
      if (it == w_.srq_out.end())
        return fail_(cat("SRQ receive ", id, " delivered twice, or never posted"));
      s = std::move(it->second);
      w_.srq_out.erase(it);
    }
    if (c.ok() && !tagged(s->data(), c.byte_len()))
      fail_(cat("SRQ receive ", id, ": the ", c.byte_len(), " bytes it brought are not a tagged run"));
    w_.payloads += c.ok();
  }

  int poll_(cq_t& cq, bool wait) {
    auto f = [this](const completion<B>& c) { on_completion_(c); };
    return wait ? cq.wait(f, 1ms).count() : std::max(0, cq.poll(f));
  }
  int poll_all_() {
    int n = 0;
    for (auto& cq : cqs_) n += poll_(cq, false);
    for (auto& r : retired_) n += poll_(r.cq, false);
    return n;
  }
  void poll_some_() {
    const std::size_t i = pick_(pds + retired_.size());
    (void)poll_(i < pds ? cqs_[i] : retired_[i - pds].cq, pick_(3) == 0);
    if (pick_(8) == 0) check_events_();
  }
  // Asynchronous events of the shared devices, read from every thread: no CQ overflowed.
  void check_events_() {
    std::shared_lock lock(w_.handles_mu);
    for (const device<B>* d : {&w_.dev0, &w_.dev1, &w_.doomed_dev})
      while (auto ev = *d ? d->next_event(0ms) : std::nullopt)
        if (ev->type == async_event_type::cq_err) fail_("a CQ overflowed");
  }

  // ---- destruction, reset, moves --------------------------------------------------------
  template <class V>
  void erase_(V& v, std::size_t i) {
    const std::uint64_t life = v[i].life;
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
    end_life_(life);
  }
  // One end destroyed while the peer thread may still post on its own: the peer's WRs
  // fail (RETRY_EXC_ERR, RNR, flushes; UC: lost) and never hang.
  void destroy_connection_() {
    std::size_t i = pick_(rcs_.size() + ucs_.size() + srqs_.size() + pending_.size() + 1);
    if (i < rcs_.size()) return erase_(rcs_, i);
    if ((i -= rcs_.size()) < ucs_.size()) return erase_(ucs_, i);
    if ((i -= ucs_.size()) < srqs_.size()) return erase_(srqs_, i);
    if ((i -= srqs_.size()) < pending_.size()) erase_(pending_, i);
  }

  // reset(): the old QP flushes into this thread's CQ (with its own number), the new one
  // is offered to the same peer again; the peer's old end fails.
  template <class T>
  void reset_(std::vector<conn<T>>& v) {
    if (v.empty() || pending_.size() >= 2) return;
    const std::size_t i = pick_(v.size());
    new_qp<T> fresh;
    try {
      fresh = std::move(v[i].qp).reset();
    } catch (const usage_error& e) {
      return cq_room_(e);  // the queue pair is as it was
    }
    if (v[i].qp) fail_("a queue pair still holds its QP after reset()");
    pending pe{.life = v[i].life};
    if constexpr (std::is_same_v<T, uc>)
      pe.uc_qp = std::move(fresh);
    else
      pe.rc_qp = std::move(fresh);
    const conn<T> old = std::move(v[i]);
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
    offer_to_(old.peer, std::is_same_v<T, uc> ? link_kind::uc : link_kind::rc, old.pd, std::move(pe));
  }

  // A queue pair and a CQ moved out and back: meanwhile the emptied handles refuse.
  void move_handles_() {
    const int p = static_cast<int>(pick_(pds));
    cq_t moved_cq(std::move(cqs_[p]));
    if (cqs_[p].poll([](const completion<B>&) {}) != -EBADF) fail_("a poll of a moved-from CQ did not return -EBADF");
    cqs_[p] = std::move(moved_cq);
    if (rcs_.empty()) return;
    conn<rc>& c = rcs_[pick_(rcs_.size())];
    live_qp<rc> moved(std::move(c.qp));
    if (c.qp.send(src_[c.pd].local(0, 8), next_id_()).status != post_status::empty_handle)
      fail_("a send on a moved-from queue pair was not refused with empty_handle");
    c.qp = std::move(moved);
  }

  // A CQ replaced (the old one retired: still polled, its queue pairs keep it), or a
  // retired one dropped: its queue pairs keep it alive, their completions unseen.
  void churn_cqs_() {
    if (pick_(3) == 0 && !retired_.empty()) return (void)retired_.erase(retired_.begin() + pick_(retired_.size()));
    if (retired_.size() >= 2) return;
    const int p = static_cast<int>(pick_(pds));
    cq_t fresh = make_cq_(p);
    if (!fresh) return;
    retired_.push_back({std::move(cqs_[p]), cq_ids_[p]});
    cqs_[p] = std::move(fresh);
    cq_ids_[p] = next_cq_++;
  }

  // ---- memory ---------------------------------------------------------------------------
  // Regions of any PD registered and published to every thread as targets, deregistered
  // while peers may be writing them (usually unpublished first, not always).
  void unpublish_(const churn_slot& c) {
    if (pick_(4) == 0) return;
    std::lock_guard lock(w_.mail_mu);
    std::erase_if(w_.targets, [&](const published_target& t) { return t.region == c.region; });
  }
  void churn_regions_() {
    churn_slot& c = churn_[pick_(churn_.size())];
    unpublish_(c);
    if (pick_(3) == 0) return (void)(c = {});
    const int p = static_cast<int>(pick_(pds));
    target_region r = on_pd_(p, [](const pd_t& pd) { return pd.allocate<target_rights>(target_bytes); });
    c = {std::move(r), p, w_.next_region++};  // the old region deregistered
    if (!c.r) return;
    const published_target t{c.r.remote(), p, c.region};
    std::lock_guard lock(w_.mail_mu);
    if (w_.targets.size() < 12)
      w_.targets.push_back(t);
    else
      w_.targets[pick_(w_.targets.size())] = t;
  }

  // The shared pool replaced: its slices still out (sources of sends, the SRQ's receive
  // buffers) keep its registration, and the last one given back, on any thread, frees it.
  void replace_pool_() {
    std::lock_guard lock(w_.pool_mu);
    w_.pool = w_.pd1.create_pool<target_rights>(slot_bytes, 80);
  }

  // ---- UD and address handles (PD 0) --------------------------------------------------
  std::optional<endpoint> ud_peer_() {
    std::lock_guard lock(w_.mail_mu);
    if (w_.ud_peers.empty()) return std::nullopt;
    return w_.ud_peers[pick_(w_.ud_peers.size())];
  }
  void step_ud_() {
    const std::size_t i = pick_(ahs_.size());
    const unsigned what = pick_(9);
    if (what == 0) {  // the UD queue pair made anew, its endpoint published
      if (ud_) destroy_(ud_, ud_life_);
      new_qp<ud> q = make_qp_<ud>(0);
      if (!q) return;
      ud_ = std::move(q).activate();
      ud_life_ = born_(0);
      post_recv_(ud_, ud_life_, 0, 2);
      std::lock_guard lock(w_.mail_mu);
      if (w_.ud_peers.size() < 8)
        w_.ud_peers.push_back(ud_.local_endpoint());
      else
        w_.ud_peers[pick_(w_.ud_peers.size())] = ud_.local_endpoint();
    } else if (what <= 2) {  // an address handle made (to any thread's UD queue pair) or destroyed
      const auto to = what == 1 ? ud_peer_() : std::nullopt;
      ahs_[i] = to ? w_.pd0.create_ah(*to) : address_handle<B>{};  // addresses taken from the old one go stale
      ++ah_gen_[i];
      if (!to) return;
      if (addresses_.size() >= 6) addresses_.erase(addresses_.begin() + pick_(addresses_.size()));
      addresses_.push_back({ahs_[i].to(*to), i, ah_gen_[i]});
    } else if (what <= 5) {  // a datagram through a kept address, its handle maybe gone
      if (!ud_ || addresses_.empty()) return;
      const kept_address& a = addresses_[pick_(addresses_.size())];
      const bool stale = ah_gen_[a.ah] != a.gen;
      const std::uint32_t len = 8 * pick_(max_msg / 8 + 1);
      const std::uint64_t id = next_id_();
      const post_result r = ud_.send(a.to, src_[0].local(at_(source_bytes, len), len), id);
      if (!stale)
        note_(r, "UD send", id, {.life = ud_life_, .qpn = ud_.qp_num()});
      else if (r.status != post_status::stale_address)
        fail_(cat("a UD send through a destroyed address handle returned ", to_string(r.status)));
      else
        ++w_.stale_refused;
    } else if (ud_) {
      post_recv_(ud_, ud_life_, 0);
    }
  }

  // ---- after the steps --------------------------------------------------------------------
  // Every signaled WR of a queue pair this thread still holds, completing in a CQ it
  // still holds, completes within its retry budget (~70 ms of wall clock).
  bool due_(const outstanding& e) {
    const life_info& l = lives_.at(e.life);
    return !e.recv && l.alive && cq_by_id_(l.cq) != nullptr;
  }
  void settle_() {
    auto any_due = [this] { return std::any_of(ledger_.begin(), ledger_.end(), [this](const auto& kv) { return due_(kv.second); }); };
    for (const auto deadline = wall::now() + 3s; any_due() && wall::now() < deadline;)
      if (poll_all_() == 0) std::this_thread::sleep_for(200us);
    for (const auto& [id, e] : ledger_)
      if (due_(e)) fail_(cat("signaled WR ", id, " of QP ", e.qpn, " never completed"));
    check_events_();
  }
  // In RTS, not in error, and nothing of it in flight: its CQ is held, so settle_() saw
  // every WR it posted complete. (One whose CQ was dropped may still have a WR retrying,
  // whose failure takes it to ERR later.)
  template <class T>
  bool healthy_(const conn<T>& c) {
    return c.qp && !c.qp.in_error() && c.qp.query_state() == qp_state::rts && cq_by_id_(lives_.at(c.life).cq);
  }
  void report_healthy_() {
    std::lock_guard lock(w_.mail_mu);
    for (const auto& c : rcs_)
      if (healthy_(c)) ++w_.healthy[c.id];
    for (const auto& c : srqs_)
      if (healthy_(c)) ++w_.healthy[c.id];
  }

  // Both ends said healthy: a READ of the peer's source succeeds and brings its bytes.
  template <class T>
  void read_over_(conn<T>& c) {
    if (!healthy_(c)) return;
    {
      std::lock_guard lock(w_.mail_mu);
      if (w_.healthy[c.id] != 2) return;
    }
    const int slot = take_slot_(c.pd);
    if (slot < 0) return;
    const std::uint64_t id = next_id_();
    const post_result r = c.qp.read(slot_(c.pd, slot, 64), c.peer_source.sub(at_(source_bytes, 64), 64), id);
    if (!r.ok()) return fail_(cat("a READ on a healthy connection was refused: ", to_string(r.status)));
    ledger_.emplace(id, outstanding{.life = c.life, .qpn = c.qp.qp_num(), .check = true, .rx_pd = c.pd, .rx_slot = slot, .len = 64});
    for (const auto deadline = wall::now() + 2s; !delivered_.count(id) && wall::now() < deadline;)
      (void)poll_(*cq_by_id_(lives_.at(c.life).cq), true);
    if (!delivered_.count(id))
      fail_(cat("a READ on connection ", c.id, ", healthy at both ends, never completed"));
    else if (delivered_.at(id) != wc_status::success)
      fail_(cat("a READ on connection ", c.id, ", healthy at both ends, failed: ", to_string(delivered_.at(id))));
    else
      ++w_.healthy_reads;
  }
  void read_over_healthy_connections_() {
    for (auto& c : rcs_) read_over_(c);
    for (auto& c : srqs_) read_over_(c);
  }

  // Every queue pair destroyed in a random order, then the CQs polled until a poll finds
  // nothing: no entry stays reserved or held for flushes. The rest is released here, on
  // this thread: the doomed device and PD go with the last of their children, somewhere.
  void teardown_() {
    while (!rcs_.empty() || !ucs_.empty() || !srqs_.empty() || !pending_.empty()) destroy_connection_();
    if (ud_) destroy_(ud_, ud_life_);
    ahs_ = {};
    auto check = [this](cq_t& cq) {
      for (int i = 0; i < 1000 && poll_(cq, false) > 0; ++i) {
      }
      if (cq.attached() != 0 || cq.reserved() != 0 || cq.flushing() != 0)
        fail_(cat("a CQ with no queue pair left, polled empty: attached ", cq.attached(), ", reserved ", cq.reserved(),
                  ", flushing ", cq.flushing()));
    };
    for (auto& cq : cqs_) check(cq);
    for (auto& r : retired_) check(r.cq);
    ledger_.clear();
    retired_.clear();
    churn_ = {};
    cqs_ = {};
    src_ = {};
    rx_ = {};
  }

  world& w_;
  const unsigned me_;
  std::minstd_rand rnd_;
  int step_ = -1;
  bool churning_ = true;  // the random steps run
  std::uint64_t next_wr_ = 1, next_life_ = 1, next_cq_ = 1;

  std::array<cq_t, pds> cqs_;  // cqs_[p]: on the device of PD p
  std::array<std::uint64_t, pds> cq_ids_{};
  std::vector<retired_cq> retired_;
  std::array<memory_region<B, source_rights>, pds> src_;  // tagged, read by peers
  std::array<memory_region<B, sink_rights>, pds> rx_;     // receive and READ sinks, in slots
  std::array<std::vector<bool>, pds> rx_used_;
  std::array<churn_slot, pds> churn_;

  std::vector<conn<rc>> rcs_;
  std::vector<conn<uc>> ucs_;
  std::vector<conn<srq_rc>> srqs_;
  std::vector<pending> pending_;
  std::unordered_set<std::uint32_t> srq_qpns_;  // every queue pair this thread made on the SRQ
  live_qp<ud> ud_;
  std::uint64_t ud_life_ = 0;
  std::array<address_handle<B>, 2> ahs_;
  std::array<std::uint64_t, 2> ah_gen_{};
  std::vector<kept_address> addresses_;

  std::unordered_map<std::uint64_t, life_info> lives_;
  std::unordered_map<std::uint64_t, outstanding> ledger_;
  std::unordered_map<std::uint64_t, wc_status> delivered_;
};

}  // namespace random_threads

TEST_CASE_TEMPLATE("random threads: devices, PDs, an SRQ, regions, a pool, AH PDs shared; queue pairs connected across threads",
                   P, rdmakit::busy_poll<>, rdmakit::event_driven<>) {
  using namespace random_threads;
  int healthy_reads = 0, payloads = 0, stale_refused = 0;
  for (unsigned seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    std::minstd_rand rnd(seed);
    const unsigned n = 2 + seed % 3;
    world w(rnd, n);
    std::vector<worker<P>> workers;
    workers.reserve(n);
    for (unsigned i = 0; i < n; ++i) workers.emplace_back(w, i, seed);
    std::vector<std::thread> threads;
    for (auto& wk : workers) threads.emplace_back([&wk] { wk.run(300); });
    for (auto& t : threads) t.join();
    for (const auto& wk : workers)
      for (const auto& f : wk.failures) FAIL_CHECK(f);
    healthy_reads += w.healthy_reads;
    payloads += w.payloads;
    stale_refused += w.stale_refused;
  }
  CHECK(healthy_reads > 0);
  CHECK(payloads > 0);
  CHECK(stale_refused > 0);
}
