// The policy layer against hand-written verbs loops on the paths bench/overhead.cpp does
// not cover (audit 27), on the null backend (bench/null_backend.hpp: its RQ ring, and
// `arrive`, which completes posted receives as a peer's SENDs would):
//  - sends of other opcodes (SEND, SEND_WITH_IMM, READ, FETCH_ADD) and UD sends, single
//    and as a post list;
//  - receives: post_recv one by one or as a list, and a server loop reposting each
//    completion from its handler (reading the immediate data or not);
//  - one CQ shared by 1, 2 or 4 queue pairs, on the send and on the receive side.
// Each policy loop has a hand-written reference that does the same work with the same
// care (the driver prints what the provider saw: both do the same number of posts,
// receives and polls).
//
//   overhead_paths --list                       "name reference" lines
//   overhead_paths --variant=NAME --iters=N     exactly N iterations (NAME all: each once)
//
// Driver only (no Google Benchmark: its instruction counts are the measure, taken by
// bench/run_overhead_paths.sh). Every iteration is 32 operations (posts, or received
// messages): instructions per operation are (I(N2) - I(N1)) / (N2 - N1) / 32.
#include "null_backend.hpp"

#include <rdmakit/rdmakit.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>
#include <optional>
#include <span>

namespace {

using namespace rdmakit;
using B = rdmakit_bench::null_backend;

constexpr std::uint32_t sq_depth = 64;
constexpr std::uint32_t rq_depth = 64;
constexpr std::uint32_t batch = 32;
constexpr std::uint32_t every = 16;
constexpr std::uint32_t msg_bytes = 64;
constexpr int poll_batch = 16;
constexpr auto rw = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
using P = busy_poll<poll_batch>;
using S16 = signal_every<every>;

enum class kind { write, send, send_imm, read, fadd, ud };
enum class posting { single, list };

template <class T, class S>
using qp_t = queue_pair<B, T, S, qp_state::rts>;

// K queue pairs of transport T on one CQ (send and receive), each connected to a peer
// on a second device (RC), or active with an address handle to its peer (UD).
template <class T, class S, int K = 1>
struct env {
  // Room for every queue pair's completions, and the shared-CQ receive loops' buffers
  // (wr_id = QP index << 8 | slot, a buffer of msg_bytes each).
  static constexpr int cq_entries = K * (sq_depth + rq_depth) > 1024 ? K * (sq_depth + rq_depth) : 1024;
  static constexpr std::size_t region_bytes = std::size_t{K} * 256 * msg_bytes > 65536 ? std::size_t{K} * 256 * msg_bytes : 65536;
  device<B> dx, dy;
  protection_domain<B> pdx, pdy;
  completion_queue<B, P> cqx, cqy;
  memory_region<B, rw> src, dst;
  qp_t<T, S> a[K], b[K];
  std::optional<address_handle<B>> ah;
  std::optional<ud_address<B>> to;

