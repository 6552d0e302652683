// detail/owning_ptr.hpp: the handles' owning pointers (unique_owner, shared_owner).
#include <rdmakit/detail/owning_ptr.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace {

using rdmakit::detail::make_shared_owner;
using rdmakit::detail::make_unique_owner;
using rdmakit::detail::shared_owner;
using rdmakit::detail::unique_owner;

// Counts its live instances, so a test can see exactly when an owner destroys.
struct tracked {
  static inline int live = 0;
  int value;
  explicit tracked(int v) : value(v) { ++live; }
  tracked(const tracked&) = delete;
  virtual ~tracked() { --live; }
};
struct derived_tracked final : tracked {
  static inline int destroyed = 0;
  using tracked::tracked;
  ~derived_tracked() override { ++destroyed; }
};
struct throws_on_construction {
  explicit throws_on_construction(int) { throw 7; }
};

}  // namespace

TEST_CASE("unique_owner: destroys its object once, on reset, reassignment or its own end") {
  tracked::live = 0;
  {
    auto a = make_unique_owner<tracked>(1);
    CHECK(tracked::live == 1);
    CHECK(a->value == 1);
    auto b = std::move(a);
    CHECK(!a);
    CHECK(tracked::live == 1);
    b = make_unique_owner<tracked>(2);  // the first is destroyed here
    CHECK(tracked::live == 1);
    CHECK((*b).value == 2);
    auto& same_b = b;  // through a reference: no compiler warning for the deliberate self-move
    b = std::move(same_b);  // a self-move keeps the object
    REQUIRE(b);
    CHECK(b->value == 2);
    tracked* raw = b.release();
    CHECK(!b);
    CHECK(tracked::live == 1);
    b.reset(raw);
    b.reset();
    CHECK(tracked::live == 0);
    b = make_unique_owner<tracked>(3);
  }
  CHECK(tracked::live == 0);
}

TEST_CASE("unique_owner of an array: zero-initialized, indexed, freed with delete[]") {
  auto ring = make_unique_owner<std::uint64_t[]>(64);
  for (int i = 0; i < 64; ++i) CHECK(ring[i] == 0);
  ring[63] = 5;
  CHECK(ring.get()[63] == 5);
}

TEST_CASE("shared_owner: the object lives while any owner does, copies and conversions share its count") {
  tracked::live = 0;
  derived_tracked::destroyed = 0;
  shared_owner<const tracked> last;
  {
    auto d = make_shared_owner<derived_tracked>(4);
    shared_owner<tracked> base = d;  // a base-class owner of the same object
    CHECK(base.get() == d.get());
    CHECK(base == shared_owner<tracked>(d));
    last = base;  // and a const one
    shared_owner<tracked> moved = std::move(base);
    CHECK(!base);
    CHECK(base == nullptr);
    const auto& same_moved = moved;  // through a reference, as above
    moved = same_moved;  // self-assignment keeps the object
    REQUIRE(moved);
    CHECK(moved->value == 4);
    d.reset();
    moved.reset();
    CHECK(tracked::live == 1);
    CHECK(derived_tracked::destroyed == 0);
  }
  CHECK(tracked::live == 1);
  CHECK(last->value == 4);
  last = nullptr;  // the last owner, through the base: the derived destructor runs
  CHECK(tracked::live == 0);
  CHECK(derived_tracked::destroyed == 1);
}

TEST_CASE("make_shared_owner: a throwing constructor leaks nothing and owns nothing") {
  shared_owner<throws_on_construction> p;
  CHECK_THROWS_AS(p = make_shared_owner<throws_on_construction>(1), int);
  CHECK(!p);
}

TEST_CASE("shared_owner: copies made and dropped on two threads destroy the object exactly once") {
  tracked::live = 0;
  for (int round = 0; round < 20; ++round) {
    {
      auto p = make_shared_owner<tracked>(round);
      auto work = [q = p] {
        std::vector<shared_owner<tracked>> copies;
        for (int i = 0; i < 1000; ++i) copies.push_back(q);
        copies.clear();
      };
      std::thread t1(work), t2(std::move(work));  // the two copies of q are the threads'
      p.reset();
      t1.join();
      t2.join();
    }
    CHECK(tracked::live == 0);
  }
}
