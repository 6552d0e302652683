// No #pragma once: looked at by every header of definitions that include it.
// In separate compilation (RDMAKIT_SEPARATE_COMPILATION) those definitions are compiled
// once, by the translation unit that includes the src.hpp headers, which define
// RDMAKIT_COMPILING_SOURCES first. Any other include of such a header would define them
// a second time, and the link would fail on "multiple definition", far from the cause:
// the compiler names the header in the include chain of this error instead.
#include <rdmakit/config.hpp>
#if defined(RDMAKIT_SEPARATE_COMPILATION) && !defined(RDMAKIT_COMPILING_SOURCES)
#error "this header holds definitions RDMAKIT_SEPARATE_COMPILATION compiles once, in the translation unit that includes the src.hpp headers: include the public header instead (<rdmakit/rdmakit.hpp>, <rdmakit/backends/mock.hpp>, <rdmakit/backends/ibverbs.hpp>)"
#endif
