// CoordinatorState: everything the coordinator knows that must survive a restart (datasets,
// jobs, tasks, workers, DYNAMIC split cursors), changed only by Apply(update). No locks, no
// I/O, no clock: the Coordinator (coordinator.h) decides every update, with every id and
// choice made, and a journal replaying the same updates rebuilds the same state.
//
// Ids start at 1 and are never reused; worker id 0 means "unassigned".
//
// Thread safety: none; the Coordinator guards its state with its mutex.
#ifndef SLUICE_SERVER_COORDINATOR_STATE_H_
#define SLUICE_SERVER_COORDINATOR_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/coordinator.pb.h"
#include "proto/dataset.pb.h"
#include "proto/journal.pb.h"
#include "proto/journal_record.pb.h"

namespace sluice {

class CoordinatorState {
 public:
  // Refcounted by the jobs that name it: a dataset with no job (num_jobs 0) is unused, and
  // the Coordinator removes it (RemoveDatasetUpdate) once it stayed unused for its
  // unused_dataset_ttl.
  struct Dataset {
    std::string id;
    proto::DatasetDef def;
    std::string owner;  // RegisterDatasetUpdate.owner
    int64_t bytes = 0;  // the serialized graph's size, charged to the owner
    int64_t num_jobs = 0;  // jobs in the state (finished or not) whose options name it
  };
  struct Worker {
    int64_t id = 0;
    std::string address;
    bool alive = true;
    // The unfinished tasks assigned to it, in assignment order. A task leaves the list when it
    // finishes (or is unassigned), so the list stays as short as the worker's current work and
    // heartbeats never walk finished ids.
    std::vector<int64_t> task_ids;
    // Finished tasks whose Task::worker_id is this worker (they ran here), until their job is
    // removed: the worker is not forgotten (RemoveWorkerUpdate) while any is left.
    int64_t finished_tasks = 0;
  };
  // What one caller identity holds, for the per-identity quotas: its unfinished jobs, its
  // datasets and their bytes (the owner fields of CreateJobUpdate and RegisterDatasetUpdate).
  struct OwnerUsage {
    int64_t unfinished_jobs = 0;
    int64_t datasets = 0;
    int64_t dataset_bytes = 0;
  };
  // DYNAMIC: one split handed to a task.
  struct Split {
    int64_t index = 0;  // in the job's split sequence
    int64_t task_id = 0;
    int64_t begin = 0;  // [begin, end) of the source's units (files or elements)
    int64_t end = 0;
  };
  struct Task {
    int64_t id = 0;
    int64_t job_id = 0;
    int64_t index = 0;
    proto::DatasetDef dataset;  // cleared when the task finishes
    bool step_sharded = false;
    int64_t worker_id = 0;  // 0: unassigned
    bool finished = false;
    std::vector<int64_t> split_indices;  // DYNAMIC: the job's splits this task got, in order
    int64_t skip_steps = 0;  // DATA resume: TaskDef.skip_steps
    // SHARDING_RANGES: the range's global steps [first_step, first_step + num_steps).
    int64_t first_step = 0;
    int64_t num_steps = 0;
    proto::CreateTaskUpdate created;  // the update that created it, for Snapshot()
    // The workers declared dead while running it unfinished (TaskWorkerLostUpdate), in order.
    std::vector<int64_t> lost_on_workers;
    // Failure policy: the deaths that are evidence against the task (TaskPoisonEvidenceUpdate)
    // since it last made progress (TaskProgressedUpdate clears them), one per distinct
    // worker, in order. Each is also in lost_on_workers.
    struct PoisonDeath {
      int64_t worker_id = 0;
      std::string evidence;
    };
    std::vector<PoisonDeath> poison_deaths;
    // The consumers that reported reading it to its end (ConsumerCompletedTaskUpdate), sorted.
    std::vector<int64_t> completed_by;
  };
  struct Job {
    int64_t id = 0;
    std::string name;
    std::string owner;  // CreateJobUpdate.owner
    proto::JobOptions options;
    std::vector<int64_t> task_ids;  // in task_index order
    bool finished = false;
    // DYNAMIC only.
    int64_t split_source_size = 0;
    int64_t split_size = 0;
    int64_t split_cursor = 0;  // next unit to hand out
    std::vector<Split> splits;  // by split index
    // SHARDING_RANGES: ranges mode (false: the job fell back to DATA, or another policy), the
    // steps per epoch and in all, the number of ranges (task i is range i, made lazily), and
    // why a RANGES job fell back to DATA.
    bool ranges = false;
    int64_t steps_per_epoch = -1;
    int64_t total_steps = -1;
    int64_t num_ranges = 0;
    std::string fallback_reason;
    proto::CreateJobUpdate created;  // the update that created it, for Snapshot()
    // Not OK for a job that ended before its data (FailJobUpdate), which is also finished:
    // failed, or released when `released`.
    absl::Status error;
    // The job ended because its consumers released it (FailJobUpdate.released), not because it
    // failed: what status shows and logs, never inferred from error's code.
    bool released = false;
    // A shared job (options.cross_trainer): the trainers admitted (TrainerJoinedUpdate), in
    // order; at most its max_trainers.
    std::vector<std::string> trainer_ids;
    // The trainers a worker dropped (TrainerDroppedUpdate), in order of dropping: out of
    // trainer_ids, refused if they come back. The last kMaxDroppedTrainersPerJob.
    std::vector<std::string> dropped_trainer_ids;
    // The consumer indices that released their place (ConsumerReleasedUpdate), sorted: they no
    // longer count as the job's consumers.
    std::vector<int64_t> released_consumers;

