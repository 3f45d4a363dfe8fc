#include "client/independent_read.h"

namespace sluice {

IndependentRead::IndependentRead(TaskStreams* streams,
                                 const proto::ClientHeartbeatResponse& tasks)
    : streams_(streams) {
  absl::MutexLock lock(&streams_->mu());
  rotation_ = streams_->AddAllTasksLocked(tasks);
}

absl::Status IndependentRead::Next(std::vector<Element>* replicas, bool* end_of_data) {
  absl::MutexLock lock(&streams_->mu());
  while (true) {
    if (rotation_.empty()) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    // Whichever task has a step; else wait, unless every task is done or one failed.
    TaskStream* ready = nullptr;
    for (size_t i = 0; i < rotation_.size() && ready == nullptr; ++i) {
      TaskStream* t = rotation_[(next_ + i) % rotation_.size()];
      if (!t->queue.empty()) ready = t;
    }
    if (ready != nullptr) {
      next_ = (next_ + 1) % rotation_.size();
      streams_->PopLocked(ready, replicas);
      *end_of_data = false;
      return absl::OkStatus();
    }
    bool removed = false;
    for (size_t i = 0; i < rotation_.size(); ++i) {
      if (!rotation_[i]->error.ok()) return rotation_[i]->error;
      if (rotation_[i]->ended) {
        rotation_.erase(rotation_.begin() + static_cast<long>(i));
        removed = true;
        break;
      }
    }
    if (removed) continue;
    streams_->cv().Wait(&streams_->mu());
  }
}

}  // namespace sluice
