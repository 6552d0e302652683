#pragma once
/// The mock backend: an in-process HCA that follows docs/semantics.md (the spec
/// behaviour; where rxe differs the mock can be told so, see fabric_config). Progress is
/// driven by post and poll calls on a simulated clock, deterministic for a seed, and
/// safe when the two ends of a connection run on two threads.
///
/// Layers, each header self-contained: mock/fabric.hpp (the control plane tests use),
/// mock/backend.hpp (the backend type), mock/objects.hpp (the HCA's state),
/// mock/engine.hpp (rules, completions, wire, responder, requester, clock, checks:
/// one header each), mock/verbs.hpp
/// (the verbs' definitions).
///
/// With RDMAKIT_SEPARATE_COMPILATION this header only declares the verbs: the engine is
/// compiled once, in the translation unit that includes <rdmakit/backends/mock/src.hpp>.
#include <rdmakit/backends/mock/backend.hpp>
#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/backends/mock/verbs.hpp>
#endif

// Separate compilation: the backend's cold instantiations are its src.hpp's
// (detail/backend_instances.hpp says which, and why here or in detail/qp_setup.hpp).
#if defined(RDMAKIT_SEPARATE_COMPILATION) && !defined(RDMAKIT_COMPILING_SOURCES)
#define RDMAKIT_BACKENDS_MOCK_INCLUDED
#if defined(RDMAKIT_BACKEND_TEMPLATES_DEFINED)
#include <rdmakit/detail/backend_instances.hpp>
RDMAKIT_BACKEND_INSTANCES(extern, ::rdmakit::backends::mock);
#endif
#endif
