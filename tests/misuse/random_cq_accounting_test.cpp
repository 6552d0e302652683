// Random completion-queue accounting on the mock, checked against a model: two or three RC
// queue pairs (signal_all, signal_every<4>, signal_manual) and sometimes one on a shared
// receive queue, on one CQ or two, under the spec profile, rxe's, and QP numbers reused at
// once (mlx5). Steps: sends (signaled or not), receives, sends from the peers, bursts of
// them with no poll between (the CQs fill up), polls, waits, drains, dispatch with per-QP
// handlers and a fallback, reset() with or without a reconnect, destruction and
// re-creation on the same CQs; a handler resets or destroys the queue pair whose batch it
// is given, makes a new one (which may take the old one's number and memory), or polls
// again. The model knows, for each wr_id (unique in a run), the native queue pair that
// posted it (a reset makes a new one) and whether a completion is owed. A seed is one run.
// What must hold whatever the order:
// - no completion is delivered twice, none carries a wr_id never posted or another queue
//   pair's qp_num, none reaches the handler of a queue pair other than its own (one made
//   later with the same number included); one whose queue pair is destroyed reaches the
//   fallback and counts in unrouted(), and one whose queue pair lives (reset or not)
//   reaches its handler when it has one;
// - after draining, every receive and every signaled send of a queue pair not destroyed
//   was delivered, success or flush (docs/ownership-and-threads.md, "Starting over": a
//   reset queue pair's WRs flush through the CQ; a live one's receives once it is in
//   ERR); a destroyed one's may be dropped. An SRQ receive is never flushed, and every
//   SEND its peer saw succeed was delivered to that queue pair;
// - posted_recvs(), send_credits(), can_post() and in_error() match what was posted and
//   delivered; no CQ overflows (no CQ_ERR) and reserved() + flushing() never passes the
//   capacity; once every queue pair is destroyed and a poll found each CQ empty, nothing
//   stays reserved or flushing, and every queue pair of the run can be created again.
// RDMAKIT_FUZZ_SEEDS=first:last runs other seeds (1:400 by default; 375 of the rxe case once
// found a reset queue pair let go with a completion still in an outer batch); a failure prints its
// seed and step. Rerun it with the same range: the mock breaks ties between timers due at
// once by address, so a run may depend on the heap the runs before it left.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <doctest/doctest.h>