  env() {
    dx = device<B>("null0");
    dy = device<B>("null0");
    pdx = dx.create_pd();
    pdy = dy.create_pd();
    cqx = dx.template create_cq<P>(cq_entries);
    cqy = dy.template create_cq<P>(cq_entries);
    B::carry_receives(cqx.native());  // before the QPs: they take its provider entries
    B::carry_receives(cqy.native());
    src = allocate<rw>(pdx, region_bytes);
    dst = allocate<rw>(pdy, region_bytes);
    const qp_cap caps{.max_send_wr = sq_depth, .max_recv_wr = rq_depth};
    for (int i = 0; i < K; ++i) {
      auto x = create_qp<T, S>(pdx, cqx, caps);
      auto y = create_qp<T, S>(pdy, cqy, caps);
      if constexpr (T::connected) {
        auto ex = x.local_endpoint();
        a[i] = std::move(x).connect(y.local_endpoint());
        b[i] = std::move(y).connect(ex);
      } else {
        a[i] = std::move(x).activate();
        b[i] = std::move(y).activate();
      }
    }
    if constexpr (!T::connected) {
      ah.emplace(pdx.create_ah(b[0].local_endpoint()));
      to.emplace(ah->to(b[0].local_endpoint()));
    }
  }
};

template <kind K>
using transport_of = std::conditional_t<K == kind::ud, ud, rc>;

constexpr opcode opcode_of(kind k) {
  switch (k) {
    case kind::write: return opcode::rdma_write;
    case kind::send: return opcode::send;
    case kind::send_imm: return opcode::send_with_imm;
    case kind::read: return opcode::rdma_read;
    case kind::fadd: return opcode::atomic_fetch_and_add;
    case kind::ud: return opcode::send;
  }
  return opcode::send;
}
constexpr std::uint32_t length_of(kind k) { return k == kind::fadd ? 8 : msg_bytes; }

// ---- sends: the loop of bench/overhead.cpp (single / list), any opcode ----------------------

template <kind Kd, class S, posting Post>
struct raw_send {
  using T = transport_of<Kd>;
  typename B::qp qp;
  typename B::cq cq;
  std::uint64_t laddr;
  std::uint32_t lkey;
  std::uint64_t raddr;
  std::uint32_t rkey;
  typename B::ah ah{};
  std::uint32_t rqpn = 0, qkey = 0;
  std::uint32_t depth;
  std::uint32_t held = 0, run = 0, next_id = 0;
  std::uint64_t errors = 0;

  explicit raw_send(env<T, S>& e)
      : qp(e.a[0].native()), cq(e.cqx.native()), laddr(e.src.local().addr), lkey(e.src.lkey()),
        raddr(e.dst.remote().addr()), rkey(e.dst.remote().rkey()), depth(e.a[0].caps().max_send_wr) {
    if constexpr (Kd == kind::ud) {
      ah = e.to->native();
      rqpn = e.b[0].local_endpoint().qpn;
      qkey = e.b[0].local_endpoint().qkey;
    }
  }
  std::uint32_t freed_per_completion() const noexcept { return std::is_same_v<S, signal_all> ? 1 : every; }
  RDMAKIT_ALWAYS_INLINE bool signal_next() noexcept {
    if constexpr (std::is_same_v<S, signal_all>) {
      return true;
    } else {
      if (++run != every) return false;
      run = 0;
      return true;
    }
  }
  RDMAKIT_ALWAYS_INLINE void build(typename B::send_wr& w, typename B::sge& s) noexcept {
    B::set_sge(s, laddr, length_of(Kd), lkey);
    const bool sig = signal_next();
    const std::uint32_t id = next_id++;
    B::set_send(w, id, opcode_of(Kd), sig ? send_flags::signaled : send_flags::none, &s, 1);
    if constexpr (Kd == kind::write || Kd == kind::read) B::set_rdma(w, raddr, rkey);
    if constexpr (Kd == kind::send_imm) B::set_imm(w, __builtin_bswap32(id));  // htonl
    if constexpr (Kd == kind::fadd) B::set_atomic(w, raddr, rkey, 1, 0);
    if constexpr (Kd == kind::ud) B::set_ud(w, ah, rqpn, qkey);
  }
  [[gnu::noinline]] void run_once() noexcept {
    if constexpr (Post == posting::list) {
      while (depth - held < batch)
        if (!reap()) return;
      typename B::sge s[batch];
      typename B::send_wr w[batch];
      for (std::uint32_t i = 0; i < batch; ++i) {
        build(w[i], s[i]);
        if (i) B::set_next(w[i - 1], &w[i]);
      }
      typename B::send_wr* bad = nullptr;
      if (B::post_send(qp, w, &bad) != 0) return (void)++errors;
      held += batch;
    } else {
      for (std::uint32_t i = 0; i < batch; ++i) {
        while (held == depth)
          if (!reap()) return;
        typename B::sge s;
        typename B::send_wr w;
        build(w, s);
        typename B::send_wr* bad = nullptr;
        if (B::post_send(qp, &w, &bad) != 0) return (void)++errors;
        ++held;
      }
    }
  }
  RDMAKIT_ALWAYS_INLINE bool reap() noexcept {
    typename B::wc wcs[poll_batch];
    const int n = B::poll_cq(cq, poll_batch, wcs);
    if (n < 0) return ++errors, false;
    for (int k = 0; k < n; ++k)
      if (B::get_status(wcs[k]) != wc_status::success) return ++errors, false;
    held -= static_cast<std::uint32_t>(n) * freed_per_completion();
    return true;
  }
};

template <kind Kd, class S, posting Post>
struct policy_send {
  using T = transport_of<Kd>;
  qp_t<T, S> qp;
  completion_queue<B, P>& cq;
  local_buffer src;
  remote_region<access::remote_write | access::remote_read | access::remote_atomic> dst;
  std::optional<ud_address<B>> to;
  std::uint32_t next_id = 0;
  std::uint64_t errors = 0;
  static constexpr send_flags flags = send_flags::no_auto_inline;  // as bench/overhead.cpp

