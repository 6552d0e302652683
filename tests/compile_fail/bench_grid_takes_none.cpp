// A loop whose parameters are swapped takes none of the grid's combinations: it
// registered no benchmark, silently (the grid was missing from the output; found by an
// audit). Its control takes (config, State&).
#include <rdmakit/benchmark.hpp>

int main() {
#ifdef RDMAKIT_CF_CONTROL
  (void)rdmakit::bench::register_grid<rdmakit::bench::list<rdmakit::rc>, rdmakit::bench::list<rdmakit::signal_all>,
                                      rdmakit::bench::list<rdmakit::busy_poll<>>>(
      "swapped", [](auto, benchmark::State&) {});
#else
  (void)rdmakit::bench::register_grid<rdmakit::bench::list<rdmakit::rc>, rdmakit::bench::list<rdmakit::signal_all>,
                                      rdmakit::bench::list<rdmakit::busy_poll<>>>(
      "swapped", [](benchmark::State&, auto) {});
#endif
}
