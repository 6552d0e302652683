#pragma once
// Room made ahead, where it can fail, for what a noexcept path adds later without
// allocating (a destroy queuing its last record).
#include <rdmakit/config.hpp>
#include <rdmakit/detail/algorithm.hpp>

#include <cstddef>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// Makes `v`'s capacity at least `n`, doubling it at the least: reserve(n) alone, called
/// each time the count grows by one, would copy the elements every time.
template <class Vector>
void reserve_room(Vector& v, std::size_t n) {
  if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
