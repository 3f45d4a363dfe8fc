#include "server/coordinator_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rpc/trainer_id.h"

namespace sluice {

absl::Status CoordinatorState::Apply(const proto::Update& update) {
  switch (update.kind_case()) {
    case proto::Update::kRegisterDataset:
      return ApplyRegisterDataset(update.register_dataset());
    case proto::Update::kRegisterWorker:
      return ApplyRegisterWorker(update.register_worker());
    case proto::Update::kWorkerDied:
      return ApplyWorkerDied(update.worker_died());
    case proto::Update::kCreateJob:
      return ApplyCreateJob(update.create_job());
    case proto::Update::kCreateTask:
      return ApplyCreateTask(update.create_task());
    case proto::Update::kAssignTask:
      return ApplyAssignTask(update.assign_task());
    case proto::Update::kFinishTask:
      return ApplyFinishTask(update.finish_task());
    case proto::Update::kFinishJob:
      return ApplyFinishJob(update.finish_job());
    case proto::Update::kProduceSplit:
      return ApplyProduceSplit(update.produce_split());
    case proto::Update::kRemoveJob:
      return ApplyRemoveJob(update.remove_job());
    case proto::Update::kTaskWorkerLost:
      return ApplyTaskWorkerLost(update.task_worker_lost());
    case proto::Update::kFailJob:
      return ApplyFailJob(update.fail_job());
    case proto::Update::kConsumerCompletedTask:
      return ApplyConsumerCompletedTask(update.consumer_completed_task());
    case proto::Update::kRemoveWorker:
      return ApplyRemoveWorker(update.remove_worker());
    case proto::Update::kTaskPoisonEvidence:
      return ApplyTaskPoisonEvidence(update.task_poison_evidence());
    case proto::Update::kTaskProgressed:
      return ApplyTaskProgressed(update.task_progressed());
    case proto::Update::kRemoveDataset:
      return ApplyRemoveDataset(update.remove_dataset());
    case proto::Update::kTrainerJoined:
      return ApplyTrainerJoined(update.trainer_joined());
    case proto::Update::kTrainerDropped:
      return ApplyTrainerDropped(update.trainer_dropped());
    case proto::Update::kConsumerReleased:
      return ApplyConsumerReleased(update.consumer_released());
    case proto::Update::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("coordinator update: no kind set");
}

const CoordinatorState::Dataset* CoordinatorState::FindDataset(absl::string_view id) const {
  auto it = datasets_.find(std::string(id));
  return it == datasets_.end() ? nullptr : &it->second;
}

const CoordinatorState::Worker* CoordinatorState::FindWorker(int64_t id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const CoordinatorState::Worker* CoordinatorState::FindWorkerByAddress(
    absl::string_view address) const {
  auto it = worker_by_address_.find(address);
  return it == worker_by_address_.end() ? nullptr : FindWorker(it->second);
}

const CoordinatorState::Job* CoordinatorState::FindJob(int64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const CoordinatorState::Job* CoordinatorState::FindJobByName(absl::string_view name) const {
  if (name.empty()) return nullptr;
  auto it = job_by_name_.find(name);
  return it == job_by_name_.end() ? nullptr : FindJob(it->second);
}

bool CoordinatorState::JobWasRemoved(int64_t id) const {
  return id > 0 && id <= last_job_id_ && !jobs_.contains(id);
}

const CoordinatorState::Task* CoordinatorState::FindTask(int64_t id) const {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &it->second;
}

int64_t CoordinatorState::NumUnfinishedTasks(int64_t worker_id) const {
  const Worker* w = FindWorker(worker_id);
  return w == nullptr ? 0 : static_cast<int64_t>(w->task_ids.size());
}

CoordinatorState::OwnerUsage CoordinatorState::Usage(absl::string_view owner) const {
  auto it = usage_.find(owner);
  return it == usage_.end() ? OwnerUsage() : it->second;
}

void CoordinatorState::ChangeUsage(const std::string& owner, int64_t jobs, int64_t datasets,
                                   int64_t bytes) {
  OwnerUsage& u = usage_[owner];
  u.unfinished_jobs += jobs;
  u.datasets += datasets;
  u.dataset_bytes += bytes;
  if (u.unfinished_jobs == 0 && u.datasets == 0 && u.dataset_bytes == 0) usage_.erase(owner);
}

void CoordinatorState::MarkFinished(Task& task) {
  if (task.finished) return;
  task.finished = true;
  if (task.worker_id != 0) {
    Worker& w = workers_.at(task.worker_id);
    w.task_ids.erase(std::remove(w.task_ids.begin(), w.task_ids.end(), task.id),
                     w.task_ids.end());
    ++w.finished_tasks;
  }
  // A finished task is never handed out again: its pipeline (twice: the task's and its
  // creating update's) is dropped, so that a long RANGES job does not keep one per range.
  task.dataset.Clear();
  task.created.clear_dataset();
}

absl::Status CoordinatorState::ApplyTrainerJoined(const proto::TrainerJoinedUpdate& u) {
  auto it = jobs_.find(u.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("TrainerJoined update: no job ", u.job_id()));
  }
  Job& job = it->second;
  if (!job.options.cross_trainer().enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainerJoined update: job ", u.job_id(), " is not shared"));
  }
  if (std::find(job.trainer_ids.begin(), job.trainer_ids.end(), u.trainer_id()) !=
      job.trainer_ids.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TrainerJoined update: trainer ", u.trainer_id(), " already joined job ", u.job_id()));
  }
  job.trainer_ids.push_back(u.trainer_id());
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyConsumerReleased(const proto::ConsumerReleasedUpdate& u) {
  auto it = jobs_.find(u.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("ConsumerReleased update: no job ", u.job_id()));
  }
  Job& job = it->second;
  const int64_t consumers = std::max<int64_t>(job.options.num_consumers(), 1);
  if (u.consumer_index() < 0 || u.consumer_index() >= consumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConsumerReleased update: job ", u.job_id(), ": consumer index ",
                     u.consumer_index(), " outside [0, ", consumers, ")"));
  }
  if (job.finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("ConsumerReleased update: job ", u.job_id(), " is finished"));
  }
  std::vector<int64_t>& released = job.released_consumers;
  auto pos = std::lower_bound(released.begin(), released.end(), u.consumer_index());
  if (pos == released.end() || *pos != u.consumer_index()) released.insert(pos, u.consumer_index());
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyTrainerDropped(const proto::TrainerDroppedUpdate& u) {
  auto it = jobs_.find(u.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("TrainerDropped update: no job ", u.job_id()));
  }
  Job& job = it->second;
  auto trainer = std::find(job.trainer_ids.begin(), job.trainer_ids.end(), u.trainer_id());
  if (trainer == job.trainer_ids.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TrainerDropped update: trainer ", u.trainer_id(), " is not a trainer of job ",
        u.job_id()));
  }
  job.trainer_ids.erase(trainer);
  job.dropped_trainer_ids.push_back(u.trainer_id());
  if (job.dropped_trainer_ids.size() > kMaxDroppedTrainersPerJob) {
    job.dropped_trainer_ids.erase(job.dropped_trainer_ids.begin());
  }
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyRemoveDataset(const proto::RemoveDatasetUpdate& u) {
  auto it = datasets_.find(u.dataset_id());
  if (it == datasets_.end()) {
    return absl::NotFoundError(
        absl::StrCat("RemoveDataset update: no dataset ", u.dataset_id()));
  }
  if (it->second.num_jobs != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RemoveDataset update: dataset ", u.dataset_id(), " is named by ", it->second.num_jobs,
        " job(s)"));
  }
  ChangeUsage(it->second.owner, 0, -1, -it->second.bytes);
  unused_datasets_.erase(u.dataset_id());
  datasets_.erase(it);
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyRegisterDataset(const proto::RegisterDatasetUpdate& u) {
  if (u.dataset_id().empty()) {
    return absl::InvalidArgumentError("RegisterDataset update: empty dataset_id");
  }
  if (datasets_.count(u.dataset_id()) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("RegisterDataset update: dataset ", u.dataset_id(), " already exists"));
  }
  Dataset d;
  d.id = u.dataset_id();
  d.def = u.dataset();
  d.owner = u.owner();
  d.bytes = static_cast<int64_t>(d.def.ByteSizeLong());
  ChangeUsage(d.owner, 0, 1, d.bytes);
  unused_datasets_.insert(d.id);
  datasets_[d.id] = std::move(d);
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyRegisterWorker(const proto::RegisterWorkerUpdate& u) {
  if (u.address().empty()) {
    return absl::InvalidArgumentError("RegisterWorker update: empty address");
  }
  auto it = workers_.find(u.worker_id());
  if (it != workers_.end()) {
    // A dead worker coming back keeps its id.
    if (it->second.alive || it->second.address != u.address()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RegisterWorker update: worker ", u.worker_id(), " at ", it->second.address,
          " is alive or has another address than ", u.address()));
    }
    it->second.alive = true;
    return absl::OkStatus();
  }
  if (u.worker_id() != NextWorkerId()) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterWorker update: worker id ",
                                                   u.worker_id(), ", expected ",
                                                   NextWorkerId()));
  }
  if (worker_by_address_.contains(u.address())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RegisterWorker update: address ", u.address(), " already belongs to worker ",
        worker_by_address_.at(u.address())));
  }
  Worker w;
  w.id = u.worker_id();
  w.address = u.address();
  workers_[w.id] = std::move(w);
  worker_by_address_[u.address()] = u.worker_id();
  last_worker_id_ = u.worker_id();
  return absl::OkStatus();
}

