#pragma once
/// A protection domain: RAII over B::pd, and the factory of everything that lives in
/// it: memory regions (typed access), registered pools, queue pairs, address handles.
#include <rdmakit/address_handle.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/qp_pool.hpp>
#include <rdmakit/queue_pair.hpp>

#include <span>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

/// A protection domain; its device must outlive it.
template <verbs_backend B>
class protection_domain {
 public:
  protection_domain() = default;
  /// Allocates a PD on the device. Prefer device::create_pd.
  explicit protection_domain(const detail::device_state<B>& dev) : dev_(&dev), pd_(B::alloc_pd(dev.ctx)) {}
  protection_domain(protection_domain&& o) noexcept : dev_(o.dev_), pd_(std::exchange(o.pd_, {})) {}
  protection_domain& operator=(protection_domain&& o) noexcept {
    if (this != &o) {
      release();
      dev_ = o.dev_;
      pd_ = std::exchange(o.pd_, {});
    }
    return *this;
  }
  ~protection_domain() { release(); }

  explicit operator bool() const noexcept { return pd_ != typename B::pd{}; }
  typename B::pd native() const noexcept { return pd_; }

  /// Registers caller-owned memory with access rights A (part of the region's type).
  template <access A>
  memory_region<B, A> register_memory(void* addr, std::size_t length) const {
    return memory_region<B, A>(pd_, addr, length);
  }
  template <access A>
  memory_region<B, A> register_memory(std::span<std::byte> bytes) const {
    return memory_region<B, A>(pd_, bytes.data(), bytes.size());
  }
  /// Allocates `length` zeroed, page-aligned bytes and registers them with rights A.
  template <access A>
  memory_region<B, A> allocate(std::size_t length) const {
    return memory_region<B, A>::allocate(pd_, length);
  }
  /// One registration of slots × slot_size bytes, handed out as slices.
  template <access A>
  registered_pool<B, A> create_pool(std::size_t slot_size, std::size_t slots) const {
    return registered_pool<B, A>(pd_, slot_size, slots);
  }

  /// A queue pair in INIT whose send and receive completions go to `cq`.
  template <transport T, signaling S = signal_all, polling P>
  queue_pair<B, T, S> create_qp(completion_queue<B, P>& cq, const qp_cap& caps, const qp_options& o = {}) const {
    return queue_pair<B, T, S>::create(pd_, *dev_, cq, cq, caps, o);
  }
  /// A queue pair in INIT with separate send and receive completion queues.
  template <transport T, signaling S = signal_all, polling PS, polling PR>
  queue_pair<B, T, S> create_qp(completion_queue<B, PS>& send_cq, completion_queue<B, PR>& recv_cq,
                                const qp_cap& caps, const qp_options& o = {}) const {
    return queue_pair<B, T, S>::create(pd_, *dev_, send_cq, recv_cq, caps, o);
  }
  /// As above with capacities known at compile time: a signal_every<N> with N above
  /// max_send_wr does not compile.
  template <transport T, signaling S = signal_all, polling P, std::uint32_t SW, std::uint32_t RW,
            std::uint32_t SS, std::uint32_t RS, std::uint32_t IL>
  queue_pair<B, T, S> create_qp(completion_queue<B, P>& cq, static_caps<SW, RW, SS, RS, IL> caps,
                                const qp_options& o = {}) const {
    static_assert(S::min_sq_depth <= SW,
                  "signal_every<N> with N larger than the send queue depth: every N-th WR is "
                  "signaled, so the send queue must hold at least N WRs; raise max_send_wr or lower N");
    return queue_pair<B, T, S>::create(pd_, *dev_, cq, cq, qp_cap(caps), o);
  }
  /// `count` queue pairs in INIT sharing `cq`.
  template <transport T, signaling S = signal_all, polling P>
  qp_pool<B, T, S> create_qp_pool(completion_queue<B, P>& cq, std::size_t count, const qp_cap& caps,
                                  const qp_options& o = {}) const {
    return qp_pool<B, T, S>::create(pd_, *dev_, cq, count, caps, o);
  }

  /// An address handle from a raw address vector.
  address_handle<B> create_ah(const ah_attr& attr) const { return address_handle<B>(pd_, attr); }
  /// An address handle reaching `peer` from `port` (GRH and source GID chosen as for
  /// queue pairs: automatic unless gid_index >= 0).
  address_handle<B> create_ah(const endpoint& peer, std::uint8_t port = 1, int gid_index = -1,
                              std::uint8_t hop_limit = 64) const {
    port_attr pa = dev_->port(port);
    int idx = gid_index >= 0 ? gid_index : detail::choose_gid<B>(dev_->ctx, port);
    return address_handle<B>(pd_, detail::make_av(peer, port, pa, idx, hop_limit, 0, false, dev_->name));
  }

 private:
  void release() noexcept {
    if (pd_ != typename B::pd{}) B::dealloc_pd(pd_);
    pd_ = {};
  }
  const detail::device_state<B>* dev_ = nullptr;
  typename B::pd pd_{};
};

RDMAKIT_END_NAMESPACE
