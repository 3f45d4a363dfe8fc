#include "server/task_progress.h"

#include <algorithm>
#include <map>
#include <string>

#include "core/rpc/trainer_id.h"

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
    // The latest report of a shared job's trainers (lag is a gauge), bounded as the job's
    // trainers are: a worker's report is not trusted to be small.
    r.clear_trainers();
    for (int i = 0; i < p.trainers_size() && i < kMaxTrainersPerJob; ++i) {
      *r.add_trainers() = p.trainers(i);
    }
  }
}

void TaskProgressTable::FillJobStatus(const std::vector<int64_t>& task_ids,
                                      proto::JobStatus* job) const {
  int64_t produced = 0;
  int64_t delivered = 0;
  int64_t bytes = 0;
  std::map<std::string, proto::TrainerProgress> trainers;
  absl::MutexLock lock(&mu_);
  for (int64_t id : task_ids) {
    auto it = reports_.find(id);
    if (it == reports_.end()) continue;
    for (const auto& [worker, r] : it->second) {
      produced += r.steps_produced();
      delivered += r.steps_delivered();
      bytes += r.bytes_delivered();
      for (const proto::TrainerProgress& t : r.trainers()) {
        proto::TrainerProgress& sum = trainers[t.trainer_id()];
        sum.set_trainer_id(t.trainer_id());
        sum.set_steps_read(sum.steps_read() + t.steps_read());
        sum.set_skipped_steps(sum.skipped_steps() + t.skipped_steps());
        sum.set_lag_steps(sum.lag_steps() + t.lag_steps());
      }
    }
  }
  for (auto& [id, t] : trainers) *job->add_trainer_progress() = std::move(t);
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
