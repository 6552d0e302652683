// detail/chrono.hpp: deadlines that saturate at the steady clock's end.
#include <rdmakit/detail/chrono.hpp>

#include <doctest/doctest.h>

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
