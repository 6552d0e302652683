#pragma once
// Versioned inline namespace, as in {fmt}: ABI changes bump it, source stays the same.
#define RDMAKIT_VERSION_MAJOR 0
#define RDMAKIT_VERSION_MINOR 1
#define RDMAKIT_BEGIN_NAMESPACE \
  namespace rdmakit {           \
  inline namespace v0 {
#define RDMAKIT_END_NAMESPACE \
  }                           \
  }

#if defined(__GNUC__) || defined(__clang__)
#define RDMAKIT_LIKELY(x) __builtin_expect(!!(x), 1)
#define RDMAKIT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RDMAKIT_ALWAYS_INLINE inline __attribute__((always_inline))
#define RDMAKIT_NOINLINE __attribute__((noinline, cold))
#else
#define RDMAKIT_LIKELY(x) (x)
#define RDMAKIT_UNLIKELY(x) (x)
#define RDMAKIT_ALWAYS_INLINE inline
#define RDMAKIT_NOINLINE
#endif
