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

#include <limits>
#include <type_traits>

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
/// Unsigned counts (which std::chrono's conversions wrap to negative past the signed
/// range, and whose comparison with a negative minimum is true for any count) and
/// floating-point ones (whose out-of-range conversion is undefined) saturate too; NaN is zero.
template <class To, class Rep, class Period>
constexpr To saturating_cast(std::chrono::duration<Rep, Period> d) noexcept {
  if constexpr (std::chrono::treat_as_floating_point_v<Rep>) {
    // Compared in To's unit, in long double (exact for To's limits where long double is
    // wider than double; else 2^63, and anything below it converts in range).
    const long double w = std::chrono::duration_cast<std::chrono::duration<long double, typename To::period>>(d).count();
    if (w != w) return To::zero();
    if (w >= static_cast<long double>(To::max().count())) return To::max();
    if (w <= static_cast<long double>(To::min().count())) return To::min();
    return To(static_cast<typename To::rep>(w));  // toward zero, as duration_cast
  } else if constexpr (std::is_unsigned_v<Rep>) {
    using wide = unsigned long long;
    constexpr wide signed_max = static_cast<wide>(std::numeric_limits<long long>::max());
    if (sizeof(Rep) < sizeof(wide) || d.count() <= static_cast<Rep>(signed_max))
      return saturating_cast<To>(std::chrono::duration<long long, Period>(static_cast<long long>(d.count())));
    return saturating_cast<To>(std::chrono::duration<long double, Period>(static_cast<long double>(d.count())));
  } else {
    using in = std::chrono::duration<Rep, Period>;
    if constexpr (std::ratio_greater<Period, typename To::period>::value) {  // a coarser unit: converting multiplies
      if (d >= std::chrono::duration_cast<in>(To::max())) return To::max();
      if (d <= std::chrono::duration_cast<in>(To::min())) return To::min();
    }
    return std::chrono::duration_cast<To>(d);
  }
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

/// A timeout field of an options struct kept in milliseconds, which any duration
/// converts to: saturated at milliseconds' range (saturating_cast: `hours::max()` is
/// `milliseconds::max()`, no practical limit, where std::chrono's implicit conversion
/// overflows, undefined behaviour that comes out negative), a finer unit rounded away
/// from zero (a positive timeout stays positive, never shorter than asked; a negative one
/// stays negative; a NaN is a negative value of its own, is_nan(), which options that
/// check their timeouts refuse by name). It is a milliseconds:
/// count(), comparisons and passing it on are the same.
struct ms_timeout : std::chrono::milliseconds {
  constexpr ms_timeout() noexcept = default;
  template <class Rep, class Period>
  constexpr ms_timeout(std::chrono::duration<Rep, Period> d) noexcept  // NOLINT(google-explicit-constructor)
      : std::chrono::milliseconds(round_up_(d)) {}
  /// Made from a NaN (a wait takes it as a negative timeout: one look).
  constexpr bool is_nan() const noexcept { return count() == nan_count_; }

 private:
  static constexpr rep nan_count_ = std::numeric_limits<rep>::min() + 1;
  template <class Rep, class Period>
  static constexpr std::chrono::milliseconds round_up_(std::chrono::duration<Rep, Period> d) noexcept {
    using ms = std::chrono::milliseconds;
    if constexpr (std::chrono::treat_as_floating_point_v<Rep>)
      if (d.count() != d.count()) return ms(nan_count_);
    ms t = saturating_cast<ms>(d);
    // Finer, or fractional: cut toward zero, so rounded away from it (a negative one
    // stays negative: 0 often means "none given").
    if constexpr (!std::ratio_greater_equal<Period, std::milli>::value || std::chrono::treat_as_floating_point_v<Rep>) {
      if (d > d.zero() && t < d && t < ms::max()) ++t;
      if (d < d.zero() && t > d && t > ms::min()) --t;
    }
    return t;
  }
};

/// The waits' default timeout, one second: a constant, so that the default argument is a
/// copy, which cannot throw (a `std::chrono::milliseconds{1000}` there is a constructor
/// call the standard does not declare noexcept, and `noexcept(cq.wait(f))` was false).
inline constexpr ms_timeout default_wait{std::chrono::milliseconds{1000}};

}  // namespace detail
RDMAKIT_END_NAMESPACE
