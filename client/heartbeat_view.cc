#include "client/heartbeat_view.h"

#include <utility>

namespace sluice {

void HeartbeatView::FillRequest(proto::ClientHeartbeatRequest* request) const {
  absl::MutexLock lock(&mu_);
  if (!have_) return;
  request->set_known_incarnation(incarnation_);
  request->set_known_version(version_);
}

proto::ClientHeartbeatResponse HeartbeatView::Apply(const proto::ClientHeartbeatResponse& answer) {
  absl::MutexLock lock(&mu_);
  const bool same = have_ && answer.incarnation() == incarnation_;
  if (!answer.delta()) {
    // A full answer replaces the view, unless the view is newer (same incarnation).
    if (!same || answer.version() >= version_) {
      tasks_.clear();
      for (const proto::TaskInfo& info : answer.tasks()) {
        tasks_[{info.task_index(), info.task_id()}] = info;
      }
      have_ = true;
      incarnation_ = answer.incarnation();
      version_ = answer.version();
      header_ = answer;
      header_.clear_tasks();
    }
    return FullLocked();
  }
  // A delta covers every change after the request's known version, which is at most the
  // view's: it applies when it is newer than the view.
  if (same && answer.version() > version_) {
    for (const proto::TaskInfo& info : answer.tasks()) {
      tasks_[{info.task_index(), info.task_id()}] = info;
    }
    for (int64_t id : answer.removed_task_ids()) {
      for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
        if (it->first.second == id) {
          tasks_.erase(it);
          break;
        }
      }
    }
    version_ = answer.version();
    header_ = answer;
    header_.clear_tasks();
    header_.clear_removed_task_ids();
    header_.set_delta(false);
  }
  return FullLocked();
}

proto::ClientHeartbeatResponse HeartbeatView::FullLocked() const {
  proto::ClientHeartbeatResponse out = header_;
  out.set_delta(false);
  for (const auto& [key, info] : tasks_) *out.add_tasks() = info;
  return out;
}

}  // namespace sluice
