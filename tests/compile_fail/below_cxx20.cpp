// Compiled below C++20 (-std=c++17, added by the test), the umbrella header stops with
// one error naming the fix instead of hundreds of errors about concepts and requires.
// The control (-DRDMAKIT_CF_CONTROL) is the same file as C++20.
#include <rdmakit/rdmakit.hpp>

#ifdef RDMAKIT_CF_CONTROL
static_assert(RDMAKIT_HAS_CXX20);
#endif

int main() {}
