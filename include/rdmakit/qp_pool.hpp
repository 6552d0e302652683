#pragma once
/// A pool of queue pairs of one type sharing completion queues: created together
/// (the CQ capacity is checked for all of them before the first is made), connected
/// together (one peer endpoint each), then used by index, by qp_num, or round-robin.
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/queue_pair.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

/// N queue pairs of transport T / signaling S in state State (init or rts).
template <verbs_backend B, transport T, signaling S = signal_all, qp_state State = qp_state::init>
class qp_pool {
 public:
  /// The type of each queue pair in the pool.
  using queue_pair_type = queue_pair<B, T, S, State>;

  qp_pool() = default;

  /// Creates `count` queue pairs in INIT on `cq`. Prefer protection_domain::create_qp_pool.
  template <polling P>
  static qp_pool create(detail::pd_ref<B> pd, completion_queue<B, P>& cq, std::size_t count, const qp_cap& caps,
                        const qp_options& o = {})
    requires(State == qp_state::init)
  {
    auto* blk = detail::policy_access::block(cq);
    if (!blk) detail::throw_empty_argument("completion_queue", "create_qp_pool");
    if (count == 0)
      throw usage_error("create_qp_pool(): a pool of 0 queue pairs has nothing to connect or use: give a count of 1 "
                        "or more");
    detail::check_qp_options(o);  // before the members' PSNs (o.psn + i) wrap at 24 bits
    const std::uint64_t per = std::uint64_t{caps.max_send_wr} + caps.max_recv_wr;
    blk->forget_drained();  // room a busy CQ's polls gave back, as create_qp takes it
    const std::uint64_t taken = blk->reserved + blk->flushing;  // reset or destroyed queue pairs' completions too
    if (per != 0 && count > (UINT64_MAX - taken) / per)
      throw usage_error(detail::cat("create_qp_pool(): a pool of ", count, " ", T::name, " queue pairs of ",
                                    caps.max_send_wr, " send + ", caps.max_recv_wr,
                                    " receive WRs each needs more CQ entries than any CQ has: make fewer"));
    const std::uint64_t need = taken + per * count;
    if (need > static_cast<std::uint64_t>(blk->capacity))
      throw usage_error(detail::cat("create_qp_pool(): CQ of ", blk->capacity, " entries is too small for a pool of ",
                                    count, " ", T::name, " queue pairs of ", caps.max_send_wr, " send + ",
                                    caps.max_recv_wr, " receive WRs each",
                                    detail::cq_entries_taken(blk->reserved, blk->flushing, blk->live()),
                                    ": create it with at least ", need, " entries"));
    // Whatever the depths (0 + 0 passes the CQ checks above): the device makes at most max_qp.
    if (const std::uint64_t most = pd->dev->attr.max_qp; most != 0 && count > most)
      throw usage_error(detail::cat("create_qp_pool(): a pool of ", count, " queue pairs is more than ",
                                    pd->dev->name, " makes (its max_qp is ", most, "): make fewer"));
    qp_pool p;
    p.qps_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      qp_options oi = o;
      if (o.psn) oi.psn = (*o.psn + static_cast<std::uint32_t>(i)) & psn_mask;
      p.qps_.push_back(queue_pair_type::create(pd, cq, cq, caps, oi));
    }
    return p;
  }

  /// Takes over the queue pairs; `o` becomes empty.
  qp_pool(qp_pool&& o) noexcept
      : qps_(std::move(o.qps_)), by_num_(std::move(o.by_num_)), cursor_(std::exchange(o.cursor_, 0)) {
    o.empty_();
  }
  /// Destroys this pool's queue pairs, then takes over `o`'s; `o` becomes empty.
  qp_pool& operator=(qp_pool&& o) noexcept {
    if (this != &o) {
      qps_ = std::move(o.qps_);
      by_num_ = std::move(o.by_num_);
      cursor_ = std::exchange(o.cursor_, 0);
      o.empty_();
    }
    return *this;
  }

  /// The number of queue pairs.
  std::size_t size() const noexcept { return qps_.size(); }
  /// The i-th queue pair (not bounds-checked).
  queue_pair_type& operator[](std::size_t i) noexcept { return qps_[i]; }
  /// The i-th queue pair (not bounds-checked).
  const queue_pair_type& operator[](std::size_t i) const noexcept { return qps_[i]; }
  /// The first queue pair, for range-for over the pool.
  auto begin() noexcept { return qps_.begin(); }
  /// Past the last queue pair.
  auto end() noexcept { return qps_.end(); }

  /// The queue pair with this number, or nullptr: a binary search of an index of the
  /// members' numbers (a completion handler calls it for every completion). A number the
  /// index does not give is looked for in every member (one may have been replaced
  /// through operator[]), and the index made again when one has it: a number of no
  /// member costs a pass over the pool.
  queue_pair_type* find(std::uint32_t qp_num) noexcept {
    const auto it = std::lower_bound(by_num_.begin(), by_num_.end(), qp_num,
                                     [](const numbered& e, std::uint32_t n) { return e.qp_num < n; });
    if (it != by_num_.end() && it->qp_num == qp_num && it->index < qps_.size()) {
      queue_pair_type& q = qps_[it->index];
      if (q && q.qp_num() == qp_num) return &q;
    }
    for (auto& q : qps_)
      if (q && q.qp_num() == qp_num) {
        index_();
        return &q;
      }
    return nullptr;
  }

  /// The next queue pair in round-robin order (spreads load over the pool).
  queue_pair_type& next() {
    if (qps_.empty())
      throw usage_error("qp_pool::next(): the pool is empty (moved from, or emptied by a refused connect or activate)");
    auto& q = qps_[cursor_];
    cursor_ = cursor_ + 1 == qps_.size() ? 0 : cursor_ + 1;
    return q;
  }

  /// The endpoints to send to the peer, in pool order.
  std::vector<endpoint> local_endpoints() const {
    std::vector<endpoint> v;
    v.reserve(qps_.size());
    for (const auto& q : qps_) v.push_back(q.local_endpoint());
    return v;
  }

  /// Connects queue pair i to peers[i] (RC/UC). Options and endpoints are checked for
  /// all of them first, and that none was moved out of the pool (nothing changes on a
  /// usage_error). If the device refuses one, the ones already connected cannot go back
  /// to INIT with this pool: every queue pair of the pool is destroyed, the pool is left
  /// empty (size() 0) and the error says so (as after std::bad_alloc on the way).
  qp_pool<B, T, S, qp_state::rts> connect(std::span<const endpoint> peers, const connect_options& o = {}) && {
    static_assert(State == qp_state::init, "connect(): this pool is already connected");
    check_members_("connect");
    if (peers.size() != qps_.size())
      throw usage_error(detail::cat("qp_pool::connect(): a pool of ", qps_.size(),
                                    " queue pairs needs as many peer endpoints, got ", peers.size()));
    for (std::size_t i = 0; i < qps_.size(); ++i) {
      detail::check_connect(peers[i], o, initiates_reads<T>,
                            detail::policy_access::parts(qps_[i]).dev().attr.max_qp_init_rd_atom);
      // What INIT→RTR would refuse before the device (a RoCE peer without a GID...).
      (void)detail::rtr_attributes<B, T>(detail::policy_access::parts(qps_[i]), peers[i], o);
    }
    qp_pool<B, T, S, qp_state::rts> out;
    out.qps_.reserve(qps_.size());
    for (std::size_t i = 0; i < qps_.size(); ++i) {
      try {
        out.qps_.push_back(std::move(qps_[i]).connect(peers[i], o));
      } catch (const verbs_error& e) {
        throw refused_("connect", i, e);
      } catch (...) {
        empty_();  // out of memory: the same end, without the words
        throw;
      }
    }
    empty_();
    return out;
  }

  /// Activates every queue pair (UD). A pool with a member moved out is a usage_error
  /// before any is touched. If the device refuses one, the pool is emptied as connect's
  /// is, and the error says so.
  qp_pool<B, T, S, qp_state::rts> activate() && {
    static_assert(State == qp_state::init, "activate(): this pool is already active");
    check_members_("activate");
    qp_pool<B, T, S, qp_state::rts> out;
    out.qps_.reserve(qps_.size());
    for (std::size_t i = 0; i < qps_.size(); ++i) {
      try {
        out.qps_.push_back(std::move(qps_[i]).activate());
      } catch (const verbs_error& e) {
        throw refused_("activate", i, e);
      } catch (...) {
        empty_();  // out of memory: the same end, without the words
        throw;
      }
    }
    empty_();
    return out;
  }

 private:
  template <verbs_backend, transport, signaling, qp_state>
  friend class qp_pool;
  // A member moved out through operator[] (or connected on its own) leaves an empty
  // queue pair: refused before any member is touched.
  void check_members_(const char* call) const {
    if (qps_.empty())
      throw usage_error(detail::cat("qp_pool::", call, "(): the pool is empty (moved from, or emptied by a refused "
                                    "connect or activate): create a new pool"));
    for (std::size_t i = 0; i < qps_.size(); ++i)
      if (!qps_[i])
        throw usage_error(detail::cat("qp_pool::", call, "(): queue pair ", i, " of ", qps_.size(),
                                      " is empty (moved out of the pool): nothing was changed; connect it on its "
                                      "own, or create a new pool"));
  }
  // Queue pair i was refused: the ones before it are past INIT and this pool cannot take
  // them back, so every queue pair goes. The transition refused stays in the error.
  verbs_error refused_(const char* call, std::size_t i, const verbs_error& e) {
    const std::size_t n = qps_.size();
    empty_();
    std::string_view why = e.detail();  // without the queue pair's own advice to retry
    if (const auto k = why.find(detail::back_to_init_note); k != std::string_view::npos)
      why = why.substr(0, k);
    std::string what = detail::cat("qp_pool::", call, "(): queue pair ", i, " of ", n, ": ", why,
                                   "; the pool's queue pairs were destroyed: create a new pool");
    if (const auto* t = e.transition()) return verbs_error(e.verb(), e.errno_value(), what, *t);
    return verbs_error(e.verb(), e.errno_value(), what);
  }

  void empty_() noexcept {
    qps_.clear();
    by_num_.clear();
    cursor_ = 0;
  }

  // find()'s index: the members' numbers, sorted. Made by the first find() that needs
  // it; without memory for it find() passes over the members.
  struct numbered {
    std::uint32_t qp_num;
    std::uint32_t index;
  };
  void index_() noexcept {
    try {
      by_num_.clear();
      for (std::size_t i = 0; i < qps_.size(); ++i)
        if (qps_[i]) by_num_.push_back({qps_[i].qp_num(), static_cast<std::uint32_t>(i)});
      std::sort(by_num_.begin(), by_num_.end(), [](const numbered& a, const numbered& b) { return a.qp_num < b.qp_num; });
    } catch (const std::bad_alloc&) {
      by_num_.clear();
    }
  }

  std::vector<queue_pair_type> qps_;
  std::vector<numbered> by_num_;
  std::size_t cursor_ = 0;
};

RDMAKIT_END_NAMESPACE
