#include "core/obs/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sluice {

int LatencyHistogram::BucketOf(int64_t ns) {
  if (ns <= 0) return 0;
  const uint64_t v = static_cast<uint64_t>(ns);
  const int octave = std::bit_width(v) - 1;  // 2^octave <= v < 2^(octave + 1)
  if (octave >= kOctaves) return kBuckets - 1;
  // The position of v within its octave, in 1/kBucketsPerOctave steps of log2.
  const double frac = std::log2(static_cast<double>(v)) - octave;
  int sub = static_cast<int>(frac * kBucketsPerOctave);
  sub = std::clamp(sub, 0, kBucketsPerOctave - 1);
  return 1 + octave * kBucketsPerOctave + sub;
}

double LatencyHistogram::BucketValue(int b) {
  if (b == 0) return 0;
  const double lo = static_cast<double>(b - 1) / kBucketsPerOctave;
  return std::exp2(lo + 0.5 / kBucketsPerOctave);
}

void LatencyHistogram::Add(absl::Duration d) {
  const int64_t ns = std::max<int64_t>(absl::ToInt64Nanoseconds(d), 0);
  ++buckets_[static_cast<size_t>(BucketOf(ns))];
  if (count_ == 0 || ns < min_ns_) min_ns_ = ns;
  if (count_ == 0 || ns > max_ns_) max_ns_ = ns;
  ++count_;
  sum_ns_ += static_cast<double>(ns);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  min_ns_ = count_ == 0 ? other.min_ns_ : std::min(min_ns_, other.min_ns_);
  max_ns_ = count_ == 0 ? other.max_ns_ : std::max(max_ns_, other.max_ns_);
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
}

absl::Duration LatencyHistogram::min() const { return absl::Nanoseconds(min_ns_); }
absl::Duration LatencyHistogram::max() const { return absl::Nanoseconds(max_ns_); }

absl::Duration LatencyHistogram::mean() const {
  if (count_ == 0) return absl::ZeroDuration();
  return absl::Nanoseconds(sum_ns_ / static_cast<double>(count_));
}

absl::Duration LatencyHistogram::Quantile(double q) const {
  if (count_ == 0) return absl::ZeroDuration();
  q = std::clamp(q, 0.0, 1.0);
  const int64_t rank =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * static_cast<double>(count_))));
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[static_cast<size_t>(b)];
    if (seen >= rank) {
      if (b == kBuckets - 1) return max();  // beyond the last octave: only max() is known
      const double v = std::clamp(BucketValue(b), static_cast<double>(min_ns_),
                                  static_cast<double>(max_ns_));
      return absl::Nanoseconds(v);
    }
  }
  return max();
}

}  // namespace sluice
