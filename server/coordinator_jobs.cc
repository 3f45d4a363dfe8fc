// Coordinator, jobs: registering datasets, creating and planning jobs, their element specs,
// consumers' heartbeats, finished jobs and the status report (coordinator.h).
#include "server/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/data/distribute/auto_shard.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/data/distribute/global_order.h"
#include "core/rpc/trainer_id.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/dataset.pb.h"
#include "server/job_options.h"
#include "server/task_planner.h"

namespace sluice {
namespace {

// A backstop for the user-controlled pipeline work the coordinator runs (parsing, spec
// inference, planning; these may read files, e.g. webdataset's first sample, or call plugins):
// an allocation that throws fails that request with RESOURCE_EXHAUSTED naming it, instead of
// escaping into the RPC handler (UNKNOWN) or ending the process. The limits in that work
// (core/data/shape_limits.h, the readers' limits) are meant to make this unreachable.
template <typename F>
auto BadAllocToStatus(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of memory while the coordinator inferred the dataset's spec "
                           "or planned its job (the request is refused; the coordinator goes on)"));
  }
}

// How long a consumer's claim (server/consumer_claims.h) outlives its last heartbeat: the time
// after which the coordinator declares the consumer gone, else a dead worker's.
absl::Duration ConsumerClaimExpiry(const CoordinatorOptions& options) {
  return options.consumer_timeout > absl::ZeroDuration() ? options.consumer_timeout
                                                         : options.worker_timeout;
}

}  // namespace

absl::Status Coordinator::CollectFinishedJobsLocked() {
  const absl::Time now = clock_->Now();
  std::vector<int64_t> expired;
  if (!finished_synced_) {
    // Jobs the state has finished but this coordinator did not see finish (after a restart,
    // or a state reloaded from the journal) count from now (so a TTL of zero or less expires
    // them below). Every job that finishes later is stamped where it finishes, so this walk
    // over every job happens once, not on every request.
    for (const auto& [id, job] : state_.jobs()) {
      if (job.finished && !finished_at_.contains(id)) finished_at_[id] = now;
    }
    finished_synced_ = true;
  }
  // Only the finished jobs are looked at. A stamp whose job is gone or no longer finished
  // (a reload undid the finish) is dropped.
  for (auto it = finished_at_.begin(); it != finished_at_.end();) {
    const CoordinatorState::Job* job = state_.FindJob(it->first);
    if (job == nullptr || !job->finished) {
      finished_at_.erase(it++);
      continue;
    }
    if (now - it->second >= options_.finished_job_ttl) expired.push_back(it->first);
    ++it;
  }
  std::sort(expired.begin(), expired.end());  // removed in id order, as the walk over jobs did
  for (int64_t id : expired) {
    const CoordinatorState::Job* job = state_.FindJob(id);
    const std::string name = job->name;
    progress_.Forget(job->task_ids);
    proto::Update u;
    u.mutable_remove_job()->set_job_id(id);
    RETURN_IF_ERROR(ApplyLocked(u));
    finished_at_.erase(id);
    ranges_jobs_.erase(id);
    replans_.erase(id);  // a re-plan still running is discarded
    failed_jobs_.erase(id);
    job_activity_.erase(id);
    consumer_seen_.erase(id);
    Log(absl::StrCat("job ", id, name.empty() ? "" : absl::StrCat(" (", name, ")"),
                     " removed: finished ", absl::FormatDuration(options_.finished_job_ttl),
                     " ago (finished_job_ttl)"));
  }
  return absl::OkStatus();
}


absl::Status Coordinator::CheckQuota(absl::string_view method, absl::string_view caller,
                                     absl::string_view name, int64_t held, int64_t more,
                                     int64_t limit) {
  if (limit <= 0 || held + more <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      method, ": caller \"", caller, "\" is over its quota ", name, " ", limit, " (it holds ",
      held, ", the request adds ", more, "; the coordinator's flag --", name,
      " sets it). Finished jobs and unused datasets free their quota when the coordinator "
      "removes them (finished_job_ttl, unused_dataset_ttl)"));
}


void Coordinator::NoteJobActivityLocked(int64_t job_id, bool heartbeat) {
  JobActivity& activity = job_activity_[job_id];
  activity.last = clock_->Now();
  activity.heartbeated = activity.heartbeated || heartbeat;
}


absl::Status Coordinator::FailIdleJobsLocked() {
  const bool idle_ttl = options_.idle_job_ttl > absl::ZeroDuration();
  const bool consumer_ttl = options_.consumer_timeout > absl::ZeroDuration();
  if (!idle_ttl && !consumer_ttl) return absl::OkStatus();
  const absl::Time now = clock_->Now();
  // Every unfinished job has an entry (one replayed or reloaded counts from now); a walk over
  // the unfinished jobs, on the ticker only.
  for (const auto& [id, job] : state_.jobs()) {
    if (!job.finished) job_activity_.try_emplace(id, JobActivity{now});
  }
  // The quiet time after which a job is ended, and the flag that says so: consumer_timeout
  // once a consumer heartbeated (none is left), idle_job_ttl before (none came yet).
  auto limit = [&](const JobActivity& a) -> std::pair<absl::Duration, absl::string_view> {
    if (a.heartbeated && consumer_ttl &&
        (!idle_ttl || options_.consumer_timeout < options_.idle_job_ttl)) {
      return {options_.consumer_timeout, "consumer_timeout"};
    }
    if (idle_ttl) return {options_.idle_job_ttl, "idle_job_ttl"};
    return {absl::InfiniteDuration(), ""};
  };
  std::vector<int64_t> idle;
  for (auto it = job_activity_.begin(); it != job_activity_.end();) {
    const CoordinatorState::Job* job = state_.FindJob(it->first);
    if (job == nullptr || job->finished) {
      job_activity_.erase(it++);
      continue;
    }
    if (now - it->second.last >= limit(it->second).first) idle.push_back(it->first);
    ++it;
  }
  std::sort(idle.begin(), idle.end());
  for (int64_t id : idle) {
    const CoordinatorState::Job* job = state_.FindJob(id);
    const JobActivity& activity = job_activity_.at(id);
    const absl::Duration quiet = now - activity.last;
    const auto [ttl, flag] = limit(activity);
    const absl::string_view what =
        activity.heartbeated
            ? " has no consumer left: its consumers read it, then none asked about it for "
            : " was abandoned: no consumer asked about it for ";
    RETURN_IF_ERROR(FailJobLocked(
        id, JobEnd::kFailed,
        absl::FailedPreconditionError(absl::StrCat(
            "job ", id, job->name.empty() ? "" : absl::StrCat(" (", job->name, ")"), what,
            absl::FormatDuration(quiet), " (", flag, " ", absl::FormatDuration(ttl), ", flag --",
            flag, "); its tasks are stopped"))));
    job_activity_.erase(id);
  }
  return absl::OkStatus();
}


