#include "core/util/backoff.h"

#include <algorithm>
#include <random>

namespace sluice {

Backoff::Backoff(absl::Duration initial, absl::Duration max)
    : initial_(initial), max_(std::max(initial, max)), current_(initial),
      rng_(std::random_device{}()) {}

absl::Duration Backoff::Next() {
  const absl::Duration d = current_;
  current_ = std::min(current_ * 2, max_);
  const int64_t full = absl::ToInt64Nanoseconds(d);
  std::uniform_int_distribution<int64_t> jitter(full / 2, full);
  return absl::Nanoseconds(jitter(rng_));
}

}  // namespace sluice
