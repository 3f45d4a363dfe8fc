// RateLimiter: a token bucket per key (a caller identity), so that one caller polling in a
// loop is refused while the others go on. Each key's bucket holds up to `burst` tokens and
// refills at `per_second`; a call takes one token or is refused.
//
// Bounded: at most max_keys buckets are kept. When the table is full, buckets that refilled
// completely (they hold nothing a new one would not) are dropped; if none did, callers without
// a bucket share one overflow bucket, so that many identities cannot grow the table or
// escape the limit.
//
//   RateLimiter polls({.per_second = 20, .burst = 40});
//   if (!polls.Admit(identity)) return RESOURCE_EXHAUSTED ...;
//
// Thread safety: thread-safe.
#ifndef SLUICE_SERVER_RATE_LIMITER_H_
#define SLUICE_SERVER_RATE_LIMITER_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/util/clock.h"

namespace sluice {

struct RateLimiterOptions {
  // Tokens added per second to each bucket. 0 or less: no limit (Admit always true).
  double per_second = 0;
  // Tokens a bucket holds at most (a burst a caller may spend at once). At least 1.
  double burst = 1;
  // Buckets kept at most (see the class comment). At least 1.
  size_t max_keys = 10000;
  // Time source. Borrowed: must outlive the limiter. nullptr: the real clock.
  Clock* clock = nullptr;
};

class RateLimiter {
 public:
  explicit RateLimiter(RateLimiterOptions options);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // Takes a token from `key`'s bucket: true if there was one, false if the caller is over its
  // rate (and nothing is taken).
  bool Admit(absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  const RateLimiterOptions& options() const { return options_; }
  // Buckets kept now (tests: bounded by max_keys).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time refilled;
  };
  // Refills `b` to `now`; true if it is full.
  bool RefillLocked(Bucket& b, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RateLimiterOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  Bucket overflow_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_SERVER_RATE_LIMITER_H_
