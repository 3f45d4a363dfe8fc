#include "server/rate_limiter.h"

#include <algorithm>

namespace sluice {

RateLimiter::RateLimiter(RateLimiterOptions options)
    : options_([&] {
        options.burst = std::max(options.burst, 1.0);
        options.max_keys = std::max<size_t>(options.max_keys, 1);
        return options;
      }()),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {
  overflow_.tokens = options_.burst;
  overflow_.refilled = clock_->Now();
}

bool RateLimiter::RefillLocked(Bucket& b, absl::Time now) const {
  const double elapsed = std::max(absl::ToDoubleSeconds(now - b.refilled), 0.0);
  b.tokens = std::min(options_.burst, b.tokens + elapsed * options_.per_second);
  b.refilled = now;
  return b.tokens >= options_.burst;
}

bool RateLimiter::Admit(absl::string_view key) {
  if (options_.per_second <= 0) return true;
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= options_.max_keys) {
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        if (RefillLocked(b->second, now)) {
          buckets_.erase(b++);
        } else {
          ++b;
        }
      }
    }
    if (buckets_.size() >= options_.max_keys) {
      RefillLocked(overflow_, now);
      if (overflow_.tokens < 1) return false;
      overflow_.tokens -= 1;
      return true;
    }
    it = buckets_.emplace(std::string(key), Bucket{options_.burst, now}).first;
  }
  Bucket& b = it->second;
  RefillLocked(b, now);
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

size_t RateLimiter::size() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

}  // namespace sluice