#include "../sanitized.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// (A namespace of its own: the misuse tests are built as a unity build.)
namespace random_cq_accounting {

using namespace rdmakit;
using namespace std::chrono_literals;
using B = backends::mock;
using cq_type = completion_queue<B, busy_poll<4>>;  // small batches: more of them end mid-way through a QP's WRs
constexpr auto rw = access::local_write | access::remote_write | access::remote_read;
// Short timers: a peer destroyed or without receives puts the sender in ERR soon (simulated time).
const connect_options quick{.timeout = 8, .retry_cnt = 1, .rnr_retry = 1, .min_rnr_timer = 1};
// 2^k - 1: the SRQ takes exactly this many under both profiles (rxe's ring takes 2^k - 1).
constexpr std::uint32_t srq_depth = 7;
constexpr qp_cap peer_caps{.max_send_wr = 16, .max_recv_wr = 16};

enum class setup { spec, rxe, reused_numbers };

// One native queue pair: reset() replaces it with another.
struct object {
  int lane = 0;
  std::uint32_t qpn = 0;
  std::uint32_t depth = 0;  // max_send_wr as asked: the credits
  int srq_gen = -1;         // on the lane's SRQ of that generation (-1: receives of its own)
  bool handler = false, destroyed = false, retired = false, failed = false;
  int handler_cq = -1;  // the CQ whose on() set the handler
  std::uint32_t recvs = 0;            // receives posted, not delivered
  std::vector<std::uint64_t> sends;   // wr_ids in post order
  std::size_t freed = 0;              // sends before this index gave their credits back
  std::uint32_t srq_got = 0, peer_sent = 0, peer_ok = 0;  // SRQ: receives delivered; SENDs of its peer, succeeded
};
struct work {
  std::uint64_t obj = 0;  // 0: an SRQ receive no queue pair was seen to take
  enum { send, recv, srq_recv } kind = send;
  bool signaled = false, delivered = false;
  int srq_gen = -1;
  std::size_t pos = 0;  // a send's index in its object's sends
};
struct peer_work {
  std::uint64_t to = 0;  // a SEND to this object (0: a receive)
  bool delivered = false;
};

// One place for queue pairs on the side under test; a peer on the other side for each.
template <class T, class S>
struct lane {
  static constexpr bool on_srq = !std::is_same_v<T, rc>;
  using init_qp = queue_pair<B, T, S, qp_state::init>;
  using rts_qp = queue_pair<B, T, S, qp_state::rts>;
  using policy = S;
  std::optional<init_qp> init;
  std::optional<rts_qp> rts;
  std::optional<queue_pair<B, rc, signal_all, qp_state::rts>> peer;
  std::optional<shared_receive_queue<B>> srq;
  std::vector<std::uint64_t> lineage;  // the live object last, before it those its resets replaced
  qp_cap cap;
  int scq = 0, rcq = 0;
  bool used = false;
  std::uint64_t current() const { return lineage.empty() ? 0 : lineage.back(); }
  bool live() const { return init || rts; }
};

class run {
 public:
  run(unsigned seed, setup s) : rnd_(seed), fab_(config_(seed, s)) {
    const int ncq = 1 + static_cast<int>(pick_(2));
    std::vector<std::uint64_t> need(2, 0);
    int index = 0;
    each_([&](auto& l) {
      using L = std::remove_reference_t<decltype(l)>;
      l.used = index < 2 || pick_(2);
      l.cap = L::on_srq ? qp_cap{.max_send_wr = 2 + pick_(4), .max_recv_wr = 0}
                        : qp_cap{.max_send_wr = 4 + pick_(5), .max_recv_wr = 2 + pick_(5)};
      l.scq = index < 2 ? index % ncq : static_cast<int>(pick_(ncq));  // each CQ has a queue pair
      l.rcq = ncq == 2 && pick_(3) == 0 ? 1 - l.scq : l.scq;
      if (l.used) {
        need[l.scq] += l.cap.max_send_wr;
        need[l.rcq] += L::on_srq ? srq_depth : l.cap.max_recv_wr;
      }
      ++index;
    });
    // Sometimes exactly the queue pairs' depths: resets and re-creations are refused more.
    for (int k = 0; k < ncq; ++k)
      cqs_.push_back(da_.create_cq<busy_poll<4>>(static_cast<int>(need[k] + (pick_(3) == 0 ? 0 : 4 + pick_(28)))));
    unrouted_.assign(cqs_.size(), 0);
  }

  // Runs the steps, drains, checks what was owed; false after a failure.
  bool go() {
    each_([&](auto& l) { create_(l, true); });
    const int steps = 300 + static_cast<int>(pick_(1700));
    for (int step = 0; step < steps && !failed_; ++step) {
      CAPTURE(step);
      one_step_();
      top_up_peers_();
      check_();
    }
    if (!failed_) finish_();
    return !failed_;
  }

 private:
  enum class via { handler, fallback, poll };

  unsigned pick_(unsigned n) { return static_cast<unsigned>(rnd_() % n); }

  // The message is made only on a failure: most of the run's time went to it.
  template <class F>
  void expect_(bool ok, F what) {
    if (ok) return;
    FAIL_CHECK(std::string(what()));
    failed_ = true;
  }

  mock::fabric_config config_(unsigned seed, setup s) {
    mock::fabric_config cfg;
    cfg.seed = seed;
    if (s == setup::rxe) cfg.profile = mock::device_profile::rxe;
    if (s == setup::reused_numbers) cfg.reuse_qp_numbers = true;
    if (pick_(2)) cfg.latency = std::chrono::microseconds(1 + pick_(3));  // WRs still in flight at a reset
    return cfg;
  }

  template <class F>
  void each_(F f) {
    std::apply([&](auto&... l) { (f(l), ...); }, lanes_);
  }
  template <class F>
  void at_(int i, F f) {
    int k = 0;
    each_([&](auto& l) {
      if (k++ == i && l.used) f(l);
    });
  }
  template <class L, class F>
  static void with_qp_(L& l, F f) {
    if (l.rts)
      f(*l.rts);
    else if (l.init)
      f(*l.init);
  }

  // ---- the steps -----------------------------------------------------------------------

