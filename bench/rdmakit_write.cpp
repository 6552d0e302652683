// rdmakit_write — raw_verbs_write's loop on rdmakit's policy layer (ibverbs backend), for
// bench/rxe_instructions.sh: the same two RC queue pairs of one process connected to
// each other, the same WRITEs, signaling and post lists, written as an application
// would write it with rdmakit (signal_every<16>, busy_poll<16>, the ledger's send
// credits, `qp.write` or a `send_batch`). Against raw_verbs_write it measures the
// library; against rdmakit-perf, what the tool adds around the library.
//
//   rdmakit_write [-d DEV] [-s BYTES] [-n WRS] [-l LIST] [-P]      (-Q is 16, -t 128)
//
// Defaults: -d $RDMAKIT_DEVICE (else the first device), -s 64, -n 8192, -l 1. No inline
// data (as the other programs on rxe). -P posts as raw_verbs_write and perftest do: the
// WR (or the list) is built once, `qp.prepare` (or a `send_batch` with `reuse()`), and
// each post rewrites only the flags the policy changes; the wr_ids then repeat, so the
// loop counts its completions from the credits instead. Exit 0 when every WR completed
// successfully.
#include <rdmakit/backends/ibverbs.hpp>
#include <rdmakit/rdmakit.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

using namespace rdmakit;
using B = backends::ibverbs;
using S = signal_every<16>;
using P = busy_poll<16>;
constexpr auto rights = access::local_write | access::remote_write;
constexpr std::uint32_t sq_depth = 128;
constexpr std::uint32_t max_list = 64;
using live_qp = queue_pair<B, rc, S, qp_state::rts>;
using remote_t = remote_region<access::remote_write>;

struct options {
  std::string device;
  std::uint32_t size = 64;
  std::uint64_t iters = 8192;
  std::uint32_t list = 1;
  bool prepared = false;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rdmakit_write: %s\n", what.c_str());
  std::exit(1);
}

