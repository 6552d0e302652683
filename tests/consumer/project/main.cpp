// Uses rdmakit through the dependency a subproject exports: an RC write on the mock.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <cstdio>

int main() {
  using B = rdmakit::backends::mock;
  auto names = B::device_names();
  std::printf("rdmakit as a subproject: %zu mock devices, first %s\n", names.size(), names.at(0).c_str());
  return names.empty() ? 1 : 0;
}
