#pragma once
/// A protection domain: RAII over B::pd, and the factory of everything that lives in
/// it: memory regions (typed access), registered pools, queue pairs, address handles.
#include <rdmakit/address_handle.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/detail/qp_setup.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/memory_window.hpp>
#include <rdmakit/qp_pool.hpp>
#include <rdmakit/queue_pair.hpp>
#include <rdmakit/shared_receive_queue.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE

/// A protection domain. It keeps its device open; regions, address handles and queue
/// pairs made from it keep it alive in turn.
template <verbs_backend B>
class protection_domain {
 public:
  protection_domain() = default;
  /// Allocates a PD on the device. Prefer device::create_pd.
  explicit protection_domain(detail::device_ref<B> dev) : st_(detail::make_shared_owner<const detail::pd_state<B>>(std::move(dev))) {}
  /// Takes over the PD; regions and queue pairs made from it keep it alive anyway.
  protection_domain(protection_domain&&) noexcept = default;
  /// Releases this handle's share, then takes over `other`'s; children keep the old PD alive.
  protection_domain& operator=(protection_domain&&) noexcept = default;
  protection_domain(const protection_domain&) = delete;
  protection_domain& operator=(const protection_domain&) = delete;

  /// False for an empty (default-constructed or moved-from) handle.
  explicit operator bool() const noexcept { return st_ != nullptr; }
  /// The backend's PD (ibv_pd* on ibverbs), for calls rdmakit does not wrap.
  typename B::pd native() const noexcept { return st_ ? st_->pd : typename B::pd{}; }

  /// Registers caller-owned memory with access rights A (part of the region's type).
  template <access A>
  memory_region<B, A> register_memory(void* addr, std::size_t length) const {
    return memory_region<B, A>(ref("register_memory"), addr, length);
  }
  /// Registers caller-owned `bytes` with access rights A (the same as the pointer form).
  template <access A>
  memory_region<B, A> register_memory(std::span<std::byte> bytes) const {
    return memory_region<B, A>(ref("register_memory"), bytes.data(), bytes.size());
  }
  /// Allocates `length` zeroed, page-aligned bytes and registers them with rights A.
  template <access A>
  memory_region<B, A> allocate(std::size_t length) const {
    return memory_region<B, A>::allocate(ref("allocate"), length);
  }
  /// One registration of slots × slot_size bytes, handed out as slices.
  template <access A>
  registered_pool<B, A> create_pool(std::size_t slot_size, std::size_t slots) const {
    return registered_pool<B, A>(ref("create_pool"), slot_size, slots);
  }

  /// An unbound memory window granting peers A (remote bits) once bound; type 2 unless
  /// asked (memory_window.hpp). Backends with memory windows only (mw_backend).
  template <access A, mw_type T = mw_type::type2>
  memory_window<B, A, T> alloc_window() const
    requires mw_backend<B>
  {
    return memory_window<B, A, T>(ref("alloc_window"));
  }

