#pragma once
/// The ibverbs backend's setup verbs, for separate compilation: in a program whose
/// translation units all define RDMAKIT_SEPARATE_COMPILATION, include this header in
/// exactly one of them (meson: the rdmakit_ibverbs_separate_dep dependency does it).
#include <rdmakit/config.hpp>
#if !defined(RDMAKIT_COMPILING_SOURCES)
#define RDMAKIT_COMPILING_SOURCES  // the definition headers below may be included (config.hpp)
#endif
#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#error "<rdmakit/backends/ibverbs/src.hpp> is for RDMAKIT_SEPARATE_COMPILATION builds; header-only builds include <rdmakit/backends/ibverbs.hpp>"
#endif
#include <rdmakit/backends/ibverbs/device_verbs.hpp>
#include <rdmakit/backends/ibverbs/qp_verbs.hpp>
#include <rdmakit/backends/ibverbs/srq_verbs.hpp>

#include <rdmakit/backends/ibverbs.hpp>
#include <rdmakit/detail/backend_instances.hpp>
#include <rdmakit/detail/qp_setup.hpp>
// The cold instantiations user translation units declare extern (detail/backend_instances.hpp).
RDMAKIT_BACKEND_INSTANCES(, ::rdmakit::backends::ibverbs);