void CoordinatorState::Unassign(Task& task) {
  if (task.worker_id == 0 || task.finished) return;
  auto& ids = workers_.at(task.worker_id).task_ids;
  ids.erase(std::remove(ids.begin(), ids.end(), task.id), ids.end());
  task.worker_id = 0;
}

absl::Status CoordinatorState::ApplyWorkerDied(const proto::WorkerDiedUpdate& u) {
  auto it = workers_.find(u.worker_id());
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("WorkerDied update: no worker ", u.worker_id()));
  }
  it->second.alive = false;
  // Its unfinished tasks wait for another worker; finished ones stay where they ran.
  std::vector<int64_t> ids = it->second.task_ids;
  for (int64_t t : ids) Unassign(tasks_.at(t));
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyCreateJob(const proto::CreateJobUpdate& u) {
  if (u.job_id() != NextJobId()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateJob update: job id ", u.job_id(), ", expected ", NextJobId()));
  }
  if (!datasets_.contains(u.options().dataset_id())) {
    return absl::NotFoundError(absl::StrCat("CreateJob update: job ", u.job_id(),
                                            " names unknown dataset ",
                                            u.options().dataset_id()));
  }
  if (!u.job_name().empty() && job_by_name_.contains(u.job_name())) {
    return absl::FailedPreconditionError(
        absl::StrCat("CreateJob update: job name ", u.job_name(), " already taken"));
  }
  Job job;
  job.id = u.job_id();
  job.name = u.job_name();
  job.owner = u.owner();
  job.options = u.options();
  job.split_source_size = u.split_source_size();
  job.split_size = u.split_size();
  job.ranges = u.ranges();
  job.steps_per_epoch = u.ranges() ? u.steps_per_epoch() : -1;
  job.total_steps = u.ranges() ? u.total_steps() : -1;
  job.num_ranges = u.ranges() ? u.num_ranges() : 0;
  job.fallback_reason = u.fallback_reason();
  job.created = u;
  if (!job.name.empty()) job_by_name_[job.name] = job.id;
  if (job.ranges) ranges_jobs_.insert(job.id);
  Dataset& dataset = datasets_.at(u.options().dataset_id());
  if (dataset.num_jobs++ == 0) unused_datasets_.erase(dataset.id);
  ChangeUsage(job.owner, 1, 0, 0);
  jobs_[job.id] = std::move(job);
  last_job_id_ = u.job_id();
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyCreateTask(const proto::CreateTaskUpdate& u) {
  if (u.task_id() != NextTaskId()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateTask update: task id ", u.task_id(), ", expected ", NextTaskId()));
  }
  auto job = jobs_.find(u.job_id());
  if (job == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("CreateTask update: task ", u.task_id(), " of unknown job ", u.job_id()));
  }
  if (job->second.finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("CreateTask update: job ", u.job_id(), " is finished"));
  }
  if (job->second.ranges && (u.task_index() >= job->second.num_ranges || u.num_steps() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateTask update: range ", u.task_index(), " of job ", u.job_id(), " with ",
        u.num_steps(), " steps, the job has ", job->second.num_ranges, " ranges"));
  }
  if (u.task_index() != static_cast<int64_t>(job->second.task_ids.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateTask update: task index ", u.task_index(), " of job ", u.job_id(),
                     ", expected ", job->second.task_ids.size()));
  }
  if (u.worker_id() != 0) {
    const Worker* w = FindWorker(u.worker_id());
    if (w == nullptr || !w->alive) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CreateTask update: task ", u.task_id(), " assigned to absent or dead worker ",
          u.worker_id()));
    }
  }
  Task task;
  task.id = u.task_id();
  task.job_id = u.job_id();
  task.index = u.task_index();
  task.dataset = u.dataset();
  task.step_sharded = u.step_sharded();
  task.skip_steps = u.skip_steps();
  task.first_step = u.first_step();
  task.num_steps = u.num_steps();
  task.worker_id = u.worker_id();
  task.created = u;
  task.created.set_worker_id(0);  // Snapshot() replays assignments on their own
  if (task.worker_id != 0) workers_.at(task.worker_id).task_ids.push_back(task.id);
  job->second.task_ids.push_back(task.id);
  tasks_[task.id] = std::move(task);
  last_task_id_ = u.task_id();
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyAssignTask(const proto::AssignTaskUpdate& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("AssignTask update: no task ", u.task_id()));
  }
  if (it->second.finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("AssignTask update: task ", u.task_id(), " is finished"));
  }
  if (u.worker_id() != 0) {
    const Worker* w = FindWorker(u.worker_id());
    if (w == nullptr || !w->alive) {
      return absl::FailedPreconditionError(absl::StrCat(
          "AssignTask update: task ", u.task_id(), " to absent or dead worker ", u.worker_id()));
    }
  }
  Unassign(it->second);
  it->second.worker_id = u.worker_id();
  if (u.worker_id() != 0) workers_.at(u.worker_id()).task_ids.push_back(u.task_id());
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyFinishTask(const proto::FinishTaskUpdate& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("FinishTask update: no task ", u.task_id()));
  }
  MarkFinished(it->second);
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyFinishJob(const proto::FinishJobUpdate& u) {
  auto it = jobs_.find(u.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("FinishJob update: no job ", u.job_id()));
  }
  for (int64_t t : it->second.task_ids) {
    if (!tasks_.at(t).finished) {
      return absl::FailedPreconditionError(absl::StrCat(
          "FinishJob update: job ", u.job_id(), " still has unfinished task ", t));
    }
  }
  if (it->second.ranges && !it->second.all_ranges_made()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinishJob update: job ", u.job_id(), " has made ", it->second.task_ids.size(),
        " of its ", it->second.num_ranges, " ranges"));
  }
  if (!it->second.finished) ChangeUsage(it->second.owner, -1, 0, 0);
  it->second.finished = true;
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyProduceSplit(const proto::ProduceSplitUpdate& u) {
  auto job = jobs_.find(u.job_id());
  if (job == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("ProduceSplit update: no job ", u.job_id()));
  }
  Job& j = job->second;
  auto task = tasks_.find(u.task_id());
  if (task == tasks_.end() || task->second.job_id != j.id) {
    return absl::NotFoundError(absl::StrCat("ProduceSplit update: job ", u.job_id(),
                                            " has no task ", u.task_id()));
  }
  if (!j.dynamic()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ProduceSplit update: job ", u.job_id(), " is not DYNAMIC"));
  }
  if (u.split_index() != static_cast<int64_t>(j.splits.size()) || u.begin() != j.split_cursor ||
      u.end() <= u.begin() || u.end() > j.split_source_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProduceSplit update: split ", u.split_index(), " [", u.begin(), ", ", u.end(),
        ") of job ", u.job_id(), " does not follow split ", j.splits.size(), " at cursor ",
        j.split_cursor, " of ", j.split_source_size));
  }
  j.splits.push_back(Split{u.split_index(), u.task_id(), u.begin(), u.end()});
  j.split_cursor = u.end();
  task->second.split_indices.push_back(u.split_index());
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyRemoveJob(const proto::RemoveJobUpdate& u) {
  auto it = jobs_.find(u.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("RemoveJob update: no job ", u.job_id()));
  }
  if (!it->second.finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("RemoveJob update: job ", u.job_id(), " is not finished"));
  }
  for (int64_t t : it->second.task_ids) {
    const Task& task = tasks_.at(t);
    // Finished (its job is): it leaves the finished count of the worker it ran on.
    if (task.worker_id != 0) --workers_.at(task.worker_id).finished_tasks;
    tasks_.erase(t);
  }
  Dataset& dataset = datasets_.at(it->second.options.dataset_id());
  if (--dataset.num_jobs == 0) unused_datasets_.insert(dataset.id);
  if (!it->second.name.empty()) job_by_name_.erase(it->second.name);
  ranges_jobs_.erase(it->first);
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyTaskWorkerLost(const proto::TaskWorkerLostUpdate& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("TaskWorkerLost update: no task ", u.task_id()));
  }
  if (!workers_.contains(u.worker_id())) {
    return absl::NotFoundError(absl::StrCat("TaskWorkerLost update: task ", u.task_id(),
                                            " names unknown worker ", u.worker_id()));
  }
  it->second.lost_on_workers.push_back(u.worker_id());
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyTaskPoisonEvidence(const proto::TaskPoisonEvidenceUpdate& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("TaskPoisonEvidence update: no task ", u.task_id()));
  }
  Task& task = it->second;
  // Evidence is about a death the task's record names: its TaskWorkerLostUpdate comes first.
  if (std::find(task.lost_on_workers.begin(), task.lost_on_workers.end(), u.worker_id()) ==
      task.lost_on_workers.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TaskPoisonEvidence update: task ", u.task_id(), " was not lost on worker ",
                     u.worker_id()));
  }
  // The same worker dying twice with the task is one piece of evidence, not two.
  for (const Task::PoisonDeath& d : task.poison_deaths) {
    if (d.worker_id == u.worker_id()) return absl::OkStatus();
  }
  task.poison_deaths.push_back(Task::PoisonDeath{u.worker_id(), u.evidence()});
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyTaskProgressed(const proto::TaskProgressedUpdate& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("TaskProgressed update: no task ", u.task_id()));
  }
  it->second.poison_deaths.clear();
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyConsumerCompletedTask(
    const proto::ConsumerCompletedTaskUpdate& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("ConsumerCompletedTask update: no task ", u.task_id()));
  }
  const int64_t consumers =
      std::max<int64_t>(jobs_.at(it->second.job_id).options.num_consumers(), 1);
  if (u.consumer_index() < 0 || u.consumer_index() >= consumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConsumerCompletedTask update: task ", u.task_id(), ": consumer index ",
                     u.consumer_index(), " outside [0, ", consumers, ")"));
  }
  std::vector<int64_t>& done = it->second.completed_by;
  auto pos = std::lower_bound(done.begin(), done.end(), u.consumer_index());
  if (pos == done.end() || *pos != u.consumer_index()) done.insert(pos, u.consumer_index());
  return absl::OkStatus();
}

