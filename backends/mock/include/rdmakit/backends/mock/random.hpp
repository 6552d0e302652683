#pragma once
/// The fabric's random draws for probabilistic faults. The numbers are those of
/// std::mt19937_64 and std::uniform_real_distribution<double>(0, 1) under libstdc++, so a
/// seed gives the same fault sequence as before; written out because <random> was 17,000
/// of the lines every translation unit that includes the mock compiles.
#include <rdmakit/config.hpp>

#include <cstddef>
#include <cstdint>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

/// MT19937-64 (Matsumoto and Nishimura's 64-bit Mersenne Twister), the parameters the
/// C++ standard gives std::mt19937_64.
class mt19937_64 {
 public:
  explicit mt19937_64(std::uint64_t s = 5489) noexcept { seed(s); }

  void seed(std::uint64_t s) noexcept {
    state_[0] = s;
    for (std::size_t i = 1; i < n; ++i)
      state_[i] = 6364136223846793005ULL * (state_[i - 1] ^ (state_[i - 1] >> 62)) + i;
    next_ = n;
  }

  std::uint64_t operator()() noexcept {
    if (next_ == n) twist();
    std::uint64_t y = state_[next_++];
    y ^= (y >> 29) & 0x5555555555555555ULL;
    y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
    y ^= (y << 37) & 0xFFF7EEE000000000ULL;
    return y ^ (y >> 43);
  }

 private:
  static constexpr std::size_t n = 312, m = 156;
  static constexpr std::uint64_t lower_mask = (1ULL << 31) - 1, upper_mask = ~lower_mask;

  void twist() noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t y = (state_[i] & upper_mask) | (state_[(i + 1) % n] & lower_mask);
      state_[i] = state_[(i + m) % n] ^ (y >> 1) ^ ((y & 1) ? 0xB5026F5AA96619E9ULL : 0);
    }
    next_ = 0;
  }

  std::uint64_t state_[n];
  std::size_t next_;
};

/// A double in [0, 1) from one draw, as libstdc++'s generate_canonical<double, 53> makes
/// it from a 64-bit engine: the draw over 2^64, the rare rounding up to 1 taken back
/// to the largest double below 1.
inline double uniform_01(mt19937_64& rng) noexcept {
  const double u = static_cast<double>(rng()) * 0x1p-64;
  return u < 1.0 ? u : 0x1.fffffffffffffp-1;
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
