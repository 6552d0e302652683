#pragma once
// The verbs of backends::mock, one header per group: devices and memory, completions,
// queue pairs, posting, shared receive queues. Each checks its arguments with errors that say what to do,
// then drives the engine under the fabric lock.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/cm_verbs.hpp>
#include <rdmakit/backends/mock/cq_verbs.hpp>
#include <rdmakit/backends/mock/device_verbs.hpp>
#include <rdmakit/backends/mock/post_verbs.hpp>
#include <rdmakit/backends/mock/qp_verbs.hpp>
#include <rdmakit/backends/mock/srq_verbs.hpp>