absl::Status CoordinatorState::ApplyFailJob(const proto::FailJobUpdate& u) {
  auto it = jobs_.find(u.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("FailJob update: no job ", u.job_id()));
  }
  if (u.code() <= 0 || u.code() > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FailJob update: job ", u.job_id(), " with status code ", u.code()));
  }
  if (it->second.finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("FailJob update: job ", u.job_id(), " is finished"));
  }
  Job& job = it->second;
  for (int64_t t : job.task_ids) MarkFinished(tasks_.at(t));
  ChangeUsage(job.owner, -1, 0, 0);
  job.finished = true;
  job.error = absl::Status(static_cast<absl::StatusCode>(u.code()), u.message());
  job.released = u.has_released() ? u.released() : ReleasedBeforeTheField(job);
  return absl::OkStatus();
}

bool CoordinatorState::ReleasedBeforeTheField(const Job& job) {
  // Before FailJobUpdate.released, a release ended its job in the request that journaled the
  // last ConsumerReleasedUpdate, with CANCELLED; no other end followed every consumer's release.
  const int64_t consumers = std::max<int64_t>(job.options.num_consumers(), 1);
  return job.error.code() == absl::StatusCode::kCancelled &&
         static_cast<int64_t>(job.released_consumers.size()) >= consumers;
}

