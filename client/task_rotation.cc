#include "client/task_rotation.h"

namespace sluice {

TaskRotation::TaskRotation(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks)
    : streams_(streams) {
  absl::MutexLock lock(&streams_->mu());
  rotation_ = streams_->AddAllTasksLocked(tasks);
}

absl::Status TaskRotation::Next(std::vector<Element>* replicas, bool* end_of_data) {
  absl::MutexLock lock(&streams_->mu());
  absl::Time waiting_since = absl::InfiniteFuture();  // read only once the caller waits
  while (true) {
    if (rotation_.empty()) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    const Turn turn = TakeTurnLocked();
    if (turn.task != nullptr) {
      streams_->PopLocked(turn.task, replicas);
      *end_of_data = false;
      return absl::OkStatus();
    }
    if (!turn.error.ok()) return turn.error;
    if (turn.look_again) continue;
    if (waiting_since == absl::InfiniteFuture()) waiting_since = absl::Now();
    if (turn.waiting_for != nullptr) {
      streams_->WaitForStepLocked(absl::MakeConstSpan(&turn.waiting_for, 1), waiting_since);
    } else {
      streams_->WaitForStepLocked(rotation_, waiting_since);
    }
  }
}

}  // namespace sluice
