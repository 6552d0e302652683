#pragma once
/// The mock backend's definitions, for separate compilation: in a program whose
/// translation units all define RDMAKIT_SEPARATE_COMPILATION, include this header in
/// exactly one of them (meson: the rdmakit_mock_separate_dep dependency does it).
/// The verbs, the fabric and the engine are then compiled there only.
#include <rdmakit/config.hpp>
#if !defined(RDMAKIT_COMPILING_SOURCES)
#define RDMAKIT_COMPILING_SOURCES  // the definition headers below may be included (config.hpp)
#endif
#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#error "<rdmakit/backends/mock/src.hpp> is for RDMAKIT_SEPARATE_COMPILATION builds; header-only builds include <rdmakit/backends/mock.hpp>"
#endif
#include <rdmakit/backends/mock/verbs.hpp>

#include <rdmakit/backends/mock/backend.hpp>
#include <rdmakit/detail/backend_instances.hpp>
#include <rdmakit/detail/qp_setup.hpp>
// The cold instantiations user translation units declare extern (detail/backend_instances.hpp).
RDMAKIT_BACKEND_INSTANCES(, ::rdmakit::backends::mock);
