#pragma once
// The scatter/gather list a WQE keeps: one entry (the common case) in place, more in a
// vector, so a WQE of one SGE touches no memory of its own beyond its slot.
#include <rdmakit/types.hpp>

#include <cstddef>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

class sge_list {
 public:
  /// Copies `n` entries from `p` (a reused list keeps its vector's capacity).
  void assign(const sge* p, std::size_t n) {
    n_ = n;
    if (n == 1)
      one_ = *p;
    else if (n > 1)
      more_.assign(p, p + n);
  }
  const sge* data() const noexcept { return n_ == 1 ? &one_ : more_.data(); }
  const sge* begin() const noexcept { return data(); }
  const sge* end() const noexcept { return data() + n_; }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  const sge& operator[](std::size_t i) const noexcept { return data()[i]; }

 private:
  std::size_t n_ = 0;
  sge one_{};
  std::vector<sge> more_;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
