#pragma once
/// The classic algorithms of <algorithm> (std::min, std::lower_bound, std::remove,
/// std::push_heap, ...), which is all rdmakit uses of it. libstdc++'s C++20 <algorithm>
/// also brings the ranges algorithms and the parallel algorithms' glue (6 MB of GCC's
/// allocations in every translation unit, 5 % of the core's, issue 12); libstdc++ keeps
/// the classic ones alone in <bits/stl_algo.h> (2 MB). Elsewhere (libc++, MSVC) this is
/// plain <algorithm>.
#include <version>  // defines __GLIBCXX__ for libstdc++
#if defined(__GLIBCXX__) && __has_include(<bits/stl_algo.h>)
#include <bits/stl_algo.h>
#else
#include <algorithm>
#endif