// The data phase; returns the number of waits that delivered completions.
__attribute__((noinline)) std::uint64_t write_loop(live_qp& qp, completion_queue<B, P>& cq, const local_buffer src,
                                                   const remote_t dst, const options& o) {
  const std::uint64_t n = o.iters;
  const std::uint32_t list = o.list;
  std::uint64_t posted = 0, completed = 0, waits = 0;
  bool failed = false;
  auto on_wc = [&](const completion<B>& c) noexcept {
    if (!c.ok()) failed = true;
    completed = c.wr_id() + 1;  // a signaled WR completes every WR before it
  };
  while (completed < n) {
    while (posted < n && qp.send_credits() >= list) {
      if (list == 1) {
        const post_result r = qp.write(src, dst, posted, posted == n - 1 ? send_flags::signaled : send_flags::none);
        if (!r) die(std::string("couldn't post: ") + r.message());
        ++posted;
      } else {
        auto batch = live_qp::make_batch<max_list>();
        const std::uint64_t k_end = std::min<std::uint64_t>(list, n - posted);
        for (std::uint64_t k = 0; k < k_end; ++k)
          (void)batch.write(src, dst, posted + k, posted + k == n - 1 ? send_flags::signaled : send_flags::none);
        const post_result r = qp.post(batch);
        if (!r) die(std::string("couldn't post a list: ") + r.message());
        posted += k_end;
      }
    }
    const wait_result w = cq.wait(on_wc, std::chrono::milliseconds(60'000));
    if (w.failed() || w.timed_out() || failed) die("a completion failed, or none came");
    ++waits;
  }
  return waits;
}

// -P: the WR or the list built once. Every 16th WR is signaled by the policy, and
// -n is a multiple of 16 and of the list, so the last WR is signaled too; the run is
// over when every credit is back.
__attribute__((noinline)) std::uint64_t prepared_loop(live_qp& qp, completion_queue<B, P>& cq, const local_buffer src,
                                                      const remote_t dst, const options& o) {
  const std::uint64_t n = o.iters;
  const std::uint32_t list = o.list;
  std::uint64_t posted = 0, waits = 0;
  const std::uint32_t depth = qp.send_credits();
  auto one = qp.prepare(op::write{src, dst}, 0);
  auto batch = live_qp::make_batch<max_list>();
  batch.reuse();
  for (std::uint32_t k = 0; k < list; ++k) (void)batch.write(src, dst, k);
  while (posted < n || qp.send_credits() < depth) {
    // Post until the ledger runs out of credits: sq_full is its "reap now".
    // Each result is read where it is made: one kept across iterations made GCC carry
    // it packed in registers through the loop, +15 instructions per post.
    if (list == 1) {
      while (posted < n) {
        const post_result r = qp.post(one);
        if (r.status == post_status::sq_full) break;
        if (!r) die(std::string("couldn't post: ") + r.message());
        ++posted;
      }
    } else {
      while (posted < n) {
        const post_result r = qp.post(batch);
        if (r.status == post_status::sq_full) break;
        if (!r) die(std::string("couldn't post a list: ") + r.message());
        posted += list;
      }
    }
    const wait_result w = cq.wait(std::chrono::milliseconds(60'000));
    if (w.failed() || w.timed_out() || qp.in_error()) die("a completion failed, or none came");
    ++waits;
  }
  return waits;
}

std::uint64_t number(const char* s, const char* opt) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (!*s || *end) die(std::string(opt) + " wants a number, got " + s);
  return v;
}

}  // namespace

int main(int argc, char** argv) try {
  options o;
  if (const char* d = std::getenv("RDMAKIT_DEVICE")) o.device = d;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("rdmakit_write [-d DEV] [-s BYTES] [-n WRS] [-l LIST] [-P]\n");
      return 0;
    }
    if (a == "-P") {
      o.prepared = true;
      continue;
    }
    if (i + 1 >= argc) die(a + " wants a value");
    const char* v = argv[++i];
    if (a == "-d") o.device = v;
    else if (a == "-s") o.size = static_cast<std::uint32_t>(number(v, "-s"));
    else if (a == "-n") o.iters = number(v, "-n");
    else if (a == "-l") o.list = static_cast<std::uint32_t>(number(v, "-l"));
    else die("unknown option " + a);
  }
  if (o.list < 1 || o.list > max_list || o.iters < 1) die("need 1 <= -l <= 64 and -n >= 1");
  if (o.prepared && (o.iters % 16 != 0 || o.iters % o.list != 0 || (o.list > 1 && o.list % 16 != 0)))
    die("-P needs -n a multiple of 16 and of -l, and -l 1 or a multiple of 16 (every list ends on a signal)");

  device<B> dev(o.device.empty() ? B::device_names().at(0) : o.device);
  auto pd = dev.create_pd();
  const std::size_t slot = (o.size + 63) / 64 * 64;
  auto mr = pd.allocate<rights>(2 * slot);
  auto cq = dev.create_cq<P>(2 * sq_depth);
  const qp_cap caps{.max_send_wr = sq_depth, .max_recv_wr = 1};
  auto x = pd.create_qp<rc, S>(cq, caps);
  auto y = pd.create_qp<rc, S>(cq, caps);
  const endpoint ex = x.local_endpoint();
  live_qp a = std::move(x).connect(y.local_endpoint());
  live_qp b = std::move(y).connect(ex);

  const local_buffer src = mr.local(0, o.size);
  const remote_t dst = mr.remote().sub(slot, o.size);
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t waits = o.prepared ? prepared_loop(a, cq, src, dst, o) : write_loop(a, cq, src, dst, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rdmakit_write: %s, RC, %u B, %llu WRs, post list %u%s, signal_every<16>, busy_poll<16>, SQ %u: "
              "%llu waits, %.3f Mpps\n",
              dev.name().c_str(), o.size, static_cast<unsigned long long>(o.iters), o.list,
              o.prepared ? " (prepared)" : "", sq_depth,
              static_cast<unsigned long long>(waits), secs > 0 ? static_cast<double>(o.iters) / secs / 1e6 : 0.0);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "rdmakit_write: %s\n", e.what());
  return 1;
}
