#include "server/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/distribute_spec.h"
#include "core/proto_convert.h"
#include "core/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/task_planner.h"

namespace sluice {
namespace {

constexpr proto::WireVersion kWireVersion = proto::WIRE_VERSION_1;
// Hex digits of the fingerprint in a dataset id.
constexpr size_t kDatasetIdDigits = 16;

std::string WireVersionName(int v) {
  std::string name = proto::WireVersion_Name(static_cast<proto::WireVersion>(v));
  return name.empty() ? absl::StrCat("wire version ", v) : name;
}

absl::Status CheckWireVersion(int version, absl::string_view request) {
  if (version == kWireVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      request, ".wire_version: wire version mismatch: the coordinator speaks ",
      WireVersionName(kWireVersion), ", the request has ", WireVersionName(version)));
}

// INVALID_ARGUMENT naming the field (`where` is the path of the options message).
absl::Status ValidateJobOptions(const proto::JobOptions& o, absl::string_view where) {
  if (o.dataset_id().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".dataset_id is empty"));
  }
  if (o.num_consumers() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".num_consumers must be positive, got ", o.num_consumers()));
  }
  if (o.replicas_per_consumer() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".replicas_per_consumer must be positive, got ", o.replicas_per_consumer()));
  }
  if (!proto::ShardingPolicy_IsValid(o.sharding_policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".sharding_policy: unknown value ", o.sharding_policy()));
  }
  if (!proto::ReadMode_IsValid(o.read_mode())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".read_mode: unknown value ", o.read_mode()));
  }
  if (o.num_tasks() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".num_tasks must be >= 0, got ", o.num_tasks()));
  }
  if (o.split_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".split_size must be >= 0, got ", o.split_size()));
  }
  return absl::OkStatus();
}

std::string FieldValue(const google::protobuf::Message& m,
                       const google::protobuf::FieldDescriptor* f) {
  const google::protobuf::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(r->GetInt64(m, f));
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r->GetInt32(m, f));
    case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f) ? "true" : "false";
    case google::protobuf::FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnum(m, f)->name();
    case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
      return absl::StrCat("\"", r->GetString(m, f), "\"");
    default:
      return "(value)";
  }
}

// "num_consumers (job has 2, request has 3), ..." for every field that differs.
std::vector<std::string> DifferingFields(const proto::JobOptions& have,
                                         const proto::JobOptions& want) {
  std::vector<std::string> out;
  const google::protobuf::Descriptor* d = proto::JobOptions::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    std::string a = FieldValue(have, f);
    std::string b = FieldValue(want, f);
    if (a != b) out.push_back(absl::StrCat(f->name(), " (job has ", a, ", request has ", b, ")"));
  }
  return out;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {}

void Coordinator::Log(absl::string_view line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::cerr << "sluice-coordinator: " << line << std::endl;
  }
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  auto c = std::make_unique<Coordinator>(std::move(options));
  if (c->options_.work_dir.empty()) return c;
  JournalOptions j;
  j.dir = c->options_.work_dir;
  j.snapshot_every = c->options_.snapshot_every;
  j.fs = c->options_.journal_fs;
  Coordinator* raw = c.get();  // the journal it logs through lives inside it
  j.log = [raw](absl::string_view line) { raw->Log(line); };
  absl::MutexLock lock(&c->mu_);
  ASSIGN_OR_RETURN(c->journal_, Journal::Open(std::move(j), &c->state_));
  c->Log(absl::StrCat("journal ", c->options_.work_dir, ": ", c->state_.num_datasets(),
                      " datasets, ", c->state_.workers().size(), " workers, ",
                      c->state_.jobs().size(), " jobs, ", c->state_.tasks().size(), " tasks"));
  return c;
}

proto::StateSnapshot Coordinator::Snapshot() {
  absl::MutexLock lock(&mu_);
  return state_.Snapshot();
}