absl::Status Coordinator::CollectUnusedDatasetsLocked() {
  if (options_.unused_dataset_ttl <= absl::ZeroDuration()) return absl::OkStatus();
  const absl::Time now = clock_->Now();
  const std::set<std::string>& unused = state_.unused_datasets();
  for (auto it = unused_since_.begin(); it != unused_since_.end();) {
    if (!unused.contains(it->first)) {
      unused_since_.erase(it++);
    } else {
      ++it;
    }
  }
  std::vector<std::string> expired;
  for (const std::string& id : unused) {
    auto [it, made] = unused_since_.try_emplace(id, now);
    if (now - it->second >= options_.unused_dataset_ttl) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    proto::Update u;
    u.mutable_remove_dataset()->set_dataset_id(id);
    RETURN_IF_ERROR(ApplyLocked(u));
    unused_since_.erase(id);
    Log(absl::StrCat("dataset ", id, " removed: no job named it for ",
                     absl::FormatDuration(options_.unused_dataset_ttl), " (unused_dataset_ttl)"));
  }
  return absl::OkStatus();
}


absl::Status Coordinator::JobNotFound(absl::string_view field, int64_t job_id) const {
  if (state_.JobWasRemoved(job_id)) {
    return absl::NotFoundError(absl::StrCat(field, ": job ", job_id,
                                            " was finished and removed"));
  }
  return absl::NotFoundError(absl::StrCat(field, ": no job ", job_id));
}

absl::StatusOr<Dataset> Coordinator::JobDatasetLocked(const CoordinatorState::Job& job) const {
  const CoordinatorState::Dataset* ds = state_.FindDataset(job.options.dataset_id());
  if (ds == nullptr) {
    return absl::NotFoundError(absl::StrCat("job ", job.id, ": unknown dataset ",
                                            job.options.dataset_id()));
  }
  return Dataset::FromDef(ds->def);
}


proto::TaskDef Coordinator::TaskDefLocked(const CoordinatorState::Task& task) const {
  const CoordinatorState::Job* job = state_.FindJob(task.job_id);
  proto::TaskDef def;
  def.set_task_id(task.id);
  def.set_job_id(task.job_id);
  def.set_task_index(task.index);
  def.set_num_tasks(job->ranges ? job->num_ranges : static_cast<int64_t>(job->task_ids.size()));
  *def.mutable_dataset() = task.dataset;
  *def.mutable_job() = job->options;
  def.set_step_sharded(task.step_sharded);
  def.set_skip_steps(task.skip_steps);
  def.set_first_step(task.first_step);
  def.set_num_steps(task.num_steps);
  return def;
}


void Coordinator::FillTaskInfoLocked(const CoordinatorState::Task& task,
                                     proto::TaskInfo* info) const {
  info->set_task_id(task.id);
  info->set_task_index(task.index);
  if (const CoordinatorState::Worker* w = state_.FindWorker(task.worker_id)) {
    info->set_worker_address(w->address);
  }
  info->set_finished(task.finished);
  info->set_first_step(task.first_step);
  info->set_num_steps(task.num_steps);
}


void Coordinator::FillTaskInfosLocked(
    const CoordinatorState::Job& job,
    google::protobuf::RepeatedPtrField<proto::TaskInfo>* out) const {
  for (int64_t t : job.task_ids) FillTaskInfoLocked(state_.tasks().at(t), out->Add());
}


