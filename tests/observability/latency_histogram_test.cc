// LatencyHistogram: quantiles within one bucket (1.1%) of the exact sorted-order value, exact
// min/max/mean, empty and merged histograms.
#include "core/obs/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

double Ns(absl::Duration d) { return absl::ToDoubleNanoseconds(d); }

// The exact q-quantile as LatencyHistogram defines it: rank ceil(q * n), at least 1.
int64_t Exact(std::vector<int64_t> v, double q) {
  std::sort(v.begin(), v.end());
  int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * v.size())));
  return v[static_cast<size_t>(rank - 1)];
}

TEST(LatencyHistogramTest, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0);
  EXPECT_EQ(h.Quantile(0.5), absl::ZeroDuration());
  EXPECT_EQ(h.min(), absl::ZeroDuration());
  EXPECT_EQ(h.max(), absl::ZeroDuration());
  EXPECT_EQ(h.mean(), absl::ZeroDuration());
}

TEST(LatencyHistogramTest, QuantilesWithinOneBucketOfTheExactValue) {
  std::mt19937_64 rng(7);
  // Log-uniform from 10 ns to 10 s: every octave the histogram covers in practice.
  std::uniform_real_distribution<double> exponent(1, 10);
  std::vector<int64_t> samples;
  LatencyHistogram h;
  for (int i = 0; i < 100000; ++i) {
    const int64_t ns = static_cast<int64_t>(std::pow(10.0, exponent(rng)));
    samples.push_back(ns);
    h.Add(absl::Nanoseconds(ns));
  }
  ASSERT_EQ(h.count(), 100000);
  for (double q : {0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const double exact = static_cast<double>(Exact(samples, q));
    EXPECT_NEAR(Ns(h.Quantile(q)), exact, exact * 0.011) << "q=" << q;
  }
  EXPECT_EQ(Ns(h.min()), static_cast<double>(*std::min_element(samples.begin(), samples.end())));
  EXPECT_EQ(Ns(h.max()), static_cast<double>(*std::max_element(samples.begin(), samples.end())));
}

TEST(LatencyHistogramTest, ConstantSamplesGiveThatValueExactly) {
  // Clamped to [min, max]: a single repeated value is reported as itself.
  LatencyHistogram h;
  for (int i = 0; i < 10; ++i) h.Add(absl::Microseconds(3));
  EXPECT_EQ(h.Quantile(0.5), absl::Microseconds(3));
  EXPECT_EQ(h.Quantile(0.99), absl::Microseconds(3));
  EXPECT_EQ(h.mean(), absl::Microseconds(3));
}

TEST(LatencyHistogramTest, ZeroNegativeAndHugeDurations) {
  LatencyHistogram h;
  h.Add(absl::ZeroDuration());
  h.Add(-absl::Seconds(1));  // counts as zero
  h.Add(absl::Hours(100));   // beyond the last octave: the last bucket, max still exact
  EXPECT_EQ(h.count(), 3);
  EXPECT_EQ(h.Quantile(0.5), absl::ZeroDuration());
  EXPECT_EQ(h.max(), absl::Hours(100));
  EXPECT_EQ(h.Quantile(1.0), absl::Hours(100));
}

TEST(LatencyHistogramTest, MergeEqualsAddingEverything) {
  LatencyHistogram a, b, all;
  for (int i = 1; i <= 1000; ++i) {
    (i % 3 == 0 ? a : b).Add(absl::Nanoseconds(i * 17));
    all.Add(absl::Nanoseconds(i * 17));
  }
  LatencyHistogram merged = a;
  merged.Merge(b);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_EQ(merged.mean(), all.mean());
  for (double q : {0.1, 0.5, 0.99}) EXPECT_EQ(merged.Quantile(q), all.Quantile(q)) << q;
  LatencyHistogram empty;
  empty.Merge(a);
  EXPECT_EQ(empty.min(), a.min());
  EXPECT_EQ(empty.Quantile(0.5), a.Quantile(0.5));
}

}  // namespace
}  // namespace sluice
