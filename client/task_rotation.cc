#include "client/task_rotation.h"

namespace sluice {

TaskRotation::TaskRotation(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks)
    : streams_(streams) {
  absl::MutexLock lock(&streams_->mu());
  rotation_ = streams_->AddAllTasksLocked(tasks);
}

absl::Status TaskRotation::Next(std::vector<Element>* replicas, bool* end_of_data) {
  absl::MutexLock lock(&streams_->mu());
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
    streams_->cv().Wait(&streams_->mu());
  }
}

}  // namespace sluice
