// The mock's own random engine (mock/random.hpp) gives the numbers <random> gave it
// before, so a fabric seed still names the same probabilistic fault sequence.
#include <rdmakit/backends/mock/random.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <random>

namespace md = rdmakit::mock::detail;

TEST_CASE("mock random: the 10000th number of the default seed is the standard's") {
  md::mt19937_64 rng;
  for (int i = 0; i < 9999; ++i) (void)rng();
  CHECK(rng() == 9981545732273789042ULL);  // [rand.predef]: mt19937_64
}

TEST_CASE("mock random: the same numbers as std::mt19937_64 for any seed, after reseeding") {
  for (std::uint64_t seed : {0ULL, 1ULL, 42ULL, 0xFFFFFFFFFFFFFFFFULL}) {
    std::mt19937_64 want(seed);
    md::mt19937_64 got(7);
    got.seed(seed);
    for (int i = 0; i < 1000; ++i) REQUIRE(got() == want());  // crosses the 312-word refill
  }
}

TEST_CASE("mock random: uniform_01 is std::uniform_real_distribution<double>(0, 1) of one draw") {
  std::mt19937_64 want(1);
  md::mt19937_64 got(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 1000; ++i) {
    const double x = md::uniform_01(got);
    REQUIRE(x == u(want));
    REQUIRE(x < 1.0);
  }
}
