#include "server/task_progress.h"

#include <algorithm>

namespace sluice {

void TaskProgressTable::Record(const proto::WorkerHeartbeatRequest& request) {
  if (request.task_progress_size() == 0) return;
  absl::MutexLock lock(&mu_);
  for (const proto::TaskProgress& p : request.task_progress()) {
    proto::TaskProgress& r = reports_[p.task_id()][request.worker_address()];
    r.set_task_id(p.task_id());
    r.set_steps_produced(std::max(r.steps_produced(), p.steps_produced()));
    r.set_steps_delivered(std::max(r.steps_delivered(), p.steps_delivered()));
    r.set_bytes_delivered(std::max(r.bytes_delivered(), p.bytes_delivered()));
  }
}

void TaskProgressTable::FillJobStatus(const std::vector<int64_t>& task_ids,
                                      proto::JobStatus* job) const {
  int64_t produced = 0;
  int64_t delivered = 0;
  int64_t bytes = 0;
  absl::MutexLock lock(&mu_);
  for (int64_t id : task_ids) {
    auto it = reports_.find(id);
    if (it == reports_.end()) continue;
    for (const auto& [worker, r] : it->second) {
      produced += r.steps_produced();
      delivered += r.steps_delivered();
      bytes += r.bytes_delivered();
    }
  }
  job->set_steps_produced(produced);
  job->set_steps_delivered(delivered);
  job->set_bytes_delivered(bytes);
}

void TaskProgressTable::Forget(const std::vector<int64_t>& task_ids) {
  absl::MutexLock lock(&mu_);
  for (int64_t id : task_ids) reports_.erase(id);
}

size_t TaskProgressTable::size() const {
  absl::MutexLock lock(&mu_);
  return reports_.size();
}

}  // namespace sluice
