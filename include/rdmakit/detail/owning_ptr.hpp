#pragma once
// The owning pointers behind the handles, without <memory>: in C++20 that header costs
// a quarter of the core's compile time (std::shared_ptr's atomics, unique_ptr's
// <ostream>), and the handles need only this much of it (issue 12, part 4).
//
// unique_owner<T, D>: one owner, moved, never copied; T may be an array (delete[]).
// shared_owner<T>:    counted owners of one object made by make_shared_owner. The count
//                     is atomic, so copies may be made and dropped on any thread. The
//                     block records how to destroy its object, so an owner can be
//                     dropped where T is incomplete, and an owner of a base class
//                     destroys the derived object it was made from (as shared_ptr).
// shared_watch<T>:    names a shared object without owning it; share() gives an owner
//                     while another owner keeps it alive. Valid only while the object
//                     exists: its destructor must drop every watch on it (as a registry
//                     entry the object removes, under the lock share() is called in).
#include <rdmakit/config.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

template <class T>
struct delete_owned {
  void operator()(T* p) const noexcept { delete p; }
};
template <class T>
struct delete_owned<T[]> {
  void operator()(T* p) const noexcept { delete[] p; }
};

template <class T, class D = delete_owned<T>>
class unique_owner {
 public:
  using element_type = std::remove_extent_t<T>;

  unique_owner() noexcept = default;
  explicit unique_owner(element_type* p) noexcept : p_(p) {}
  unique_owner(unique_owner&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  unique_owner& operator=(unique_owner&& o) noexcept {
    reset(std::exchange(o.p_, nullptr));  // o's pointer is taken first: self-move keeps it
    return *this;
  }
  ~unique_owner() { reset(); }

  void reset(element_type* p = nullptr) noexcept {
    if (element_type* old = std::exchange(p_, p)) D{}(old);
  }
  [[nodiscard]] element_type* release() noexcept { return std::exchange(p_, nullptr); }
  element_type* get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  element_type& operator*() const noexcept
    requires(!std::is_array_v<T>)
  {
    return *p_;
  }
  element_type* operator->() const noexcept
    requires(!std::is_array_v<T>)
  {
    return p_;
  }
  element_type& operator[](std::size_t i) const noexcept
    requires std::is_array_v<T>
  {
    return p_[i];
  }

 private:
  element_type* p_ = nullptr;
};

/// A new T(args...) with its owner.
template <class T, class... A>
  requires(!std::is_array_v<T>)
unique_owner<T> make_unique_owner(A&&... args) {
  return unique_owner<T>(new T(std::forward<A>(args)...));
}

/// n value-initialized T (zeros for numbers) with their owner.
template <class T>
  requires std::is_array_v<T> && (std::extent_v<T> == 0)
unique_owner<T> make_unique_owner(std::size_t n) {
  return unique_owner<T>(new std::remove_extent_t<T>[n]());
}

// The count and the destroyer of a shared object; the object follows it in one
// allocation (shared_block).
struct shared_count {
  long owners;
  void (*destroy)(shared_count*) noexcept;
};

template <class T>
struct shared_block final : shared_count {
  T value;
  template <class... A>
  explicit shared_block(A&&... args) : shared_count{1, &destroy_}, value(std::forward<A>(args)...) {}
  static void destroy_(shared_count* c) noexcept {
    auto* b = static_cast<shared_block*>(c);
    // An object in use by the code that dropped its last owner destroys itself later
    // (cq_block: a completion handler dropped its CQ).
    if constexpr (requires { b->value.keep_while_delivering(c); })
      if (b->value.keep_while_delivering(c)) return;
    delete b;
  }
};

template <class T>
class shared_owner {
 public:
  using element_type = T;

  shared_owner() noexcept = default;
  shared_owner(std::nullptr_t) noexcept {}
  shared_owner(const shared_owner& o) noexcept : p_(o.p_), c_(o.c_) { add_owner_(); }
  shared_owner(shared_owner&& o) noexcept : p_(std::exchange(o.p_, nullptr)), c_(std::exchange(o.c_, nullptr)) {}
  /// From an owner of a derived (or less const) type: the same object and count.
  template <class U>
    requires std::is_convertible_v<U*, T*>
  shared_owner(const shared_owner<U>& o) noexcept : p_(o.p_), c_(o.c_) {
    add_owner_();
  }
  template <class U>
    requires std::is_convertible_v<U*, T*>
  shared_owner(shared_owner<U>&& o) noexcept : p_(std::exchange(o.p_, nullptr)), c_(std::exchange(o.c_, nullptr)) {}
  // By value: copy, move, conversion and self-assignment in one (the old object is
  // dropped when `o` goes).
  shared_owner& operator=(shared_owner o) noexcept {
    swap(o);
    return *this;
  }
  ~shared_owner() { drop_owner_(); }

  void swap(shared_owner& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(c_, o.c_);
  }
  void reset() noexcept { shared_owner().swap(*this); }
  T* get() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  T* operator->() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  friend bool operator==(const shared_owner& a, const shared_owner& b) noexcept { return a.p_ == b.p_; }
  friend bool operator==(const shared_owner& a, std::nullptr_t) noexcept { return a.p_ == nullptr; }

 private:
  template <class>
  friend class shared_owner;
  template <class U, class... A>
  friend shared_owner<U> make_shared_owner(A&&...);

  shared_owner(T* p, shared_count* c) noexcept : p_(p), c_(c) {}
  void add_owner_() const noexcept {
    if (c_) __atomic_fetch_add(&c_->owners, 1, __ATOMIC_RELAXED);
  }
  // acq_rel: the last owner sees every other owner's writes before it destroys.
  void drop_owner_() noexcept {
    if (c_ && __atomic_fetch_sub(&c_->owners, 1, __ATOMIC_ACQ_REL) == 1) c_->destroy(c_);
  }

  T* p_ = nullptr;
  shared_count* c_ = nullptr;

  template <class>
  friend class shared_watch;
};

template <class T>
class shared_watch {
 public:
  shared_watch() noexcept = default;
  explicit shared_watch(const shared_owner<T>& o) noexcept : p_(o.p_), c_(o.c_) {}
  T* get() const noexcept { return p_; }
  /// An owner, or an empty one once the last owner went (the object is being destroyed).
  shared_owner<T> share() const noexcept {
    long n = __atomic_load_n(&c_->owners, __ATOMIC_RELAXED);
    do {
      if (n == 0) return {};
    } while (!__atomic_compare_exchange_n(&c_->owners, &n, n + 1, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));
    return shared_owner<T>(p_, c_);
  }

 private:
  T* p_ = nullptr;
  shared_count* c_ = nullptr;
};

/// A new T(args...) owned by the returned owner, its count and object in one allocation.
template <class T, class... A>
shared_owner<T> make_shared_owner(A&&... args) {
  auto* b = new shared_block<std::remove_const_t<T>>(std::forward<A>(args)...);
  return shared_owner<T>(&b->value, b);
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
