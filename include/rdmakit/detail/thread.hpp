#pragma once
/// std::thread::id, std::this_thread::get_id, yield and sleep_for, which is all rdmakit
/// uses of <thread>. libstdc++'s C++20 <thread> also brings std::jthread and
/// <stop_token> (7 MB of GCC's allocations in every translation unit, issue 12);
/// libstdc++ 11 and later keep these alone in <bits/std_thread.h> and
/// <bits/this_thread_sleep.h>. Elsewhere (libc++, MSVC) this is plain <thread>.
#include <version>  // defines __GLIBCXX__ for libstdc++
#if defined(__GLIBCXX__) && __has_include(<bits/std_thread.h>) && __has_include(<bits/this_thread_sleep.h>)
#include <bits/std_thread.h>
#include <bits/this_thread_sleep.h>
#else
#include <thread>
#endif