    bool dynamic() const { return options.sharding_policy() == proto::SHARDING_DYNAMIC; }
    bool splits_exhausted() const { return split_cursor >= split_source_size; }
    // Ranges mode: every range has its task.
    bool all_ranges_made() const { return static_cast<int64_t>(task_ids.size()) >= num_ranges; }
  };

  CoordinatorState() = default;
  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;
  // Movable, so that the Coordinator can start over from its journal.
  CoordinatorState(CoordinatorState&&) = default;
  CoordinatorState& operator=(CoordinatorState&&) = default;

  // Applies one update. FAILED_PRECONDITION / NOT_FOUND / INVALID_ARGUMENT naming the update
  // and the id when it does not fit the state (a duplicate id, an unknown job, ...); the state
  // is then unchanged. Updates decided by the Coordinator always apply.
  absl::Status Apply(const proto::Update& update);

  // The whole state as updates that rebuild it (proto/journal_record.proto): each entity's
  // creating update as it was applied, then its later changes, then the id counters. Restore
  // of the result on an empty state gives an equal state.
  proto::StateSnapshot Snapshot() const;
  // Rebuilds the state from Snapshot()'s output. Requires an empty state. The error of the
  // first update that does not apply, naming its index; the state is then unusable.
  absl::Status Restore(const proto::StateSnapshot& snapshot);

  // Lookups: nullptr when absent. Entries never move, so a pointer stays valid as long as the
  // state, except that RemoveJobUpdate removes a finished job and its tasks, RemoveWorker a
  // worker and RemoveDataset an unused dataset.
  const Dataset* FindDataset(absl::string_view id) const;
  const Worker* FindWorker(int64_t id) const;
  const Worker* FindWorkerByAddress(absl::string_view address) const;
  const Job* FindJob(int64_t id) const;
  const Job* FindJobByName(absl::string_view name) const;
  // True for a job id that existed and was removed (RemoveJobUpdate).
  bool JobWasRemoved(int64_t id) const;
  const Task* FindTask(int64_t id) const;

  // Ordered by id.
  const std::map<int64_t, Worker>& workers() const { return workers_; }
  const std::map<int64_t, Job>& jobs() const { return jobs_; }
  const std::map<int64_t, Task>& tasks() const { return tasks_; }
  // The ids of the jobs in ranges mode (Job::ranges), ascending: what MakeRanges looks at,
  // without walking every job.
  const std::set<int64_t>& ranges_jobs() const { return ranges_jobs_; }
  size_t num_datasets() const { return datasets_.size(); }
  const std::map<std::string, Dataset>& datasets() const { return datasets_; }
  // The ids of the datasets no job names (Dataset::num_jobs 0), ascending: what the dataset
  // collector looks at, without walking every dataset.
  const std::set<std::string>& unused_datasets() const { return unused_datasets_; }
  // What `owner` holds; all zero for an owner that holds nothing. The empty owner (requests
  // made in-process, without a caller) is counted like any other.
  OwnerUsage Usage(absl::string_view owner) const;
  // Owners holding anything (for tests: the table must not grow with callers that left).
  size_t num_owners() const { return usage_.size(); }