  explicit policy_send(env<T, S>& e)
      : qp(std::move(e.a[0])), cq(e.cqx), src(e.src.local(0, length_of(Kd))),
        dst(e.dst.remote().sub(0, length_of(Kd))), to(e.to) {}

  RDMAKIT_ALWAYS_INLINE auto make(std::uint32_t id) const noexcept {
    if constexpr (Kd == kind::write) return op::write{src, dst};
    if constexpr (Kd == kind::read) return op::read{src, dst};
    if constexpr (Kd == kind::send) return op::send{src};
    if constexpr (Kd == kind::send_imm) return op::send_imm{src, id};
    if constexpr (Kd == kind::fadd) return op::fetch_add{src, dst, 1};
    if constexpr (Kd == kind::ud) return op::ud_send<B>{src, *to};
  }

  [[gnu::noinline]] void run_once() noexcept {
    if constexpr (Post == posting::list) {
      while (!qp.can_post(batch))
        if (!reap()) return;
      auto list = decltype(qp)::template make_batch<batch>();
      for (std::uint32_t i = 0; i < batch; ++i) {
        const std::uint32_t id = next_id++;
        (void)list.add(make(id), id, flags);
      }
      if (!qp.post(list).ok()) ++errors;
    } else {
      for (std::uint32_t i = 0; i < batch; ++i) {
        const std::uint32_t id = next_id++;
        post_result r = qp.post(make(id), id, flags);
        while (r.status == post_status::sq_full && reap()) r = qp.post(make(id), id, flags);
        if (!r.ok()) return (void)++errors;
      }
    }
  }
  RDMAKIT_ALWAYS_INLINE bool reap() noexcept {
    const auto r = cq.wait();
    if (r.failed() || r.timed_out()) return ++errors, false;
    return true;
  }
};

// ---- receives -------------------------------------------------------------------------
// rx single/list: post 32 receives (one per post_recv, or one list of 32 built on each
// post), 32 messages arrive, poll until the 32 are reaped (batches of 16), checking
// each status. rx server: the RQ is kept full (64 posted at setup); 32 messages arrive;
// each completion polled is checked, its byte_len (and immediate data) read, and its
// buffer (the wr_id names its slot) posted again with one post_recv, as a send_bw
// server does.

enum class rx { single, list, server, server_imm };

template <rx R>
struct raw_rx {
  typename B::qp qp;
  typename B::cq cq;
  std::uint64_t base;
  std::uint32_t lkey;
  std::uint32_t next_id = 0;
  std::uint64_t errors = 0, bytes = 0, imms = 0;

