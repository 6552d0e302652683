#pragma once
/// Umbrella header: the whole backend-agnostic library. Add a backend header
/// (<rdmakit/backends/mock.hpp> or <rdmakit/backends/ibverbs.hpp>) to use it. The
/// TCP endpoint exchange is not in here: it needs POSIX sockets and threads, and most
/// translation units do not exchange anything; include <rdmakit/connection.hpp>.
#include <rdmakit/config.hpp>  // first: below C++20, the compilation ends there
#include <rdmakit/address_handle.hpp>
#include <rdmakit/backend.hpp>
#include <rdmakit/completion.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/config.hpp>
#include <rdmakit/device.hpp>
#include <rdmakit/endpoint.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/grh.hpp>
#include <rdmakit/memory.hpp>
#include <rdmakit/memory_window.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/polling.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/protection_domain.hpp>
#include <rdmakit/qp_pool.hpp>
#include <rdmakit/queue_pair.hpp>
#include <rdmakit/shared_receive_queue.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>
#include <rdmakit/types.hpp>