absl::Status Coordinator::RegisterDataset(const proto::RegisterDatasetRequest& request,
                                          proto::RegisterDatasetResponse* response,
                                          absl::string_view caller) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "RegisterDatasetRequest"));
  absl::StatusOr<Dataset> parsed = absl::InvalidArgumentError(
      "RegisterDatasetRequest: set one of `dataset` (a DatasetDef) or `pipeline` (an "
      "expression)");
  switch (request.graph_case()) {
    case proto::RegisterDatasetRequest::kDataset:
      parsed = BadAllocToStatus("RegisterDataset",
                                [&] { return Dataset::FromDef(request.dataset()); });
      break;
    case proto::RegisterDatasetRequest::kPipeline:
      parsed = BadAllocToStatus("RegisterDataset",
                                [&] { return Dataset::Parse(request.pipeline()); });
      break;
    case proto::RegisterDatasetRequest::GRAPH_NOT_SET:
      break;
  }
  if (!parsed.ok()) return parsed.status();
  const Dataset& dataset = *parsed;
  std::string fingerprint;
  ASSIGN_OR_RETURN(ElementSpec spec,
                   BadAllocToStatus("RegisterDataset", [&]() -> absl::StatusOr<ElementSpec> {
                     ASSIGN_OR_RETURN(ElementSpec spec, dataset.element_spec());
                     fingerprint = dataset.Fingerprint();
                     return spec;
                   }));

  DurableLock lock(this);
  RETURN_IF_ERROR(CheckLivenessLocked());
  std::string id = absl::StrCat("ds-", fingerprint.substr(0, kDatasetIdDigits));
  const CoordinatorState::Dataset* existing = state_.FindDataset(id);
  if (existing != nullptr &&
      !google::protobuf::util::MessageDifferencer::Equals(existing->def, dataset.def())) {
    // A prefix collision between different graphs: the full fingerprint tells them apart.
    id = absl::StrCat("ds-", fingerprint);
    existing = state_.FindDataset(id);
  }
  if (existing == nullptr) {
    const CoordinatorState::OwnerUsage usage = state_.Usage(caller);
    RETURN_IF_ERROR(CheckQuota("RegisterDataset", caller, "max_datasets_per_identity",
                               usage.datasets, 1, options_.max_datasets_per_identity));
    RETURN_IF_ERROR(CheckQuota("RegisterDataset", caller, "max_dataset_bytes_per_identity",
                               usage.dataset_bytes,
                               static_cast<int64_t>(dataset.def().ByteSizeLong()),
                               options_.max_dataset_bytes_per_identity));
    proto::Update u;
    u.mutable_register_dataset()->set_dataset_id(id);
    *u.mutable_register_dataset()->mutable_dataset() = dataset.def();
    u.mutable_register_dataset()->set_owner(std::string(caller));
    RETURN_IF_ERROR(ApplyLocked(u));
    Log(absl::StrCat("dataset ", id, " registered by \"", caller, "\""));
  } else if (auto since = unused_since_.find(id); since != unused_since_.end()) {
    // Registered again, as a client does right before it creates a job: unused from now.
    since->second = clock_->Now();
  }
  response->set_dataset_id(id);
  *response->mutable_element_spec() = ElementSpecToProto(spec);
  return absl::OkStatus();
}


absl::Status Coordinator::ExistingJobLocked(const CoordinatorState::Job& job,
                                            const proto::JobOptions& options,
                                            proto::GetOrCreateJobResponse* response) const {
  std::vector<std::string> diffs = DifferingFields(job.options, options);
  if (!diffs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GetOrCreateJobRequest: job \"", job.name, "\" (id ", job.id,
        ") exists with other options: ", absl::StrJoin(diffs, ", ")));
  }
  response->set_job_id(job.id);
  response->set_created(false);
  response->set_fallback_reason(job.fallback_reason);
  response->set_steps_per_epoch(job.steps_per_epoch);
  response->set_total_steps(job.total_steps);
  return absl::OkStatus();
}

absl::Status Coordinator::AdmitTrainerLocked(int64_t job_id, absl::string_view trainer_id) {
  if (trainer_id.empty()) return absl::OkStatus();
  const CoordinatorState::Job* job = state_.FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  const std::vector<std::string>& ids = job->trainer_ids;
  if (std::find(ids.begin(), ids.end(), trainer_id) != ids.end()) return absl::OkStatus();
  const std::vector<std::string>& dropped = job->dropped_trainer_ids;
  if (std::find(dropped.begin(), dropped.end(), trainer_id) != dropped.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GetOrCreateJobRequest.trainer_id ", QuoteTrainerId(trainer_id), ": job \"", job->name,
        "\" (id ", job_id, ") dropped this trainer after no stream of it was open to a worker "
        "for the worker's --drop_departed_trainers_after, and the steps it missed are gone; "
        "join under a new trainer_id"));
  }
  const int64_t max = job->options.cross_trainer().max_trainers() > 0
                          ? job->options.cross_trainer().max_trainers()
                          : kDefaultMaxTrainers;
  if (static_cast<int64_t>(ids.size()) >= max) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "GetOrCreateJobRequest.trainer_id ", QuoteTrainerId(trainer_id), ": job \"", job->name,
        "\" (id ", job_id, ") is shared by its maximum of ", max,
        " trainers (options.cross_trainer.max_trainers)"));
  }
  proto::Update u;
  u.mutable_trainer_joined()->set_job_id(job_id);
  u.mutable_trainer_joined()->set_trainer_id(std::string(trainer_id));
  RETURN_IF_ERROR(ApplyLocked(u));
  Log(absl::StrCat("job ", job_id, ": trainer ", QuoteTrainerId(trainer_id), " joined (",
                   ids.size(), " of at most ", max, ")"));
  return absl::OkStatus();
}

