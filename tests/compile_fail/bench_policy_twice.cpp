// A policy named twice in one list made two benchmarks of one name (found by an audit).
#include <rdmakit/benchmark.hpp>

int main() {
#ifdef RDMAKIT_CF_CONTROL
  using transports = rdmakit::bench::list<rdmakit::rc, rdmakit::uc>;
#else
  using transports = rdmakit::bench::list<rdmakit::rc, rdmakit::rc>;
#endif
  (void)rdmakit::bench::register_grid<transports, rdmakit::bench::list<rdmakit::signal_all>,
                                      rdmakit::bench::list<rdmakit::busy_poll<>>>("twice", [](auto, benchmark::State&) {});
}
