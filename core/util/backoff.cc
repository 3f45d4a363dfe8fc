#include "core/util/backoff.h"

#include <algorithm>
#include <utility>

namespace sluice {

Backoff::Backoff(absl::Duration initial, absl::Duration max, RandomSource random)
    : initial_(initial), max_(std::max(initial, max)), current_(initial),
      random_(random ? std::move(random) : EntropyRandomSource()) {}

absl::Duration Backoff::Next() {
  const absl::Duration d = current_;
  current_ = std::min(current_ * 2, max_);
  return UniformDuration(d / 2, d, random_);
}

}  // namespace sluice
