#pragma once
// The operations of operations.hpp spelled as member functions, written once for the
// queue pair (which posts them) and the post list (which adds them): the two cannot
// drift. Argument order everywhere: local side, remote side, operands, wr_id, flags
// (UD sends name their destination first). Derived supplies submit_(op, wr_id, flags).
#include <rdmakit/address_handle.hpp>
#include <rdmakit/config.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/types.hpp>

#include <cstdint>
#include <span>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class Derived, class B>
class operation_calls {
 public:
  /// SEND `buf` to the connected peer.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) send(const local_buffer& buf, std::uint64_t wr_id,
                                                          send_flags flags = send_flags::none) noexcept {
    return submit(op::send<>{buf}, wr_id, flags);
  }
  /// SEND gathered from `sgl`.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) send(std::span<const local_buffer> sgl, std::uint64_t wr_id,
                                                          send_flags flags = send_flags::none) noexcept {
    return submit(op::send{sgl}, wr_id, flags);
  }
  /// SEND with 32-bit immediate data (host order; the receiver's completion has it).
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) send_imm(const local_buffer& buf, std::uint32_t imm,
                                                              std::uint64_t wr_id,
                                                              send_flags flags = send_flags::none) noexcept {
    return submit(op::send_imm<>{buf, imm}, wr_id, flags);
  }
  /// UD: SEND `buf` to `to` (an address handle, remote QPN and Q_Key).
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) send(const ud_address<B>& to, const local_buffer& buf,
                                                          std::uint64_t wr_id,
                                                          send_flags flags = send_flags::none) noexcept {
    return submit(op::ud_send<B>{buf, to}, wr_id, flags);
  }
  /// UD: SEND with immediate data to `to`.
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) send_imm(const ud_address<B>& to, const local_buffer& buf,
                                                              std::uint32_t imm, std::uint64_t wr_id,
                                                              send_flags flags = send_flags::none) noexcept {
    return submit(op::ud_send_imm<B>{buf, to, imm}, wr_id, flags);
  }
  /// RDMA WRITE `src` to `dst` (RC, UC).
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) write(const local_buffer& src, const remote_region<A>& dst,
                                                           std::uint64_t wr_id,
                                                           send_flags flags = send_flags::none) noexcept {
    return submit(op::write<A>{src, dst}, wr_id, flags);
  }
  /// RDMA WRITE gathered from `sgl`.
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) write(std::span<const local_buffer> sgl,
                                                           const remote_region<A>& dst, std::uint64_t wr_id,
                                                           send_flags flags = send_flags::none) noexcept {
    return submit(op::write{sgl, dst}, wr_id, flags);
  }
  /// RDMA WRITE with immediate data: also consumes a receive at the peer.
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) write_imm(const local_buffer& src, const remote_region<A>& dst,
                                                               std::uint32_t imm, std::uint64_t wr_id,
                                                               send_flags flags = send_flags::none) noexcept {
    return submit(op::write_imm<A>{src, dst, imm}, wr_id, flags);
  }
  /// RDMA READ from `src` into `dst` (RC only; dst needs LOCAL_WRITE).
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) read(const local_buffer& dst, const remote_region<A>& src,
                                                          std::uint64_t wr_id,
                                                          send_flags flags = send_flags::none) noexcept {
    return submit(op::read<A>{dst, src}, wr_id, flags);
  }
  /// RDMA READ scattered into `sgl`.
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) read(std::span<const local_buffer> sgl,
                                                          const remote_region<A>& src, std::uint64_t wr_id,
                                                          send_flags flags = send_flags::none) noexcept {
    return submit(op::read{sgl, src}, wr_id, flags);
  }
  /// 64-bit compare-and-swap at `target` (8 bytes, 8-aligned); the old value lands in
  /// `result` (8 bytes, LOCAL_WRITE). RC only.
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) compare_swap(const local_buffer& result,
                                                                  const remote_region<A>& target,
                                                                  std::uint64_t compare, std::uint64_t swap,
                                                                  std::uint64_t wr_id,
                                                                  send_flags flags = send_flags::none) noexcept {
    return submit(op::compare_swap<A>{result, target, compare, swap}, wr_id, flags);
  }
  /// 64-bit fetch-and-add at `target`; the old value lands in `result`. RC only.
  template <access A>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE decltype(auto) fetch_add(const local_buffer& result,
                                                               const remote_region<A>& target, std::uint64_t add,
                                                               std::uint64_t wr_id,
                                                               send_flags flags = send_flags::none) noexcept {
    return submit(op::fetch_add<A>{result, target, add}, wr_id, flags);
  }

 private:
  template <class Op>
  RDMAKIT_ALWAYS_INLINE decltype(auto) submit(const Op& o, std::uint64_t wr_id, send_flags flags) noexcept {
    return static_cast<Derived&>(*this).submit_(o, wr_id, flags);
  }
};

}  // namespace detail
RDMAKIT_END_NAMESPACE
