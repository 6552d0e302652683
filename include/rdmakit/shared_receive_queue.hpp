#pragma once
/// Shared receive queues. `pd.create_srq({.max_wr = 512, .max_sge = 1})` returns a
/// `shared_receive_queue<B>`; queue pairs created on it with `pd.create_qp<rc>(cq, srq,
/// caps)` (transport `on_srq<rc>`, RC, UC or UD) take every receive from it, in the
/// order they were posted, and each completion names the queue pair the message arrived
/// on. Such a queue pair has no post_recv (it does not compile); its receive CQ reserves
/// the SRQ's max_wr once, however many of the SRQ's queue pairs complete there. That
/// bounds the CQ's receive completions only if receives are posted again after polling
/// (rxe frees an SRQ slot when a message takes it, not when its completion is polled:
/// docs/ownership-and-threads.md, "Starting over").
///
/// The SRQ keeps its protection domain alive and every queue pair on it keeps the SRQ
/// alive, so destroying the handle first never frees it under them. Posting is noexcept,
/// allocation-free and returns a status. The backend must model srq_backend.
#include <rdmakit/backend.hpp>
#include <rdmakit/completion.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/qp_parts.hpp>
#include <rdmakit/detail/sge_list.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/types.hpp>

#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

struct policy_access;

// Owned by the shared_receive_queue handle and by every queue pair on it: the native
// SRQ is destroyed when the last of them goes, after its queue pairs, before its PD.
template <class B>
struct srq_state {
  pd_ref<B> pd;
  typename B::srq srq{};
  srq_attr attr{};                // max_wr, max_sge as granted; limit as asked at creation
  srq_offset offset;  // grh_bytes while a UD queue pair takes receives from it
  srq_traffic traffic;  // whether a receive was ever posted: read by destroyed queue pairs

  srq_state(pd_ref<B> p, const srq_attr& asked) : pd(std::move(p)), attr(asked) {
    srq = B::create_srq(pd->pd, attr);
    // What the SRQ takes, not the write-back: rxe reports max_wr as asked and takes its
    // ring's 2^k - 1 receives, which the receive CQs must have room for (else a CQ
    // overflows and a completion is lost). query_srq reports the ring.
    try {
      const srq_attr held = B::query_srq(srq);
      if (held.max_wr > attr.max_wr) attr.max_wr = held.max_wr;
      if (held.max_sge > attr.max_sge) attr.max_sge = held.max_sge;
    } catch (...) {
      B::destroy_srq(srq);
      throw;
    }
  }
  srq_state(const srq_state&) = delete;
  srq_state& operator=(const srq_state&) = delete;
  ~srq_state() {
    if (srq != typename B::srq{}) B::destroy_srq(srq);
  }
};

}  // namespace detail

/// A shared receive queue (see the file comment). Move-only; an empty handle (default
/// or moved-from) throws usage_error from setup calls and returns empty_handle from posts.
template <class B>
class shared_receive_queue {
  static_assert(srq_backend<B>,
                "shared_receive_queue needs a backend with shared receive queues (the srq_backend "
                "concept: create_srq, post_srq_recv, arm_srq_limit, query_srq, create_qp_on_srq)");

 public:
  /// The verbs backend the SRQ was created on.
  using backend = B;

  /// An empty handle.
  shared_receive_queue() = default;
  /// Creates the SRQ in the PD. Prefer protection_domain::create_srq. Throws usage_error
  /// for a max_wr or max_sge of 0 or above the device's max_srq_wr / max_srq_sge, or a
  /// limit above max_wr; verbs_error when the device refuses.
  explicit shared_receive_queue(detail::pd_ref<B> pd, const srq_attr& attr) {
    check(pd->dev->attr, attr);
    st_ = detail::make_shared_owner<detail::srq_state<B>>(std::move(pd), attr);
  }
  /// Takes over the SRQ; queue pairs on it keep it alive anyway.
  shared_receive_queue(shared_receive_queue&&) noexcept = default;
  /// Releases this handle's share, then takes over `other`'s.
  shared_receive_queue& operator=(shared_receive_queue&&) noexcept = default;
  shared_receive_queue(const shared_receive_queue&) = delete;
  shared_receive_queue& operator=(const shared_receive_queue&) = delete;

