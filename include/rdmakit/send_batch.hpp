#pragma once
/// Post lists: `auto batch = qp.make_batch<32>(); batch.add(op::write{src, dst}, id);
/// qp.post(batch);` posts every WR with one doorbell. The same operation values as
/// queue_pair::post, checked against the transport at compile time.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/qp_parts.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE

template <verbs_backend B, transport T, signaling S, qp_state State>
class queue_pair;
template <verbs_backend B, transport T, std::size_t Max, std::size_t SgePerWr = 1>
class send_batch;

/// A post list: several WRs posted with one doorbell by queue_pair::post. The
/// operations check the transport at compile time like the queue pair's own.
template <verbs_backend B, transport T, std::size_t Max, std::size_t SgePerWr>
class send_batch {
  static_assert(Max >= 1 && SgePerWr >= 1, "send_batch needs Max >= 1 and SgePerWr >= 1");

 public:
  /// An empty list (its storage is left uninitialized until WRs are added).
  send_batch() noexcept {}
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  bool full() const noexcept { return n_ == Max; }
  void clear() noexcept { n_ = nsge_ = 0; }

  /// Adds one operation (rdmakit/operations.hpp), the same value queue_pair::post
  /// takes; false when the batch is full. Checked against the transport at compile time.
  template <operation Op>
  bool add(const Op& o, std::uint64_t wr_id, send_flags flags = send_flags::none) noexcept {
    Op::rule::template check<T>();
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.local)>, local_buffer>)
      return add_(Op::code, {&o.local, 1}, wr_id, flags, o);
    else
      return add_(Op::code, o.local, wr_id, flags, o);
  }

  // The same operations spelled as functions, like queue_pair's.
  bool send(const local_buffer& buf, std::uint64_t wr_id, send_flags flags = send_flags::none) noexcept {
    return add(op::send<>{buf}, wr_id, flags);
  }
  /// A SEND gathered from `sgl` (at most SgePerWr entries on average).
  bool send(std::span<const local_buffer> sgl, std::uint64_t wr_id, send_flags flags = send_flags::none) noexcept {
    return add(op::send{sgl}, wr_id, flags);
  }
  bool send_imm(const local_buffer& buf, std::uint32_t imm, std::uint64_t wr_id,
                send_flags flags = send_flags::none) noexcept {
    return add(op::send_imm<>{buf, imm}, wr_id, flags);
  }
  bool send(const ud_address<B>& to, const local_buffer& buf, std::uint64_t wr_id,
            send_flags flags = send_flags::none) noexcept {
    return add(op::ud_send<B>{buf, to}, wr_id, flags);
  }
  bool send_imm(const ud_address<B>& to, const local_buffer& buf, std::uint32_t imm, std::uint64_t wr_id,
                send_flags flags = send_flags::none) noexcept {
    return add(op::ud_send_imm<B>{buf, to, imm}, wr_id, flags);
  }
  template <access A>
  bool write(const local_buffer& src, const remote_region<A>& dst, std::uint64_t wr_id,
             send_flags flags = send_flags::none) noexcept {
    return add(op::write<A>{src, dst}, wr_id, flags);
  }
  template <access A>
  bool write(std::span<const local_buffer> sgl, const remote_region<A>& dst, std::uint64_t wr_id,
             send_flags flags = send_flags::none) noexcept {
    return add(op::write{sgl, dst}, wr_id, flags);
  }
  template <access A>
  bool write_imm(const local_buffer& src, const remote_region<A>& dst, std::uint32_t imm, std::uint64_t wr_id,
                 send_flags flags = send_flags::none) noexcept {
    return add(op::write_imm<A>{src, dst, imm}, wr_id, flags);
  }
  template <access A>
  bool read(const local_buffer& dst, const remote_region<A>& src, std::uint64_t wr_id,
            send_flags flags = send_flags::none) noexcept {
    return add(op::read<A>{dst, src}, wr_id, flags);
  }
  template <access A>
  bool read(std::span<const local_buffer> sgl, const remote_region<A>& src, std::uint64_t wr_id,
            send_flags flags = send_flags::none) noexcept {
    return add(op::read{sgl, src}, wr_id, flags);
  }
  template <access A>
  bool compare_swap(const local_buffer& result, const remote_region<A>& target, std::uint64_t compare,
                    std::uint64_t swap, std::uint64_t wr_id, send_flags flags = send_flags::none) noexcept {
    return add(op::compare_swap<A>{result, target, compare, swap}, wr_id, flags);
  }
  template <access A>
  bool fetch_add(const local_buffer& result, const remote_region<A>& target, std::uint64_t add_value,
                 std::uint64_t wr_id, send_flags flags = send_flags::none) noexcept {
    return add(op::fetch_add<A>{result, target, add_value}, wr_id, flags);
  }

 private:
  template <verbs_backend, transport, signaling, qp_state>
  friend class queue_pair;

  // After a partial post: forget the first k WRs (their SGEs stay until clear()).
  void drop_front_(std::size_t k) noexcept {
    for (std::size_t i = k; i < n_; ++i) {
      wrs_[i - k] = wrs_[i];
      entries_[i - k] = entries_[i];
    }
    n_ -= k;
  }

  template <class Op>
  bool add_(opcode op, std::span<const local_buffer> sgl, std::uint64_t wr_id, send_flags flags,
            const Op& o) noexcept {
    if (n_ == Max || nsge_ + sgl.size() > Max * SgePerWr) return false;
    detail::send_desc<B> d{};
    d.wr_id = wr_id;
    d.op = op;
    d.flags = flags;
    d.num_sge = static_cast<int>(sgl.size());
    d.total = 0;
    const auto first = static_cast<std::uint32_t>(nsge_);
    for (const auto& b : sgl) {
      B::set_sge(sges_[nsge_++], b.addr, b.length, b.lkey);
      d.total += b.length;
    }
    o.fill(d);
    detail::set_op_fields<B, T>(wrs_[n_], d);  // the rest is set at post time
    entries_[n_] = {wr_id, op, flags, d.num_sge, d.total, first};
    ++n_;
    return true;
  }

  detail::uninit_array<typename B::send_wr, Max> wrs_;
  std::array<detail::batch_entry, Max> entries_;
  detail::uninit_array<typename B::sge, Max * SgePerWr> sges_;
  std::size_t n_ = 0;
  std::size_t nsge_ = 0;
};


RDMAKIT_END_NAMESPACE
