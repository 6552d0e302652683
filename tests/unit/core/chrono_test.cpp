// detail/chrono.hpp: deadlines that saturate at the steady clock's end.
#include <rdmakit/detail/chrono.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

using namespace std::chrono;
using rdmakit::detail::deadline_after;

TEST_CASE("deadline_after: the sum while it fits, the clock's end past it, `from` for none") {
  const auto from = steady_clock::now();
  CHECK(deadline_after(from, milliseconds(5)) == from + milliseconds(5));
  CHECK(deadline_after(from, hours(1)) == from + hours(1));
  CHECK(deadline_after(from, milliseconds::max()) == steady_clock::time_point::max());
  CHECK(deadline_after(from, hours::max()) == steady_clock::time_point::max());
  CHECK(deadline_after(from, nanoseconds::max()) == steady_clock::time_point::max());
  CHECK(deadline_after(from, milliseconds(0)) == from);
  CHECK(deadline_after(from, milliseconds(-5)) == from);
  CHECK(deadline_after(from, milliseconds::min()) == from);
  const auto late = steady_clock::time_point::max() - milliseconds(10);
  CHECK(deadline_after(late, milliseconds(9)) == late + milliseconds(9));
  CHECK(deadline_after(late, milliseconds(10)) == steady_clock::time_point::max());
  CHECK(deadline_after(late, seconds(1)) == steady_clock::time_point::max());
  CHECK(deadline_after(milliseconds::max()) == steady_clock::time_point::max());
}

// Unsigned and floating-point counts went through std::chrono's plain conversions: an
// unsigned count compared below the (negative) minimum, so duration<unsigned>(5) came out
// milliseconds::min() and a 5 s timeout expired at once; one past the signed range
// wrapped to -1; a double past the range was an undefined conversion (in practice
// negative: duration<double, milli>::max() expired at once), and 0.2 ms came out 0.
TEST_CASE("ms_timeout, steady_duration: unsigned and floating-point durations keep their value, saturated") {
  using rdmakit::detail::ms_timeout;
  using rdmakit::detail::steady_duration;
  CHECK(ms_timeout(duration<unsigned>(5)) == milliseconds(5000));
  CHECK(steady_duration(duration<std::uint32_t, std::milli>(5)) == milliseconds(5));
  CHECK(ms_timeout(duration<std::uint64_t, std::milli>::max()) == milliseconds::max());
  CHECK(steady_duration(duration<std::uint64_t, std::nano>::max()) == nanoseconds::max());
  CHECK(ms_timeout(duration<std::uint64_t, std::nano>::max()) == milliseconds(18'446'744'073'710));  // rounded up
  CHECK(ms_timeout(duration<double, std::milli>::max()) == milliseconds::max());
  CHECK(ms_timeout(duration<double, std::milli>(1e20)) == milliseconds::max());
  CHECK(ms_timeout(duration<double, std::micro>::max()) == milliseconds::max());
  CHECK(steady_duration(duration<float, std::nano>::max()) == nanoseconds::max());
  CHECK(ms_timeout(duration<double, std::milli>(-1e30)) == milliseconds::min());
  CHECK(ms_timeout(duration<double>(2.5)) == milliseconds(2500));
  CHECK(ms_timeout(duration<double, std::milli>(0.2)) == milliseconds(1));  // rounded up, not 0
  CHECK(steady_duration(duration<double, std::milli>(0.2)) == microseconds(200));
  CHECK(ms_timeout(duration<double, std::milli>(std::numeric_limits<double>::quiet_NaN())).is_nan());
}

// A negative timeout finer than a millisecond was cut toward zero: -500 us became 0, which
// options read as "none given" (exchange_options::accept_timeout 0: use timeout).
TEST_CASE("ms_timeout: a negative timeout stays negative, rounded away from zero") {
  using rdmakit::detail::ms_timeout;
  CHECK(ms_timeout(microseconds(-500)) == milliseconds(-1));
  CHECK(ms_timeout(nanoseconds(-1)) == milliseconds(-1));
  CHECK(ms_timeout(microseconds(-1500)) == milliseconds(-2));
  CHECK(ms_timeout(microseconds(-2000)) == milliseconds(-2));
  CHECK(ms_timeout(duration<double, std::milli>(-0.2)) == milliseconds(-1));
  CHECK(ms_timeout(nanoseconds::min()) == milliseconds(-9'223'372'036'855));
  CHECK(ms_timeout(microseconds(0)) == milliseconds(0));
}

TEST_CASE("ms_timeout: a NaN is told from every number, and is negative (a wait looks once)") {
  using namespace std::chrono;
  const rdmakit::detail::ms_timeout nan = duration<double>(std::numeric_limits<double>::quiet_NaN());
  CHECK(nan.is_nan());
  CHECK(nan.count() < 0);
  CHECK_FALSE(rdmakit::detail::ms_timeout(duration<double>(-1e300)).is_nan());
  CHECK_FALSE(rdmakit::detail::ms_timeout(milliseconds::min()).is_nan());
  CHECK_FALSE(rdmakit::detail::ms_timeout(milliseconds(0)).is_nan());
}
