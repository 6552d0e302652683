#pragma once
/// What rdmakit uses of <thread>: which thread is calling (this_thread_tag) and
/// std::this_thread::sleep_for. libstdc++'s C++20 <thread> also brings std::jthread and
/// <stop_token> (7 MB of GCC's allocations in every translation unit, issue 12), and
/// std::thread itself (<bits/std_thread.h>) std::unique_ptr with C++20's <ostream> (25 MB);
/// libstdc++ 11 and later keep sleep_for alone in <bits/this_thread_sleep.h>. Elsewhere
/// (libc++, MSVC) this is plain <thread>.
#include <rdmakit/config.hpp>

#include <version>  // defines __GLIBCXX__ for libstdc++
#if defined(__GLIBCXX__) && __has_include(<bits/this_thread_sleep.h>)
#include <bits/this_thread_sleep.h>
#else
#include <thread>
#endif

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

/// A value that differs between any two threads alive at once and is never null (the
/// address of a thread_local), as std::this_thread::get_id() is: a thread started after
/// another ended may get the ended one's value.
inline const void* this_thread_tag() noexcept {
  static thread_local const char tag = 0;
  return &tag;
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