  /// A queue pair in INIT whose send and receive completions go to `cq`.
  template <transport T, signaling S = signal_all, polling P>
  queue_pair<B, T, S> create_qp(completion_queue<B, P>& cq, const qp_cap& caps, const qp_options& o = {}) const {
    return queue_pair<B, T, S>::create(ref("create_qp"), cq, cq, caps, o);
  }
  /// A queue pair in INIT with separate send and receive completion queues.
  template <transport T, signaling S = signal_all, polling PS, polling PR>
  queue_pair<B, T, S> create_qp(completion_queue<B, PS>& send_cq, completion_queue<B, PR>& recv_cq,
                                const qp_cap& caps, const qp_options& o = {}) const {
    return queue_pair<B, T, S>::create(ref("create_qp"), send_cq, recv_cq, caps, o);
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
    return queue_pair<B, T, S>::create(ref("create_qp"), cq, cq, qp_cap(caps), o);
  }
  /// A shared receive queue of attr.max_wr receives of attr.max_sge SGEs, its limit
  /// armed when attr.limit is not 0 (backends modelling srq_backend).
  template <class SB = B>
  shared_receive_queue<SB> create_srq(const srq_attr& attr) const {
    return shared_receive_queue<SB>(ref("create_srq"), attr);
  }
  /// A queue pair in INIT whose sends complete in `cq` and whose receives come from
  /// `srq` and complete in `cq` (transport `on_srq<T>`: it has no post_recv). caps.
  /// max_recv_wr must be 0.
  // (The SRQ's backend is deduced (SB), and constrained: overload resolution must not
  // instantiate shared_receive_queue for a backend without SRQs when it tries these with
  // the other create_qp overloads' arguments. Clang checks a parameter that deduces
  // nothing before the constraints (CWG 1391): `const shared_receive_queue<B>&` made it
  // complete the class, whose static_assert then failed every create_qp.)
  template <transport T, signaling S = signal_all, polling P, class SB>
    requires std::same_as<SB, B> && srq_backend<B>
  queue_pair<B, on_srq<T>, S> create_qp(completion_queue<B, P>& cq, const shared_receive_queue<SB>& srq,
                                        const qp_cap& caps, const qp_options& o = {}) const {
    return queue_pair<B, on_srq<T>, S>::create(ref("create_qp"), cq, cq, detail::policy_access::shared_block(srq),
                                               caps, o);
  }
  /// As above with separate send and receive completion queues.
  template <transport T, signaling S = signal_all, polling PS, polling PR, class SB>
    requires std::same_as<SB, B> && srq_backend<B>
  queue_pair<B, on_srq<T>, S> create_qp(completion_queue<B, PS>& send_cq, completion_queue<B, PR>& recv_cq,
                                        const shared_receive_queue<SB>& srq, const qp_cap& caps,
                                        const qp_options& o = {}) const {
    return queue_pair<B, on_srq<T>, S>::create(ref("create_qp"), send_cq, recv_cq,
                                               detail::policy_access::shared_block(srq), caps, o);
  }
  /// `count` queue pairs in INIT sharing `cq`.
  template <transport T, signaling S = signal_all, polling P>
  qp_pool<B, T, S> create_qp_pool(completion_queue<B, P>& cq, std::size_t count, const qp_cap& caps,
                                  const qp_options& o = {}) const {
    return qp_pool<B, T, S>::create(ref("create_qp_pool"), cq, count, caps, o);
  }

  /// An address handle from a raw address vector.
  address_handle<B> create_ah(const ah_attr& attr) const { return address_handle<B>(ref("create_ah"), attr); }
  /// An address handle reaching `peer` (GRH and source GID chosen as for queue pairs:
  /// automatic unless o.gid_index is set): `pd.create_ah(peer, {.port = 2})`.
  address_handle<B> create_ah(const endpoint& peer, const ah_options& o = {}) const {
    auto pd = ref("create_ah");
    const auto& dev = *pd->dev;
    const port_attr pa = dev.port(o.port);
    const int idx = o.gid_index ? *o.gid_index : detail::choose_gid<B>(dev.ctx, o.port);
    // The address vector holds the index in 8 bits: 256 would silently be slot 0, also
    // where the table is larger (rxe: 1024 entries).
    if (o.gid_index && idx > 255)
      throw usage_error(detail::cat("create_ah(): ah_options::gid_index = ", idx,
                                    " is above 255: an address vector's sgid_index has 8 bits (verbs cannot send "
                                    "from a GID past 255); use an index 0..255, or leave gid_index unset"));
    if (o.gid_index && (idx < 0 || static_cast<std::uint32_t>(idx) >= pa.gid_tbl_len ||
                        !B::query_gid(dev.ctx, o.port, idx).valid))
      throw usage_error(detail::cat("create_ah(): ah_options::gid_index = ", idx, " is not a valid slot of port ",
                                    static_cast<unsigned>(o.port), "'s GID table (", pa.gid_tbl_len,
                                    " entries): use an index whose device::gid(port, index) is valid, or leave "
                                    "gid_index unset to choose one automatically"));
    if (o.sl > 15)
      throw usage_error(detail::cat("create_ah(): ah_options::sl = ", static_cast<unsigned>(o.sl),
                                    " is not a service level: use 0..15 (a UD client's is its completion's sl())"));
    return address_handle<B>(std::move(pd), detail::make_av(peer, o.port, pa, idx, o.hop_limit, o.sl, false, dev.name));
  }