  void one_step_() {
    std::vector<int> used;
    int k = 0;
    each_([&](auto& l) {
      if (l.used) used.push_back(k);
      ++k;
    });
    const int i = used[pick_(static_cast<unsigned>(used.size()))];
    bool repaired = false;
    at_(i, [&](auto& l) {  // a lane destroyed, left in INIT or in ERR is taken up again, now and then
      if (pick_(4) != 0) return;
      repaired = true;
      if (!l.live())
        create_(l, pick_(4) != 0);
      else if (l.init)
        connect_(l);
      else if (l.rts->in_error())
        reset_(l, true);
      else
        repaired = false;
    });
    if (repaired) return;
    const unsigned op = pick_(100);
    if (op < 25) {
      at_(i, [&](auto& l) { send_(l); });
    } else if (op < 40) {
      at_(i, [&](auto& l) { recv_(l); });
    } else if (op < 50) {
      at_(i, [&](auto& l) { peer_send_(l); });
    } else if (op < 55) {
      at_(i, [&](auto& l) { set_handler_(l); });
    } else if (op < 80) {
      poll_some_(static_cast<int>(pick_(static_cast<unsigned>(cqs_.size()))));
    } else if (op < 85) {
      (void)cb_.poll(on_peer_);
    } else if (op < 92) {
      at_(i, [&](auto& l) { reset_(l, pick_(4) != 0); });
    } else if (op < 95) {
      at_(i, [&](auto& l) { destroy_(l); });
    } else if (op < 97) {
      // A burst with no poll: every send queue full, the receives taken, so the CQs fill up.
      each_([&](auto& l) {
        for (int n = 0; n < 16; ++n) send_(l);
        for (int n = 0; n < 8; ++n) recv_(l);
        for (int n = 0; n < 8; ++n) peer_send_(l);
      });
    } else {
      at_(i, [&](auto& l) { create_(l, pick_(4) != 0); });
    }
  }

  // One of poll, wait, drain, dispatch, dispatch_wait on A's CQ k (nested ones included).
  int poll_some_(int k) {
    const int outer = std::exchange(cq_now_, k);
    cq_type& cq = cqs_[static_cast<std::size_t>(k)];
    int n = 0;
    switch (pick_(6)) {
      case 0: n = cq.poll(on_poll_); break;
      case 1: n = cq.wait(on_poll_, 0ms).count(); break;
      case 2: n = cq.drain(on_poll_); break;
      case 3: n = cq.dispatch_wait(on_fallback_, 0ms).count(); break;
      default: n = cq.dispatch(on_fallback_); break;
    }
    cq_now_ = outer;
    expect_(n >= 0, [&] { return "a poll failed: " + std::to_string(n); });
    return n;
  }

  template <class L>
  void create_(L& l, bool connect) {
    if (!l.used || l.live()) return;
    using S = typename L::policy;
    if constexpr (L::on_srq) {
      if (!l.srq) {  // a new SRQ after each destruction: what the old one's queue pairs took went with them
        l.srq.emplace(pa_.create_srq({.max_wr = srq_depth}));
        ++srq_gen_;
        srq_out_ = 0;
      }
    }
    try {
      if constexpr (L::on_srq)
        l.init.emplace(pa_.template create_qp<rc, S>(cq_(l.scq), cq_(l.rcq), *l.srq, l.cap));
      else
        l.init.emplace(pa_.template create_qp<rc, S>(cq_(l.scq), cq_(l.rcq), l.cap));
    } catch (const usage_error&) {
      return;  // no room yet beside what destroyed queue pairs may have left: documented
    }
    new_object_(l);
    if (connect) connect_(l);
  }

  template <class L>
  void new_object_(L& l) {
    object o;
    o.lane = lane_index_(l);
    o.qpn = l.init->qp_num();
    o.depth = l.cap.max_send_wr;
    if constexpr (L::on_srq) o.srq_gen = srq_gen_;
    const std::uint64_t id = next_object_++;
    objs_[id] = std::move(o);
    l.lineage.push_back(id);
  }

  template <class L>
  int lane_index_(const L& l) {
    int k = 0, found = -1;
    each_([&](auto& m) {
      if (static_cast<const void*>(&m) == static_cast<const void*>(&l)) found = k;
      ++k;
    });
    return found;
  }

  template <class L>
  void connect_(L& l) {
    if (!l.init) return;
    // Destroyed peers hold room in their CQ until a poll finds it empty (rxe leaves their completions).
    if (cb_.reserved() + cb_.flushing() + peer_caps.max_send_wr + peer_caps.max_recv_wr >
        static_cast<std::uint64_t>(cb_.capacity()))
      for (int i = 0; i < 1000 && cb_.poll(on_peer_) > 0; ++i) {
      }
    auto p = pb_.create_qp<rc>(cb_, peer_caps);
    const endpoint pe = p.local_endpoint();
    l.peer.emplace(std::move(p).connect(l.init->local_endpoint(), quick));
    l.rts.emplace(std::move(*l.init).connect(pe, quick));
    l.init.reset();
  }

