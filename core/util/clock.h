// Clock: the injectable source of time for anything that measures liveness or intervals
// (heartbeats, worker timeouts). Production code uses Clock::Real(); tests use FakeClock and
// move time by hand, so no test depends on the wall clock.
//
// Thread safety: every Clock is safe to call from many threads.
#ifndef SLUICE_CORE_CLOCK_H_
#define SLUICE_CORE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The process-wide real clock (absl::Now()); never null, never destroyed.
  static Clock* Real();
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

inline Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

// A clock that stands still until Advance()/Set() moves it. Starts at the Unix epoch + 1 day,
// so that "time zero" is never confused with an unset absl::Time.
class FakeClock final : public Clock {
 public:
  FakeClock() = default;
  explicit FakeClock(absl::Time start) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(24);
};

}  // namespace sluice

#endif  // SLUICE_CORE_CLOCK_H_
