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