  /// False for an empty handle.
  explicit operator bool() const noexcept { return st_ != nullptr; }
  /// The backend's SRQ (ibv_srq* on ibverbs), for calls rdmakit does not wrap.
  typename B::srq native() const noexcept { return st_ ? st_->srq : typename B::srq{}; }
  /// max_wr and max_sge as the device granted them (at least those asked for): max_wr is
  /// the receives the SRQ takes, as query_srq reports it (rxe: its ring's 2^k - 1).
  const srq_attr& caps() const { return state("caps").attr; }
  /// Whether the asynchronous event `ev` (device::next_event) is about this SRQ:
  /// SRQ_LIMIT_REACHED or SRQ_ERR.
  bool raised(const async_event& ev) const noexcept {
    return st_ && ev.object == static_cast<const void*>(st_->srq) &&
           (ev.type == async_event_type::srq_limit_reached || ev.type == async_event_type::srq_err);
  }

  /// Arms the low watermark: when a receive taken leaves fewer than `limit` posted, the
  /// device raises SRQ_LIMIT_REACHED once (device::next_event) and disarms it; arm it
  /// again after reposting. 0 disarms. Throws usage_error above max_wr, verbs_error when
  /// the device refuses. Reposting on the event, before the completions of the receives
  /// taken are polled, can put more than max_wr receive completions in the CQ on rxe and
  /// the mock, and overflow a CQ sized for max_wr (docs/ownership-and-threads.md): refill
  /// from the completions you poll, or give the CQ room for the receives you let wait.
  void arm_limit(std::uint32_t limit) {
    const auto& s = state("arm_limit");
    if (limit > s.attr.max_wr)
      throw usage_error(detail::cat("shared_receive_queue::arm_limit(): limit ", limit, " is above the SRQ's max_wr ",
                                    s.attr.max_wr,
                                    ": the event fires when fewer than `limit` receives are posted, so ask for at most "
                                    "max_wr"));
    if (int e = B::arm_srq_limit(s.srq, limit))
      throw verbs_error("ibv_modify_srq", e, detail::cat("arming the SRQ limit ", limit));
  }
  /// The limit armed now; 0 once the event fired (or when never armed).
  std::uint32_t limit() const { return B::query_srq(state("limit").srq).limit; }