absl::Status Coordinator::ApplyLocked(const proto::Update& update) {
  // The one place updates take effect. Journaled before they are applied: every update was
  // validated first, so that it applies, now and at every replay.
  const bool journal_now = journal_ != nullptr && !in_batch_;
  if (journal_now) RETURN_IF_ERROR(journal_->Append({update}));
  absl::Status s = state_.Apply(update);
  if (!s.ok()) {
    // Every update was validated first: this is a coordinator bug, not a bad request.
    return absl::InternalError(absl::StrCat("coordinator state rejected its own update: ",
                                            s.message()));
  }
  if (in_batch_) batch_.push_back(update);
  if (journal_now) MaybeSnapshotLocked();
  return absl::OkStatus();
}

void Coordinator::MaybeSnapshotLocked() {
  if (!journal_->snapshot_due()) return;
  absl::Status s = journal_->WriteSnapshot(state_.Snapshot());
  if (!s.ok()) Log(absl::StrCat("snapshot failed (the journal goes on): ", s.ToString()));
}

void Coordinator::ReloadFromJournalLocked() {
  state_ = CoordinatorState();
  absl::Status s = journal_->Reload(&state_);
  if (!s.ok()) {
    // The state is unknown: answering from it could lose or duplicate data. A restart
    // replays the journal.
    Log(absl::StrCat("cannot replay the journal to undo a failed request, exiting: ",
                     s.ToString()));
    std::abort();
  }
}

Coordinator::JournalBatch::JournalBatch(Coordinator* c) : c_(c) {
  c_->in_batch_ = c_->journal_ != nullptr;
}

absl::Status Coordinator::JournalBatch::Commit() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  done_ = true;
  if (!c_->in_batch_) return absl::OkStatus();
  c_->in_batch_ = false;
  std::vector<proto::Update> updates = std::move(c_->batch_);
  c_->batch_.clear();
  if (updates.empty()) return absl::OkStatus();
  absl::Status s = c_->journal_->Append(updates);
  if (!s.ok()) {
    c_->ReloadFromJournalLocked();
    return s;
  }
  c_->MaybeSnapshotLocked();
  return absl::OkStatus();
}

Coordinator::JournalBatch::~JournalBatch() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (done_ || !c_->in_batch_) return;
  c_->in_batch_ = false;
  const bool applied = !c_->batch_.empty();
  c_->batch_.clear();
  if (applied) c_->ReloadFromJournalLocked();
}

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

