#pragma once
// Live objects of one kind by number (fabric_state's QPs by QP number, MRs by key,
// windows by index), with the members of std::unordered_map<std::uint32_t, T*> the mock
// uses. One open-addressing table of (number, pointer) shared by every kind, with
// linear probing and no tombstones (an erase shifts the entries after it back):
// std::unordered_map and its instantiations cost every translation unit that includes
// the mock about 20 MB of GCC's allocations, a tenth of core + mock (issue 12).
#include <rdmakit/config.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

/// The untyped table behind object_map<T>: numbers to non-null pointers.
class number_table {
 public:
  struct cell {
    std::uint32_t key = 0;
    void* value = nullptr;  // null: an empty cell
  };

  /// The cell holding `key`, or null.
  const cell* find(std::uint32_t key) const noexcept {
    if (cells_.empty()) return nullptr;
    for (std::size_t i = home_(key);; i = (i + 1) & mask_()) {
      const cell& c = cells_[i];
      if (!c.value) return nullptr;
      if (c.key == key) return &c;
    }
  }
  /// Maps `key` to `value`, replacing what it mapped to (null: removes it).
  void assign(std::uint32_t key, void* value) {
    if (!value) {
      erase(key);
      return;
    }
    if ((size_ + 1) * 2 > cells_.size()) grow_();  // at most half full: short probes
    std::size_t i = home_(key);
    while (cells_[i].value && cells_[i].key != key) i = (i + 1) & mask_();
    if (!cells_[i].value) ++size_;
    cells_[i] = {key, value};
  }
  /// Removes `key`; 1 if it was there.
  std::size_t erase(std::uint32_t key) noexcept {
    const cell* found = find(key);
    if (!found) return 0;
    std::size_t hole = static_cast<std::size_t>(found - cells_.data());
    // Entries after the hole whose home is not between it and them move back into it,
    // so that every entry stays reachable from its home without crossing an empty cell.
    for (std::size_t j = (hole + 1) & mask_(); cells_[j].value; j = (j + 1) & mask_()) {
      const std::size_t home = home_(cells_[j].key);
      const bool stays = hole < j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        cells_[hole] = cells_[j];
        hole = j;
      }
    }
    cells_[hole] = {};
    --size_;
    // At most an eighth full: half the cells. A walk of the table (the mock's look for
    // a window bound to a region or QP) then costs what it holds, not what it once
    // held (audit 26: 200,000 windows freed left a walk 470 times as long).
    if (cells_.size() > min_cells && size_ * 8 <= cells_.size()) shrink_();
    return 1;
  }
  std::size_t size() const noexcept { return size_; }
  /// Cells, free or not: what a walk of the entries reads.
  std::size_t capacity() const noexcept { return cells_.size(); }
  const std::vector<cell>& cells() const noexcept { return cells_; }
  /// The first cell from `c` on that holds an entry; null past the last.
  const cell* next_entry(const cell* c) const noexcept {
    for (const cell* end = cells_.data() + cells_.size(); c != end; ++c)
      if (c->value) return c;
    return nullptr;
  }

 private:
  std::size_t mask_() const noexcept { return cells_.size() - 1; }
  // Fibonacci hashing: numbers handed out in sequence spread over the table.
  std::size_t home_(std::uint32_t key) const noexcept {
    return static_cast<std::size_t>((std::uint64_t{key} * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
  }
  static constexpr std::size_t min_cells = 16;
  // The bigger table first: when that allocation fails, this one keeps every entry
  // (swapping the old one out first lost them all, and the fabric its objects).
  void grow_() { move_to_(std::vector<cell>(std::size_t{1} << (cells_.empty() ? 4 : bits_ + 1), cell{})); }
  // Half the cells, when they can be had (a shrink is only a saving: erase cannot fail).
  void shrink_() noexcept {
    try {
      move_to_(std::vector<cell>(cells_.size() / 2, cell{}));
    } catch (...) {
    }
  }
  /// Every entry into `table` (empty cells, a power of two of them, room for them all at
  /// most half full), which becomes this one's.
  void move_to_(std::vector<cell> table) noexcept {
    table.swap(cells_);
    bits_ = 0;
    while ((std::size_t{1} << bits_) < cells_.size()) ++bits_;
    size_ = 0;  // the re-inserts below fit: no resize, nothing that throws
    for (const cell& c : table)
      if (c.value) assign(c.key, c.value);
  }

  std::vector<cell> cells_;  // a power of two of them, or none
  std::size_t size_ = 0;
  unsigned bits_ = 0;  // cells_.size() == 2^bits_
};

template <class T>
class object_map {
 public:
  struct entry {
    std::uint32_t first = 0;
    T* second = nullptr;
  };
  /// Iterates the entries (in no particular order); made invalid by any change. The end
  /// is a null cell, so that find() builds its result from the cell alone.
  class iterator {
   public:
    iterator(const number_table* t, const number_table::cell* c) : t_(t), c_(c) {}
    const entry& operator*() const {
      e_ = {c_->key, static_cast<T*>(c_->value)};
      return e_;
    }
    const entry* operator->() const { return &**this; }
    iterator& operator++() {
      c_ = t_->next_entry(c_ + 1);
      return *this;
    }
    bool operator==(const iterator& o) const { return c_ == o.c_; }

   private:
    const number_table* t_;
    const number_table::cell* c_;  // null: the end
    mutable entry e_;
  };
  /// What `m[key] = p` assigns through (a null p removes the key).
  class slot {
   public:
    slot(number_table& t, std::uint32_t key) : t_(t), key_(key) {}
    void operator=(T* p) { t_.assign(key_, p); }

   private:
    number_table& t_;
    std::uint32_t key_;
  };

  iterator find(std::uint32_t key) const { return iterator(&t_, t_.find(key)); }
  std::size_t count(std::uint32_t key) const { return t_.find(key) ? 1 : 0; }
  slot operator[](std::uint32_t key) { return slot(t_, key); }
  std::size_t erase(std::uint32_t key) { return t_.erase(key); }
  std::size_t size() const noexcept { return t_.size(); }
  /// Cells of the table, free or not (a walk reads them all).
  std::size_t capacity() const noexcept { return t_.capacity(); }
  iterator begin() const { return iterator(&t_, t_.next_entry(t_.cells().data())); }
  iterator end() const { return iterator(&t_, nullptr); }

 private:
  number_table t_;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
