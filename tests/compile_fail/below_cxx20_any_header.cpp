// Compiled below C++20 (-std=c++17, added by the test), any rdmakit header included
// first, not only the umbrella, stops with the one diagnostic naming the fix (config.hpp
// ends the compilation): <rdmakit/event_loop.hpp> gave 132 errors after the #error.
// The control (-DRDMAKIT_CF_CONTROL) is the same file as C++20.
#include <rdmakit/event_loop.hpp>
#include <rdmakit/connection.hpp>

#ifdef RDMAKIT_CF_CONTROL
static_assert(RDMAKIT_HAS_CXX20);
#endif

int main() {}
