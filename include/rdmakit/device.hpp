#pragma once
/// An open RDMA device: RAII over B::context, port and GID queries, and the factory of
/// protection domains and completion queues. Everything made from it keeps the device
/// open (detail/device_state.hpp), so handles may be destroyed in any order.
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/protection_domain.hpp>

#include <cerrno>
#include <concepts>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
/// Throws verbs_error(ENODEV) when `all` (the backend's device names) is empty or lacks
/// `name` (empty: any device). Not a template: one copy whatever the backends.
void check_device_name(const std::vector<std::string>& all, std::string_view name, std::string_view backend);
template <class B>
class device_events_core;
}  // namespace detail

/// An open device.
template <verbs_backend B>
class device {
 public:
  /// Names of the devices the backend sees (the mock: those of its default fabric).
  static std::vector<std::string> names() { return B::device_names(); }
  /// Names of the devices of a backend-specific source (the mock: a fabric).
  template <class Source>
    requires requires(Source& src) {
      { B::device_names(src) } -> std::same_as<std::vector<std::string>>;
    }
  static std::vector<std::string> names(Source& src) {
    return B::device_names(src);
  }

  device() = default;
  /// Opens a device by name; an empty name opens the first one. The mock opens it from
  /// its process default fabric (rdmakit::mock::default_fabric()), never from another.
  explicit device(std::string_view name) { open_(B::device_names(), [&] { return B::open_device(name); }, name); }

  /// Opens a device by name from a backend-specific source, passed explicitly (the
  /// mock: `device<backends::mock> dev(fab, "mock0")` opens from the fabric `fab`).
  template <class Source>
    requires requires(Source& src, std::string_view n) {
      { B::open_device(src, n) } -> std::same_as<typename B::context>;
      { B::device_names(src) } -> std::same_as<std::vector<std::string>>;
    }
  device(Source& src, std::string_view name) {
    open_(B::device_names(src), [&] { return B::open_device(src, name); }, name);
  }
  /// Takes over the device; children made from it keep it open anyway.
  device(device&&) noexcept = default;
  /// Releases this handle's share, then takes over `other`'s; children keep the old device open.
  device& operator=(device&&) noexcept = default;
  device(const device&) = delete;
  device& operator=(const device&) = delete;

 private:
  template <class Open>
  void open_(const std::vector<std::string>& all, Open&& open, std::string_view name) {
    detail::check_device_name(all, name, B::name);
    auto st = detail::make_shared_owner<detail::device_state<B>>();
    st->ctx = open();  // closed by ~device_state if a query below throws
    st->name = B::device_name(st->ctx);
    st->attr = B::query_device(st->ctx);
    st->windows.open(detail::device_identity<B>(st->ctx));
    // A context another device object has open: its state, shared (st gives its borrow
    // of the context back).
    if constexpr (detail::shares_contexts<B>)
      st_ = detail::open_devices<B>::share_or_add(std::move(st));
    else
      st_ = std::move(st);
  }

 public:
  /// False for an empty (default-constructed or moved-from) handle.
  explicit operator bool() const noexcept { return st_ != nullptr; }
  /// The device's name (e.g. "mlx5_0", "rxe0", "mock0"); throws usage_error on an empty handle.
  const std::string& name() const { return state("name").name; }
  /// The device's capabilities as queried when it was opened; throws usage_error on an empty handle.
  const device_attr& attr() const { return state("attr").attr; }
  /// The backend's context (ibv_context* on ibverbs), for calls rdmakit does not wrap.
  typename B::context native() const noexcept { return st_ ? st_->ctx : typename B::context{}; }

  /// Current attributes of port `n` (1-based).
  port_attr port(std::uint8_t n = 1) const { return state("port").port(n); }
  /// GID table entry `index` of port `n`.
  gid_entry gid(std::uint8_t n, int index) const { return B::query_gid(state("gid").ctx, n, index); }
  /// The valid GID entries of port `n`.
  std::vector<gid_entry> gids(std::uint8_t n = 1) const {
    auto pa = state("gids").port(n);
    std::vector<gid_entry> v;
    for (std::uint32_t i = 0; i < pa.gid_tbl_len; ++i) {
      auto e = B::query_gid(st_->ctx, n, static_cast<int>(i));
      if (e.valid && !e.value.is_zero()) v.push_back(e);
    }
    return v;
  }
  /// The GID index rdmakit uses on port `n` when none is given (RoCEv2 IPv4-mapped first).
  int default_gid_index(std::uint8_t n = 1) const {
    return detail::choose_gid<B>(state("default_gid_index").ctx, n);
  }

  /// The next asynchronous event of this device (port up/down, a QP that hit a fatal or
  /// access error, a CQ that overflowed, ...), waiting up to `timeout` (not at all for 0
  /// or less); nullopt when none came. The backend acknowledges it. Use `event.qp_num`
  /// (or `event.object` against a handle's native()) to find the object concerned. Throws verbs_error
  /// when the device's event queue fails, usage_error while a device_events awaits this
  /// device's events (each event goes to one reader; a device_events made while this
  /// call waits, on another thread, is refused likewise).
  std::optional<async_event> next_event(detail::ms_timeout timeout = std::chrono::milliseconds{0}) const {
    async_event ev;
    const auto& st = state("next_event");
    // Counted as a reader while it waits, so a device_events made meanwhile (on another
    // thread) is refused instead of losing events to this call.
    if (RDMAKIT_UNLIKELY(!st.begin_next_event()))
      throw usage_error(detail::cat("device::next_event(): a device_events awaits the asynchronous events of ", st.name,
                                    " on an event loop: co_await its next() there (each event goes to one reader)"));
    struct reading {
      const detail::device_state<B>& st;
      ~reading() { st.end_next_event(); }
    } const guard{st};
    // A negative timeout looks once (a deadline already past), as every wait here: the
    // backends take it as no limit.
    const auto wait = timeout.count() < 0 ? std::chrono::milliseconds{0} : std::chrono::milliseconds(timeout);
    const int e = B::get_async_event(st.ctx, wait, ev);
    if (e == 0) return ev;
    if (e == ETIMEDOUT || e == EAGAIN) return std::nullopt;
    throw verbs_error("ibv_get_async_event", e, detail::cat("reading the asynchronous events of ", st_->name));
  }

  /// A new protection domain (it keeps this device open).
  protection_domain<B> create_pd() const {
    state("create_pd");
    return protection_domain<B>(st_);
  }
  /// A completion queue of at least `entries` entries, polled with policy P (it keeps
  /// this device open).
  template <polling P = busy_poll<>>
  completion_queue<B, P> create_cq(int entries, int comp_vector = 0) const {
    state("create_cq");
    return completion_queue<B, P>(st_, entries, comp_vector);
  }

 private:
  friend class detail::device_events_core<B>;  // keeps the device open while it waits on it
  friend struct detail::policy_access;         // the connection manager keeps it open too

  const detail::device_state<B>& state(const char* call) const {
    if (!st_) detail::throw_empty("device", call);
    return *st_;
  }
  detail::shared_owner<const detail::device_state<B>> st_;
};

RDMAKIT_END_NAMESPACE

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/device_impl.hpp>
#endif