absl::StatusOr<Coordinator::JobPlan> Coordinator::PlanJob(const proto::DatasetDef& dataset_def,
                                                          const proto::JobOptions& options,
                                                          int64_t live) const {
  JobPlan out;
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::FromDef(dataset_def));
  const bool coordinated = options.read_mode() == proto::READ_MODE_COORDINATED;
  RETURN_IF_ERROR(DistributedPerReplicaSpec(dataset, coordinated ? options.num_consumers() : 1,
                                            options.replicas_per_consumer())
                      .status());
  out.dynamic = options.sharding_policy() == proto::SHARDING_DYNAMIC;
  proto::CreateJobUpdate* c = &out.create;
  *c->mutable_options() = options;
  // Resume: only where a start step means the same thing for any number of tasks.
  proto::ShardingPolicy policy = options.sharding_policy();
  if (policy == proto::SHARDING_AUTO) {
    policy = ReadsFiles(dataset) ? proto::SHARDING_FILE : proto::SHARDING_DATA;
  }
  if (options.start_step() != 0 && policy != proto::SHARDING_RANGES &&
      policy != proto::SHARDING_DATA) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GetOrCreateJobRequest.options.start_step ", options.start_step(),
        ": resume (start_step) needs SHARDING_RANGES or SHARDING_DATA, the job uses ",
        proto::ShardingPolicy_Name(options.sharding_policy()),
        options.sharding_policy() != policy
            ? absl::StrCat(" (", proto::ShardingPolicy_Name(policy), " for this dataset)")
            : std::string()));
  }
  if (policy == proto::SHARDING_RANGES) {
    absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(dataset);
    if (plan.ok()) {
      ASSIGN_OR_RETURN(RangeCut cut, CutJob(options, plan->steps_per_epoch));
      // Fail now, not at the first range, if the order options are unusable.
      if (cut.num_ranges() > 0) {
        const GlobalRange r = cut.Range(0);
        const int64_t begin = r.first_step - r.epoch_first_step;
        absl::StatusOr<Dataset> first = GlobalOrderRange(
            dataset, *plan, OrderOptions(options.order()), r.epoch, begin, begin + r.num_steps);
        if (!first.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "GetOrCreateJobRequest.options.order: ", first.status().message()));
        }
      }
      c->set_ranges(true);
      c->set_steps_per_epoch(plan->steps_per_epoch);
      c->set_total_steps(cut.total_steps());
      c->set_num_ranges(cut.num_ranges());
      out.ranges_job = std::make_unique<RangesJob>(RangesJob{options, dataset, *plan, cut});
    } else if (plan.status().code() != absl::StatusCode::kFailedPrecondition) {
      return plan.status();  // the source could not be opened or the graph is bad
    } else if (options.order().shuffle() != proto::SHUFFLE_NONE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GetOrCreateJobRequest.options.order.shuffle ",
          proto::ShuffleMode_Name(options.order().shuffle()),
          " needs a pipeline with random access, and this one has none: ",
          plan.status().message()));
    } else {
      c->set_fallback_reason(std::string(plan.status().message()));
      policy = proto::SHARDING_DATA;
    }
  }
  if (policy == proto::SHARDING_DATA) out.skip_steps = options.start_step();
  if (c->ranges()) {
    // Ranges are made as workers have room.
  } else if (out.dynamic) {
    ASSIGN_OR_RETURN(SplitSource source, DescribeSplitSource(dataset));
    int64_t split_size = 1;
    if (!source.files) {
      split_size = options.split_size();
      if (split_size == 0) {
        absl::StatusOr<int64_t> batch = GlobalBatchSize(dataset);
        split_size = batch.ok() && *batch > 0 ? *batch * options_.split_batches
                                              : options_.split_elements;
      }
    }
    c->set_split_source_size(source.size);
    c->set_split_size(std::max<int64_t>(split_size, 1));
  } else {
    const int64_t k = options.num_tasks() > 0 ? options.num_tasks() : live;
    ASSIGN_OR_RETURN(out.tasks, PlanStaticTasks(dataset, policy, k));
  }
  return out;
}

