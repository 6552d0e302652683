#pragma once
// A FIFO whose slots are reused: popping keeps the element (and the capacity of the
// vectors inside it) for a later push, so a queue that is filled and drained in steady
// state allocates nothing. The mock's send queues, CQs and zero-latency wire use it.
#include <rdmakit/config.hpp>

#include <cstddef>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

/// `InPlace`: an element may be used in place after pop_front() (see push_back).
template <class T, bool InPlace = false>
class slot_ring {
 public:
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) & mask_()]; }
  const T& operator[](std::size_t i) const noexcept { return slots_[(head_ + i) & mask_()]; }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }
  T& back() noexcept { return (*this)[size_ - 1]; }

  /// The slot after the last element, now part of the queue. It holds whatever a popped
  /// element left there: the caller overwrites every field.
  ///
  /// InPlace: one slot always stays free, so the element popped last is not
  /// overwritten before the next pop; and when the ring grows, the old slots are kept
  /// until release_retired(). Together: an element may be used in place after
  /// pop_front() while more are pushed, until the next pop_front() or release_retired().
  T& push_back() {
    if (size_ + (InPlace ? 1 : 0) >= slots_.size()) grow_();
    ++size_;
    return back();
  }
  /// Frees the slots left behind by growing (see push_back).
  void release_retired() noexcept {
    if (!retired_.empty()) retired_.clear();
  }
  void pop_front() noexcept {
    head_ = (head_ + 1) & mask_();
    --size_;
  }
  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }
  /// Removes the elements `drop` selects, keeping the others in order.
  template <class Pred>
  void remove_if(Pred drop) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < size_; ++i)
      if (!drop((*this)[i])) {
        if (kept != i) std::swap((*this)[kept], (*this)[i]);
        ++kept;
      }
    size_ = kept;
  }

  /// Iteration, oldest first (range-for).
  template <class R, class V>
  class iter {
   public:
    iter(R* r, std::size_t i) : r_(r), i_(i) {}
    V& operator*() const { return (*r_)[i_]; }
    V* operator->() const { return &(*r_)[i_]; }
    iter& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const iter& o) const { return i_ == o.i_; }
    bool operator!=(const iter& o) const { return i_ != o.i_; }

   private:
    R* r_;
    std::size_t i_;
  };
  /// Room for `n` elements without growing.
  void reserve(std::size_t n) {
    while (slots_.size() < n + (InPlace ? 1 : 0)) grow_();
  }

  iter<slot_ring, T> begin() { return {this, 0}; }
  iter<slot_ring, T> end() { return {this, size_}; }
  iter<const slot_ring, const T> begin() const { return {this, 0}; }
  iter<const slot_ring, const T> end() const { return {this, size_}; }

 private:
  std::size_t mask_() const noexcept { return slots_.size() - 1; }
  // Doubles the slot count (a power of two), moving the elements to the front in order.
  void grow_() {
    std::vector<T> bigger(slots_.empty() ? 8 : slots_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    // Any of the old slot arrays may hold the element popped last: all are kept.
    if (InPlace) retired_.push_back(std::move(bigger));
    head_ = 0;
  }

  std::vector<T> slots_;
  std::vector<std::vector<T>> retired_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
