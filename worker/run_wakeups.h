// RunWakeups: the wake-up callbacks a buffer collects under its lock (StepBuffer,
// CrossTrainerWindow), run once the lock is released: declared before the MutexLock, it is
// destroyed after it, so no callback runs under the buffer's lock.
//
// Not thread-safe: one per call, on the caller's stack.
#ifndef SLUICE_WORKER_RUN_WAKEUPS_H_
#define SLUICE_WORKER_RUN_WAKEUPS_H_

#include <functional>
#include <vector>

namespace sluice {

struct RunWakeups {
  std::vector<std::function<void()>> wake;
  ~RunWakeups() {
    for (auto& f : wake) f();
  }
};

}  // namespace sluice

#endif  // SLUICE_WORKER_RUN_WAKEUPS_H_
