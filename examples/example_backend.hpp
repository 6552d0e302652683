#pragma once
// The backend an example runs on, chosen when it is built: the mock (two devices of a
// fabric made for the run), or, built with RDMAKIT_EXAMPLE_IBVERBS (the `<example>-ibverbs`
// programs), real verbs through libibverbs with both sides on one device, which loops
// back (rxe or a NIC): `<example>-ibverbs [device]`, the first device by default.
#include <rdmakit/rdmakit.hpp>
#if defined(RDMAKIT_EXAMPLE_IBVERBS) && RDMAKIT_EXAMPLE_IBVERBS
#include <rdmakit/backends/ibverbs.hpp>
#else
#include <rdmakit/backends/mock.hpp>
#endif

#include <string>
#include <utility>

namespace rdmakit_examples {

#if defined(RDMAKIT_EXAMPLE_IBVERBS) && RDMAKIT_EXAMPLE_IBVERBS
using B = rdmakit::backends::ibverbs;
#else
using B = rdmakit::backends::mock;
#endif

/// The devices of the example's two sides.
inline std::pair<rdmakit::device<B>, rdmakit::device<B>> open_devices(int argc, char** argv) {
#if defined(RDMAKIT_EXAMPLE_IBVERBS) && RDMAKIT_EXAMPLE_IBVERBS
  const std::string name = argc > 1 ? argv[1] : "";
  return {rdmakit::device<B>(name), rdmakit::device<B>(name)};
#else
  (void)argc, (void)argv;
  rdmakit::mock::fabric fab;  // its devices keep it alive
  return {rdmakit::device<B>(fab, "mock0"), rdmakit::device<B>(fab, "mock1")};
#endif
}

}  // namespace rdmakit_examples
