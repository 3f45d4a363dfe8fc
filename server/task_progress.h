// TaskProgressTable: the coordinator's record of the workers' per-task progress reports
// (WorkerHeartbeatRequest.task_progress), summed per job for GetStatus. Not coordinator state:
// it is not journaled, and after a restart it refills from the next heartbeats.
//
// A task that moved between workers has one report from each; each worker's counts only grow
// while it runs the task, so the table keeps, per (task, worker), the largest values seen and
// a job's totals are the sums over its tasks and their workers.
//
// Thread safety: thread-safe.
#ifndef SLUICE_SERVER_TASK_PROGRESS_H_
#define SLUICE_SERVER_TASK_PROGRESS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace sluice {

class TaskProgressTable {
 public:
  // Records the reports of one heartbeat.
  void Record(const proto::WorkerHeartbeatRequest& request);
  // Sets steps_delivered, bytes_delivered and steps_produced of `job` from the reports of
  // `task_ids` (0 for tasks without a report), and a shared job's trainer_progress (each
  // trainer's counts summed over the tasks, by trainer id).
  void FillJobStatus(const std::vector<int64_t>& task_ids, proto::JobStatus* job) const;
  // Forgets the reports of these tasks (their job was removed).
  void Forget(const std::vector<int64_t>& task_ids);
  // Tasks with reports.
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  // task id -> worker address -> the largest counts reported.
  std::map<int64_t, std::map<std::string, proto::TaskProgress>> reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_SERVER_TASK_PROGRESS_H_