  explicit raw_rx(env<rc, S16>& e) : qp(e.b[0].native()), cq(e.cqy.native()), base(e.dst.local().addr), lkey(e.dst.lkey()) {
    if constexpr (R == rx::server || R == rx::server_imm)
      for (std::uint32_t i = 0; i < rq_depth; ++i) repost(i);
  }
  RDMAKIT_ALWAYS_INLINE bool repost(std::uint32_t slot) noexcept {
    typename B::sge s;
    typename B::recv_wr w;
    B::set_sge(s, base + slot * msg_bytes, msg_bytes, lkey);
    B::set_recv(w, slot, &s, 1);
    typename B::recv_wr* bad = nullptr;
    return B::post_recv(qp, &w, &bad) == 0;
  }
  [[gnu::noinline]] void run_once() noexcept {
    if constexpr (R == rx::single) {
      for (std::uint32_t i = 0; i < batch; ++i)
        if (!repost(i)) return (void)++errors;
    } else if constexpr (R == rx::list) {
      typename B::sge s[batch];
      typename B::recv_wr w[batch];
      for (std::uint32_t i = 0; i < batch; ++i) {
        B::set_sge(s[i], base + i * msg_bytes, msg_bytes, lkey);
        B::set_recv(w[i], i, &s[i], 1);
        if (i) B::set_next(w[i - 1], &w[i]);
      }
      typename B::recv_wr* bad = nullptr;
      if (B::post_recv(qp, w, &bad) != 0) return (void)++errors;
    }
    B::arrive(qp, batch, msg_bytes, R == rx::server_imm, 0x01000000);
    std::uint32_t got = 0;
    while (got < batch) {
      typename B::wc wcs[poll_batch];
      const int n = B::poll_cq(cq, poll_batch, wcs);
      if (n < 0) return (void)++errors;
      for (int k = 0; k < n; ++k) {
        if (B::get_status(wcs[k]) != wc_status::success) return (void)++errors;
        if constexpr (R == rx::server || R == rx::server_imm) {
          bytes += B::get_byte_len(wcs[k]);
          if constexpr (R == rx::server_imm) imms += __builtin_bswap32(B::get_imm(wcs[k]));  // ntohl
          if (!repost(static_cast<std::uint32_t>(B::get_wr_id(wcs[k])))) return (void)++errors;
        }
      }
      got += static_cast<std::uint32_t>(n);
    }
  }
};

template <rx R>
struct policy_rx {
  qp_t<rc, S16> qp;
  completion_queue<B, P>& cq;
  local_buffer bufs[rq_depth];
  std::uint64_t errors = 0, bytes = 0, imms = 0;