int64_t Coordinator::LeastLoadedWorkerLocked() const {
  int64_t best = 0;
  int64_t best_load = 0;
  for (const auto& [id, w] : state_.workers()) {
    if (!w.alive) continue;
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
  std::vector<int64_t> dead;
  for (const auto& [id, w] : state_.workers()) {
    if (!w.alive) continue;
    auto it = last_heartbeat_.find(id);
    if (it == last_heartbeat_.end()) {
      last_heartbeat_[id] = now;
      continue;
    }
    if (now - it->second >= options_.worker_timeout) dead.push_back(id);
  }
  for (int64_t id : dead) {
    Log(absl::StrCat(WorkerNameLocked(id), " is dead: no heartbeat for ",
                     absl::FormatDuration(now - last_heartbeat_[id]), " (worker_timeout ",
                     absl::FormatDuration(options_.worker_timeout), ")"));
    proto::Update u;
    u.mutable_worker_died()->set_worker_id(id);
    RETURN_IF_ERROR(ApplyLocked(u));
  }
  if (!dead.empty()) RETURN_IF_ERROR(AssignWaitingTasksLocked());
  return absl::OkStatus();
}

void Coordinator::CheckWorkerLiveness() {
  absl::MutexLock lock(&mu_);
  absl::Status s = CheckLivenessLocked();
  if (!s.ok()) Log(s.ToString());
}

absl::Status Coordinator::AssignWaitingTasksLocked() {
  std::vector<int64_t> waiting;
  for (const auto& [id, t] : state_.tasks()) {
    if (t.worker_id == 0 && !t.finished) waiting.push_back(id);
  }
  for (int64_t task_id : waiting) {
    int64_t worker = LeastLoadedWorkerLocked();
    if (worker == 0) return absl::OkStatus();  // they wait for a worker to heartbeat
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
                                           bool step_sharded, int64_t worker_id) {
  const CoordinatorState::Job* job = state_.FindJob(job_id);
  proto::Update u;
  proto::CreateTaskUpdate* c = u.mutable_create_task();
  c->set_task_id(state_.NextTaskId());
  c->set_job_id(job_id);
  c->set_task_index(static_cast<int64_t>(job->task_ids.size()));
  *c->mutable_dataset() = dataset;
  c->set_step_sharded(step_sharded);
  c->set_worker_id(worker_id);
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
  proto::Update u;
  u.mutable_finish_task()->set_task_id(task_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  const CoordinatorState::Task* task = state_.FindTask(task_id);
  const CoordinatorState::Job* job = state_.FindJob(task->job_id);
  for (int64_t t : job->task_ids) {
    if (!state_.tasks().at(t).finished) return absl::OkStatus();
  }
  // DYNAMIC: every task finishes only after end_of_splits, so the splits are all done too.
  proto::Update f;
  f.mutable_finish_job()->set_job_id(job->id);
  RETURN_IF_ERROR(ApplyLocked(f));
  Log(absl::StrCat("job ", job->id, job->name.empty() ? "" : absl::StrCat(" (", job->name, ")"),
                   " finished: all ", job->task_ids.size(), " tasks done"));
  return absl::OkStatus();
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
  def.set_num_tasks(static_cast<int64_t>(job->task_ids.size()));
  *def.mutable_dataset() = task.dataset;
  *def.mutable_job() = job->options;
  def.set_step_sharded(task.step_sharded);
  return def;
}

void Coordinator::FillTaskInfosLocked(
    const CoordinatorState::Job& job,
    google::protobuf::RepeatedPtrField<proto::TaskInfo>* out) const {
  for (int64_t t : job.task_ids) {
    const CoordinatorState::Task& task = state_.tasks().at(t);
    proto::TaskInfo* info = out->Add();
    info->set_task_id(task.id);
    info->set_task_index(task.index);
    if (const CoordinatorState::Worker* w = state_.FindWorker(task.worker_id)) {
      info->set_worker_address(w->address);
    }
    info->set_finished(task.finished);
  }
}

// ---------------------------------------------------------------------------------------------
// RPCs.

absl::Status Coordinator::RegisterDataset(const proto::RegisterDatasetRequest& request,
                                          proto::RegisterDatasetResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "RegisterDatasetRequest"));
  absl::StatusOr<Dataset> parsed = absl::InvalidArgumentError(
      "RegisterDatasetRequest: set one of `dataset` (a DatasetDef) or `pipeline` (an "
      "expression)");
  switch (request.graph_case()) {
    case proto::RegisterDatasetRequest::kDataset:
      parsed = Dataset::FromDef(request.dataset());
      break;
    case proto::RegisterDatasetRequest::kPipeline:
      parsed = Dataset::Parse(request.pipeline());
      break;
    case proto::RegisterDatasetRequest::GRAPH_NOT_SET:
      break;
  }
  if (!parsed.ok()) return parsed.status();
  const Dataset& dataset = *parsed;
  ASSIGN_OR_RETURN(ElementSpec spec, dataset.element_spec());
  const std::string fingerprint = dataset.Fingerprint();

  absl::MutexLock lock(&mu_);
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
    proto::Update u;
    u.mutable_register_dataset()->set_dataset_id(id);
    *u.mutable_register_dataset()->mutable_dataset() = dataset.def();
    RETURN_IF_ERROR(ApplyLocked(u));
    Log(absl::StrCat("dataset ", id, " registered"));
  }
  response->set_dataset_id(id);
  *response->mutable_element_spec() = ElementSpecToProto(spec);
  return absl::OkStatus();
}

