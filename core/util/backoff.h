// Exponential backoff with jitter, for every retry loop in Sluice (clients reaching the
// coordinator or a worker, workers asking the coordinator for splits, collective peers
// connecting). The jitter spreads the retries of many processes that failed together (a
// coordinator restart seen by a thousand consumers) instead of having them hit the server in
// waves at the same instants.
//
//   Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
//   while (...) {
//     ... try; on success return ...
//     const absl::Duration wait = backoff.Next();
//     if (absl::Now() + wait > give_up) return error;
//     absl::SleepFor(wait);
//   }
//
// Thread safety: not thread-safe; one per retry loop.
#ifndef SLUICE_CORE_BACKOFF_H_
#define SLUICE_CORE_BACKOFF_H_

#include <cstdint>

#include "absl/time/time.h"
#include "core/util/jitter.h"

namespace sluice {

class Backoff {
 public:
  // Requires 0 < initial <= max. `random`: the jitter's source (tests inject a fixed one);
  // unset: seeded from the system's entropy.
  Backoff(absl::Duration initial, absl::Duration max, RandomSource random = nullptr);

  // The next wait: uniform in [d/2, d], where d is `initial` on the first call and doubles on
  // each call up to `max`.
  absl::Duration Next();
  // Back to `initial` (after progress).
  void Reset() { current_ = initial_; }

 private:
  const absl::Duration initial_;
  const absl::Duration max_;
  absl::Duration current_;
  RandomSource random_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_BACKOFF_H_
