#pragma once
/// The core's non-template definitions (text conversions, error messages and
/// constructors, completion texts, the cold checks of device opening and queue pair
/// setup), for separate compilation: in a
/// program whose translation units all define RDMAKIT_SEPARATE_COMPILATION, include
/// this header in exactly one of them, with the src.hpp of each backend the program
/// uses (<rdmakit/backends/mock/src.hpp>, <rdmakit/backends/ibverbs/src.hpp>). meson:
/// the rdmakit_separate_dep dependency does it (the backends' separate dependencies
/// include it).
#include <rdmakit/config.hpp>
#if !defined(RDMAKIT_COMPILING_SOURCES)
#define RDMAKIT_COMPILING_SOURCES  // the definition headers below may be included (config.hpp)
#endif
#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#error "<rdmakit/src.hpp> is for RDMAKIT_SEPARATE_COMPILATION builds; header-only builds include <rdmakit/rdmakit.hpp>"
#endif
#include <rdmakit/detail/completion_impl.hpp>
#include <rdmakit/detail/device_impl.hpp>
#include <rdmakit/detail/error_impl.hpp>
#include <rdmakit/detail/gid_choice_impl.hpp>
#include <rdmakit/detail/qp_setup_impl.hpp>
#include <rdmakit/detail/text_impl.hpp>
#include <rdmakit/detail/types_impl.hpp>
