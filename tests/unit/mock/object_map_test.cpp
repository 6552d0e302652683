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
