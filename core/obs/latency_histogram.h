// LatencyHistogram: quantiles (p50, p99, ...) of a stream of durations in bounded memory.
//
// Durations are counted in log-spaced buckets, 64 per power of two of nanoseconds, so a
// quantile is known to within 1.1% of its value whatever the number of samples, in a fixed
// ~20 KiB. The minimum, maximum and mean are exact. Used by `sluicectl bench` for the trainer's
// wait for input per step.
//
//   LatencyHistogram h;
//   for (...) h.Add(absl::Nanoseconds(ns));
//   absl::Duration p99 = h.Quantile(0.99);
//
// Thread safety: none; one writer (merge per-thread histograms with Merge()).
#ifndef SLUICE_CORE_OBS_LATENCY_HISTOGRAM_H_
#define SLUICE_CORE_OBS_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstdint>

#include "absl/time/time.h"

namespace sluice {

class LatencyHistogram {
 public:
  // Sub-buckets per power of two; the relative width of a bucket is 2^(1/64) - 1 = 1.09%.
  static constexpr int kBucketsPerOctave = 64;
  // Durations up to 2^42 ns (~73 minutes) have their own bucket; longer ones share the last.
  static constexpr int kOctaves = 42;

  // Counts one duration; a negative one counts as zero.
  void Add(absl::Duration d);
  // Adds every sample of `other`.
  void Merge(const LatencyHistogram& other);

  int64_t count() const { return count_; }
  // Exact; zero when empty.
  absl::Duration min() const;
  absl::Duration max() const;
  absl::Duration mean() const;
  // The q-quantile (q in [0, 1], clamped), to within one bucket (1.1%), and never outside
  // [min(), max()]: the value of the sample of rank ceil(q * count) (at least 1) in sorted
  // order, estimated as its bucket's geometric middle (max() for a sample beyond the last
  // octave). Zero when empty.
  absl::Duration Quantile(double q) const;

 private:
  static constexpr int kBuckets = 1 + kOctaves * kBucketsPerOctave;  // [0] counts 0 ns
  static int BucketOf(int64_t ns);
  // The geometric middle of bucket `b`'s range, in ns.
  static double BucketValue(int b);

  std::array<int64_t, kBuckets> buckets_{};
  int64_t count_ = 0;
  int64_t min_ns_ = 0;
  int64_t max_ns_ = 0;
  double sum_ns_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_OBS_LATENCY_HISTOGRAM_H_
