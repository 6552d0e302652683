// rxe_window.so — an LD_PRELOAD helper for bench/rxe_instructions.sh: marks, for
// callgrind, the data phase of a program that posts RDMA WRITEs with ibv_post_send and
// reaps them with ibv_poll_cq, so that raw verbs, perftest (a stripped binary) and
// rdmakit-perf are counted over exactly the same window.
//
// ibv_post_send and ibv_poll_cq are inline functions of <infiniband/verbs.h> that call
// through ctx->ops; this library interposes ibv_open_device and points those two entries
// at wrappers (the provider's own functions are called from them, unchanged):
//
// - window start: the first ibv_post_send (callgrind collection on; run valgrind with
//   --collect-atstart=no);
// - window end: when the WRs known complete reach RXE_WIN_WRS (collection off, dump
//   "rxe-window"), i.e. right after the poll that returns the last completion. A send
//   completion completes its WR and every unsignaled WR before it (the wrapper keeps the
//   position of each signaled WR posted), whatever the program's moderation;
// - inside the window a poll that returns 0 is not returned to the program: the wrapper
//   polls again until it gets a completion (or 30 s pass), so the program never runs an
//   empty iteration of its loop. The provider's empty polls are counted (`empty`) and
//   their cost subtracted by the script;
// - after the window: RXE_WIN_CALIB empty polls of the same CQ alone (dump
//   "rxe-calibration"), which gives the exact cost of one empty poll;
// - RXE_WIN_STATS: a file that receives "key value" lines (posts, wrs, polls, empty,
//   cqes, completed, calib, calib_nonempty, status_errors, window_closed).
//
// The wrappers' own instructions are in this object; the script leaves this object out.
// Not part of the library; only built when libibverbs and valgrind/callgrind.h are found.
#include <infiniband/verbs.h>
#include <valgrind/callgrind.h>

#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

using post_send_fn = int (*)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
using poll_cq_fn = int (*)(ibv_cq*, int, ibv_wc*);
using open_fn = ibv_context* (*)(ibv_device*);

post_send_fn real_post_send = nullptr;
poll_cq_fn real_poll_cq = nullptr;

enum class phase { before, inside, after };
phase state = phase::before;

unsigned long long wrs_expected = 0;
unsigned long long posts = 0, wrs = 0, polls = 0, empty = 0, cqes = 0, completed = 0, status_errors = 0;
// Positions (WR counts) of the signaled WRs posted and not yet completed, in order.
constexpr unsigned ring_size = 1u << 16;
unsigned long long signaled_at[ring_size];
unsigned long long ring_head = 0, ring_tail = 0;
unsigned long long calib = 0, calib_nonempty = 0;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void write_stats() {
  const char* path = std::getenv("RXE_WIN_STATS");
  if (!path || !*path) return;
  if (FILE* f = std::fopen(path, "w")) {
    std::fprintf(f, "posts %llu\nwrs %llu\npolls %llu\nempty %llu\ncqes %llu\ncompleted %llu\ncalib %llu\n"
                 "calib_nonempty %llu\nstatus_errors %llu\nwindow_closed %d\n",
                 posts, wrs, polls, empty, cqes, completed, calib, calib_nonempty, status_errors,
                 state == phase::after ? 1 : 0);
    std::fclose(f);
  }
}

// Empty polls of the (now drained) CQ alone: their cost per call is what an empty poll
// inside the window cost.
__attribute__((noinline)) void calibrate(ibv_cq* cq, int n) {
  ibv_wc wc[64];
  if (n > 64) n = 64;
  if (n < 1) n = 1;
  const char* m = std::getenv("RXE_WIN_CALIB");
  const unsigned long long count = m ? std::strtoull(m, nullptr, 10) : 1000;
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  for (unsigned long long i = 0; i < count; ++i)
    if (real_poll_cq(cq, n, wc) != 0) ++calib_nonempty;
  CALLGRIND_TOGGLE_COLLECT;
  CALLGRIND_DUMP_STATS_AT("rxe-calibration");
  calib = count;
}

void end_window(ibv_cq* cq, int n) {
  CALLGRIND_TOGGLE_COLLECT;
  CALLGRIND_DUMP_STATS_AT("rxe-window");
  state = phase::after;
  calibrate(cq, n);
  write_stats();
}

int win_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (state == phase::before) {
    state = phase::inside;
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
  }
  if (state == phase::inside) {
    ++posts;
    for (ibv_send_wr* w = wr; w; w = w->next) {
      ++wrs;
      if (w->send_flags & IBV_SEND_SIGNALED) signaled_at[ring_tail++ % ring_size] = wrs;
    }
  }
  return real_post_send(qp, wr, bad);
}

int win_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  if (state != phase::inside) return real_poll_cq(cq, n, wc);
  int r = real_poll_cq(cq, n, wc);
  ++polls;
  if (r == 0) {
    const double deadline = now_s() + 30;
    for (unsigned i = 1; r == 0; ++i) {
      ++empty;
      if (i % 1024 == 0 && now_s() > deadline) return 0;
      r = real_poll_cq(cq, n, wc);
    }
  }
  if (r > 0) {
    for (int i = 0; i < r; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) ++status_errors;
      if (ring_head < ring_tail) completed = signaled_at[ring_head++ % ring_size];
    }
    cqes += static_cast<unsigned long long>(r);
    if (wrs_expected && completed >= wrs_expected) end_window(cq, n);
  }
  return r;
}

}  // namespace

extern "C" ibv_context* ibv_open_device(ibv_device* dev) {
  static open_fn next = reinterpret_cast<open_fn>(dlsym(RTLD_NEXT, "ibv_open_device"));
  if (!next) return nullptr;
  ibv_context* ctx = next(dev);
  if (!ctx) return ctx;
  if (const char* e = std::getenv("RXE_WIN_WRS")) wrs_expected = std::strtoull(e, nullptr, 10);
  if (!real_post_send) {
    real_post_send = ctx->ops.post_send;
    real_poll_cq = ctx->ops.poll_cq;
  }
  if (ctx->ops.post_send == real_post_send && ctx->ops.poll_cq == real_poll_cq) {
    ctx->ops.post_send = win_post_send;
    ctx->ops.poll_cq = win_poll_cq;
  } else {
    std::fprintf(stderr, "rxe_window: a second device with other provider functions: not counted\n");
  }
  return ctx;
}

// If a program that opened a device ends before the window closed, say so in the stats
// (processes that never opened one, e.g. `timeout` around valgrind, write nothing).
__attribute__((destructor)) static void rxe_window_fini() {
  if (real_post_send && state != phase::after) write_stats();
}