  template <class L>
  void reset_(L& l, bool reconnect) {
    if (!l.live()) return;
    std::optional<typename L::init_qp> fresh;
    try {
      fresh.emplace(l.rts ? std::move(*l.rts).reset() : std::move(*l.init).reset());
    } catch (const usage_error&) {
      return;  // no room for the old queue pair's flushes beside a new one: nothing changed (documented)
    }
    l.rts.reset();
    l.init = std::move(fresh);
    objs_[l.current()].retired = true;
    new_object_(l);
    l.peer.reset();  // the peer starts over too
    if (reconnect) connect_(l);
  }

  template <class L>
  void destroy_(L& l) {
    l.peer.reset();  // first: a queue pair made next then reuses the memory of this lane's (its link's address)
    l.rts.reset();
    l.init.reset();
    for (const std::uint64_t id : l.lineage) objs_[id].destroyed = true;  // the queue pairs its resets kept go too
    l.lineage.clear();
    if constexpr (L::on_srq) l.srq.reset();
  }

  template <class L>
  void set_handler_(L& l) {
    const std::uint64_t id = l.current();
    if (!id) return;
    const int k = pick_(2) ? l.scq : l.rcq;
    object& o = objs_[id];
    if (o.handler && k != o.handler_cq) {
      // One handler takes both CQs' completions: on() through the other CQ is refused,
      // and the handler set stays (it is what seen_ then checks).
      with_qp_(l, [&](auto& q) { CHECK_THROWS_AS(cq_(k).on(q, [](const completion<B>&) {}), usage_error); });
      return;
    }
    with_qp_(l, [&](auto& q) { cq_(k).on(q, [this, id](const completion<B>& c) { seen_(c, via::handler, id); }); });
    o.handler = true;
    o.handler_cq = k;
  }

  template <class L>
  void send_(L& l) {
    if (!l.rts) return;
    auto& q = *l.rts;
    const std::uint64_t id = next_id_++;
    const send_flags fl = pick_(3) == 0 ? send_flags::signaled : send_flags::none;
    const std::size_t at = pick_(4096);  // (one pick a statement: the same run whatever the compiler)
    const local_buffer src = ma_.local(at, 1 + pick_(64));
    const post_result r = pick_(2) ? q.write(src, mb_.remote().sub(pick_(4096), 64), id, fl) : q.send(src, id, fl);
    object& o = objs_[l.current()];
    if (!r.ok()) {
      expect_(r.status == post_status::sq_full || r.status == post_status::qp_error,
              [&] { return std::string("a send refused with ") + to_string(r.status); });
      return;
    }
    // The policy's decision (signal_manual also signals the WR that takes the last slot).
    work_[id] = {.obj = l.current(), .kind = work::send, .signaled = q.unsignaled_run() == 0, .pos = o.sends.size()};
    o.sends.push_back(id);
  }

  template <class L>
  void recv_(L& l) {
    const std::uint64_t id = next_id_++;
    const local_buffer buf = ma_.local(8192 + pick_(4096), 256);
    if constexpr (L::on_srq) {
      // Never more receives out than the SRQ's depth, which its CQ reserves: refilled ahead
      // of the polls, an SRQ could overflow the CQ (documented).
      if (!l.srq || srq_out_ >= srq_depth) return;
      if (!l.srq->post_recv(buf, id).ok()) return;
      work_[id] = {.kind = work::srq_recv, .srq_gen = srq_gen_};
      ++srq_out_;
    } else {
      with_qp_(l, [&](auto& q) {
        if (!q.post_recv(buf, id).ok()) return;
        work_[id] = {.obj = l.current(), .kind = work::recv};
        ++objs_[l.current()].recvs;
      });
    }
  }

  template <class L>
  void peer_send_(L& l) {
    if (!l.peer || !l.rts) return;
    const std::uint64_t id = next_id_++;
    const std::size_t at = pick_(4096);
    if (!l.peer->send(mb_.local(at, 1 + pick_(64)), id).ok()) return;
    peer_work_[id] = {.to = l.current()};
    ++objs_[l.current()].peer_sent;
  }

