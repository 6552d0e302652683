#pragma once
// The set of live objects of one kind (fabric_state's contexts, pds, cqs, ...), in
// address order. A sorted vector of void* shared by every kind: a std::set<T*> per kind
// made each translation unit that includes the mock instantiate the red-black tree again
// for each of the eight kinds (about 3 MB of GCC's allocations each), and one std::set
// still brought <set> and its tree (issue 12). The sets hold tens of objects; an insert
// or erase moves the pointers after it.
#include <rdmakit/config.hpp>
#include <rdmakit/detail/algorithm.hpp>

#include <cstddef>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

template <class T>
class object_set {
  using vec = std::vector<void*>;

 public:
  class iterator {
   public:
    explicit iterator(vec::const_iterator it) : it_(it) {}
    T* operator*() const { return static_cast<T*>(*it_); }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator&) const = default;

   private:
    vec::const_iterator it_;
  };

  void insert(T* p) {
    auto it = std::lower_bound(v_.begin(), v_.end(), static_cast<void*>(p));
    if (it == v_.end() || *it != p) v_.insert(it, p);
  }
  std::size_t erase(T* p) {
    auto it = std::lower_bound(v_.begin(), v_.end(), static_cast<void*>(p));
    if (it == v_.end() || *it != p) return 0;
    v_.erase(it);
    return 1;
  }
  std::size_t count(T* p) const { return std::binary_search(v_.begin(), v_.end(), static_cast<void*>(p)) ? 1 : 0; }
  iterator begin() const { return iterator(v_.begin()); }
  iterator end() const { return iterator(v_.end()); }

 private:
  vec v_;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
