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
