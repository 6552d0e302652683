#pragma once
// C++20 or later (MSVC reports its standard in _MSVC_LANG; GCC 10 says 201709L for C++20).
#if defined(_MSVC_LANG) && _MSVC_LANG > __cplusplus
#define RDMAKIT_CPLUSPLUS _MSVC_LANG
#else
#define RDMAKIT_CPLUSPLUS __cplusplus
#endif
#if RDMAKIT_CPLUSPLUS > 201703L
#define RDMAKIT_HAS_CXX20 1
#else
#define RDMAKIT_HAS_CXX20 0
// The compilation ends here, with this one diagnostic, whichever rdmakit header came
// first: after an #error the compiler goes on, into hundreds of errors about concepts
// and requires-clauses, while a header that is not found is fatal (GCC, clang, MSVC).
#include <rdmakit requires C++20: compile with -std=c++20 (MSVC: /std:c++20) or later>
#endif

// Release version (meson.build's project version; a test checks they agree). Versioned
// inline namespace, as in {fmt}: ABI changes bump it, source stays the same.
#define RDMAKIT_VERSION_MAJOR 0
#define RDMAKIT_VERSION_MINOR 1
#define RDMAKIT_VERSION_PATCH 0
#define RDMAKIT_VERSION_STRING "0.1.0"
/// MAJOR * 10000 + MINOR * 100 + PATCH, for `#if RDMAKIT_VERSION >= 10200`.
#define RDMAKIT_VERSION (RDMAKIT_VERSION_MAJOR * 10000 + RDMAKIT_VERSION_MINOR * 100 + RDMAKIT_VERSION_PATCH)
#define RDMAKIT_BEGIN_NAMESPACE \
  namespace rdmakit {           \
  inline namespace v0 {
#define RDMAKIT_END_NAMESPACE \
  }                           \
  }

// Header-only by default: functions defined in headers are `inline`. With
// RDMAKIT_SEPARATE_COMPILATION defined in every translation unit, the backends' verbs
// and the core's non-template text are only declared, and compiled once where the
// src.hpp headers are included (asio's model; see
// README, "Separate compilation"). RDMAKIT_DECL marks those definitions; cold ones that
// are RDMAKIT_NOINLINE are declared without it (GCC warns on noinline inline declarations).
#if defined(RDMAKIT_SEPARATE_COMPILATION)
#define RDMAKIT_DECL
#else
#define RDMAKIT_DECL inline
#endif

#if defined(__GNUC__) || defined(__clang__)
#define RDMAKIT_LIKELY(x) __builtin_expect(!!(x), 1)
#define RDMAKIT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RDMAKIT_ALWAYS_INLINE inline __attribute__((always_inline))
// A lambda's (after its parameter list): one called from a hot loop and a cold path both.
#define RDMAKIT_INLINE_LAMBDA __attribute__((always_inline))
#define RDMAKIT_NOINLINE __attribute__((noinline, cold))
// Out of line but on a data path some programs run all the time (a CQ shared by many
// queue pairs routes every batch there): not cold, which GCC would compile for size.
#define RDMAKIT_OUT_OF_LINE __attribute__((noinline))
// The value may have changed, as far as the optimizer knows: a branch whose body uses it
// stays a branch (GCC turns `if (c) x |= k;` into arithmetic on c, whichever way c goes).
#define RDMAKIT_OPAQUE(x) __asm__ volatile("" : "+r"(x))
#else
#define RDMAKIT_LIKELY(x) (x)
#define RDMAKIT_UNLIKELY(x) (x)
#define RDMAKIT_ALWAYS_INLINE inline
#define RDMAKIT_INLINE_LAMBDA
#define RDMAKIT_NOINLINE
#define RDMAKIT_OUT_OF_LINE
#define RDMAKIT_OPAQUE(x) ((void)(x))
#endif
