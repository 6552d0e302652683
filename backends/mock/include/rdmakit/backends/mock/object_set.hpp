#pragma once
// The set of live objects of one kind (fabric_state's contexts, pds, cqs, ...), in
// address order like std::set<T*>. Every kind shares one std::set<void*>: a
// std::set<T*> per kind made each translation unit that includes the mock instantiate
// the red-black tree again for each of the eight kinds (about 3 MB of GCC's allocations
// each, issue 12).
#include <rdmakit/config.hpp>

#include <cstddef>
#include <set>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

template <class T>
class object_set {
  using set = std::set<void*>;

 public:
  class iterator {
   public:
    explicit iterator(set::const_iterator it) : it_(it) {}
    T* operator*() const { return static_cast<T*>(*it_); }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator&) const = default;

   private:
    set::const_iterator it_;
  };

  void insert(T* p) { s_.insert(p); }
  std::size_t erase(T* p) { return s_.erase(p); }
  std::size_t count(T* p) const { return s_.count(p); }
  iterator begin() const { return iterator(s_.begin()); }
  iterator end() const { return iterator(s_.end()); }

 private:
  set s_;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
