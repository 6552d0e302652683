// fabric_state's sets of live objects (mock/object_set.hpp) behave as the std::set<T*>
// they replace: address order, erase and count by pointer.
#include <rdmakit/backends/mock/object_set.hpp>

#include <doctest/doctest.h>

#include <set>
#include <vector>

namespace md = rdmakit::mock::detail;

TEST_CASE("mock object_set: iterates in the address order of std::set<T*>, with erase and count") {
  int objs[6] = {};
  md::object_set<int> got;
  std::set<int*> want;
  for (int i : {4, 1, 5, 0, 3}) {
    got.insert(&objs[i]);
    want.insert(&objs[i]);
  }
  got.insert(&objs[1]);  // already there: still once
  CHECK(got.erase(&objs[5]) == 1);
  CHECK(got.erase(&objs[5]) == 0);
  want.erase(&objs[5]);
  CHECK(got.count(&objs[3]) == 1);
  CHECK(got.count(&objs[2]) == 0);
  std::vector<int*> order;
  for (int* p : got) order.push_back(p);
  CHECK(order == std::vector<int*>(want.begin(), want.end()));
}
