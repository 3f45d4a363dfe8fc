#include "core/util/mutex_deadlock_detection.h"

#include "absl/synchronization/mutex.h"

namespace sluice {

void SkipMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace sluice