 private:
  friend struct detail::policy_access;
  detail::pd_ref<B> ref(const char* call) const {
    if (!st_) detail::throw_empty("protection_domain", call);
    return st_;
  }
  detail::pd_ref<B> st_;
};

// The factories that take template arguments, as free functions: in generic code (a
// template over B) `allocate<acc>(pd, n)` and `create_qp<rc>(pd, cq, caps)` need no
// `pd.template allocate<acc>(n)`. Found by ordinary lookup or by ADL on `pd`.

/// pd.allocate<A>(length).
template <access A, verbs_backend B>
memory_region<B, A> allocate(const protection_domain<B>& pd, std::size_t length) {
  return pd.template allocate<A>(length);
}
/// pd.register_memory<A>(bytes).
template <access A, verbs_backend B>
memory_region<B, A> register_memory(const protection_domain<B>& pd, std::span<std::byte> bytes) {
  return pd.template register_memory<A>(bytes);
}
/// pd.create_pool<A>(slot_size, slots).
template <access A, verbs_backend B>
registered_pool<B, A> create_pool(const protection_domain<B>& pd, std::size_t slot_size, std::size_t slots) {
  return pd.template create_pool<A>(slot_size, slots);
}
/// pd.alloc_window<A, T>().
template <access A, mw_type T = mw_type::type2, verbs_backend B>
  requires mw_backend<B>
memory_window<B, A, T> alloc_window(const protection_domain<B>& pd) {
  return pd.template alloc_window<A, T>();
}
/// pd.create_qp<T, S>(cq, caps, o).
template <transport T, signaling S = signal_all, verbs_backend B, polling P>
queue_pair<B, T, S> create_qp(const protection_domain<B>& pd, completion_queue<B, P>& cq, const qp_cap& caps,
                              const qp_options& o = {}) {
  return pd.template create_qp<T, S>(cq, caps, o);
}
/// pd.create_qp<T, S>(send_cq, recv_cq, caps, o).
template <transport T, signaling S = signal_all, verbs_backend B, polling PS, polling PR>
queue_pair<B, T, S> create_qp(const protection_domain<B>& pd, completion_queue<B, PS>& send_cq,
                              completion_queue<B, PR>& recv_cq, const qp_cap& caps, const qp_options& o = {}) {
  return pd.template create_qp<T, S>(send_cq, recv_cq, caps, o);
}
/// pd.create_srq(attr).
template <verbs_backend B>
  requires srq_backend<B>
shared_receive_queue<B> create_srq(const protection_domain<B>& pd, const srq_attr& attr) {
  return pd.template create_srq<B>(attr);
}
/// pd.create_qp<T, S>(cq, srq, caps, o).
template <transport T, signaling S = signal_all, verbs_backend B, polling P>
  requires srq_backend<B>
queue_pair<B, on_srq<T>, S> create_qp(const protection_domain<B>& pd, completion_queue<B, P>& cq,
                                      const shared_receive_queue<B>& srq, const qp_cap& caps,
                                      const qp_options& o = {}) {
  return pd.template create_qp<T, S>(cq, srq, caps, o);
}
/// pd.create_qp_pool<T, S>(cq, count, caps, o).
template <transport T, signaling S = signal_all, verbs_backend B, polling P>
qp_pool<B, T, S> create_qp_pool(const protection_domain<B>& pd, completion_queue<B, P>& cq, std::size_t count,
                                const qp_cap& caps, const qp_options& o = {}) {
  return pd.template create_qp_pool<T, S>(cq, count, caps, o);
}

RDMAKIT_END_NAMESPACE
