#pragma once
/// std::chrono's durations, time points and clocks, which is all rdmakit uses of it.
/// libstdc++'s C++20 <chrono> also brings <sstream> and the calendar and time-zone
/// formatting (about 16,000 preprocessed lines, a fifth of the core's parse time);
/// libstdc++ 11 and later keep the durations and clocks alone in <bits/chrono.h>.
/// Elsewhere (libc++, MSVC, older libstdc++) this is plain <chrono>.
#include <version>  // defines __GLIBCXX__ for libstdc++
#if defined(__GLIBCXX__) && __has_include(<bits/chrono.h>)
#include <bits/chrono.h>
#else
#include <chrono>
#endif

#include <rdmakit/config.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// `from + timeout` on the steady clock, saturated at its end: a timeout past the
/// clock's range (milliseconds::max(), hours::max()) means no practical limit, where
/// the plain sum overflows (undefined behaviour that, in practice, expires at once).
/// A timeout of zero or less is `from`.
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point from,
                                                     std::chrono::duration<Rep, Period> timeout) noexcept {
  using time_point = std::chrono::steady_clock::time_point;
  if (timeout <= timeout.zero()) return from;
  // The room left, in the timeout's unit (rounded down): comparing there cannot overflow.
  const auto room = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(time_point::max() - from);
  return timeout >= room ? time_point::max() : from + std::chrono::duration_cast<time_point::duration>(timeout);
}

/// `d` in the unit of `To`, saturated at its range: a timeout of hours::max() or
/// milliseconds::max() ("no practical limit") is To::max(), where the plain conversion
/// overflows (undefined behaviour that, in practice, comes out negative and expires at
/// once). For timeouts taken as any duration and kept in one unit.
template <class To, class Rep, class Period>
constexpr To saturating_cast(std::chrono::duration<Rep, Period> d) noexcept {
  using in = std::chrono::duration<Rep, Period>;
  if constexpr (std::ratio_greater<Period, typename To::period>::value) {  // a coarser unit: converting multiplies
    if (d >= std::chrono::duration_cast<in>(To::max())) return To::max();
    if (d <= std::chrono::duration_cast<in>(To::min())) return To::min();
  }
  return std::chrono::duration_cast<To>(d);
}
/// saturating_cast to the steady clock's unit (the coroutine layer's timeouts).
template <class Rep, class Period>
constexpr std::chrono::steady_clock::duration steady_duration(std::chrono::duration<Rep, Period> d) noexcept {
  return saturating_cast<std::chrono::steady_clock::duration>(d);
}

/// deadline_after(now, timeout).
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> timeout) noexcept {
  return deadline_after(std::chrono::steady_clock::now(), timeout);
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
