#pragma once
// Live objects of one kind by number (fabric_state's QPs by QP number, MRs by key,
// windows by index), with the members of std::unordered_map<std::uint32_t, T*> the mock
// uses. Every kind shares one std::unordered_map<std::uint32_t, void*>: a map per kind
// made each translation unit that includes the mock instantiate the hash table again
// for each kind (issue 12).
#include <rdmakit/config.hpp>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

template <class T>
class object_map {
  using map = std::unordered_map<std::uint32_t, void*>;

 public:
  struct entry {
    std::uint32_t first = 0;
    T* second = nullptr;
  };
  class iterator {
   public:
    explicit iterator(map::const_iterator it) : it_(it) {}
    const entry& operator*() const {
      e_ = {it_->first, static_cast<T*>(it_->second)};
      return e_;
    }
    const entry* operator->() const { return &**this; }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator& o) const { return it_ == o.it_; }

   private:
    map::const_iterator it_;
    mutable entry e_;
  };
  /// What `m[key] = p` assigns through.
  class slot {
   public:
    explicit slot(void*& s) : s_(s) {}
    void operator=(T* p) { s_ = p; }

   private:
    void*& s_;
  };

  iterator find(std::uint32_t key) const { return iterator(m_.find(key)); }
  std::size_t count(std::uint32_t key) const { return m_.count(key); }
  slot operator[](std::uint32_t key) { return slot(m_[key]); }
  std::size_t erase(std::uint32_t key) { return m_.erase(key); }
  iterator begin() const { return iterator(m_.begin()); }
  iterator end() const { return iterator(m_.end()); }

 private:
  map m_;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
