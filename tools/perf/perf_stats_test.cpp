// rdmakit-perf's statistics (perf.hpp): what a long timed run keeps stays bounded, and
// the figures it reports stay exact where they can be (an audit: -D kept one mark per
// poll and one latency sample per operation, 20 MB/s without end).
#include "perf.hpp"

#include <doctest/doctest.h>

using namespace rdmakit_perf;

TEST_CASE("lat_samples: a run past what it keeps reports exact count, extremes and mean; keeps a fair sample") {
  lat_samples s(1000);
  // 10,000 samples: 1..10000 us, shuffled by a stride coprime with 10000.
  for (std::uint64_t i = 0; i < 10'000; ++i) s.add(static_cast<double>((i * 7919) % 10'000 + 1));
  const lat_result r = s.stats(64);
  CHECK(r.iters == 10'000);
  CHECK(r.t_min == 1);
  CHECK(r.t_max == 10'000);
  CHECK(r.t_avg == doctest::Approx(5000.5));
  CHECK(r.t_stdev == doctest::Approx(2886.75).epsilon(0.001));
  // A uniform sample of 1000: the median near 5000, p99 near 9900.
  CHECK(r.t_typical == doctest::Approx(5000).epsilon(0.1));
  CHECK(r.p99 == doctest::Approx(9900).epsilon(0.02));
}

TEST_CASE("lat_samples: below what it keeps, every sample counts (the percentiles as before)") {
  lat_samples s(1000);
  for (int i = 1; i <= 100; ++i) s.add(i);
  const lat_result r = s.stats(8);
  CHECK(r.iters == 100);
  CHECK(r.t_typical == 51);
  CHECK(r.p99 == 99);
  CHECK(r.p999 == 100);
}

TEST_CASE("marks_at::bound halves the marks at its limit, keeping the last; the peak stays a true window") {
  marks_at<std::uint64_t> m;
  for (std::uint64_t i = 1; i <= 1000; ++i) m.add(i * 10, i * 4);
  m.bound(2000);
  CHECK(m.v.size() == 1000);  // below the limit: untouched
  m.bound(1000);
  CHECK(m.v.size() == 500);
  CHECK(m.v.back() == std::pair<std::uint64_t, std::uint64_t>{10'000, 4000});
  for (std::size_t i = 1; i < m.v.size(); ++i) CHECK(m.v[i].second > m.v[i - 1].second);
  m.add(10'010, 4004);  // marks go on after it
  CHECK(m.v.size() == 501);
}

namespace {
clock_type::time_point at_us(std::int64_t us) { return clock_type::time_point{} + std::chrono::microseconds(us); }
}  // namespace

TEST_CASE("receive_bw_stats: a full CQ drained in batches is no peak; every message counts from the start") {
  // 160 messages of 1 MiB sent from t=0; the server's first poll is at 1000 us and
  // drains them, 16 a poll, one poll a microsecond. (send_bw's server took the drain's
  // speed, 16 messages a microsecond, for its average and peak, and left the first
  // poll's 16 out.)
  receive_marks m;
  std::uint64_t total = 0;
  for (int k = 0; k < 10; ++k) {
    total += 16;
    m.polled(at_us(1000 + k), at_us(1001 + k), total, false);  // each poll full: the CQ was not empty
  }
  m.polled(at_us(1010), at_us(1011), total, true);  // empty
  const bw_result r = receive_bw_stats(m, at_us(0), 1 << 20, 16);
  CHECK(r.iters == 160);
  CHECK(r.seconds == doctest::Approx(1010e-6));
  CHECK(r.avg_mb == doctest::Approx(160 / 1010e-6));
  CHECK(r.peak_mb == doctest::Approx(r.avg_mb));  // no window starts inside the drain
}

TEST_CASE("receive_bw_stats: every message in the first poll still gives a rate (it gave 0.00)") {
  receive_marks m;
  m.polled(at_us(10), at_us(11), 0, true);
  m.polled(at_us(40), at_us(41), 2, true);
  const bw_result r = receive_bw_stats(m, at_us(0), 65536, 128);
  CHECK(r.iters == 2);
  CHECK(r.seconds == doctest::Approx(41e-6));
  CHECK(r.avg_mb > 0);
  CHECK(r.mpps == doctest::Approx(2 / 41e-6 / 1e6));
  CHECK(r.peak_mb == doctest::Approx(r.avg_mb));  // fewer than a window: the average
}

TEST_CASE("receive_bw_stats: the peak's windows start where the CQ was seen empty") {
  // Slow for 100 us (a message every 10 us), then 100 messages in 10 us (one every
  // 100 ns), each poll finding the CQ empty after its message: the fast stretch is a
  // true window.
  auto at_ns = [](std::int64_t ns) { return clock_type::time_point{} + std::chrono::nanoseconds(ns); };
  receive_marks m;
  std::uint64_t total = 0;
  for (std::int64_t k = 0; k < 10; ++k) m.polled(at_ns(k * 10'000), at_ns(k * 10'000 + 50), ++total, true);
  for (std::int64_t k = 0; k < 100; ++k) m.polled(at_ns(100'000 + k * 100), at_ns(100'000 + k * 100 + 50), ++total, true);
  const bw_result r = receive_bw_stats(m, at_ns(0), 1 << 20, 50);
  CHECK(r.iters == 110);
  CHECK(r.seconds == doctest::Approx(109'950e-9));
  CHECK(r.avg_mb == doctest::Approx(110 / 109'950e-9));
  // 50 messages or more from one of the fast stretch's polls: about 10 a microsecond,
  // never more than the messages over the time from the poll before the first of them.
  CHECK(r.peak_mb > 9e6);
  CHECK(r.peak_mb <= 50 / 4'950e-9);
  // The same polls, none finding the CQ empty: every window starts at the run's start,
  // and the peak is the average.
  receive_marks full;
  for (const auto& [when, n] : m.ends.v) full.polled(when, when, n, false);
  const bw_result f = receive_bw_stats(full, at_ns(0), 1 << 20, 50);
  CHECK(f.peak_mb == doctest::Approx(f.avg_mb));
}

TEST_CASE("receive_marks: empty polls move the window's start to the latest, and bound keeps both lists") {
  receive_marks m;
  m.polled(at_us(1), at_us(2), 0, true);
  m.polled(at_us(5), at_us(6), 0, true);
  CHECK(m.ends.v.empty());
  REQUIRE(m.starts.v.size() == 1);
  CHECK(m.starts.v.back().first == at_us(5));
  for (std::uint64_t i = 1; i <= 100; ++i) m.polled(at_us(10 + 2 * i), at_us(11 + 2 * i), i, i % 2 == 0);
  CHECK(m.ends.v.size() == 100);
  CHECK(m.starts.v.size() == 51);
  m.bound(50);
  CHECK(m.ends.v.size() == 50);
  CHECK(m.ends.v.back().second == 100);
  CHECK(m.starts.v.size() < 51);
  CHECK(m.starts.v.back().second == 100);
}
