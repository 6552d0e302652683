// An empty list left the grid without a combination, and the error blamed the loop
// ("the loop takes none of these combinations"), not the list (helper-101's audit, F6).
#include <rdmakit/benchmark.hpp>

int main() {
#ifdef RDMAKIT_CF_CONTROL
  using signalings = rdmakit::bench::list<rdmakit::signal_all>;
#else
  using signalings = rdmakit::bench::list<>;
#endif
  (void)rdmakit::bench::register_grid<rdmakit::bench::list<rdmakit::rc>, signalings,
                                      rdmakit::bench::list<rdmakit::busy_poll<>>>("empty", [](auto, benchmark::State&) {});
}