absl::Status Coordinator::GetOrCreateJob(const proto::GetOrCreateJobRequest& request,
                                         proto::GetOrCreateJobResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "GetOrCreateJobRequest"));
  const proto::JobOptions& options = request.options();
  RETURN_IF_ERROR(ValidateJobOptions(options, "GetOrCreateJobRequest.options"));

  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckLivenessLocked());
  JournalBatch batch(this);  // the job and its tasks: one record, or nothing
  const CoordinatorState::Dataset* ds = state_.FindDataset(options.dataset_id());
  if (ds == nullptr) {
    return absl::NotFoundError(absl::StrCat("GetOrCreateJobRequest.options.dataset_id: no dataset ",
                                            options.dataset_id(), " is registered"));
  }
  if (const CoordinatorState::Job* job = state_.FindJobByName(request.job_name())) {
    std::vector<std::string> diffs = DifferingFields(job->options, options);
    if (!diffs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GetOrCreateJobRequest: job \"", request.job_name(), "\" (id ", job->id,
          ") exists with other options: ", absl::StrJoin(diffs, ", ")));
    }
    response->set_job_id(job->id);
    response->set_created(false);
    return absl::OkStatus();
  }

  // Validate everything before the first update.
  const proto::DatasetDef dataset_def = ds->def;
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::FromDef(dataset_def));
  const bool coordinated = options.read_mode() == proto::READ_MODE_COORDINATED;
  RETURN_IF_ERROR(DistributedPerReplicaSpec(dataset, coordinated ? options.num_consumers() : 1,
                                            options.replicas_per_consumer())
                      .status());
  const int64_t live = NumLiveWorkersLocked();
  if (live == 0) {
    return absl::UnavailableError(
        "GetOrCreateJob: no input workers registered yet; retry when a worker has heartbeated");
  }
  const bool dynamic = options.sharding_policy() == proto::SHARDING_DYNAMIC;
  std::vector<TaskPlan> plans;
  proto::Update create;
  proto::CreateJobUpdate* c = create.mutable_create_job();
  c->set_job_id(state_.NextJobId());
  c->set_job_name(request.job_name());
  *c->mutable_options() = options;
  if (dynamic) {
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
    ASSIGN_OR_RETURN(plans, PlanStaticTasks(dataset, options.sharding_policy(), k));
  }

  RETURN_IF_ERROR(ApplyLocked(create));
  const int64_t job_id = c->job_id();
  Log(absl::StrCat("job ", job_id,
                   request.job_name().empty() ? "" : absl::StrCat(" (", request.job_name(), ")"),
                   " created: dataset ", options.dataset_id(), ", ",
                   proto::ShardingPolicy_Name(options.sharding_policy()), ", ",
                   proto::ReadMode_Name(options.read_mode()), ", ", options.num_consumers(),
                   " consumers x ", options.replicas_per_consumer(), " replicas, ",
                   dynamic ? absl::StrCat(live, " dynamic tasks")
                           : absl::StrCat(plans.size(), " tasks")));
  if (dynamic) {
    std::vector<int64_t> workers;
    for (const auto& [id, w] : state_.workers()) {
      if (w.alive) workers.push_back(id);
    }
    for (int64_t w : workers) {
      RETURN_IF_ERROR(CreateTaskLocked(job_id, dataset_def, /*step_sharded=*/false, w));
    }
  } else {
    for (const TaskPlan& plan : plans) {
      RETURN_IF_ERROR(
          CreateTaskLocked(job_id, plan.dataset, plan.step_sharded, LeastLoadedWorkerLocked()));
    }
  }
  RETURN_IF_ERROR(batch.Commit());
  response->set_job_id(job_id);
  response->set_created(true);
  return absl::OkStatus();
}

