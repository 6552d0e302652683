#pragma once
// RDMAKIT_TEST_SANITIZED: defined in a build with AddressSanitizer or ThreadSanitizer
// (GCC's macros, clang's __has_feature), for tests whose size or allocation a sanitizer
// changes. RDMAKIT_TEST_TSAN: with ThreadSanitizer, which does not follow a fork of a
// threaded program (the tests that fork a child to see it abort skip it).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RDMAKIT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RDMAKIT_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define RDMAKIT_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMAKIT_TEST_TSAN 1
#endif
#endif
