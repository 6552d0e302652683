#pragma once
/// std::function, which is all rdmakit's backends use of <functional>. libstdc++'s
/// C++20 <functional> also brings std::bind, the searchers and with them <unordered_map>
/// and <array> (8 MB of GCC's allocations in every translation unit, issue 12);
/// libstdc++ keeps std::function alone in <bits/std_function.h>. Elsewhere (libc++,
/// MSVC) this is plain <functional>.
#include <version>  // defines __GLIBCXX__ for libstdc++
#if defined(__GLIBCXX__) && __has_include(<bits/std_function.h>)
#include <bits/std_function.h>
#else
#include <functional>
#endif