absl::Status Coordinator::GetOrCreateJob(const proto::GetOrCreateJobRequest& request,
                                         proto::GetOrCreateJobResponse* response,
                                         absl::string_view caller,
                                         const std::function<bool()>& cancelled) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "GetOrCreateJobRequest"));
  const proto::JobOptions& options = request.options();
  RETURN_IF_ERROR(ValidateJobOptions(options, "GetOrCreateJobRequest.options"));
  RETURN_IF_ERROR(ValidateJobTrainer(options, request.trainer_id(), "GetOrCreateJobRequest"));

  proto::DatasetDef dataset_def;
  int64_t live = 0;
  {
    DurableLock lock(this);
    RETURN_IF_ERROR(CheckLivenessLocked());
    const CoordinatorState::Dataset* ds = state_.FindDataset(options.dataset_id());
    if (ds == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "GetOrCreateJobRequest.options.dataset_id: no dataset ", options.dataset_id(),
          " is registered"));
    }
    if (const CoordinatorState::Job* job = state_.FindJobByName(request.job_name())) {
      if (!job->finished) NoteJobActivityLocked(job->id);
      RETURN_IF_ERROR(ExistingJobLocked(*job, options, response));
      return AdmitTrainerLocked(job->id, request.trainer_id());
    }
    // Refused before planning, which may read the data.
    RETURN_IF_ERROR(CheckQuota("GetOrCreateJob", caller, "max_jobs_per_identity",
                               state_.Usage(caller).unfinished_jobs, 1,
                               options_.max_jobs_per_identity));
    live = NumLiveWorkersLocked();
    if (live == 0) {
      return absl::UnavailableError(
          "GetOrCreateJob: no input workers registered yet; retry when a worker has "
          "heartbeated");
    }
    dataset_def = ds->def;
  }
  // Planning may read the data (record indexes of a RANGES job, file lists): outside the lock,
  // so that heartbeats and other jobs' requests are served meanwhile (docs/SERVICE.md,
  // "Isolation").
  if (options_.before_planning) options_.before_planning(options.dataset_id());
  ASSIGN_OR_RETURN(JobPlan job_plan, BadAllocToStatus("GetOrCreateJob", [&] {
                     return PlanJob(dataset_def, options, live);
                   }));
  // The caller may have given up while the job planned (a deadline shorter than the plan, a
  // client that retried): nothing is created for a call nobody waits for.
  if (cancelled && cancelled()) return absl::CancelledError("the caller cancelled the call");

  DurableLock lock(this);
  RETURN_IF_ERROR(CheckLivenessLocked());
  JournalBatch batch(this);  // the job and its tasks: one record, or nothing
  // Another request may have made the job while this one planned.
  if (const CoordinatorState::Job* job = state_.FindJobByName(request.job_name())) {
    if (!job->finished) NoteJobActivityLocked(job->id);
    RETURN_IF_ERROR(ExistingJobLocked(*job, options, response));
    RETURN_IF_ERROR(AdmitTrainerLocked(job->id, request.trainer_id()));
    return batch.Commit();
  }
  // Other requests of the same caller may have created jobs while this one planned.
  RETURN_IF_ERROR(CheckQuota("GetOrCreateJob", caller, "max_jobs_per_identity",
                             state_.Usage(caller).unfinished_jobs, 1,
                             options_.max_jobs_per_identity));
  if (state_.FindDataset(options.dataset_id()) == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "GetOrCreateJobRequest.options.dataset_id: dataset ", options.dataset_id(),
        " was removed while the job was planned (unused_dataset_ttl); register it again"));
  }
  if (NumLiveWorkersLocked() == 0) {
    return absl::UnavailableError(
        "GetOrCreateJob: no live input worker; retry when a worker has heartbeated");
  }
  live = NumLiveWorkersLocked();
  const bool dynamic = job_plan.dynamic;
  const std::vector<TaskPlan>& plans = job_plan.tasks;
  const int64_t skip_steps = job_plan.skip_steps;
  std::unique_ptr<RangesJob> ranges_job = std::move(job_plan.ranges_job);
  proto::Update create;
  proto::CreateJobUpdate* c = create.mutable_create_job();
  *c = job_plan.create;
  c->set_job_id(state_.NextJobId());
  c->set_job_name(request.job_name());
  c->set_owner(std::string(caller));
  RETURN_IF_ERROR(ApplyLocked(create));
  const int64_t job_id = c->job_id();
  NoteJobActivityLocked(job_id);
  Log(absl::StrCat("job ", job_id,
                   request.job_name().empty() ? "" : absl::StrCat(" (", request.job_name(), ")"),
                   " created: dataset ", options.dataset_id(), ", ",
                   proto::ShardingPolicy_Name(options.sharding_policy()), ", ",
                   proto::ReadMode_Name(options.read_mode()), ", ", options.num_consumers(),
                   " consumers x ", options.replicas_per_consumer(), " replicas, ",
                   c->ranges()  ? absl::StrCat(c->num_ranges(), " ranges of global steps [",
                                               options.start_step(), ", ",
                                               options.start_step() + c->total_steps(), ")")
                   : dynamic    ? absl::StrCat(live, " dynamic tasks")
                                : absl::StrCat(plans.size(), " tasks")));
  if (!c->fallback_reason().empty()) {
    Log(absl::StrCat("job ", job_id, ": SHARDING_RANGES falls back to DATA: ",
                     c->fallback_reason()));
  }
  if (c->ranges()) {
    ranges_jobs_[job_id] = std::move(ranges_job);
    if (c->num_ranges() == 0) {
      proto::Update f;
      f.mutable_finish_job()->set_job_id(job_id);
      RETURN_IF_ERROR(ApplyLocked(f));
      finished_at_[job_id] = clock_->Now();
      Log(absl::StrCat("job ", job_id, " finished: no steps left from start_step ",
                       options.start_step()));
    } else {
      RETURN_IF_ERROR(MakeRangesLocked());
    }
  } else if (dynamic) {
    std::vector<int64_t> workers;
    for (const auto& [id, w] : state_.workers()) {
      if (w.alive) workers.push_back(id);
    }
    for (int64_t w : workers) {
      RETURN_IF_ERROR(CreateTaskLocked(job_id, dataset_def, /*step_sharded=*/false, w));
    }
  } else {
    for (const TaskPlan& plan : plans) {
      RETURN_IF_ERROR(CreateTaskLocked(job_id, plan.dataset, plan.step_sharded,
                                       LeastLoadedWorkerLocked(),
                                       plan.step_sharded ? skip_steps : 0));
    }
  }
  RETURN_IF_ERROR(AdmitTrainerLocked(job_id, request.trainer_id()));
  RETURN_IF_ERROR(batch.Commit());
  response->set_job_id(job_id);
  response->set_created(true);
  response->set_fallback_reason(c->fallback_reason());
  response->set_steps_per_epoch(c->ranges() ? c->steps_per_epoch() : -1);
  response->set_total_steps(c->ranges() ? c->total_steps() : -1);
  return absl::OkStatus();
}


absl::Status Coordinator::GetElementSpec(const proto::GetElementSpecRequest& request,
                                         proto::GetElementSpecResponse* response) {
  proto::JobOptions options;
  proto::DatasetDef def;
  {
    DurableLock lock(this);
    RETURN_IF_ERROR(CheckLivenessLocked());
    switch (request.target_case()) {
      case proto::GetElementSpecRequest::kJobId: {
        const CoordinatorState::Job* job = state_.FindJob(request.job_id());
        if (job == nullptr) return JobNotFound("GetElementSpecRequest.job_id", request.job_id());
        if (!job->finished) NoteJobActivityLocked(job->id);
        options = job->options;
        break;
      }
      case proto::GetElementSpecRequest::kOptions:
        options = request.options();
        RETURN_IF_ERROR(ValidateJobOptions(options, "GetElementSpecRequest.options"));
        break;
      case proto::GetElementSpecRequest::TARGET_NOT_SET:
        return absl::InvalidArgumentError(
            "GetElementSpecRequest: set one of `job_id` or `options`");
    }
    const CoordinatorState::Dataset* ds = state_.FindDataset(options.dataset_id());
    if (ds == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("GetElementSpecRequest: no dataset ", options.dataset_id()));
    }
    def = ds->def;
  }
  const bool coordinated = options.read_mode() == proto::READ_MODE_COORDINATED;
  ASSIGN_OR_RETURN(
      ElementSpec spec,
      BadAllocToStatus("GetElementSpec", [&]() -> absl::StatusOr<ElementSpec> {
        ASSIGN_OR_RETURN(Dataset dataset, Dataset::FromDef(std::move(def)));
        return DistributedPerReplicaSpec(dataset, coordinated ? options.num_consumers() : 1,
                                         options.replicas_per_consumer());
      }));
  *response->mutable_per_replica_spec() = ElementSpecToProto(spec);
  response->set_num_replicas(options.replicas_per_consumer());
  return absl::OkStatus();
}

