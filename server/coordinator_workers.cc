// Coordinator, workers: liveness, draining a dead worker, placing tasks on live workers and
// the workers' heartbeats (coordinator.h).
#include "server/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <queue>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/distribute/auto_shard.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/data/distribute/global_order.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "core/rpc/trainer_id.h"
#include "core/util/transient_error.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/dataset.pb.h"
#include "server/job_options.h"
#include "server/task_planner.h"

namespace sluice {

std::string Coordinator::WorkerNameLocked(int64_t worker_id) const {
  const CoordinatorState::Worker* w = state_.FindWorker(worker_id);
  if (w == nullptr) return absl::StrCat("worker ", worker_id);
  return absl::StrCat("worker ", worker_id, " (", w->address, ")");
}


int64_t Coordinator::NumLiveWorkersLocked() const {
  int64_t n = 0;
  for (const auto& [id, w] : state_.workers()) n += w.alive ? 1 : 0;
  return n;
}


int64_t Coordinator::LeastLoadedWorkerLocked(const absl::flat_hash_set<int64_t>& excluded) const {
  int64_t best = 0;
  int64_t best_load = 0;
  for (const auto& [id, w] : state_.workers()) {
    if (!w.alive || excluded.contains(id)) continue;
    int64_t load = state_.NumUnfinishedTasks(id);
    if (best == 0 || load < best_load) {
      best = id;
      best_load = load;
    }
  }
  return best;
}


absl::Status Coordinator::CheckLivenessLocked() {
  const absl::Time now = clock_->Now();
  if (!liveness_synced_) {
    // Workers the state has alive but this coordinator never heard from (after a restart, or
    // a state reloaded from the journal) count from the moment they are first noticed.
    for (const auto& [id, w] : state_.workers()) {
      if (w.alive && !liveness_.watched(id)) liveness_.Heartbeat(id, now);
    }
    liveness_synced_ = true;
  }
  // The coordinator's own loop lag: with no liveness check for more than two intervals, it
  // was not running (paused, starved, its lock held); nobody could hear the workers then.
  const absl::Duration interval = options_.liveness_interval;
  if (interval > absl::ZeroDuration() && last_liveness_check_.has_value()) {
    const absl::Duration stalled = now - *last_liveness_check_ - interval;
    if (stalled > interval) {
      liveness_.Excuse(stalled, now);
      Log(absl::StrCat("coordinator stalled: no liveness check for ",
                       absl::FormatDuration(now - *last_liveness_check_), " (interval ",
                       absl::FormatDuration(interval), "); that time is not counted as the ",
                       "workers' silence"));
    }
  }
  last_liveness_check_ = now;
  // Only the workers silent for worker_timeout are looked at (oldest heartbeat first), not
  // every worker on every request.
  std::vector<int64_t> dead;
  for (int64_t id : liveness_.SilentSince(now - options_.worker_timeout)) {
    const CoordinatorState::Worker* w = state_.FindWorker(id);
    if (w == nullptr || !w->alive) {
      liveness_.Unwatch(id);
      continue;
    }
    {
      absl::MutexLock arrivals(&arrivals_mu_);
      auto arrived = heartbeat_arrivals_.find(w->address);
      if (arrived != heartbeat_arrivals_.end()) {
        liveness_.Heartbeat(id, arrived->second);  // arrived, still waiting for mu_
      }
    }
    if (now - *liveness_.LastHeartbeat(id) >= options_.worker_timeout) dead.push_back(id);
  }
  for (int64_t id : dead) {
    Log(absl::StrCat(WorkerNameLocked(id), " is dead: no heartbeat for ",
                     absl::FormatDuration(now - *liveness_.LastHeartbeat(id)), " (worker_timeout ",
                     absl::FormatDuration(options_.worker_timeout), ")"));
    RETURN_IF_ERROR(WorkerDiedLocked(id));
  }
  if (!dead.empty()) RETURN_IF_ERROR(AssignWaitingTasksLocked());
  return CollectFinishedJobsLocked();
}

absl::Status Coordinator::WorkerDiedLocked(int64_t worker_id) {
  // One death, one journal record: a failed write undoes all of it, so that a retry counts it
  // once (not its lost tasks twice).
  JournalBatch batch(this);
  const std::optional<absl::Time> last_heartbeat = liveness_.LastHeartbeat(worker_id);
  std::vector<int64_t> lost;
  for (int64_t t : state_.FindWorker(worker_id)->task_ids) {
    if (!state_.tasks().at(t).finished) lost.push_back(t);
  }
  for (int64_t t : lost) {
    // Judged before the updates below change the task's run.
    const std::string evidence = options_.max_task_worker_deaths > 0
                                     ? PoisonEvidenceLocked(t, worker_id, last_heartbeat)
                                     : std::string();
    proto::Update u;
    u.mutable_task_worker_lost()->set_task_id(t);
    u.mutable_task_worker_lost()->set_worker_id(worker_id);
    RETURN_IF_ERROR(ApplyLocked(u));
    if (evidence.empty()) continue;
    const CoordinatorState::Task* lost_task = state_.FindTask(t);
    if (std::any_of(lost_task->poison_deaths.begin(), lost_task->poison_deaths.end(),
                    [&](const CoordinatorState::Task::PoisonDeath& d) {
                      return d.worker_id == worker_id;
                    })) {
      continue;  // the same worker dying with it again is no more evidence (distinct workers)
    }
    proto::Update e;
    e.mutable_task_poison_evidence()->set_task_id(t);
    e.mutable_task_poison_evidence()->set_worker_id(worker_id);
    e.mutable_task_poison_evidence()->set_evidence(evidence);
    RETURN_IF_ERROR(ApplyLocked(e));
    const CoordinatorState::Task* task = state_.FindTask(t);
    Log(absl::StrCat("task ", t, " (job ", task->job_id, ", index ", task->index,
                     "): the death of ", evidence, " counts against it (",
                     task->poison_deaths.size(), " of max_task_worker_deaths ",
                     options_.max_task_worker_deaths, ")"));
  }
  proto::Update u;
  u.mutable_worker_died()->set_worker_id(worker_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  // Once the batch is journaled: a failed one leaves the worker alive and watched.
  auto commit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    RETURN_IF_ERROR(batch.Commit());
    liveness_.Unwatch(worker_id);
    dead_since_[worker_id] = clock_->Now();
    return absl::OkStatus();
  };
  if (options_.max_task_worker_deaths <= 0) return commit();
  for (int64_t t : lost) {
    const CoordinatorState::Task* task = state_.FindTask(t);
    if (task == nullptr || task->finished) continue;  // its job failed with an earlier task
    const int64_t deaths = static_cast<int64_t>(task->poison_deaths.size());
    if (deaths < options_.max_task_worker_deaths) continue;
    std::vector<std::string> evidence;
    for (const CoordinatorState::Task::PoisonDeath& d : task->poison_deaths) {
      evidence.push_back(d.evidence);
    }
    const CoordinatorState::Job* job = state_.FindJob(task->job_id);
    RETURN_IF_ERROR(FailJobLocked(
        task->job_id, JobEnd::kFailed,
        absl::FailedPreconditionError(absl::StrCat(
            "job ", job->id, job->name.empty() ? "" : absl::StrCat(" (", job->name, ")"),
            ": task ", t, " (index ", task->index, ") is quarantined: ", deaths,
            " workers died soon after they were handed it, none having produced a step of it (",
            absl::StrJoin(evidence, "; "), "; max_task_worker_deaths ",
            options_.max_task_worker_deaths, ", task_death_window ",
            absl::FormatDuration(options_.task_death_window),
            "), so it is not handed to another worker. A pipeline that crashes its worker (out "
            "of memory, a native crash) does this; the workers' logs say more"))));
  }
  return commit();
}

std::string Coordinator::PoisonEvidenceLocked(int64_t task_id, int64_t worker_id,
                                              std::optional<absl::Time> last_heartbeat) const {
  auto run = runs_.find(task_id);
  // A run this coordinator did not see handed over (assigned but never answered to the
  // worker, or from before a restart), or one that produced a step, says nothing against the
  // task.
  if (run == runs_.end() || run->second.worker_id != worker_id ||
      !run->second.handed_at.has_value() || run->second.progressed ||
      !last_heartbeat.has_value()) {
    return "";
  }
  const absl::Duration alive = std::max(*last_heartbeat - *run->second.handed_at,
                                        absl::ZeroDuration());
  if (alive > options_.task_death_window) return "";
  return absl::StrCat(WorkerNameLocked(worker_id), ": silent from ", absl::FormatDuration(alive),
                      " after it was handed the task, no step of it produced");
}

bool Coordinator::ProgressedOnWorkerLocked(const CoordinatorState::Task& task) const {
  auto run = runs_.find(task.id);
  return run != runs_.end() && run->second.worker_id == task.worker_id && run->second.progressed;
}

void Coordinator::TrackTaskRunsLocked(const proto::Update& update) {
  // A new run of `task` on `worker` (none on worker 0: unassigned).
  auto start = [this](int64_t task, int64_t worker) {
    if (worker == 0) {
      runs_.erase(task);
      return;
    }
    TaskRun run;
    run.worker_id = worker;
    runs_[task] = run;
  };
  switch (update.kind_case()) {
    case proto::Update::kCreateTask:
      start(update.create_task().task_id(), update.create_task().worker_id());
      break;
    case proto::Update::kAssignTask:
      start(update.assign_task().task_id(), update.assign_task().worker_id());
      break;
    case proto::Update::kFinishTask:
      runs_.erase(update.finish_task().task_id());
      task_failures_.erase(update.finish_task().task_id());
      break;
    case proto::Update::kFailJob:
    case proto::Update::kRemoveJob: {
      const int64_t job_id = update.has_fail_job() ? update.fail_job().job_id()
                                                   : update.remove_job().job_id();
      if (const CoordinatorState::Job* job = state_.FindJob(job_id)) {
        for (int64_t t : job->task_ids) {
          runs_.erase(t);
          task_failures_.erase(t);
        }
      }
      break;
    }
    default:
      break;  // a dead worker's runs stay until WorkerDiedLocked judged them (or reassigned)
  }
}

absl::Status Coordinator::NoteTaskRunsLocked(int64_t worker_id,
                                             const proto::WorkerHeartbeatRequest& request) {
  for (const proto::TaskProgress& p : request.task_progress()) {
    if (p.steps_produced() <= 0) continue;
    const CoordinatorState::Task* task = state_.FindTask(p.task_id());
    if (task == nullptr || task->finished || task->worker_id != worker_id) continue;
    auto run = runs_.find(p.task_id());
    if (run != runs_.end() && run->second.worker_id == worker_id) run->second.progressed = true;
    if (task->poison_deaths.empty()) continue;
    proto::Update u;
    u.mutable_task_progressed()->set_task_id(p.task_id());
    RETURN_IF_ERROR(ApplyLocked(u));
    Log(absl::StrCat("task ", task->id, " (job ", task->job_id, ", index ", task->index,
                     ") produced a step on ", WorkerNameLocked(worker_id),
                     ": the earlier deaths of its workers no longer count against it"));
  }
  // After this answer the worker runs every unfinished task assigned to it (new_tasks lists
  // those it did not list itself).
  const absl::Time now = clock_->Now();
  for (int64_t t : state_.FindWorker(worker_id)->task_ids) {
    if (state_.tasks().at(t).finished) continue;
    auto run = runs_.find(t);
    if (run != runs_.end() && run->second.worker_id == worker_id &&
        !run->second.handed_at.has_value()) {
      run->second.handed_at = now;
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::FailJobLocked(int64_t job_id, JobEnd why, const absl::Status& error) {
  const CoordinatorState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished) return absl::OkStatus();
  const bool released = why == JobEnd::kReleased;
  proto::Update u;
  u.mutable_fail_job()->set_job_id(job_id);
  u.mutable_fail_job()->set_code(static_cast<int>(error.code()));
  u.mutable_fail_job()->set_message(std::string(error.message()));
  u.mutable_fail_job()->set_released(released);
  RETURN_IF_ERROR(ApplyLocked(u));
  // A job its consumers released ended as they wished: no failure to warn of. Any other end
  // is a failure, whatever its code (a RANGES plan's cancelled read gives CANCELLED).
  Log(released ? absl::StrCat("job ", job_id, " released by its consumers: its tasks are stopped")
               : absl::StrCat("job ", job_id, " failed: ", error.ToString()));
  finished_at_[job_id] = clock_->Now();
  return absl::OkStatus();
}

absl::Status Coordinator::TaskFailedLocked(int64_t worker_id, const proto::TaskFailure& failure) {
  const CoordinatorState::Task* task = state_.FindTask(failure.task_id());
  // Only the task's current worker speaks for it; a stale report is ignored.
  if (task == nullptr || task->finished || task->worker_id != worker_id) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(failure.code());
  const CoordinatorState::Job* job = state_.FindJob(task->job_id);
  const std::string name = job->name.empty() ? "" : absl::StrCat(" (", job->name, ")");
  std::vector<WorkerFailure>& failures = task_failures_[task->id];
  const auto same = std::find_if(failures.begin(), failures.end(), [&](const WorkerFailure& f) {
    return f.worker_id != worker_id && f.code == code && f.message == failure.message();
  });
  if (same != failures.end()) {
    return FailJobLocked(
        job->id, JobEnd::kFailed,
        absl::Status(code, absl::StrCat("job ", job->id, name, " failed: task ", task->id,
                                        " (index ", task->index, ") failed the same way on ",
                                        WorkerNameLocked(same->worker_id), " and ",
                                        WorkerNameLocked(worker_id), ": ", failure.message())));
  }
  failures.push_back(WorkerFailure{worker_id, code, failure.message()});
  // Bounded: one entry per worker that failed the task, and a task that found no worker left
  // to try fails its job below.
  absl::flat_hash_set<int64_t> tried;
  for (const WorkerFailure& f : failures) tried.insert(f.worker_id);
  // Refused at the element limit: whatever else a worker holds, one with a limit as low refuses
  // it too (and may report a process-limit refusal instead, which would hide the cause), so
  // only a worker known to have a larger limit is tried.
  const int64_t refused_at = failure.element_limit_bytes();
  if (refused_at > 0) {
    for (const auto& [id, limit] : element_limits_) {
      if (limit <= refused_at) tried.insert(id);
    }
  }
  const int64_t next = LeastLoadedWorkerLocked(tried);
  if (next == 0 && refused_at > 0) {
    return FailJobLocked(
        job->id, JobEnd::kFailed,
        absl::Status(code,
                     absl::StrCat("job ", job->id, name, " failed: task ", task->id, " (index ",
                                  task->index, ") failed on ", WorkerNameLocked(worker_id), ": ",
                                  failure.message(), "; no other live worker has ",
                                  "a memory limit of one element above ", refused_at, " bytes")));
  }
  if (next == 0) {
    return FailJobLocked(
        job->id, JobEnd::kFailed,
        absl::Status(code, absl::StrCat("job ", job->id, name, " failed: task ", task->id,
                                        " (index ", task->index, ") failed on ",
                                        WorkerNameLocked(worker_id), ": ", failure.message(),
                                        failures.size() > 1
                                            ? absl::StrCat(" (and on ", failures.size() - 1,
                                                           " other worker(s) with other errors)")
                                            : std::string(),
                                        "; no other live worker is left to try it")));
  }
  return MoveTaskLocked(task->id, next,
                        absl::StrCat("it failed on ", WorkerNameLocked(worker_id), " with ",
                                     absl::StatusCodeToString(code), " (", failure.message(),
                                     "), which may be local to that worker"));
}

absl::Status Coordinator::TaskHandedBackLocked(int64_t worker_id,
                                               const proto::TaskFailure& failure) {
  const CoordinatorState::Task* task = state_.FindTask(failure.task_id());
  if (task == nullptr || task->finished || task->worker_id != worker_id) return absl::OkStatus();
  // Another worker when there is one (the error may be this worker's path to a store), else
  // this one again: the task restarts at its next heartbeat, which paces the retries.
  int64_t next = LeastLoadedWorkerLocked({worker_id});
  if (next == 0) next = worker_id;
  return MoveTaskLocked(task->id, next,
                        absl::StrCat(WorkerNameLocked(worker_id), " gave it back after a ",
                                     "transient error (",
                                     absl::StatusCodeToString(
                                         static_cast<absl::StatusCode>(failure.code())),
                                     ": ", failure.message(), "); no death counted"));
}

absl::Status Coordinator::MoveTaskLocked(int64_t task_id, int64_t worker_id,
                                         absl::string_view why) {
  proto::Update u;
  u.mutable_assign_task()->set_task_id(task_id);
  u.mutable_assign_task()->set_worker_id(worker_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  const CoordinatorState::Task* t = state_.FindTask(task_id);
  Log(absl::StrCat("task ", task_id, " (job ", t->job_id, ", index ", t->index,
                   ") assigned to ", WorkerNameLocked(worker_id), ": ", why));
  return absl::OkStatus();
}

absl::Status Coordinator::DrainWorkerLocked(int64_t worker_id) {
  int64_t moving = state_.NumUnfinishedTasks(worker_id);
  proto::Update u;
  u.mutable_worker_died()->set_worker_id(worker_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  liveness_.Unwatch(worker_id);
  dead_since_[worker_id] = clock_->Now();
  Log(absl::StrCat(WorkerNameLocked(worker_id), " is draining: its ", moving,
                   " unfinished task(s) are reassigned now"));
  RETURN_IF_ERROR(AssignWaitingTasksLocked());
  return MakeRangesLocked();
}


absl::Status Coordinator::CheckIncarnationLocked(int64_t worker_id, const std::string& address,
                                                 uint64_t incarnation, bool* restarted) {
  *restarted = false;
  if (incarnation == 0) return absl::OkStatus();  // a worker that predates incarnations
  WorkerIncarnations& known = incarnations_[worker_id];
  if (known.current == incarnation) return absl::OkStatus();
  if (std::find(known.retired.begin(), known.retired.end(), incarnation) != known.retired.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", address, ": process incarnation ", absl::Hex(incarnation),
        " was replaced by a newer process at the same address (incarnation ",
        absl::Hex(known.current), "); this process must stop or take another address"));
  }
  if (known.current != 0) {
    *restarted = true;
    known.retired.push_back(known.current);
    if (known.retired.size() > kRetiredIncarnations) known.retired.erase(known.retired.begin());
  }
  known.current = incarnation;
  return absl::OkStatus();
}

void Coordinator::NoteHeartbeatArrival(const std::string& worker_address) {
  const absl::Time now = clock_->Now();
  absl::MutexLock arrivals(&arrivals_mu_);
  heartbeat_arrivals_[worker_address] = now;
}

void Coordinator::CheckWorkerLiveness() {
  DurableLock lock(this);
  absl::Status s = CheckLivenessLocked();
  if (s.ok()) s = CollectDeadWorkersLocked();
  if (s.ok()) s = FailIdleJobsLocked();
  if (s.ok()) s = CollectUnusedDatasetsLocked();
  if (s.ok() && !failed_jobs_.empty()) s = MakeRangesLocked();  // retries that are due
  if (!s.ok()) Log(s.ToString());
  watchers_.ExpireUntil(clock_->Now());
  MaybeDecideScalingLocked();
}


absl::Status Coordinator::CollectDeadWorkersLocked() {
  const absl::Time now = clock_->Now();
  std::vector<int64_t> expired;
  for (const auto& [id, w] : state_.workers()) {
    if (w.alive) continue;
    auto [it, first_seen] = dead_since_.try_emplace(id, now);  // after a restart: from now
    if (w.task_ids.empty() && w.finished_tasks == 0 && (now - it->second >= options_.dead_worker_ttl ||
                               (first_seen && options_.dead_worker_ttl <= absl::ZeroDuration()))) {
      expired.push_back(id);
    }
  }
  if (expired.empty()) return absl::OkStatus();
  // A task that lists a worker among those that died running it keeps it (failure policy).
  absl::flat_hash_set<int64_t> named;
  for (const auto& [id, task] : state_.tasks()) {
    named.insert(task.lost_on_workers.begin(), task.lost_on_workers.end());
  }
  for (int64_t id : expired) {
    if (named.contains(id)) continue;
    const std::string address = state_.FindWorker(id)->address;
    const std::string name = WorkerNameLocked(id);
    proto::Update u;
    u.mutable_remove_worker()->set_worker_id(id);
    RETURN_IF_ERROR(ApplyLocked(u));
    liveness_.Forget(id);
    versions_.ForgetWorker(id);
    watchers_.Notify(id);  // its next heartbeat registers it anew
    dead_since_.erase(id);
    element_limits_.erase(id);
    incarnations_.erase(id);
    {
      absl::MutexLock arrivals(&arrivals_mu_);
      heartbeat_arrivals_.erase(address);
    }
    Log(absl::StrCat(name, " removed: dead for ", absl::FormatDuration(options_.dead_worker_ttl),
                     " and holding no task (dead_worker_ttl)"));
  }
  return absl::OkStatus();
}


bool Coordinator::TableSizes::operator==(const TableSizes& o) const {
  return workers == o.workers && jobs == o.jobs && tasks == o.tasks &&
         heartbeat_arrivals == o.heartbeat_arrivals && liveness == o.liveness &&
         dead_since == o.dead_since && finished_at == o.finished_at &&
         consumer_seen == o.consumer_seen && completed_by == o.completed_by &&
         ranges_jobs == o.ranges_jobs && failed_jobs == o.failed_jobs &&
         progress_tasks == o.progress_tasks && version_jobs == o.version_jobs &&
         version_workers == o.version_workers && task_runs == o.task_runs &&
         datasets == o.datasets && owners == o.owners && job_activity == o.job_activity &&
         unused_since == o.unused_since &&
         max_worker_tasks == o.max_worker_tasks;
}


Coordinator::TableSizes Coordinator::TEST_TableSizes() {
  absl::MutexLock lock(&mu_);
  TableSizes t;
  t.workers = state_.workers().size();
  t.jobs = state_.jobs().size();
  t.tasks = state_.tasks().size();
  {
    absl::MutexLock arrivals(&arrivals_mu_);
    t.heartbeat_arrivals = heartbeat_arrivals_.size();
  }
  t.liveness = liveness_.size();
  t.dead_since = dead_since_.size();
  t.finished_at = finished_at_.size();
  t.consumer_seen = consumer_seen_.size();
  // Consumers' completions live in the tasks (Task::completed_by): counted as tasks holding
  // any, so that they leave with their job's tasks.
  for (const auto& [id, task] : state_.tasks()) {
    if (!task.completed_by.empty()) ++t.completed_by;
  }
  t.ranges_jobs = ranges_jobs_.size();
  t.failed_jobs = failed_jobs_.size();
  t.progress_tasks = progress_.size();
  t.version_jobs = versions_.tracked_jobs();
  t.version_workers = versions_.tracked_workers();
  t.task_runs = runs_.size();
  t.datasets = state_.num_datasets();
  t.owners = state_.num_owners();
  t.job_activity = job_activity_.size();
  t.unused_since = unused_since_.size();
  for (const auto& [id, w] : state_.workers()) {
    t.max_worker_tasks = std::max(t.max_worker_tasks, w.task_ids.size());
  }
  return t;
}


absl::Status Coordinator::AssignWaitingTasksLocked() {
  std::vector<int64_t> waiting;
  for (const auto& [id, t] : state_.tasks()) {
    if (t.worker_id == 0 && !t.finished) waiting.push_back(id);
  }
  if (waiting.empty()) return absl::OkStatus();
  // Each live worker's load, counted once: moving T tasks costs O(T log W + W + their tasks),
  // not O(T x W) (a worker death in a large fleet moves many tasks at once). Fewest unfinished
  // tasks first, lowest id on ties, as LeastLoadedWorkerLocked.
  using Load = std::pair<int64_t, int64_t>;  // (unfinished tasks, worker id)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (const auto& [id, w] : state_.workers()) {
    if (w.alive) loads.push({state_.NumUnfinishedTasks(id), id});
  }
  if (loads.empty()) return absl::OkStatus();  // they wait for a worker to heartbeat
  std::sort(waiting.begin(), waiting.end());  // in task order, whatever the hash order
  for (int64_t task_id : waiting) {
    auto [load, worker] = loads.top();
    loads.pop();
    loads.push({load + 1, worker});
    proto::Update u;
    u.mutable_assign_task()->set_task_id(task_id);
    u.mutable_assign_task()->set_worker_id(worker);
    RETURN_IF_ERROR(ApplyLocked(u));
    const CoordinatorState::Task* t = state_.FindTask(task_id);
    Log(absl::StrCat("task ", task_id, " (job ", t->job_id, ", index ", t->index,
                     ") reassigned to ", WorkerNameLocked(worker)));
  }
  return absl::OkStatus();
}


absl::Status Coordinator::CreateTaskLocked(int64_t job_id, const proto::DatasetDef& dataset,
                                           bool step_sharded, int64_t worker_id,
                                           int64_t skip_steps, const GlobalRange* range) {
  const CoordinatorState::Job* job = state_.FindJob(job_id);
  proto::Update u;
  proto::CreateTaskUpdate* c = u.mutable_create_task();
  c->set_task_id(state_.NextTaskId());
  c->set_job_id(job_id);
  c->set_task_index(static_cast<int64_t>(job->task_ids.size()));
  *c->mutable_dataset() = dataset;
  c->set_step_sharded(step_sharded);
  c->set_worker_id(worker_id);
  c->set_skip_steps(skip_steps);
  if (range != nullptr) {
    c->set_first_step(range->first_step);
    c->set_num_steps(range->num_steps);
  }
  RETURN_IF_ERROR(ApplyLocked(u));
  Log(absl::StrCat("task ", c->task_id(), " (job ", job_id, ", index ", c->task_index(), ") ",
                   worker_id == 0 ? std::string("waits for a worker")
                                  : absl::StrCat("assigned to ", WorkerNameLocked(worker_id))));
  return absl::OkStatus();
}


absl::Status Coordinator::OnWorkerAvailableLocked(int64_t worker_id) {
  RETURN_IF_ERROR(AssignWaitingTasksLocked());
  if (!options_.dynamic_tasks_for_new_workers) return absl::OkStatus();
  std::vector<int64_t> dynamic_jobs;
  for (const auto& [id, job] : state_.jobs()) {
    // Coordinated consumers read the tasks round-robin, and a task joining mid-rotation could
    // reach them at different rounds: a coordinated job keeps the tasks it started with.
    if (!job.dynamic() || job.finished || job.splits_exhausted() ||
        job.options.read_mode() == proto::READ_MODE_COORDINATED) {
      continue;
    }
    bool has_task = false;
    for (int64_t t : job.task_ids) {
      const CoordinatorState::Task& task = state_.tasks().at(t);
      has_task |= task.worker_id == worker_id && !task.finished;
    }
    if (!has_task) dynamic_jobs.push_back(id);
  }
  for (int64_t job_id : dynamic_jobs) {
    const CoordinatorState::Job* job = state_.FindJob(job_id);
    const CoordinatorState::Dataset* ds = state_.FindDataset(job->options.dataset_id());
    RETURN_IF_ERROR(CreateTaskLocked(job_id, ds->def, /*step_sharded=*/false, worker_id));
  }
  return absl::OkStatus();
}


absl::Status Coordinator::FinishTaskLocked(int64_t task_id) {
  // The task's end and the job's end it makes: one journal record, so that a failed write
  // leaves both undone (the worker reports the task again) rather than a job that never ends.
  JournalBatch batch(this);
  proto::Update u;
  u.mutable_finish_task()->set_task_id(task_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  const CoordinatorState::Task* task = state_.FindTask(task_id);
  const CoordinatorState::Job* job = state_.FindJob(task->job_id);
  for (int64_t t : job->task_ids) {
    if (!state_.tasks().at(t).finished) return batch.Commit();
  }
  if (job->ranges && !job->all_ranges_made()) return batch.Commit();
  // DYNAMIC: every task finishes only after end_of_splits, so the splits are all done too.
  const int64_t job_id = job->id;
  const std::string job_name = job->name;
  const size_t num_tasks = job->task_ids.size();
  proto::Update f;
  f.mutable_finish_job()->set_job_id(job_id);
  RETURN_IF_ERROR(ApplyLocked(f));
  RETURN_IF_ERROR(batch.Commit());
  Log(absl::StrCat("job ", job_id, job_name.empty() ? "" : absl::StrCat(" (", job_name, ")"),
                   " finished: all ", num_tasks, " tasks done"));
  finished_at_[job_id] = clock_->Now();
  return absl::OkStatus();
}

absl::Status Coordinator::RecordEndedConsumersLocked(
    const proto::WorkerHeartbeatRequest& request, int64_t worker_id) {
  for (const proto::TaskProgress& progress : request.task_progress()) {
    const CoordinatorState::Task* task = state_.FindTask(progress.task_id());
    if (task == nullptr || task->finished) continue;
    if (task->worker_id != worker_id &&
        std::find(task->lost_on_workers.begin(), task->lost_on_workers.end(), worker_id) ==
            task->lost_on_workers.end()) {
      continue;  // another worker's task: not this worker's consumers to report
    }
    const CoordinatorState::Job* job = state_.FindJob(task->job_id);
    if (job->options.read_mode() != proto::READ_MODE_COORDINATED) continue;
    for (int64_t consumer : progress.ended_consumers()) {
      bool finished = false;
      RETURN_IF_ERROR(ConsumerCompletedTaskLocked(progress.task_id(), consumer, &finished));
      if (finished) break;
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RecordDroppedTrainersLocked(
    const proto::WorkerHeartbeatRequest& request, int64_t worker_id) {
  for (const proto::TaskProgress& progress : request.task_progress()) {
    if (progress.dropped_trainer_ids().empty()) continue;
    const CoordinatorState::Task* task = state_.FindTask(progress.task_id());
    if (task == nullptr) continue;
    if (task->worker_id != worker_id &&
        std::find(task->lost_on_workers.begin(), task->lost_on_workers.end(), worker_id) ==
            task->lost_on_workers.end()) {
      continue;  // another worker's task: not this worker's trainers to report
    }
    const CoordinatorState::Job* job = state_.FindJob(task->job_id);
    if (job == nullptr || !job->options.cross_trainer().enabled()) continue;
    const int64_t job_id = job->id;
    // A worker's list is at most kMaxDroppedTrainersPerWindow long; more is not looked at.
    const int n = std::min<int>(progress.dropped_trainer_ids_size(),
                                static_cast<int>(kMaxDroppedTrainersPerWindow));
    for (int i = 0; i < n; ++i) {
      const std::string& id = progress.dropped_trainer_ids(i);
      const std::vector<std::string>& ids = state_.FindJob(job_id)->trainer_ids;
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) continue;
      proto::Update u;
      proto::TrainerDroppedUpdate* d = u.mutable_trainer_dropped();
      d->set_job_id(job_id);
      d->set_trainer_id(id);
      d->set_task_id(task->id);
      d->set_worker_address(request.worker_address());
      RETURN_IF_ERROR(ApplyLocked(u));
      Log(absl::StrCat("job ", job_id, ": trainer ", QuoteTrainerId(id), " dropped by ",
                       WorkerNameLocked(worker_id), " (task ", progress.task_id(),
                       "): no stream of it for --drop_departed_trainers_after; refused if it "
                       "comes back"));
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::WorkerHeartbeat(const proto::WorkerHeartbeatRequest& request,
                                          proto::WorkerHeartbeatResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "WorkerHeartbeatRequest"));
  if (request.worker_address().empty()) {
    return absl::InvalidArgumentError("WorkerHeartbeatRequest.worker_address is empty");
  }
  for (const proto::TaskFailure& failure : request.failed_tasks()) {
    if (failure.code() <= 0 ||
        failure.code() > static_cast<int>(absl::StatusCode::kUnauthenticated) ||
        IsTransientTaskError(static_cast<absl::StatusCode>(failure.code()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WorkerHeartbeatRequest.failed_tasks: task ", failure.task_id(), " with status code ",
          failure.code(), ", which is not a deterministic failure (core/util/transient_error.h)"));
    }
  }
  for (const proto::TaskFailure& back : request.handed_back_tasks()) {
    if (!IsTransientTaskError(static_cast<absl::StatusCode>(back.code()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WorkerHeartbeatRequest.handed_back_tasks: task ", back.task_id(), " with status code ",
          back.code(), ", which is not a transient error (core/util/transient_error.h)"));
    }
  }
  progress_.Record(request);
  if (!request.draining()) NoteHeartbeatArrival(request.worker_address());
  DurableLock lock(this);
  {
    // Reports of tasks whose job was removed (the worker has not yet been told to stop them)
    // are not kept.
    std::vector<int64_t> removed;
    for (const proto::TaskProgress& p : request.task_progress()) {
      if (state_.FindTask(p.task_id()) == nullptr) removed.push_back(p.task_id());
    }
    if (!removed.empty()) progress_.Forget(removed);
  }
  const absl::Time now = clock_->Now();
  const CoordinatorState::Worker* worker = state_.FindWorkerByAddress(request.worker_address());
  int64_t worker_id = worker != nullptr ? worker->id : state_.NextWorkerId();
  // A new process at this address: the old one is dead (its tasks move now, as on a timeout)
  // and this heartbeat registers the new one, whose reports cannot be about the old one's
  // tasks (a fresh process has none; a forger has no business there).
  bool restarted = false;
  if (worker == nullptr) incarnations_.erase(worker_id);  // left by a refused registration
  RETURN_IF_ERROR(CheckIncarnationLocked(worker_id, request.worker_address(),
                                         request.process_incarnation(), &restarted));
  if (restarted && worker != nullptr && worker->alive) {
    Log(absl::StrCat(WorkerNameLocked(worker_id), " restarted (new process incarnation): ",
                     "the old process is dead"));
    RETURN_IF_ERROR(WorkerDiedLocked(worker_id));
    RETURN_IF_ERROR(AssignWaitingTasksLocked());
  }
  // Record this heartbeat before judging the others, so that a worker that was slow but is
  // talking now is not declared dead by its own heartbeat.
  if (worker != nullptr ? worker->alive : !request.draining()) liveness_.Heartbeat(worker_id, now);
  RETURN_IF_ERROR(CheckLivenessLocked());
  worker = state_.FindWorker(worker_id);
  if (worker != nullptr && worker->alive && !request.draining()) {
    NoteWorkerLoadLocked(worker_id, request);
  }
  if (request.max_element_bytes() > 0) {
    element_limits_[worker_id] = request.max_element_bytes();
  }
  if (request.draining()) {
    // Leaving: its finished tasks count, its other tasks go elsewhere now, it gets nothing
    // new, and a draining heartbeat never revives it.
    if (!restarted) RETURN_IF_ERROR(RecordEndedConsumersLocked(request, worker_id));
    if (worker != nullptr && worker->alive) {
      for (int64_t task_id : request.finished_task_ids()) {
        const CoordinatorState::Task* task = state_.FindTask(task_id);
        if (task == nullptr || task->finished || task->worker_id != worker_id) continue;
        RETURN_IF_ERROR(FinishTaskLocked(task_id));
      }
      for (const proto::TaskFailure& failure : request.failed_tasks()) {
        RETURN_IF_ERROR(TaskFailedLocked(worker_id, failure));
      }
      RETURN_IF_ERROR(DrainWorkerLocked(worker_id));
    }
    for (int64_t task_id : request.active_task_ids()) response->add_tasks_to_stop(task_id);
    response->set_worker_id(worker != nullptr ? worker_id : 0);
    return absl::OkStatus();
  }
  if (worker == nullptr || !worker->alive) {
    const bool back = worker != nullptr;
    proto::Update u;
    u.mutable_register_worker()->set_worker_id(worker_id);
    u.mutable_register_worker()->set_address(request.worker_address());
    RETURN_IF_ERROR(ApplyLocked(u));
    liveness_.Heartbeat(worker_id, now);
    dead_since_.erase(worker_id);
    Log(absl::StrCat(WorkerNameLocked(worker_id), back ? " is back" : " registered"));
    RETURN_IF_ERROR(OnWorkerAvailableLocked(worker_id));
  }

  // A restarted worker's reports would be about its old process's tasks: not heeded.
  static const google::protobuf::RepeatedField<int64_t> kNoTasks;
  static const google::protobuf::RepeatedPtrField<proto::TaskFailure> kNoFailures;
  for (int64_t task_id : restarted ? kNoTasks : request.finished_task_ids()) {
    const CoordinatorState::Task* task = state_.FindTask(task_id);
    if (task == nullptr || task->finished) continue;
    // Normally only the task's current worker finishes it. A coordinated task is also finished
    // by a worker it was taken from (declared dead while running it, then back: a coordinator
    // restart does that to every slow worker): that worker reports it finished only once
    // every consumer confirmed its end there or is gone (worker/step_buffer.h), which holds
    // whoever runs it now; its consumers may have exited before they could tell the
    // coordinator, and nobody would read the task from its new worker. Any other report
    // (an independent task's, a worker that never ran it) is ignored.
    if (task->worker_id != worker_id) {
      const CoordinatorState::Job* job = state_.FindJob(task->job_id);
      if (job->options.read_mode() != proto::READ_MODE_COORDINATED ||
          std::find(task->lost_on_workers.begin(), task->lost_on_workers.end(), worker_id) ==
              task->lost_on_workers.end()) {
        continue;
      }
      Log(absl::StrCat("task ", task_id, " (job ", job->id, ", index ", task->index,
                       ") finished: every consumer received its end from ",
                       WorkerNameLocked(worker_id), ", which ran it before"));
    }
    RETURN_IF_ERROR(FinishTaskLocked(task_id));
  }
  for (const proto::TaskFailure& failure : restarted ? kNoFailures : request.failed_tasks()) {
    RETURN_IF_ERROR(TaskFailedLocked(worker_id, failure));
  }
  for (const proto::TaskFailure& back : request.handed_back_tasks()) {
    RETURN_IF_ERROR(TaskHandedBackLocked(worker_id, back));
  }
  // The consumers that read a task to its end from this worker (whichever worker runs it now):
  // they count even if they exited before telling the coordinator themselves (it was down).
  if (!restarted) RETURN_IF_ERROR(RecordEndedConsumersLocked(request, worker_id));
  if (!restarted) RETURN_IF_ERROR(RecordDroppedTrainersLocked(request, worker_id));
  // Tasks this worker runs that its consumers finished without it (some read them elsewhere
  // before a worker death, the others are gone): it cannot drain them itself.
  // Only tasks some consumer completed can be (FinishIfConsumersDoneLocked); collected first,
  // as finishing one changes the worker's list. Usually none: no copy of the list per call.
  absl::InlinedVector<int64_t, 4> completed_by_some;
  for (int64_t task_id : state_.FindWorker(worker_id)->task_ids) {
    const CoordinatorState::Task& task = state_.tasks().at(task_id);
    if (!task.finished && !task.completed_by.empty()) completed_by_some.push_back(task_id);
  }
  for (int64_t task_id : completed_by_some) {
    bool finished = false;
    RETURN_IF_ERROR(FinishIfConsumersDoneLocked(task_id, &finished));
  }
  // Ranges: room may have appeared (a finished range, a new worker).
  RETURN_IF_ERROR(MakeRangesLocked());

  // Versioned answers: a worker whose assignment did not change since the version it applied
  // already runs every task assigned to it.
  if (request.known_incarnation() != versions_.incarnation() ||
      versions_.WorkerChangedSince(worker_id, request.known_version())) {
    absl::flat_hash_set<int64_t> known(request.active_task_ids().begin(),
                                       request.active_task_ids().end());
    const auto& finished = restarted ? kNoTasks : request.finished_task_ids();
    known.insert(finished.begin(), finished.end());
    for (int64_t task_id : state_.FindWorker(worker_id)->task_ids) {
      const CoordinatorState::Task& task = state_.tasks().at(task_id);
      if (task.finished || known.contains(task_id)) continue;
      *response->add_new_tasks() = TaskDefLocked(task);
    }
  }
  for (int64_t task_id : request.active_task_ids()) {
    const CoordinatorState::Task* task = state_.FindTask(task_id);
    // Also a task finished without it (its consumers all reported its end).
    if (task == nullptr || task->worker_id != worker_id || task->finished) {
      response->add_tasks_to_stop(task_id);
    }
  }
  // Finished tasks of a removed job: the worker can forget them.
  for (int64_t task_id : request.finished_task_ids()) {
    if (state_.FindTask(task_id) == nullptr) response->add_tasks_to_stop(task_id);
  }
  RETURN_IF_ERROR(NoteTaskRunsLocked(worker_id, request));
  FillGoneConsumersLocked(worker_id, response);
  response->set_worker_id(worker_id);
  response->set_incarnation(versions_.incarnation());
  response->set_version(versions_.version());
  response->set_worker_timeout_ms(absl::ToInt64Milliseconds(options_.worker_timeout));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Coordinator::WatchAssignment(const proto::WatchAssignmentRequest& request,
                                                      AssignmentWatchers::Done done) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "WatchAssignmentRequest"));
  if (request.worker_address().empty()) {
    return absl::InvalidArgumentError("WatchAssignmentRequest.worker_address is empty");
  }
  if (request.wait_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WatchAssignmentRequest.wait_ms is negative (", request.wait_ms(), ")"));
  }
  absl::Duration wait = options_.max_assignment_watch;
  if (request.wait_ms() > 0) wait = std::min(wait, absl::Milliseconds(request.wait_ms()));
  {
    absl::MutexLock lock(&mu_);
    const CoordinatorState::Worker* worker = state_.FindWorkerByAddress(request.worker_address());
    if (worker == nullptr) {
      return absl::NotFoundError(absl::StrCat("worker ", request.worker_address(),
                                              " is not registered: heartbeat first"));
    }
    auto known = incarnations_.find(worker->id);
    if (request.process_incarnation() != 0 && known != incarnations_.end() &&
        known->second.current != 0 && known->second.current != request.process_incarnation()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", request.worker_address(), ": process incarnation ",
          absl::Hex(request.process_incarnation()), " is not the registered one (",
          absl::Hex(known->second.current), "); heartbeat first"));
    }
    // Checked and registered under mu_, where every change notifies: none is missed.
    if (request.known_incarnation() == versions_.incarnation() &&
        !versions_.WorkerChangedSince(worker->id, request.known_version())) {
      return watchers_.Add(worker->id, clock_->Now() + wait, std::move(done));
    }
  }
  done(true);
  return uint64_t{0};
}

}  // namespace sluice