  void top_up_peers_() {
    each_([&](auto& l) {
      if (!l.peer || l.peer->in_error()) return;
      while (l.peer->posted_recvs() < peer_caps.max_recv_wr) {
        const std::uint64_t id = next_id_++;
        if (!l.peer->post_recv(mb_.local(8192 + pick_(4096), 256), id).ok()) break;
        peer_work_[id] = {};
      }
    });
  }

  // ---- what a completion must be ---------------------------------------------------------

  void seen_(const completion<B>& c, via how, std::uint64_t handler_obj) {
    const auto it = work_.find(c.wr_id());
    if (it == work_.end())
      return expect_(false, [&] { return "a completion with a wr_id never posted: " + std::to_string(c.wr_id()); });
    work& w = it->second;
    const auto wr = [&] { return "wr_id " + std::to_string(c.wr_id()); };
    if (w.delivered) return expect_(false, [&] { return wr() + " delivered twice"; });
    w.delivered = true;
    if (w.kind == work::srq_recv) {
      // The SRQ's receive belongs to the queue pair a message took it on: the last one
      // made of that SRQ with its number (numbers are reused only by a queue pair that
      // took none: a reset one that took one is kept).
      for (const auto& [id, o] : objs_)
        if (o.srq_gen == w.srq_gen && o.qpn == c.qp_num() && id > w.obj) w.obj = id;
      if (!w.obj)
        return expect_(false, [&] {
          return wr() + ": an SRQ receive completed on QP " + std::to_string(c.qp_num()) + ", none of its SRQ's";
        });
      expect_(c.ok(), [&] { return wr() + ": an SRQ receive did not succeed (they are never flushed)"; });
    }
    object& o = objs_[w.obj];
    const auto of = [&] { return wr() + " of object " + std::to_string(w.obj); };
    expect_(c.qp_num() == o.qpn, [&] {
      return of() + " carries QP number " + std::to_string(c.qp_num()) + ", not " + std::to_string(o.qpn);
    });
    expect_(c.is_recv() == (w.kind != work::send), [&] { return of() + ": a receive told from a send wrongly"; });
    if (how == via::handler)
      expect_(handler_obj == w.obj && !o.destroyed,
              [&] { return of() + " reached the handler of object " + std::to_string(handler_obj); });
    if (how == via::fallback)
      expect_(o.destroyed || !o.handler,
              [&] { return of() + " reached the fallback while its queue pair has a handler"; });
    if (o.destroyed) ++unrouted_[static_cast<std::size_t>(cq_now_)];
    if (!c.ok()) o.failed = true;
    if (w.kind == work::recv) {
      expect_(o.recvs > 0, [&] { return of() + ": more receives completed than were posted"; });
      --o.recvs;
    } else if (w.kind == work::srq_recv) {
      ++o.srq_got;
      if (w.srq_gen == srq_gen_) --srq_out_;
    } else if (c.ok()) {
      // A success gives back its credit and those of the WRs before it. (Successes come in
      // send-queue order, but a handler's nested poll delivers later ones before the rest
      // of its own batch.)
      o.freed = std::max(o.freed, w.pos + 1);
    }
    if (acting_ && depth_ < 2 && pick_(12) == 0) act_in_handler_(o.lane);
  }

  // What a handler may do to the queue pair whose batch it is given (or to its lane).
  void act_in_handler_(int lane) {
    ++depth_;
    at_(lane, [&](auto& l) {
      switch (pick_(5)) {
        case 0: reset_(l, pick_(2)); break;
        case 1: destroy_(l); break;
        case 2:  // destroyed and made again at once (with reused numbers, it takes the old one's), its
                 // completion polled before the rest of the batch
          destroy_(l);
          create_(l, true);
          if (pick_(2)) set_handler_(l);
          send_(l);
          (void)poll_some_(l.scq);
          break;
        case 3:
          reset_(l, false);
          recv_(l);
          set_handler_(l);
          break;
        default: (void)poll_some_(static_cast<int>(pick_(static_cast<unsigned>(cqs_.size())))); break;
      }
    });
    --depth_;
  }

  void peer_seen_(const completion<B>& c) {
    const auto it = peer_work_.find(c.wr_id());
    if (it == peer_work_.end() || it->second.delivered)
      return expect_(false, [&] { return "a peer's completion, never posted or twice: " + std::to_string(c.wr_id()); });
    it->second.delivered = true;
    if (it->second.to && c.ok()) ++objs_[it->second.to].peer_ok;  // its receive was taken
  }