absl::Status Coordinator::GetElementSpec(const proto::GetElementSpecRequest& request,
                                         proto::GetElementSpecResponse* response) {
  proto::JobOptions options;
  proto::DatasetDef def;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckLivenessLocked());
    switch (request.target_case()) {
      case proto::GetElementSpecRequest::kJobId: {
        const CoordinatorState::Job* job = state_.FindJob(request.job_id());
        if (job == nullptr) {
          return absl::NotFoundError(
              absl::StrCat("GetElementSpecRequest.job_id: no job ", request.job_id()));
        }
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
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::FromDef(std::move(def)));
  const bool coordinated = options.read_mode() == proto::READ_MODE_COORDINATED;
  ASSIGN_OR_RETURN(ElementSpec spec,
                   DistributedPerReplicaSpec(dataset, coordinated ? options.num_consumers() : 1,
                                             options.replicas_per_consumer()));
  *response->mutable_per_replica_spec() = ElementSpecToProto(spec);
  response->set_num_replicas(options.replicas_per_consumer());
  return absl::OkStatus();
}

absl::Status Coordinator::WorkerHeartbeat(const proto::WorkerHeartbeatRequest& request,
                                          proto::WorkerHeartbeatResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "WorkerHeartbeatRequest"));
  if (request.worker_address().empty()) {
    return absl::InvalidArgumentError("WorkerHeartbeatRequest.worker_address is empty");
  }
  progress_.Record(request);
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  const CoordinatorState::Worker* worker = state_.FindWorkerByAddress(request.worker_address());
  int64_t worker_id = worker != nullptr ? worker->id : state_.NextWorkerId();
  // Record this heartbeat before judging the others, so that a worker that was slow but is
  // talking now is not declared dead by its own heartbeat.
  if (worker == nullptr || worker->alive) last_heartbeat_[worker_id] = now;
  RETURN_IF_ERROR(CheckLivenessLocked());
  worker = state_.FindWorker(worker_id);
  if (worker == nullptr || !worker->alive) {
    const bool back = worker != nullptr;
    proto::Update u;
    u.mutable_register_worker()->set_worker_id(worker_id);
    u.mutable_register_worker()->set_address(request.worker_address());
    RETURN_IF_ERROR(ApplyLocked(u));
    last_heartbeat_[worker_id] = now;
    Log(absl::StrCat(WorkerNameLocked(worker_id), back ? " is back" : " registered"));
    RETURN_IF_ERROR(OnWorkerAvailableLocked(worker_id));
  }

  for (int64_t task_id : request.finished_task_ids()) {
    const CoordinatorState::Task* task = state_.FindTask(task_id);
    // Only the task's current worker can finish it; a stale report from a worker the task was
    // taken from is ignored.
    if (task == nullptr || task->finished || task->worker_id != worker_id) continue;
    RETURN_IF_ERROR(FinishTaskLocked(task_id));
  }

  absl::flat_hash_set<int64_t> known(request.active_task_ids().begin(),
                                     request.active_task_ids().end());
  known.insert(request.finished_task_ids().begin(), request.finished_task_ids().end());
  for (int64_t task_id : state_.FindWorker(worker_id)->task_ids) {
    const CoordinatorState::Task& task = state_.tasks().at(task_id);
    if (task.finished || known.contains(task_id)) continue;
    *response->add_new_tasks() = TaskDefLocked(task);
  }
  for (int64_t task_id : request.active_task_ids()) {
    const CoordinatorState::Task* task = state_.FindTask(task_id);
    if (task == nullptr || task->worker_id != worker_id) response->add_tasks_to_stop(task_id);
  }
  response->set_worker_id(worker_id);
  return absl::OkStatus();
}

absl::Status Coordinator::ClientHeartbeat(const proto::ClientHeartbeatRequest& request,
                                          proto::ClientHeartbeatResponse* response) {
  RETURN_IF_ERROR(CheckWireVersion(request.wire_version(), "ClientHeartbeatRequest"));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const CoordinatorState::Job* job = state_.FindJob(request.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("ClientHeartbeatRequest.job_id: no job ", request.job_id()));
  }
  if (request.consumer_index() < 0 || request.consumer_index() >= job->options.num_consumers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientHeartbeatRequest.consumer_index ", request.consumer_index(), " is outside [0, ",
        job->options.num_consumers(), ") for job ", job->id));
  }
  FillTaskInfosLocked(*job, response->mutable_tasks());
  response->set_job_finished(job->finished);
  response->set_num_tasks(static_cast<int64_t>(job->task_ids.size()));
  return absl::OkStatus();
}