  explicit policy_rx(env<rc, S16>& e) : qp(std::move(e.b[0])), cq(e.cqy) {
    for (std::uint32_t i = 0; i < rq_depth; ++i) bufs[i] = e.dst.local(i * msg_bytes, msg_bytes);
    if constexpr (R == rx::server || R == rx::server_imm)
      for (std::uint32_t i = 0; i < rq_depth; ++i) (void)qp.post_recv(bufs[i], i);
  }
  [[gnu::noinline]] void run_once() noexcept {
    if constexpr (R == rx::single) {
      for (std::uint32_t i = 0; i < batch; ++i)
        if (!qp.post_recv(bufs[i], i).ok()) return (void)++errors;
    } else if constexpr (R == rx::list) {
      if (!qp.post_recvs(std::span<const local_buffer>(bufs, batch), 0).ok()) return (void)++errors;
    }
    B::arrive(qp.native(), batch, msg_bytes, R == rx::server_imm, 0x01000000);
    std::uint32_t got = 0;
    while (got < batch) {
      int n;
      if constexpr (R == rx::single || R == rx::list) {
        n = cq.poll();  // the layer checks the statuses (a failure puts the QP in ERR)
      } else {
        n = cq.poll([&](const completion<B>& c) noexcept {
          if (!c.ok()) return (void)++errors;
          bytes += c.byte_len();
          if constexpr (R == rx::server_imm) imms += c.imm();
          const auto slot = static_cast<std::uint32_t>(c.wr_id());
          if (!qp.post_recv(bufs[slot], slot).ok()) ++errors;
        });
      }
      if (n < 0) return (void)++errors;
      got += static_cast<std::uint32_t>(n);
    }
    if constexpr (R == rx::single || R == rx::list)
      if (qp.in_error()) ++errors;
  }
};

// ---- a shared CQ: K RC queue pairs, one send CQ (WRITEs, every16) -----------------------
// 32 WRITEs an iteration, round-robin over the K queue pairs; a QP without a free SQ slot
// reaps the shared CQ. The raw loop keeps each QP's slots and run in arrays and puts the
// QP's index in the wr_id (as perftest does) to find whose slots a completion frees.

template <int K>
struct raw_shared_send {
  typename B::qp qp[K];
  typename B::cq cq;
  std::uint64_t laddr, raddr;
  std::uint32_t lkey, rkey;
  std::uint32_t depth;
  std::uint32_t held[K] = {}, run[K] = {};
  std::uint64_t errors = 0;
  explicit raw_shared_send(env<rc, S16, K>& e)
      : cq(e.cqx.native()), laddr(e.src.local().addr), raddr(e.dst.remote().addr()), lkey(e.src.lkey()),
        rkey(e.dst.remote().rkey()), depth(e.a[0].caps().max_send_wr) {
    for (int i = 0; i < K; ++i) qp[i] = e.a[i].native();
  }
  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i) {
      const std::uint32_t q = i % K;
      while (held[q] == depth)
        if (!reap()) return;
      typename B::sge s;
      typename B::send_wr w;
      B::set_sge(s, laddr, msg_bytes, lkey);
      bool sig = ++run[q] == every;
      if (sig) run[q] = 0;
      B::set_send(w, q, opcode::rdma_write, sig ? send_flags::signaled : send_flags::none, &s, 1);
      B::set_rdma(w, raddr, rkey);
      typename B::send_wr* bad = nullptr;
      if (B::post_send(qp[q], &w, &bad) != 0) return (void)++errors;
      ++held[q];
    }
  }
  RDMAKIT_ALWAYS_INLINE bool reap() noexcept {
    typename B::wc wcs[poll_batch];
    const int n = B::poll_cq(cq, poll_batch, wcs);
    if (n < 0) return ++errors, false;
    for (int k = 0; k < n; ++k) {
      if (B::get_status(wcs[k]) != wc_status::success) return ++errors, false;
      held[B::get_wr_id(wcs[k])] -= every;
    }
    return true;
  }
};

template <int K>
struct policy_shared_send {
  qp_t<rc, S16> qp[K];
  completion_queue<B, P>& cq;
  local_buffer src;
  remote_region<access::remote_write | access::remote_read | access::remote_atomic> dst;
  std::uint64_t errors = 0;
  static constexpr send_flags flags = send_flags::no_auto_inline;
  explicit policy_shared_send(env<rc, S16, K>& e)
      : cq(e.cqx), src(e.src.local(0, msg_bytes)), dst(e.dst.remote().sub(0, msg_bytes)) {
    for (int i = 0; i < K; ++i) qp[i] = std::move(e.a[i]);
  }
  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i) {
      const std::uint32_t q = i % K;
      post_result r = qp[q].post(op::write{src, dst}, q, flags);
      while (r.status == post_status::sq_full && reap()) r = qp[q].post(op::write{src, dst}, q, flags);
      if (!r.ok()) return (void)++errors;
    }
  }
  RDMAKIT_ALWAYS_INLINE bool reap() noexcept {
    const auto r = cq.wait();
    if (r.failed() || r.timed_out()) return ++errors, false;
    return true;
  }
};

// ---- a shared CQ: K RC queue pairs' receives on one CQ (server loop) -------------------
// Each QP's RQ kept full (64); 32 messages arrive, one per QP in turn (interleaved in
// the CQ, as from K clients sending at once); each completion polled is checked, its
// byte_len read, and its buffer posted again on its own QP. wr_id = QP index << 8 | slot
// in both loops (the raw one finds the QP by it; the layer routes by qp_num anyway).