  // ---- checks after each step and at the end -----------------------------------------

  void check_() {
    std::vector<std::size_t> attached(cqs_.size(), 0);
    each_([&](auto& l) {
      using L = std::remove_reference_t<decltype(l)>;
      if (!l.live()) return;
      ++attached[static_cast<std::size_t>(l.scq)];
      if (l.rcq != l.scq) ++attached[static_cast<std::size_t>(l.rcq)];
      const object& o = objs_[l.current()];
      const auto at = [&] { return "object " + std::to_string(l.current()) + ": "; };
      with_qp_(l, [&](auto& q) {
        expect_(q.posted_recvs() == (L::on_srq ? 0 : o.recvs), [&] {
          return at() + "posted_recvs() " + std::to_string(q.posted_recvs()) + ", the model " + std::to_string(o.recvs);
        });
        expect_(q.in_error() == o.failed, [&] { return at() + "in_error() is not what the completions say"; });
        const std::uint32_t credits = q.send_credits();
        const std::size_t held = o.sends.size() - o.freed;
        expect_(credits == (o.failed ? 0 : o.depth - held), [&] {
          return at() + "send_credits() " + std::to_string(credits) + ", the model " + std::to_string(o.depth - held);
        });
        expect_(q.can_post() == (credits > 0), [&] { return at() + "can_post() disagrees with send_credits()"; });
      });
    });
    for (std::size_t k = 0; k < cqs_.size(); ++k) {
      const cq_type& cq = cqs_[k];
      expect_(cq.reserved() + cq.flushing() <= static_cast<std::uint64_t>(cq.capacity()),
              [&] { return "CQ " + std::to_string(k) + ": reserved() + flushing() above its capacity"; });
      expect_(cq.unrouted() == unrouted_[k], [&] {
        return "CQ " + std::to_string(k) + ": unrouted() " + std::to_string(cq.unrouted()) + ", the model " +
               std::to_string(unrouted_[k]);
      });
      expect_(cq.attached() == attached[k],
              [&] { return "CQ " + std::to_string(k) + ": attached() is not the live queue pairs"; });
    }
    for (auto* d : {&da_, &db_})
      while (auto ev = d->next_event(0ms))
        expect_(ev->type != async_event_type::cq_err, [] { return "a CQ overflowed"; });
  }

  // Polls everything until nothing comes and the simulated clock stands still.
  void drain_() {
    for (int quiet = 0, i = 0; quiet < 3 && i < 100000 && !failed_; ++i) {
      const auto before = fab_.now();
      int got = 0;
      for (std::size_t k = 0; k < cqs_.size(); ++k) {
        got += poll_some_(static_cast<int>(k));
      }
      got += std::max(0, cb_.poll(on_peer_));
      quiet = got == 0 && fab_.now() == before ? quiet + 1 : 0;
    }
    for (std::size_t k = 0; k < cqs_.size(); ++k) {
      cq_now_ = static_cast<int>(k);
      expect_(cqs_[k].poll(on_poll_) == 0, [] { return "a poll after draining found more"; });
    }
  }

  void finish_() {
    acting_ = false;
    each_([&](auto& l) {
      if (pick_(2)) reset_(l, false);  // all they have out is then owed as flushes
    });
    drain_();
    check_();
    for (const auto& entry : work_) {
      const work& w = entry.second;
      if (w.delivered || w.kind == work::srq_recv) continue;
      const object& o = objs_.at(w.obj);
      if (o.destroyed) continue;  // dropped with its queue pair (or given to the fallback)
      const bool owed = w.kind == work::send ? w.signaled : o.retired || o.failed;
      expect_(!owed, [&] {
        return "wr_id " + std::to_string(entry.first) + (w.kind == work::send ? " (a signaled send)" : " (a receive)") +
               " of object " + std::to_string(w.obj) + (o.retired ? ", reset," : ", live,") + " never completed";
      });
    }
    for (const auto& entry : objs_) {
      const object& o = entry.second;
      if (o.srq_gen < 0 || o.destroyed) continue;
      expect_(o.srq_got >= o.peer_ok && o.srq_got <= o.peer_sent, [&] {
        return "object " + std::to_string(entry.first) + ": " + std::to_string(o.srq_got) +
               " SRQ receives delivered, " + std::to_string(o.peer_ok) + " SENDs its peer saw succeed, " +
               std::to_string(o.peer_sent) + " sent";
      });
    }
    // Everything destroyed: once a poll found each CQ empty, all the room is back.
    each_([&](auto& l) { destroy_(l); });
    for (std::size_t k = 0; k < cqs_.size(); ++k) {
      cq_now_ = static_cast<int>(k);
      for (int i = 0; i < 1000 && cqs_[k].poll(on_poll_) > 0; ++i) {
      }
      expect_(cqs_[k].reserved() == 0 && cqs_[k].flushing() == 0 && cqs_[k].attached() == 0, [&] {
        return "CQ " + std::to_string(k) + ": room still held with every queue pair destroyed (reserved " +
               std::to_string(cqs_[k].reserved()) + ", flushing " + std::to_string(cqs_[k].flushing()) + ")";
      });
    }
    check_();
    each_([&](auto& l) {
      create_(l, true);
      expect_(!l.used || l.rts, [] { return "a queue pair of the run could not be created again on its CQs"; });
    });
  }