absl::Status Coordinator::GetSplit(const proto::GetSplitRequest& request,
                                   proto::GetSplitResponse* response) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const CoordinatorState::Job* job = state_.FindJob(request.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("GetSplitRequest.job_id: no job ", request.job_id()));
  }
  const CoordinatorState::Task* task = state_.FindTask(request.task_id());
  if (task == nullptr || task->job_id != job->id) {
    return absl::NotFoundError(absl::StrCat("GetSplitRequest.task_id: job ", job->id,
                                            " has no task ", request.task_id()));
  }
  if (!job->dynamic()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GetSplit: job ", job->id, " uses ",
        proto::ShardingPolicy_Name(job->options.sharding_policy()),
        " sharding; splits exist only under SHARDING_DYNAMIC"));
  }
  if (task->finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("GetSplit: task ", task->id, " of job ", job->id, " is finished"));
  }
  ASSIGN_OR_RETURN(Dataset dataset, JobDatasetLocked(*job));

  const CoordinatorState::Split* split = nullptr;
  if (request.has_task_split_index()) {
    const int64_t i = request.task_split_index();
    const int64_t received = static_cast<int64_t>(task->split_indices.size());
    if (i < 0 || i > received) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GetSplitRequest.task_split_index ", i, ": task ", task->id, " has received ",
          received, " splits, so the next is ", received));
    }
    if (i < received) split = &job->splits[task->split_indices[i]];
  }
  if (split == nullptr) {
    if (job->splits_exhausted()) {
      response->set_end_of_splits(true);
      return absl::OkStatus();
    }
    const int64_t begin = job->split_cursor;
    const int64_t end = std::min(job->split_source_size, begin + job->split_size);
    ASSIGN_OR_RETURN(Dataset piece, SplitDataset(dataset, begin, end));
    proto::Update u;
    proto::ProduceSplitUpdate* p = u.mutable_produce_split();
    p->set_job_id(job->id);
    p->set_task_id(task->id);
    p->set_split_index(static_cast<int64_t>(job->splits.size()));
    p->set_begin(begin);
    p->set_end(end);
    RETURN_IF_ERROR(ApplyLocked(u));
    response->set_split_index(p->split_index());
    *response->mutable_dataset() = piece.def();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Dataset piece, SplitDataset(dataset, split->begin, split->end));
  response->set_split_index(split->index);
  *response->mutable_dataset() = piece.def();
  return absl::OkStatus();
}

absl::Status Coordinator::GetStatus(const proto::GetStatusRequest& /*request*/,
                                    proto::GetStatusResponse* response) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const absl::Time now = clock_->Now();
  for (const auto& [id, w] : state_.workers()) {
    proto::WorkerStatus* s = response->add_workers();
    s->set_worker_id(id);
    s->set_address(w.address);
    s->set_alive(w.alive);
    auto it = last_heartbeat_.find(id);
    s->set_seconds_since_heartbeat(
        it == last_heartbeat_.end() ? -1.0 : absl::ToDoubleSeconds(now - it->second));
    for (int64_t t : w.task_ids) s->add_task_ids(t);
  }
  for (const auto& [id, job] : state_.jobs()) {
    proto::JobStatus* s = response->add_jobs();
    s->set_job_id(id);
    s->set_job_name(job.name);
    *s->mutable_options() = job.options;
    FillTaskInfosLocked(job, s->mutable_tasks());
    s->set_finished(job.finished);
    progress_.FillJobStatus(job.task_ids, s);
  }
  response->set_num_datasets(static_cast<int64_t>(state_.num_datasets()));
  return absl::OkStatus();
}

}  // namespace sluice
