#pragma once
// A scatter/gather list as a post hands it to the device: its SGEs and its length, or
// the rule it breaks. Internal to queue_pair.hpp and shared_receive_queue.hpp.
#include <rdmakit/backend.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/post_result.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t max_stack_sge = 32;  // rxe's limit; SGLs above are EINVAL anyway

// The largest message a WR carries (IBA: a port's max_msg_sz is at most 2^31). Longer
// lists are refused here: providers add the lengths in 32 bits (rdma-core 44's rxe), so
// 2 GiB + 2 GiB + 16 B would reach them, and auto-inline, as a 16-byte message.
inline constexpr std::uint64_t max_message_bytes = std::uint64_t{1} << 31;

// A list's total fits 32 bits when `count` is not negative; else `broken` says why.
struct sgl_facts {
  int count;
  std::uint32_t total;
  post_rule broken;
};

template <class B>
RDMAKIT_ALWAYS_INLINE sgl_facts fill_sges(std::span<const local_buffer> sgl, typename B::sge* s) noexcept {
  if (RDMAKIT_UNLIKELY(sgl.size() > max_stack_sge)) return {-1, 0, post_rule::sge_count};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < sgl.size(); ++i) {
    B::set_sge(s[i], sgl[i].addr, sgl[i].length, sgl[i].lkey);
    total += sgl[i].length;
  }
  if (RDMAKIT_UNLIKELY(total > max_message_bytes)) return {-1, 0, post_rule::message_size};
  return {static_cast<int>(sgl.size()), static_cast<std::uint32_t>(total), post_rule::unknown};
}

// What a post returns for a list fill_sges refused.
constexpr post_result refused_list(post_rule broken) noexcept {
  return {post_status::backend_error, EINVAL, 0, broken};
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