template <int K>
struct raw_shared_rx {
  typename B::qp qp[K];
  typename B::cq cq;
  std::uint64_t base;
  std::uint32_t lkey;
  std::uint64_t errors = 0, bytes = 0;
  explicit raw_shared_rx(env<rc, S16, K>& e) : cq(e.cqy.native()), base(e.dst.local().addr), lkey(e.dst.lkey()) {
    for (int i = 0; i < K; ++i) {
      qp[i] = e.b[i].native();
      for (std::uint32_t s = 0; s < rq_depth; ++s) repost(static_cast<std::uint32_t>(i) << 8 | s);
    }
  }
  RDMAKIT_ALWAYS_INLINE bool repost(std::uint32_t id) noexcept {
    typename B::sge s;
    typename B::recv_wr w;
    B::set_sge(s, base + id * msg_bytes, msg_bytes, lkey);
    B::set_recv(w, id, &s, 1);
    typename B::recv_wr* bad = nullptr;
    return B::post_recv(qp[id >> 8], &w, &bad) == 0;
  }
  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i) B::arrive(qp[i % K], 1, msg_bytes);
    std::uint32_t got = 0;
    while (got < batch) {
      typename B::wc wcs[poll_batch];
      const int n = B::poll_cq(cq, poll_batch, wcs);
      if (n < 0) return (void)++errors;
      for (int k = 0; k < n; ++k) {
        if (B::get_status(wcs[k]) != wc_status::success) return (void)++errors;
        bytes += B::get_byte_len(wcs[k]);
        if (!repost(static_cast<std::uint32_t>(B::get_wr_id(wcs[k])))) return (void)++errors;
      }
      got += static_cast<std::uint32_t>(n);
    }
  }
};

template <int K>
struct policy_shared_rx {
  qp_t<rc, S16> qp[K];
  completion_queue<B, P>& cq;
  local_buffer bufs[K][rq_depth];
  std::uint64_t errors = 0, bytes = 0;
  explicit policy_shared_rx(env<rc, S16, K>& e) : cq(e.cqy) {
    for (int i = 0; i < K; ++i) {
      qp[i] = std::move(e.b[i]);
      for (std::uint32_t s = 0; s < rq_depth; ++s) {
        const std::uint32_t id = static_cast<std::uint32_t>(i) << 8 | s;
        bufs[i][s] = e.dst.local(id * msg_bytes, msg_bytes);
        (void)qp[i].post_recv(bufs[i][s], id);
      }
    }
  }
  [[gnu::noinline]] void run_once() noexcept {
    for (std::uint32_t i = 0; i < batch; ++i) B::arrive(qp[i % K].native(), 1, msg_bytes);
    std::uint32_t got = 0;
    while (got < batch) {
      const int n = cq.poll([&](const completion<B>& c) noexcept {
        if (!c.ok()) return (void)++errors;
        bytes += c.byte_len();
        const auto id = static_cast<std::uint32_t>(c.wr_id());
        if (!qp[id >> 8].post_recv(bufs[id >> 8][id & 0xff], id).ok()) ++errors;
      });
      if (n < 0) return (void)++errors;
      got += static_cast<std::uint32_t>(n);
    }
  }
};

// ---- driver --------------------------------------------------------------------------

template <class Env, class Loop>
std::uint64_t drive(std::uint64_t iters) {
  Env e;
  std::vector<B::qp> natives;
  for (auto& q : e.a) natives.push_back(q.native());
  for (auto& q : e.b) natives.push_back(q.native());
  B::cq cqs[2] = {e.cqx.native(), e.cqy.native()};
  Loop loop(e);
  for (std::uint64_t i = 0; i < iters; ++i) loop.run_once();
  // What the provider saw: the same in the raw and the policy loop of one path.
  std::uint64_t sends = 0, recvs = 0, polled = 0;
  for (auto* q : natives) sends += q->sends, recvs += q->recvs;
  for (auto* c : cqs) polled += c->head;
  std::printf("  provider: sends=%llu recvs=%llu completions polled=%llu\n", (unsigned long long)sends,
              (unsigned long long)recvs, (unsigned long long)polled);
  return loop.errors;
}

