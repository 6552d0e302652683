// What a program built with RDMAKIT_SEPARATE_COMPILATION compiles once, in the one
// translation unit that includes the src.hpp headers (README, "Separate compilation"),
// with a user's -O2 and strict warnings: none may warn there either (GCC's
// -Wnull-dereference found the mock's type 1 bind reading a UD address, an audit).
#include <rdmakit/backends/mock/src.hpp>
#include <rdmakit/src.hpp>
#if defined(RDMAKIT_HAVE_IBVERBS)
#include <rdmakit/backends/ibverbs/src.hpp>
#endif