Coordinator::ConsumerSeen& Coordinator::ConsumerSeenLocked(const CoordinatorState::Job& job) {
  auto [it, made] = consumer_seen_.try_emplace(job.id);
  if (made) {
    const auto n = static_cast<size_t>(std::max<int64_t>(job.options.num_consumers(), 1));
    it->second.last.assign(n, clock_->Now());
    it->second.gone_logged.assign(n, false);
  }
  return it->second;
}

void Coordinator::FillGoneConsumersLocked(int64_t worker_id,
                                          proto::WorkerHeartbeatResponse* response) {
  // The jobs of its unfinished tasks, each once, ascending (a worker holds few: no heap).
  absl::InlinedVector<int64_t, 8> sorted;
  for (int64_t task_id : state_.FindWorker(worker_id)->task_ids) {
    const CoordinatorState::Task& task = state_.tasks().at(task_id);
    if (!task.finished) sorted.push_back(task.job_id);
  }
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (int64_t job_id : sorted) {
    const CoordinatorState::Job* job = state_.FindJob(job_id);
    if (job->options.read_mode() != proto::READ_MODE_COORDINATED ||
        job->options.num_consumers() < 2) {
      continue;  // nobody else waits for the consumer
    }
    for (int64_t c = 0; c < job->options.num_consumers(); ++c) {
      if (!ConsumerGoneLocked(*job, c)) continue;
      proto::ConsumerRef* gone = response->add_gone_consumers();
      gone->set_job_id(job_id);
      gone->set_consumer_index(c);
    }
  }
}

bool Coordinator::ConsumerGoneLocked(const CoordinatorState::Job& job, int64_t c) {
  if (job.options.read_mode() != proto::READ_MODE_COORDINATED ||
      job.options.num_consumers() < 2 || c < 0 || c >= job.options.num_consumers()) {
    return false;
  }
  if (std::binary_search(job.released_consumers.begin(), job.released_consumers.end(), c)) {
    return true;
  }
  if (options_.consumer_timeout <= absl::ZeroDuration()) return false;
  ConsumerSeen& seen = ConsumerSeenLocked(job);
  const auto i = static_cast<size_t>(c);
  const absl::Time now = clock_->Now();
  if (now - seen.last[i] < options_.consumer_timeout) return false;
  if (!seen.gone_logged[i]) {
    seen.gone_logged[i] = true;
    Log(absl::StrCat("consumer ", c, " of job ", job.id, " is gone: no heartbeat for ",
                     absl::FormatDuration(now - seen.last[i]), " (consumer_timeout ",
                     absl::FormatDuration(options_.consumer_timeout),
                     "); its workers stop holding steps for it"));
  }
  return true;
}

absl::Status Coordinator::FinishIfConsumersDoneLocked(int64_t task_id, bool* finished) {
  *finished = false;
  const CoordinatorState::Task* task = state_.FindTask(task_id);
  if (task == nullptr || task->finished || task->completed_by.empty()) return absl::OkStatus();
  const CoordinatorState::Job* job = state_.FindJob(task->job_id);
  // A shared job's consumers are trainers' processes that all carry consumer index 0: one
  // trainer's end says nothing of the others (still reading, or expected and not yet joined).
  // The worker running the task knows its trainers (worker/cross_trainer_window.h: drained())
  // and reports the task finished itself.
  if (job->options.cross_trainer().enabled() && task->worker_id != 0) return absl::OkStatus();
  const int64_t n = std::max<int64_t>(job->options.num_consumers(), 1);
  std::vector<int64_t> gone;
  for (int64_t c = 0; c < n; ++c) {
    if (std::binary_search(task->completed_by.begin(), task->completed_by.end(), c)) continue;
    if (!ConsumerGoneLocked(*job, c)) return absl::OkStatus();
    gone.push_back(c);
  }
  Log(absl::StrCat("task ", task_id, " (job ", job->id, ", index ", task->index,
                   ") finished: every consumer received its end",
                   gone.empty() ? "" : absl::StrCat(" but the gone ones (",
                                                    absl::StrJoin(gone, ", "), ")")));
  RETURN_IF_ERROR(FinishTaskLocked(task_id));
  *finished = true;
  return absl::OkStatus();
}

absl::Status Coordinator::ConsumerCompletedTaskLocked(int64_t task_id, int64_t consumer,
                                                     bool* finished) {
  *finished = false;
  const CoordinatorState::Task* task = state_.FindTask(task_id);
  if (task == nullptr || task->finished) return absl::OkStatus();
  const CoordinatorState::Job* job = state_.FindJob(task->job_id);
  if (consumer < 0 || consumer >= std::max<int64_t>(job->options.num_consumers(), 1)) {
    return absl::OkStatus();
  }
  if (!std::binary_search(task->completed_by.begin(), task->completed_by.end(), consumer)) {
    proto::Update u;
    u.mutable_consumer_completed_task()->set_task_id(task_id);
    u.mutable_consumer_completed_task()->set_consumer_index(consumer);
    RETURN_IF_ERROR(ApplyLocked(u));
  }
  return FinishIfConsumersDoneLocked(task_id, finished);
}