struct variant {
  std::string name, reference;
  std::uint64_t (*fn)(std::uint64_t);
};

std::vector<variant>& all() {
  static std::vector<variant> v;
  return v;
}

template <kind Kd, class S, posting Post>
void add_send(const char* k, const char* s, const char* p) {
  using E = env<transport_of<Kd>, S>;
  const std::string tail = std::string(k) + "/" + s + "/" + p;
  all().push_back({"raw/" + tail, "", &drive<E, raw_send<Kd, S, Post>>});
  all().push_back({"policy/" + tail, "raw/" + tail, &drive<E, policy_send<Kd, S, Post>>});
}
template <rx R>
void add_rx(const char* name) {
  using E = env<rc, S16>;
  all().push_back({std::string("raw/") + name, "", &drive<E, raw_rx<R>>});
  all().push_back({std::string("policy/") + name, std::string("raw/") + name, &drive<E, policy_rx<R>>});
}
template <int K>
void add_shared() {
  using E = env<rc, S16, K>;
  const std::string n = std::to_string(K);
  all().push_back({"raw/shared_send/" + n, "", &drive<E, raw_shared_send<K>>});
  all().push_back({"policy/shared_send/" + n, "raw/shared_send/" + n, &drive<E, policy_shared_send<K>>});
  all().push_back({"raw/shared_rx/" + n, "", &drive<E, raw_shared_rx<K>>});
  all().push_back({"policy/shared_rx/" + n, "raw/shared_rx/" + n, &drive<E, policy_shared_rx<K>>});
}

void register_all() {
  add_send<kind::write, S16, posting::single>("write", "every16", "single");
  add_send<kind::write, S16, posting::list>("write", "every16", "list");
  add_send<kind::send, S16, posting::single>("send", "every16", "single");
  add_send<kind::send, S16, posting::list>("send", "every16", "list");
  add_send<kind::send, signal_all, posting::single>("send", "all", "single");
  add_send<kind::send_imm, S16, posting::single>("send_imm", "every16", "single");
  add_send<kind::send_imm, S16, posting::list>("send_imm", "every16", "list");
  add_send<kind::read, S16, posting::single>("read", "every16", "single");
  add_send<kind::read, S16, posting::list>("read", "every16", "list");
  add_send<kind::read, signal_all, posting::single>("read", "all", "single");
  add_send<kind::fadd, S16, posting::single>("fadd", "every16", "single");
  add_send<kind::fadd, signal_all, posting::single>("fadd", "all", "single");
  add_send<kind::ud, S16, posting::single>("ud", "every16", "single");
  add_send<kind::ud, S16, posting::list>("ud", "every16", "list");
  add_send<kind::ud, signal_all, posting::single>("ud", "all", "single");
  add_rx<rx::single>("rx/single");
  add_rx<rx::list>("rx/list");
  add_rx<rx::server>("rx/server");
  add_rx<rx::server_imm>("rx/server_imm");
  add_shared<1>();
  add_shared<2>();
  add_shared<4>();
  add_shared<16>();  // more queue pairs than the CQ's inline route cache had slots (8, before s68)
}

}  // namespace

int main(int argc, char** argv) try {
  register_all();
  std::string_view name;
  std::uint64_t iters = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--list") {
      for (auto& v : all()) std::printf("%s %s\n", v.name.c_str(), v.reference.c_str());
      return 0;
    }
    if (a.substr(0, 10) == "--variant=") name = a.substr(10);
    if (a.substr(0, 8) == "--iters=") iters = std::strtoull(argv[i] + 8, nullptr, 10);
  }
  int found = 0, failed = 0;
  for (auto& v : all()) {
    if (v.name != name && name != "all") continue;
    ++found;
    const auto errors = v.fn(iters);
    std::printf("%s iters=%llu errors=%llu\n", v.name.c_str(), (unsigned long long)iters, (unsigned long long)errors);
    failed += errors != 0;
  }
  if (!found) return std::fprintf(stderr, "unknown variant\n"), 2;
  return failed ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
