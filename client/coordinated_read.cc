#include "client/coordinated_read.h"

namespace sluice {

CoordinatedRead::CoordinatedRead(TaskStreams* streams,
                                 const proto::ClientHeartbeatResponse& tasks)
    : streams_(streams) {
  absl::MutexLock lock(&streams_->mu());
  rotation_ = streams_->AddAllTasksLocked(tasks);
}

absl::Status CoordinatedRead::Next(std::vector<Element>* replicas, bool* end_of_data) {
  absl::MutexLock lock(&streams_->mu());
  while (true) {
    if (rotation_.empty()) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    TaskStream* t = rotation_[next_ % rotation_.size()];
    if (!t->queue.empty()) {
      streams_->PopLocked(t, replicas);
      next_ = (next_ + 1) % rotation_.size();
      *end_of_data = false;
      return absl::OkStatus();
    }
    if (!t->error.ok()) return t->error;
    if (t->ended) {
      const size_t at = next_ % rotation_.size();
      rotation_.erase(rotation_.begin() + static_cast<long>(at));
      next_ = rotation_.empty() ? 0 : at % rotation_.size();
      continue;
    }
    streams_->cv().Wait(&streams_->mu());
  }
}

}  // namespace sluice
