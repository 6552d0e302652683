#ifndef RDMAKIT_TESTS_COMPILE_FAIL_CASES_HPP  // a guard, not #pragma once: meson.build precompiles this header (GCC)
#define RDMAKIT_TESTS_COMPILE_FAIL_CASES_HPP
// Shared declarations for the compile-fail cases. They only need to type-check, so the
// objects come from declared-but-undefined functions over the archetype backend (which
// proves the checks rely on the verbs_backend concept alone).
#include <rdmakit/rdmakit.hpp>

using B = rdmakit::archetype_backend;
using namespace rdmakit;

inline constexpr rdmakit::access all_rights =
    rdmakit::access::local_write | rdmakit::access::remote_read | rdmakit::access::remote_write | rdmakit::access::remote_atomic;

template <class T, class S = signal_all>
queue_pair<B, T, S, qp_state::rts>& connected();
template <class T, class S = signal_all>
queue_pair<B, T, S, qp_state::init>& fresh();
memory_region<B, all_rights>& region();
memory_region<B, rdmakit::access::local_write>& local_only_region();
protection_domain<B>& pd();
completion_queue<B>& cq();
address_handle<B>& ah();
#endif