  std::mt19937 rnd_;
  mock::fabric fab_;
  device<B> da_{fab_, "mock0"}, db_{fab_, "mock1"};
  protection_domain<B> pa_ = da_.create_pd(), pb_ = db_.create_pd();
  memory_region<B, rw> ma_ = pa_.allocate<rw>(1 << 14), mb_ = pb_.allocate<rw>(1 << 14);
  completion_queue<B> cb_ = db_.create_cq(4096);  // the peers'
  std::vector<cq_type> cqs_;                       // the side under test's: one or two
  cq_type& cq_(int k) { return cqs_[static_cast<std::size_t>(k)]; }
  std::tuple<lane<rc, signal_all>, lane<rc, signal_every<4>>, lane<rc, signal_manual>,
             lane<on_srq<rc>, signal_every<2>>>
      lanes_;
  std::unordered_map<std::uint64_t, object> objs_;
  std::unordered_map<std::uint64_t, work> work_;
  std::unordered_map<std::uint64_t, peer_work> peer_work_;
  std::vector<std::uint64_t> unrouted_;  // per CQ: completions delivered whose queue pair was destroyed
  std::uint64_t next_id_ = 1, next_object_ = 1;
  int srq_gen_ = 0;
  std::uint32_t srq_out_ = 0;  // receives posted to the current SRQ, not delivered
  int cq_now_ = 0;             // the CQ being polled (nested polls restore it)
  int depth_ = 0;              // handlers acting inside handlers
  bool acting_ = true, failed_ = false;
  std::function<void(const completion<B>&)> on_poll_ = [this](const completion<B>& c) { seen_(c, via::poll, 0); };
  std::function<void(const completion<B>&)> on_fallback_ = [this](const completion<B>& c) {
    seen_(c, via::fallback, 0);
  };
  std::function<void(const completion<B>&)> on_peer_ = [this](const completion<B>& c) { peer_seen_(c); };
};

// RDMAKIT_FUZZ_SEEDS=first:last widens the range for a manual run. Under a sanitizer
// (about ten times slower at -O0) the last hundred, 375 among them, within the test's
// two minutes.
std::pair<unsigned, unsigned> seed_range() {
#ifdef RDMAKIT_TEST_SANITIZED
  unsigned first = 301, last = 400;
#else
  unsigned first = 1, last = 400;
#endif
  if (const char* s = std::getenv("RDMAKIT_FUZZ_SEEDS")) (void)std::sscanf(s, "%u:%u", &first, &last);
  return {first, last};
}

void run_seeds(setup s) {
  const auto [first, last] = seed_range();
  for (unsigned seed = first; seed <= last; ++seed) {
    CAPTURE(seed);
    if (!run(seed, s).go()) break;  // one failing seed is enough to read
  }
}

}  // namespace random_cq_accounting

TEST_CASE("random CQ accounting against a model: the spec profile") {
  random_cq_accounting::run_seeds(random_cq_accounting::setup::spec);
}
TEST_CASE("random CQ accounting against a model: the rxe profile (a destroyed QP's completions stay in its CQ)") {
  random_cq_accounting::run_seeds(random_cq_accounting::setup::rxe);
}
TEST_CASE("random CQ accounting against a model: QP numbers reused at once") {
  random_cq_accounting::run_seeds(random_cq_accounting::setup::reused_numbers);
}
