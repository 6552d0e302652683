#pragma once
/// An open RDMA device: RAII over B::context, port and GID queries, and the factory of
/// protection domains and completion queues. It must outlive everything made from it.
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/detail/device_state.hpp>
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/protection_domain.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

/// An open device.
template <verbs_backend B>
class device {
 public:
  /// Names of the devices the backend sees.
  static std::vector<std::string> names() { return B::device_names(); }

  device() = default;
  /// Opens a device by name; an empty name opens the first one.
  explicit device(std::string_view name) : st_(std::make_unique<detail::device_state<B>>()) {
    auto all = B::device_names();
    if (all.empty())
      throw verbs_error("ibv_open_device", ENODEV,
                        std::string("no RDMA device found by the ") + std::string(B::name) +
                            " backend: load a driver (e.g. `rdma link add rxe0 type rxe netdev eth0`) "
                            "or test with the mock backend");
    if (!name.empty()) {
      bool found = false;
      for (const auto& n : all) found = found || n == name;
      if (!found) {
        std::string list;
        for (const auto& n : all) list += (list.empty() ? "" : ", ") + n;
        throw verbs_error("ibv_open_device", ENODEV,
                          "no device named \"" + std::string(name) + "\"; available: " + list);
      }
    }
    st_->ctx = B::open_device(name);
    try {
      st_->name = B::device_name(st_->ctx);
      st_->attr = B::query_device(st_->ctx);
    } catch (...) {
      B::close_device(st_->ctx);
      throw;
    }
  }
  device(device&&) noexcept = default;
  device& operator=(device&& o) noexcept {
    if (this != &o) {
      release();
      st_ = std::move(o.st_);
    }
    return *this;
  }
  ~device() { release(); }

  explicit operator bool() const noexcept { return st_ != nullptr; }
  const std::string& name() const noexcept { return st_->name; }
  const device_attr& attr() const noexcept { return st_->attr; }
  typename B::context native() const noexcept { return st_->ctx; }

  /// Current attributes of port `n` (1-based).
  port_attr port(std::uint8_t n = 1) const { return st_->port(n); }
  /// GID table entry `index` of port `n`.
  gid_entry gid(std::uint8_t n, int index) const { return B::query_gid(st_->ctx, n, index); }
  /// The valid GID entries of port `n`.
  std::vector<gid_entry> gids(std::uint8_t n = 1) const {
    auto pa = port(n);
    std::vector<gid_entry> v;
    for (std::uint32_t i = 0; i < pa.gid_tbl_len; ++i) {
      auto e = B::query_gid(st_->ctx, n, static_cast<int>(i));
      if (e.valid && !e.value.is_zero()) v.push_back(e);
    }
    return v;
  }
  /// The GID index rdmakit uses on port `n` when none is given (RoCEv2 IPv4-mapped first).
  int default_gid_index(std::uint8_t n = 1) const {
    return detail::choose_gid<B>(st_->ctx, n);
  }

  /// A new protection domain.
  protection_domain<B> create_pd() const { return protection_domain<B>(*st_); }
  /// A completion queue of at least `entries` entries, polled with policy P.
  template <polling P = busy_poll<>>
  completion_queue<B, P> create_cq(int entries, int comp_vector = 0) const {
    return completion_queue<B, P>(st_->ctx, entries, comp_vector);
  }

 private:
  void release() noexcept {
    if (st_ && st_->ctx != typename B::context{}) B::close_device(st_->ctx);
    st_.reset();
  }
  std::unique_ptr<detail::device_state<B>> st_;
};

RDMAKIT_END_NAMESPACE