  /// Posts one receive into `buf` (while a UD queue pair is on this SRQ: buf must also
  /// hold the 40-byte GRH first, else recv_too_small). rq_full when the SRQ holds max_wr
  /// receives.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post_recv(const local_buffer& buf, std::uint64_t wr_id) noexcept {
    typename B::sge s;
    B::set_sge(s, buf.addr, buf.length, buf.lkey);
    return post_(&s, 1, buf.length, wr_id);
  }
  /// Posts one receive scattered over `sgl`.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE post_result post_recv(std::span<const local_buffer> sgl,
                                                            std::uint64_t wr_id) noexcept {
    typename B::sge s[detail::max_stack_sge];
    const auto list = detail::fill_sges<B>(sgl, s);
    if (RDMAKIT_UNLIKELY(list.count < 0)) return detail::refused_list(list.broken);
    return post_(s, list.count, list.total, wr_id);
  }
  /// Posts one receive per buffer with wr_ids first_wr_id, first_wr_id + 1, ...; one
  /// doorbell per 32 receives. `posted` says how many went in.
  [[nodiscard]] post_result post_recvs(std::span<const local_buffer> bufs, std::uint64_t first_wr_id) noexcept {
    if (RDMAKIT_UNLIKELY(!st_)) return {post_status::empty_handle, 0, 0};
    if (RDMAKIT_UNLIKELY(detail::bad_recv_ids(first_wr_id, bufs.size()))) return {post_status::bad_wr_id, 0, 0};
    const std::uint32_t need = st_->offset.get();
    for (const auto& b : bufs)
      if (RDMAKIT_UNLIKELY(b.length < need)) return {post_status::recv_too_small, 0, 0};
    constexpr std::size_t chunk = 32;
    std::uint32_t done = 0;
    st_->traffic.note_post();
    while (done < bufs.size()) {
      typename B::sge s[chunk];
      typename B::recv_wr w[chunk];
      const std::size_t n = std::min(chunk, bufs.size() - done);
      for (std::size_t i = 0; i < n; ++i) {
        const auto& b = bufs[done + i];
        B::set_sge(s[i], b.addr, b.length, b.lkey);
        B::set_recv(w[i], (first_wr_id + done + i) | detail::recv_wr_bit, &s[i], 1);
        if (i) B::set_next(w[i - 1], &w[i]);
      }
      typename B::recv_wr* bad = nullptr;
      const int e = B::post_srq_recv(st_->srq, w, &bad);
      done += e ? (bad ? static_cast<std::uint32_t>(bad - w) : 0u) : static_cast<std::uint32_t>(n);
      if (e) return refused_(e, done, 1);
    }
    return {post_status::ok, 0, done};
  }

 private:
  friend struct detail::policy_access;

  static void check(const device_attr& dev, const srq_attr& a) {
    auto range = [](const char* field, std::uint32_t v, const char* limit, std::uint32_t max) {
      if (v == 0 || v > max)
        throw usage_error(detail::cat("create_srq(): ", field, " ", v, " is outside 1..", max, " (the device's ", limit,
                                      max == 0 ? "; the device has no shared receive queues)" : ")"));
    };
    range("max_wr", a.max_wr, "max_srq_wr", dev.max_srq_wr);
    range("max_sge", a.max_sge, "max_srq_sge", dev.max_srq_sge);
    if (a.max_sge > detail::max_stack_sge)  // a post hands the device at most 32
      throw usage_error(detail::cat("create_srq(): max_sge ", a.max_sge, " is above the ", detail::max_stack_sge,
                                    " SGEs rdmakit hands the device in one receive: ask for ",
                                    detail::max_stack_sge, " or fewer"));
    if (a.limit > a.max_wr)
      throw usage_error(detail::cat("create_srq(): limit ", a.limit, " is above max_wr ", a.max_wr,
                                    ": the event fires when fewer than `limit` receives are posted"));
  }

  const detail::srq_state<B>& state(const char* call) const {
    if (!st_) detail::throw_empty("shared_receive_queue", call);
    return *st_;
  }

  RDMAKIT_NOINLINE post_result refused_(int e, std::uint32_t posted, int n) const noexcept {
    if (e == ENOMEM) return {post_status::rq_full, 0, posted};
    return {post_status::backend_error, e, posted,
            e == EINVAL && static_cast<std::uint32_t>(n) > st_->attr.max_sge ? post_rule::sge_count
                                                                             : post_rule::unknown};
  }

  RDMAKIT_ALWAYS_INLINE post_result post_(typename B::sge* s, int n, std::uint32_t total,
                                          std::uint64_t wr_id) noexcept {
    if (RDMAKIT_UNLIKELY(!st_)) return {post_status::empty_handle, 0, 0};
    if (RDMAKIT_UNLIKELY(wr_id >= detail::recv_wr_id_end)) return {post_status::bad_wr_id, 0, 0};
    if (RDMAKIT_UNLIKELY(total < st_->offset.get())) return {post_status::recv_too_small, 0, 0};
    st_->traffic.note_post();
    typename B::recv_wr w;
    B::set_recv(w, wr_id | detail::recv_wr_bit, s, n);
    typename B::recv_wr* bad = nullptr;
    if (int e = B::post_srq_recv(st_->srq, &w, &bad); RDMAKIT_UNLIKELY(e != 0)) return refused_(e, 0, n);
    return {post_status::ok, 0, 1};
  }

  detail::shared_owner<detail::srq_state<B>> st_;
};

RDMAKIT_END_NAMESPACE
