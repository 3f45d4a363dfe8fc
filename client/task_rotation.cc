#include "client/task_rotation.h"

#include "core/util/status_macros.h"

namespace sluice {

TaskRotation::TaskRotation(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks)
    : streams_(streams) {
  absl::MutexLock lock(&streams_->mu());
  rotation_ = streams_->AddAllTasksLocked(tasks);
}

absl::Status TaskRotation::Next(std::vector<Element>* replicas, bool* end_of_data) {
  if (batch_next_ == batch_.size()) {
    absl::MutexLock lock(&streams_->mu());
    RETURN_IF_ERROR(RefillLocked(end_of_data));
    if (*end_of_data) return absl::OkStatus();
  }
  *replicas = std::move(batch_[batch_next_++]);
  *end_of_data = false;
  return absl::OkStatus();
}

absl::Status TaskRotation::RefillLocked(bool* end_of_data) {
  // The steps handed out leave the consumer's hands: their credit may be granted again.
  for (const auto& [task, cost] : batch_costs_) streams_->ReleaseLocked(task, cost);
  batch_costs_.clear();
  batch_.clear();  // the vectors were moved out: nothing to free
  batch_next_ = 0;
  const int64_t batch_bytes = streams_->TakeBatchBytes();
  int64_t taken_bytes = 0;
  absl::Time waiting_since = absl::InfiniteFuture();  // read only once the caller waits
  while (batch_.size() < kMaxBatchSteps) {
    if (rotation_.empty()) break;
    const Turn turn = TakeTurnLocked();
    if (turn.task != nullptr) {
      batch_.emplace_back();
      const int64_t cost = streams_->TakeLocked(turn.task, &batch_.back());
      taken_bytes += cost;
      if (!batch_costs_.empty() && batch_costs_.back().first == turn.task) {
        batch_costs_.back().second += cost;
      } else {
        batch_costs_.emplace_back(turn.task, cost);
      }
      if (taken_bytes >= batch_bytes) break;
      continue;
    }
    if (!batch_.empty()) break;  // what was ready goes first; an error or a wait comes after
    if (!turn.error.ok()) return turn.error;
    if (turn.look_again) continue;
    if (waiting_since == absl::InfiniteFuture()) waiting_since = absl::Now();
    if (turn.waiting_for != nullptr) {
      streams_->WaitForStepLocked(absl::MakeConstSpan(&turn.waiting_for, 1), waiting_since);
    } else {
      streams_->WaitForStepLocked(rotation_, waiting_since);
    }
  }
  *end_of_data = batch_.empty();
  return absl::OkStatus();
}

}  // namespace sluice
