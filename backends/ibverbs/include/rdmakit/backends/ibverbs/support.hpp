#pragma once
// What the ibverbs backend's setup verbs share: errno handling, device names for
// messages, non-blocking fds and a bounded wait on them, the raw device limits.
#include <rdmakit/backends/ibverbs/convert.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

[[noreturn]] inline void fail(const char* verb, int err, const std::string& detail) {
  throw verbs_error(verb, err, detail);
}

inline std::string ctx_name(const ibv_context* ctx) {
  const char* n = ctx && ctx->device ? ibv_get_device_name(ctx->device) : nullptr;
  return n ? n : "(unknown device)";
}

inline int set_nonblocking(int fd) noexcept {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return errno;
  if (flags & O_NONBLOCK) return 0;
  return ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ? errno : 0;
}

/// Waits up to `timeout` (negative or over a year: forever) for `fd` to be readable,
/// then calls `take()` (which returns 0 or an errno). EAGAIN from `take` (another
/// reader won the race) waits again. Returns 0, ETIMEDOUT or an errno.
template <class Take>
int wait_then(int fd, std::chrono::milliseconds timeout, Take take) noexcept {
  using clock = std::chrono::steady_clock;
  const bool forever = timeout.count() < 0 || timeout > std::chrono::hours(24 * 366);
  const auto deadline = clock::now() + (forever ? std::chrono::milliseconds{0} : timeout);
  for (;;) {
    int wait_ms = -1;
    if (!forever) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      wait_ms = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : static_cast<int>(left);
    }
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) {
      if (!forever && clock::now() >= deadline) return ETIMEDOUT;
      continue;
    }
    const int r = take();
    if (r != EAGAIN && r != EWOULDBLOCK) return r;
    if (!forever && clock::now() >= deadline) return ETIMEDOUT;
  }
}

inline ibv_device_attr query_raw(ibv_context* ctx) {
  ibv_device_attr a;
  std::memset(&a, 0, sizeof a);
  if (int err = rc_errno(ibv_query_device(ctx, &a)))
    fail("ibv_query_device", err, cat("querying ", ctx_name(ctx)));
  return a;
}

inline const char* memlock_hint() noexcept {
  return "the locked-memory limit may be too low: check `ulimit -l` (raise memlock in "
         "/etc/security/limits.conf or run the container with --ulimit memlock=-1)";
}

inline std::string caps_string(const qp_cap& c) {
  return cat("max_send_wr=", c.max_send_wr, " max_recv_wr=", c.max_recv_wr, " max_send_sge=", c.max_send_sge,
             " max_recv_sge=", c.max_recv_sge, " max_inline_data=", c.max_inline_data);
}

inline std::uint32_t nonneg(int v) noexcept { return v < 0 ? 0u : static_cast<std::uint32_t>(v); }

// ibv_get_device_list sets errno; no errno at all means no device support.
inline int list_errno() noexcept { return errno != 0 ? errno : ENODEV; }

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