absl::Status Coordinator::JobErrorLocked(const CoordinatorState::Job& job) const {
  return job.error;  // a RANGES job retrying its plan is not failed (yet): its consumers wait
}

absl::Status Coordinator::ClientHeartbeat(const proto::ClientHeartbeatRequest& request,
                                          proto::ClientHeartbeatResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "ClientHeartbeatRequest"));
  DurableLock lock(this);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const CoordinatorState::Job* job = state_.FindJob(request.job_id());
  if (job == nullptr) return JobNotFound("ClientHeartbeatRequest.job_id", request.job_id());
  RETURN_IF_ERROR(JobErrorLocked(*job));
  if (request.consumer_index() < 0 || request.consumer_index() >= job->options.num_consumers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientHeartbeatRequest.consumer_index ", request.consumer_index(), " is outside [0, ",
        job->options.num_consumers(), ") for job ", job->id));
  }
  if (!job->finished) NoteJobActivityLocked(job->id, /*heartbeat=*/true);
  if (job->options.read_mode() == proto::READ_MODE_COORDINATED) {
    ConsumerSeen& seen = ConsumerSeenLocked(*job);
    seen.last[request.consumer_index()] = clock_->Now();
    if (seen.gone_logged[request.consumer_index()]) {
      seen.gone_logged[request.consumer_index()] = false;
      Log(absl::StrCat("consumer ", request.consumer_index(), " of job ", job->id,
                       " is back"));
    }
  }
  // Only the process holding this consumer index speaks for it (server/consumer_claims.h).
  const ConsumerClaims::Verdict claim = consumer_claims_.Check(
      job->id, request.consumer_index(), request.consumer_secret(), clock_->Now(),
      ConsumerClaimExpiry(options_));
  response->set_consumer_secret(claim.secret);
  // Only the holder's load counts (a second process claiming the index is not this consumer).
  if (claim.holder && !job->finished) NoteConsumerLoadLocked(job->id, request);
  // Tasks every consumer has read to the end are finished, whoever produced them. Each
  // consumer's report is journaled once, so that it still counts after a restart when that
  // consumer has exited meanwhile.
  bool finished_any = false;
  static const google::protobuf::RepeatedField<int64_t> kNoReports;
  for (int64_t task_id : claim.holder ? request.completed_task_ids() : kNoReports) {
    const CoordinatorState::Task* task = state_.FindTask(task_id);
    if (task == nullptr || task->job_id != job->id) continue;
    bool finished = false;
    RETURN_IF_ERROR(ConsumerCompletedTaskLocked(task_id, request.consumer_index(), &finished));
    finished_any = finished_any || finished;
  }
  if (finished_any) RETURN_IF_ERROR(MakeRangesLocked());
  response->set_job_finished(job->finished);
  const int64_t made = static_cast<int64_t>(job->task_ids.size());
  response->set_num_tasks(job->ranges ? job->num_ranges : made);
  response->set_num_tasks_created(made);
  response->set_incarnation(versions_.incarnation());
  response->set_version(versions_.version());
  // Versioned answers: only what changed since the version the consumer applied, if known.
  std::optional<std::vector<int64_t>> changed;
  if (request.known_incarnation() == versions_.incarnation()) {
    changed = versions_.JobChangesSince(job->id, request.known_version());
  }
  if (changed.has_value()) {
    response->set_delta(true);
    std::vector<const CoordinatorState::Task*> tasks;
    for (int64_t id : *changed) {
      const CoordinatorState::Task* task = state_.FindTask(id);
      if (task == nullptr || task->job_id != job->id) continue;
      if (job->ranges && task->finished) {
        response->add_removed_task_ids(id);
      } else {
        tasks.push_back(task);
      }
    }
    std::sort(tasks.begin(), tasks.end(),
              [](const auto* a, const auto* b) { return a->index < b->index; });
    for (const CoordinatorState::Task* task : tasks) {
      FillTaskInfoLocked(*task, response->add_tasks());
    }
    std::sort(response->mutable_removed_task_ids()->begin(),
              response->mutable_removed_task_ids()->end());
    return absl::OkStatus();
  }
  FillTaskInfosLocked(*job, response->mutable_tasks());
  if (job->ranges) {
    // Only the ranges that exist and are unfinished (docs/SERVICE.md, "Global order").
    auto* tasks = response->mutable_tasks();
    int kept = 0;
    for (int i = 0; i < tasks->size(); ++i) {
      if (tasks->Get(i).finished()) continue;
      if (kept != i) tasks->SwapElements(kept, i);
      ++kept;
    }
    tasks->DeleteSubrange(kept, tasks->size() - kept);
  }
  return absl::OkStatus();
}

