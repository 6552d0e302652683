// fabric_state's maps of objects by number (mock/object_map.hpp) behave as the
// std::unordered_map<std::uint32_t, T*> they replace, through the members the mock uses.
#include <rdmakit/backends/mock/object_map.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <map>

namespace md = rdmakit::mock::detail;

TEST_CASE("mock object_map: m[key] = p, find, count, erase and iteration") {
  int objs[4] = {};
  md::object_map<int> m;
  m[7] = &objs[0];
  m[9] = &objs[1];
  m[7] = &objs[2];  // replaces
  m[100] = &objs[3];
  auto it = m.find(7);
  REQUIRE(it != m.end());
  CHECK(it->first == 7);
  CHECK(it->second == &objs[2]);
  CHECK(m.find(8) == m.end());
  CHECK(m.count(9) == 1);
  CHECK(m.erase(9) == 1);
  CHECK(m.erase(9) == 0);
  CHECK(m.count(9) == 0);
  std::map<std::uint32_t, int*> seen;
  for (auto& [key, p] : m) seen[key] = p;
  CHECK(seen == std::map<std::uint32_t, int*>{{7, &objs[2]}, {100, &objs[3]}});
}

TEST_CASE("mock object_map: thousands of inserts and erases agree with std::map (erase shifts entries back)") {
  // Keys from a small range, so that probes collide and wrap around the table, and
  // erases leave entries that must move back into the hole to stay findable.
  static int objs[64];
  md::object_map<int> m;
  std::map<std::uint32_t, int*> want;
  std::uint64_t x = 12345;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull, static_cast<std::uint32_t>(x >> 33); };
  for (int step = 0; step < 20000; ++step) {
    const std::uint32_t r = next();
    const std::uint32_t key = r % 97 + (r & 0x100 ? 0xFFFFFF00u : 0);  // near 0 and near 2^32
    if (r % 3 == 0) {
      CHECK(m.erase(key) == want.erase(key));
    } else {
      int* p = &objs[r % 64];
      m[key] = p;
      want[key] = p;
    }
    if (step % 1000 == 0 || step == 19999) {
      std::map<std::uint32_t, int*> seen;
      for (auto& [k, p] : m) seen[k] = p;
      REQUIRE(seen == want);
      for (std::uint32_t k = 0; k < 97; ++k)
        for (std::uint32_t hi : {0u, 0xFFFFFF00u}) {
          auto it = m.find(k + hi);
          const auto w = want.find(k + hi);
          REQUIRE((it == m.end()) == (w == want.end()));
          if (w != want.end()) CHECK(it->second == w->second);
          CHECK(m.count(k + hi) == want.count(k + hi));
        }
    }
  }
  m[5] = &objs[0];
  m[5] = nullptr;  // a null pointer removes the key
  CHECK(m.count(5) == 0);
}

// The table never shrank (audit 26, F5): 200,000 windows made and freed left 2^19 cells,
// and the mock's walks of its windows (at each destroy_qp and dereg_mr) cost 470 times
// more for the rest of the run. A table emptied down to a few entries shrinks.
TEST_CASE("mock object_map: a table emptied again shrinks, its remaining entries still found") {
  static int objs[8];
  md::object_map<int> m;
  CHECK(m.capacity() == 0);
  for (std::uint32_t k = 1; k <= 100'000; ++k) m[k] = &objs[k % 8];
  CHECK(m.capacity() >= 200'000);
  for (std::uint32_t k = 1; k <= 100'000; ++k)
    if (k % 20'000 != 0) m.erase(k);  // five stay
  CHECK(m.capacity() <= 64);
  std::map<std::uint32_t, int*> seen;
  for (auto& [key, p] : m) seen[key] = p;
  CHECK(seen.size() == 5);
  for (std::uint32_t k = 20'000; k <= 100'000; k += 20'000) {
    REQUIRE(m.find(k) != m.end());
    CHECK(m.find(k)->second == &objs[k % 8]);
  }
  for (std::uint32_t k = 20'000; k <= 100'000; k += 20'000) m.erase(k);
  CHECK(m.capacity() <= 16);
  CHECK(m.begin() == m.end());
}