  // Unfinished tasks assigned to the worker.
  int64_t NumUnfinishedTasks(int64_t worker_id) const;

  // The ids the next update of each kind must use.
  int64_t NextWorkerId() const { return last_worker_id_ + 1; }
  int64_t NextJobId() const { return last_job_id_ + 1; }
  int64_t NextTaskId() const { return last_task_id_ + 1; }

 private:
  absl::Status ApplyRegisterDataset(const proto::RegisterDatasetUpdate& u);
  absl::Status ApplyRegisterWorker(const proto::RegisterWorkerUpdate& u);
  absl::Status ApplyWorkerDied(const proto::WorkerDiedUpdate& u);
  absl::Status ApplyCreateJob(const proto::CreateJobUpdate& u);
  absl::Status ApplyCreateTask(const proto::CreateTaskUpdate& u);
  absl::Status ApplyAssignTask(const proto::AssignTaskUpdate& u);
  absl::Status ApplyFinishTask(const proto::FinishTaskUpdate& u);
  absl::Status ApplyFinishJob(const proto::FinishJobUpdate& u);
  absl::Status ApplyProduceSplit(const proto::ProduceSplitUpdate& u);
  absl::Status ApplyRemoveJob(const proto::RemoveJobUpdate& u);
  absl::Status ApplyTaskWorkerLost(const proto::TaskWorkerLostUpdate& u);
  absl::Status ApplyFailJob(const proto::FailJobUpdate& u);
  absl::Status ApplyConsumerCompletedTask(const proto::ConsumerCompletedTaskUpdate& u);
  absl::Status ApplyRemoveWorker(const proto::RemoveWorkerUpdate& u);
  absl::Status ApplyTaskPoisonEvidence(const proto::TaskPoisonEvidenceUpdate& u);
  absl::Status ApplyTaskProgressed(const proto::TaskProgressedUpdate& u);
  absl::Status ApplyRemoveDataset(const proto::RemoveDatasetUpdate& u);
  absl::Status ApplyTrainerJoined(const proto::TrainerJoinedUpdate& u);
  absl::Status ApplyTrainerDropped(const proto::TrainerDroppedUpdate& u);
  absl::Status ApplyConsumerReleased(const proto::ConsumerReleasedUpdate& u);

  // A FailJobUpdate journaled before its `released` field: whether it was a release (see the
  // field's comment in proto/journal.proto).
  static bool ReleasedBeforeTheField(const Job& job);

  void Unassign(Task& task);
  // Marks an unfinished task finished: it leaves its worker's list (Worker::task_ids) and
  // counts in the worker's finished_tasks, and its pipeline is dropped.
  void MarkFinished(Task& task);
  // Adds `delta` to `owner`'s usage, dropping the entry when it falls to zero.
  void ChangeUsage(const std::string& owner, int64_t jobs, int64_t datasets, int64_t bytes);

  std::map<std::string, Dataset> datasets_;
  std::map<int64_t, Worker> workers_;
  absl::flat_hash_map<std::string, int64_t> worker_by_address_;
  std::map<int64_t, Job> jobs_;
  absl::flat_hash_map<std::string, int64_t> job_by_name_;
  std::map<int64_t, Task> tasks_;
  std::set<int64_t> ranges_jobs_;  // ids in jobs_ whose Job::ranges is set
  std::set<std::string> unused_datasets_;  // ids in datasets_ whose num_jobs is 0
  absl::flat_hash_map<std::string, OwnerUsage> usage_;  // owners holding anything
  int64_t last_worker_id_ = 0;
  int64_t last_job_id_ = 0;
  int64_t last_task_id_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_COORDINATOR_STATE_H_