absl::Status CoordinatorState::ApplyRemoveWorker(const proto::RemoveWorkerUpdate& u) {
  auto it = workers_.find(u.worker_id());
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("RemoveWorker update: no worker ", u.worker_id()));
  }
  if (it->second.alive || !it->second.task_ids.empty() || it->second.finished_tasks != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RemoveWorker update: worker ", u.worker_id(), " is alive or still holds tasks"));
  }
  for (const auto& [id, task] : tasks_) {
    for (int64_t w : task.lost_on_workers) {
      if (w == u.worker_id()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "RemoveWorker update: task ", id, " names worker ", u.worker_id()));
      }
    }
  }
  worker_by_address_.erase(it->second.address);
  workers_.erase(it);
  return absl::OkStatus();
}

// The order makes every update apply: entities first (workers alive, tasks unassigned), then
// splits, then assignments in each worker's own order (so that Worker::task_ids comes back in
// the same order), then finishes, then deaths (a dead worker holds only finished tasks).
proto::StateSnapshot CoordinatorState::Snapshot() const {
  proto::StateSnapshot out;
  for (const auto& [id, d] : datasets_) {
    proto::RegisterDatasetUpdate* u = out.add_updates()->mutable_register_dataset();
    u->set_dataset_id(d.id);
    *u->mutable_dataset() = d.def;
    u->set_owner(d.owner);
  }
  for (const auto& [id, w] : workers_) {
    proto::RegisterWorkerUpdate* u = out.add_updates()->mutable_register_worker();
    u->set_worker_id(w.id);
    u->set_address(w.address);
  }
  for (const auto& [id, job] : jobs_) {
    *out.add_updates()->mutable_create_job() = job.created;
    // The dropped ones first (joined, then dropped, in their order), so that the joined ones
    // keep theirs.
    for (const std::string& trainer : job.dropped_trainer_ids) {
      proto::TrainerJoinedUpdate* u = out.add_updates()->mutable_trainer_joined();
      u->set_job_id(id);
      u->set_trainer_id(trainer);
      proto::TrainerDroppedUpdate* d = out.add_updates()->mutable_trainer_dropped();
      d->set_job_id(id);
      d->set_trainer_id(trainer);
    }
    for (const std::string& trainer : job.trainer_ids) {
      proto::TrainerJoinedUpdate* u = out.add_updates()->mutable_trainer_joined();
      u->set_job_id(id);
      u->set_trainer_id(trainer);
    }
    // Before the job's end (FailJob, below), which they may have led to.
    for (int64_t c : job.released_consumers) {
      proto::ConsumerReleasedUpdate* u = out.add_updates()->mutable_consumer_released();
      u->set_job_id(id);
      u->set_consumer_index(c);
    }
    for (int64_t t : job.task_ids) {
      *out.add_updates()->mutable_create_task() = tasks_.at(t).created;
    }
    for (const Split& split : job.splits) {
      proto::ProduceSplitUpdate* u = out.add_updates()->mutable_produce_split();
      u->set_job_id(id);
      u->set_task_id(split.task_id);
      u->set_split_index(split.index);
      u->set_begin(split.begin);
      u->set_end(split.end);
    }
  }
  for (const auto& [id, w] : workers_) {
    for (int64_t t : w.task_ids) {
      proto::AssignTaskUpdate* u = out.add_updates()->mutable_assign_task();
      u->set_task_id(t);
      u->set_worker_id(id);
    }
  }
  // Finished tasks keep the worker they ran on (assigned here, finished below).
  for (const auto& [id, task] : tasks_) {
    if (!task.finished || task.worker_id == 0) continue;
    proto::AssignTaskUpdate* u = out.add_updates()->mutable_assign_task();
    u->set_task_id(id);
    u->set_worker_id(task.worker_id);
  }
  for (const auto& [id, task] : tasks_) {
    for (int64_t w : task.lost_on_workers) {
      proto::TaskWorkerLostUpdate* u = out.add_updates()->mutable_task_worker_lost();
      u->set_task_id(id);
      u->set_worker_id(w);
    }
  }
  for (const auto& [id, task] : tasks_) {
    for (const Task::PoisonDeath& d : task.poison_deaths) {
      proto::TaskPoisonEvidenceUpdate* u = out.add_updates()->mutable_task_poison_evidence();
      u->set_task_id(id);
      u->set_worker_id(d.worker_id);
      u->set_evidence(d.evidence);
    }
  }
  for (const auto& [id, task] : tasks_) {
    for (int64_t c : task.completed_by) {
      proto::ConsumerCompletedTaskUpdate* u = out.add_updates()->mutable_consumer_completed_task();
      u->set_task_id(id);
      u->set_consumer_index(c);
    }
  }
  // A failed job's tasks are finished by its FailJob, not one by one (a FinishTask of each
  // would make the job look finished before it fails).
  for (const auto& [id, task] : tasks_) {
    if (task.finished && jobs_.at(task.job_id).error.ok()) {
      out.add_updates()->mutable_finish_task()->set_task_id(id);
    }
  }
  for (const auto& [id, job] : jobs_) {
    if (!job.finished) continue;
    if (job.error.ok()) {
      out.add_updates()->mutable_finish_job()->set_job_id(id);
    } else {
      proto::FailJobUpdate* u = out.add_updates()->mutable_fail_job();
      u->set_job_id(id);
      u->set_code(static_cast<int>(job.error.code()));
      u->set_message(std::string(job.error.message()));
      u->set_released(job.released);
    }
  }
  for (const auto& [id, w] : workers_) {
    if (!w.alive) out.add_updates()->mutable_worker_died()->set_worker_id(id);
  }
  out.set_last_worker_id(last_worker_id_);
  out.set_last_job_id(last_job_id_);
  out.set_last_task_id(last_task_id_);
  return out;
}

