#pragma once
// The completion verbs of backends::mock: channels, CQs, polls, notification
// requests and completion events. Every call takes the fabric lock; a wait for an
// event releases it between slices.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/engine.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/owning_ptr.hpp>
#include <rdmakit/detail/thread.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace backends {

namespace mockd = rdmakit::mock::detail;

RDMAKIT_DECL mock::channel mock::create_comp_channel(context ctx) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  auto ch = detail::make_unique_owner<mockd::channel_obj>();
  mockd::check_ready_fd(ch->ready, "ibv_create_comp_channel", "the channel's CQ events");
  ch->ctx = ctx;
  f.channels.insert(ch.get());  // the last step that may throw
  ++ctx->children;
  return ch.release();
}

RDMAKIT_DECL int mock::destroy_comp_channel(channel ch) noexcept {
  if (!ch) return EINVAL;
  auto& f = mockd::fab_of(ch);
  std::lock_guard lk(f.mu);
  if (ch->cqs) return EBUSY;  // CQs still report to it
  --ch->ctx->children;
  f.channels.erase(ch);
  delete ch;
  return 0;
}

RDMAKIT_DECL mock::cq mock::create_cq(context ctx, int cqe, channel ch, int comp_vector) {
  auto& f = mockd::fab_of(ctx);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  const auto& limits = f.devices[ctx->dev].cfg.limits;
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > limits.max_cqe)
    mockd::fail("ibv_create_cq", EINVAL,
                detail::cat("cqe ", cqe, " is outside 1..", limits.max_cqe, " (the device's max_cqe)"));
  if (comp_vector < 0 || static_cast<std::uint32_t>(comp_vector) >= limits.num_comp_vectors)
    mockd::fail("ibv_create_cq", EINVAL,
                detail::cat("comp_vector=", comp_vector, " is outside 0..", limits.num_comp_vectors - 1,
                            " (the device's num_comp_vectors)"));
  if (ch && ch->ctx != ctx) mockd::fail("ibv_create_cq", EINVAL, "the completion channel belongs to another device");
  auto& dev = f.devices[ctx->dev];
  mockd::check_room(dev.count.cq, limits.max_cq, "ibv_create_cq", "completion queues", "max_cq", dev);
  auto c = detail::make_unique_owner<mockd::cq_obj>();
  c->ctx = ctx;
  c->channel = ch;
  // rxe's ring has a power of two of slots, one kept empty, and reports what it holds
  // (create.grants_rounded_up); the spec profile grants exactly what was asked.
  c->capacity = cqe;
  if (f.as_rxe()) {
    std::uint32_t slots = 2;
    while (slots < static_cast<std::uint32_t>(cqe) + 1) slots *= 2;  // cqe <= max_cqe: no overflow
    c->capacity = static_cast<int>(slots - 1);
  }
  f.cqs.insert(c.get());  // the last step that may throw
  ++dev.count.cq;
  if (ch) ++ch->cqs;
  ++ctx->children;
  return c.release();
}

RDMAKIT_DECL int mock::cq_capacity(cq c) noexcept { return c->capacity; }

RDMAKIT_DECL int mock::destroy_cq(cq c) noexcept {
  if (!c) return EINVAL;
  auto& f = mockd::fab_of(c);
  std::lock_guard lk(f.mu);
  if (c->qps) return EBUSY;                            // a QP still uses it
  if (c->events_acked < c->events_delivered) return EBUSY;  // ibv_destroy_cq would wait forever
  if (c->channel) {
    auto& ev = c->channel->events;
    ev.erase(std::remove(ev.begin(), ev.end(), c), ev.end());
    c->channel->ready.sync(!ev.empty());
    --c->channel->cqs;
  }
  mockd::drop_async_events(f, c);
  --c->ctx->children;
  --f.devices[c->ctx->dev].count.cq;
  f.cqs.erase(c);
  delete c;
  return 0;
}

RDMAKIT_DECL int mock::poll_cq(cq c, int n, wc* out) noexcept {
  // A negative count: refused, or (rxe profile) none polled, as rxe's and mlx5's loops do
  // (deviations.hpp, cq.poll_negative_count).
  if (RDMAKIT_UNLIKELY(n < 0)) return mockd::fab_of(c).as_rxe() ? 0 : -EINVAL;
  auto& f = mockd::fab_of(c);
  std::lock_guard lk(f.mu);
  mockd::touch(f);
  mockd::run_due(f);
  int got = mockd::take(f, c, n, out);
  if (got == 0 && mockd::jump(f)) got = mockd::take(f, c, n, out);
  // Flushes of QPs moved to ERR are written once a poll has found nothing: as on a
  // device, a poll may find the CQ empty before they come.
  if (got == 0) mockd::write_due_flushes(f);
  return got;
}

RDMAKIT_DECL int mock::req_notify_cq(cq c, bool solicited_only) noexcept {
  auto& f = mockd::fab_of(c);
  std::function<void(const void*)> hook;
  {
    std::lock_guard lk(f.mu);
    mockd::touch(f);
    hook = f.arm_hook;
  }
  if (hook) hook(c);
  std::lock_guard lk(f.mu);
  if (!c->channel) return f.as_rxe() ? 0 : EINVAL;  // nothing could ever be notified
  // An arm for the next completion is not narrowed by a later solicited-only one before
  // the event (IBA C11-31/C11-32): the event still comes on the next completion.
  c->solicited_only = c->armed ? c->solicited_only && solicited_only : solicited_only;
  c->armed = true;
  mockd::write_due_flushes(f);  // a thread may now sleep on the channel (epoll) and poll nothing
  return 0;
}

RDMAKIT_DECL int mock::get_cq_event(channel ch, std::chrono::milliseconds timeout, cq& out) noexcept {
  auto& f = mockd::fab_of(ch);
  std::unique_lock lk(f.mu);
  if (!mockd::wait_for_event(f, lk, mockd::deadline_after(timeout), [&] { return !ch->events.empty(); }))
    return ETIMEDOUT;
  out = ch->events.front();
  ch->events.erase(ch->events.begin());
  ch->ready.sync(!ch->events.empty());
  ++out->events_delivered;
  return 0;
}

RDMAKIT_DECL void mock::ack_cq_events(cq c, unsigned n) noexcept {
  auto& f = mockd::fab_of(c);
  std::lock_guard lk(f.mu);
  c->events_acked = std::min(c->events_delivered, c->events_acked + n);
}

RDMAKIT_DECL int mock::channel_fd(channel ch) noexcept { return ch ? ch->ready.fd() : -1; }

RDMAKIT_DECL bool mock::progress_pending(channel ch) noexcept {
  if (!ch) return false;
  auto& f = mockd::fab_of(ch);
  std::lock_guard lk(f.mu);
  return mockd::pending(f);
}

}  // namespace backends
RDMAKIT_END_NAMESPACE