absl::Status Coordinator::ReleaseConsumer(const proto::ReleaseConsumerRequest& request,
                                          proto::ReleaseConsumerResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "ReleaseConsumerRequest"));
  DurableLock lock(this);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const CoordinatorState::Job* job = state_.FindJob(request.job_id());
  if (job == nullptr) {
    // Finished and removed since (finished_job_ttl): nothing left to release.
    if (state_.JobWasRemoved(request.job_id())) {
      response->set_job_finished(true);
      return absl::OkStatus();
    }
    return JobNotFound("ReleaseConsumerRequest.job_id", request.job_id());
  }
  const int64_t consumers = std::max<int64_t>(job->options.num_consumers(), 1);
  const int64_t c = request.consumer_index();
  if (c < 0 || c >= consumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReleaseConsumerRequest.consumer_index ", c, " is outside [0, ", consumers,
                     ") for job ", job->id));
  }
  // Only the process holding the consumer may release it (server/consumer_claims.h); a caller
  // that never heartbeated has no secret, and one holding nothing must not end a job.
  if (request.consumer_secret() == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "ReleaseConsumerRequest.consumer_secret is 0: only the process holding consumer ", c,
        " of job ", job->id, " (the secret its ClientHeartbeat answers carry) may release it"));
  }
  response->set_job_finished(job->finished);
  if (job->finished) return absl::OkStatus();
  const ConsumerClaims::Verdict claim = consumer_claims_.Check(
      job->id, c, request.consumer_secret(), clock_->Now(), ConsumerClaimExpiry(options_));
  if (!claim.holder) {
    return absl::PermissionDeniedError(absl::StrCat(
        "ReleaseConsumerRequest.consumer_secret is not the secret of consumer ", c, " of job ",
        job->id, ": another process holds it"));
  }
  NoteJobActivityLocked(job->id, /*heartbeat=*/true);
  // Its consumers may come back (by name) or join (shared): the job is theirs to end, by
  // consumer_timeout after its last activity.
  if (!job->name.empty() || job->options.cross_trainer().enabled()) return absl::OkStatus();
  if (!std::binary_search(job->released_consumers.begin(), job->released_consumers.end(), c)) {
    proto::Update u;
    u.mutable_consumer_released()->set_job_id(job->id);
    u.mutable_consumer_released()->set_consumer_index(c);
    RETURN_IF_ERROR(ApplyLocked(u));
    Log(absl::StrCat("consumer ", c, " of job ", job->id, " released its place"));
  }
  if (static_cast<int64_t>(job->released_consumers.size()) < consumers) {
    // The others read on; tasks that waited only for this one's end are done.
    bool finished_any = false;
    for (int64_t task_id : std::vector<int64_t>(job->task_ids)) {
      bool finished = false;
      RETURN_IF_ERROR(FinishIfConsumersDoneLocked(task_id, &finished));
      finished_any = finished_any || finished;
    }
    if (finished_any) RETURN_IF_ERROR(MakeRangesLocked());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(FailJobLocked(
      job->id, JobEnd::kReleased,
      absl::CancelledError(absl::StrCat("job ", job->id,
                                        " was released by its consumers: nobody reads it any more; "
                                        "its tasks are stopped"))));
  response->set_job_finished(true);
  return absl::OkStatus();
}

absl::Status Coordinator::GetStatus(const proto::GetStatusRequest& request,
                                    proto::GetStatusResponse* response) {
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GetStatusRequest.page_size ", request.page_size(), " is negative"));
  }
  const int64_t page_size = std::max<int64_t>(
      1, std::min(request.page_size() == 0 ? options_.status_page_size : request.page_size(),
                  options_.max_status_page_size));
  // The token names the first entry of the page: "w<worker id>" or "j<job id>".
  bool in_jobs = false;
  int64_t from = 0;
  if (const std::string& token = request.page_token(); !token.empty()) {
    if ((token[0] != 'w' && token[0] != 'j') ||
        !absl::SimpleAtoi(absl::string_view(token).substr(1), &from) || from < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GetStatusRequest.page_token \"", absl::CHexEscape(token.substr(0, 64)),
          "\" is not a token this coordinator made (pass next_page_token as it came)"));
    }
    in_jobs = token[0] == 'j';
  }
  DurableLock lock(this);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const absl::Time now = clock_->Now();
  int64_t left = page_size;
  response->set_num_datasets(static_cast<int64_t>(state_.num_datasets()));
  FillScalingStatusLocked(response->mutable_scaling());
  if (!in_jobs) {
    auto it = state_.workers().lower_bound(from);
    for (; it != state_.workers().end() && left > 0; ++it, --left) {
      const auto& [id, w] = *it;
      proto::WorkerStatus* s = response->add_workers();
      s->set_worker_id(id);
      s->set_address(w.address);
      s->set_alive(w.alive);
      std::optional<absl::Time> last = liveness_.LastHeartbeat(id);
      s->set_seconds_since_heartbeat(last.has_value() ? absl::ToDoubleSeconds(now - *last)
                                                      : -1.0);
      for (int64_t t : w.task_ids) s->add_task_ids(t);
    }
    if (it != state_.workers().end()) {
      response->set_next_page_token(absl::StrCat("w", it->first));
      return absl::OkStatus();
    }
    from = 0;
  }
  auto it = state_.jobs().lower_bound(from);
  for (; it != state_.jobs().end() && left > 0; ++it, --left) {
    const auto& [id, job] = *it;
    proto::JobStatus* s = response->add_jobs();
    s->set_job_id(id);
    s->set_job_name(job.name);
    *s->mutable_options() = job.options;
    FillTaskInfosLocked(job, s->mutable_tasks());
    for (proto::TaskInfo& info : *s->mutable_tasks()) {
      if (const CoordinatorState::Task* task = state_.FindTask(info.task_id())) {
        info.set_progressed_on_worker(ProgressedOnWorkerLocked(*task));
      }
    }
    s->set_finished(job.finished);
    if (absl::Status error = JobErrorLocked(job); !error.ok()) s->set_error(error.ToString());
    s->set_released(job.released);
    if (auto retry = failed_jobs_.find(id); retry != failed_jobs_.end() && !job.finished) {
      s->set_retrying(retry->second.error.ToString());
    }
    progress_.FillJobStatus(job.task_ids, s);
    FillJobLoadLocked(id, s);
    for (const std::string& trainer : job.trainer_ids) s->add_trainer_ids(trainer);
    for (const std::string& trainer : job.dropped_trainer_ids) {
      s->add_dropped_trainer_ids(trainer);
    }
  }
  if (it != state_.jobs().end()) response->set_next_page_token(absl::StrCat("j", it->first));
  return absl::OkStatus();
}

}  // namespace sluice