absl::Status CoordinatorState::Restore(const proto::StateSnapshot& snapshot) {
  if (!datasets_.empty() || !workers_.empty() || !jobs_.empty() || !tasks_.empty()) {
    return absl::FailedPreconditionError("CoordinatorState::Restore: the state is not empty");
  }
  for (int i = 0; i < snapshot.updates_size(); ++i) {
    const proto::Update& u = snapshot.updates(i);
    // Ids of removed entities leave gaps: each creation names its own id.
    if (u.has_register_worker() && !workers_.contains(u.register_worker().worker_id())) {
      last_worker_id_ = u.register_worker().worker_id() - 1;
    }
    if (u.has_create_job()) last_job_id_ = u.create_job().job_id() - 1;
    if (u.has_create_task()) last_task_id_ = u.create_task().task_id() - 1;
    absl::Status s = Apply(u);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("snapshot update ", i, " does not apply: ", s.message()));
    }
  }
  if (snapshot.last_worker_id() < last_worker_id_ || snapshot.last_job_id() < last_job_id_ ||
      snapshot.last_task_id() < last_task_id_) {
    return absl::InvalidArgumentError(
        "snapshot: its id counters are behind the ids of its entities");
  }
  last_worker_id_ = snapshot.last_worker_id();
  last_job_id_ = snapshot.last_job_id();
  last_task_id_ = snapshot.last_task_id();
  return absl::OkStatus();
}

}  // namespace sluice
