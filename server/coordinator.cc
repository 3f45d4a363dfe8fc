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
#include "core/data/distribute/auto_shard.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/data/distribute/global_order.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
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
  if (o.start_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".start_step must be >= 0, got ", o.start_step()));
  }
  const proto::GlobalOrder& order = o.order();
  if (!proto::ShuffleMode_IsValid(order.shuffle())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".order.shuffle: unknown value ", order.shuffle()));
  }
  if (order.shuffle_block_size() < 0 || order.num_epochs() < 0 || order.range_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".order: shuffle_block_size (", order.shuffle_block_size(), "), num_epochs (",
        order.num_epochs(), ") and range_steps (", order.range_steps(), ") must be >= 0"));
  }
  if (o.sharding_policy() == proto::SHARDING_RANGES &&
      o.read_mode() == proto::READ_MODE_INDEPENDENT) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".sharding_policy: SHARDING_RANGES with READ_MODE_INDEPENDENT is not supported "
               "yet; use READ_MODE_COORDINATED"));
  }
  return absl::OkStatus();
}

constexpr int64_t kDefaultRangeSteps = 16;
constexpr int64_t kDefaultShuffleBlock = 1024;

GlobalOrderOptions OrderOptions(const proto::GlobalOrder& order) {
  GlobalOrderOptions g;
  g.shuffle = order.shuffle();
  g.seed = order.seed();
  g.block_size =
      order.shuffle_block_size() > 0 ? order.shuffle_block_size() : kDefaultShuffleBlock;
  return g;
}

absl::StatusOr<RangeCut> CutJob(const proto::JobOptions& o, int64_t steps_per_epoch) {
  const int64_t epochs = std::max<int64_t>(1, o.order().num_epochs());
  const int64_t range_steps =
      o.order().range_steps() > 0 ? o.order().range_steps() : kDefaultRangeSteps;
  absl::StatusOr<RangeCut> cut = RangeCut::Make(steps_per_epoch, epochs, o.start_step(),
                                                range_steps);
  if (!cut.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GetOrCreateJobRequest.options: ", cut.status().message()));
  }
  return cut;
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
  return CollectFinishedJobsLocked();
}

absl::Status Coordinator::CollectFinishedJobsLocked() {
  const absl::Time now = clock_->Now();
  std::vector<int64_t> expired;
  for (const auto& [id, job] : state_.jobs()) {
    if (!job.finished) continue;
    auto it = finished_at_.find(id);
    if (it == finished_at_.end()) {
      finished_at_[id] = now;  // after a restart: counted from now
      if (options_.finished_job_ttl <= absl::ZeroDuration()) expired.push_back(id);
      continue;
    }
    if (now - it->second >= options_.finished_job_ttl) expired.push_back(id);
  }
  for (int64_t id : expired) {
    const CoordinatorState::Job* job = state_.FindJob(id);
    const std::string name = job->name;
    proto::Update u;
    u.mutable_remove_job()->set_job_id(id);
    RETURN_IF_ERROR(ApplyLocked(u));
    finished_at_.erase(id);
    ranges_jobs_.erase(id);
    Log(absl::StrCat("job ", id, name.empty() ? "" : absl::StrCat(" (", name, ")"),
                     " removed: finished ", absl::FormatDuration(options_.finished_job_ttl),
                     " ago (finished_job_ttl)"));
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

absl::StatusOr<const Coordinator::RangesJob*> Coordinator::RangesJobLocked(
    const CoordinatorState::Job& job) {
  auto it = ranges_jobs_.find(job.id);
  if (it != ranges_jobs_.end() &&
      google::protobuf::util::MessageDifferencer::Equals(it->second->options, job.options)) {
    return it->second.get();
  }
  // After a restart: planned again from the dataset, which must still give the same steps.
  ASSIGN_OR_RETURN(Dataset dataset, JobDatasetLocked(job));
  ASSIGN_OR_RETURN(GlobalOrderPlan plan, PlanGlobalOrder(dataset));
  if (plan.steps_per_epoch != job.steps_per_epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id, ": its dataset now has ", plan.steps_per_epoch,
        " steps per epoch, it had ", job.steps_per_epoch, " when the job was created"));
  }
  ASSIGN_OR_RETURN(RangeCut cut, CutJob(job.options, plan.steps_per_epoch));
  auto entry = std::make_unique<RangesJob>(RangesJob{job.options, std::move(dataset), plan, cut});
  const RangesJob* raw = entry.get();
  ranges_jobs_[job.id] = std::move(entry);
  return raw;
}

absl::Status Coordinator::MakeRangesLocked() {
  const int64_t cap = std::max<int64_t>(1, options_.ranges_per_worker);
  std::vector<int64_t> jobs;
  for (const auto& [id, job] : state_.jobs()) {
    if (job.ranges && !job.finished && !job.all_ranges_made()) jobs.push_back(id);
  }
  for (int64_t job_id : jobs) {
    while (true) {
      const CoordinatorState::Job* job = state_.FindJob(job_id);
      if (job->all_ranges_made()) break;
      // The live worker with the fewest unfinished ranges of this job, if below the cap.
      int64_t best = 0;
      int64_t best_load = cap;
      for (const auto& [wid, w] : state_.workers()) {
        if (!w.alive) continue;
        int64_t load = 0;
        for (int64_t t : w.task_ids) {
          const CoordinatorState::Task& task = state_.tasks().at(t);
          load += task.job_id == job_id && !task.finished ? 1 : 0;
        }
        if (load < best_load) {
          best = wid;
          best_load = load;
        }
      }
      if (best == 0) break;
      ASSIGN_OR_RETURN(const RangesJob* rj, RangesJobLocked(*job));
      const GlobalRange range = rj->cut.Range(static_cast<int64_t>(job->task_ids.size()));
      const int64_t begin = range.first_step - range.epoch_first_step;
      ASSIGN_OR_RETURN(Dataset piece,
                       GlobalOrderRange(rj->dataset, rj->plan, OrderOptions(job->options.order()),
                                        range.epoch, begin, begin + range.num_steps));
      RETURN_IF_ERROR(CreateTaskLocked(job_id, piece.def(), /*step_sharded=*/false, best,
                                       /*skip_steps=*/0, &range));
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::DrainWorkerLocked(int64_t worker_id) {
  int64_t moving = state_.NumUnfinishedTasks(worker_id);
  proto::Update u;
  u.mutable_worker_died()->set_worker_id(worker_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  Log(absl::StrCat(WorkerNameLocked(worker_id), " is draining: its ", moving,
                   " unfinished task(s) are reassigned now"));
  RETURN_IF_ERROR(AssignWaitingTasksLocked());
  return MakeRangesLocked();
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
  proto::Update u;
  u.mutable_finish_task()->set_task_id(task_id);
  RETURN_IF_ERROR(ApplyLocked(u));
  const CoordinatorState::Task* task = state_.FindTask(task_id);
  const CoordinatorState::Job* job = state_.FindJob(task->job_id);
  for (int64_t t : job->task_ids) {
    if (!state_.tasks().at(t).finished) return absl::OkStatus();
  }
  if (job->ranges && !job->all_ranges_made()) return absl::OkStatus();
  // DYNAMIC: every task finishes only after end_of_splits, so the splits are all done too.
  proto::Update f;
  f.mutable_finish_job()->set_job_id(job->id);
  RETURN_IF_ERROR(ApplyLocked(f));
  Log(absl::StrCat("job ", job->id, job->name.empty() ? "" : absl::StrCat(" (", job->name, ")"),
                   " finished: all ", job->task_ids.size(), " tasks done"));
  finished_at_[job->id] = clock_->Now();
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
  def.set_num_tasks(job->ranges ? job->num_ranges : static_cast<int64_t>(job->task_ids.size()));
  *def.mutable_dataset() = task.dataset;
  *def.mutable_job() = job->options;
  def.set_step_sharded(task.step_sharded);
  def.set_skip_steps(task.skip_steps);
  def.set_first_step(task.first_step);
  def.set_num_steps(task.num_steps);
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
    info->set_first_step(task.first_step);
    info->set_num_steps(task.num_steps);
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
    response->set_fallback_reason(job->fallback_reason);
    response->set_steps_per_epoch(job->steps_per_epoch);
    response->set_total_steps(job->total_steps);
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
  std::unique_ptr<RangesJob> ranges_job;
  int64_t skip_steps = 0;
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
      ranges_job = std::make_unique<RangesJob>(RangesJob{options, dataset, *plan, cut});
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
  if (policy == proto::SHARDING_DATA) skip_steps = options.start_step();
  if (c->ranges()) {
    // Ranges are made below, as workers have room.
  } else if (dynamic) {
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
    ASSIGN_OR_RETURN(plans, PlanStaticTasks(dataset, policy, k));
  }

  RETURN_IF_ERROR(ApplyLocked(create));
  const int64_t job_id = c->job_id();
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
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckLivenessLocked());
    switch (request.target_case()) {
      case proto::GetElementSpecRequest::kJobId: {
        const CoordinatorState::Job* job = state_.FindJob(request.job_id());
        if (job == nullptr) return JobNotFound("GetElementSpecRequest.job_id", request.job_id());
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
  if (worker != nullptr ? worker->alive : !request.draining()) last_heartbeat_[worker_id] = now;
  RETURN_IF_ERROR(CheckLivenessLocked());
  worker = state_.FindWorker(worker_id);
  if (request.draining()) {
    // Leaving: its finished tasks count, its other tasks go elsewhere now, it gets nothing
    // new, and a draining heartbeat never revives it.
    if (worker != nullptr && worker->alive) {
      for (int64_t task_id : request.finished_task_ids()) {
        const CoordinatorState::Task* task = state_.FindTask(task_id);
        if (task == nullptr || task->finished || task->worker_id != worker_id) continue;
        RETURN_IF_ERROR(FinishTaskLocked(task_id));
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
  // Ranges: room may have appeared (a finished range, a new worker).
  RETURN_IF_ERROR(MakeRangesLocked());

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
    // Also a task finished without it (its consumers all reported its end).
    if (task == nullptr || task->worker_id != worker_id || task->finished) {
      response->add_tasks_to_stop(task_id);
    }
  }
  // Finished tasks of a removed job: the worker can forget them.
  for (int64_t task_id : request.finished_task_ids()) {
    if (state_.FindTask(task_id) == nullptr) response->add_tasks_to_stop(task_id);
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
  if (job == nullptr) return JobNotFound("ClientHeartbeatRequest.job_id", request.job_id());
  if (request.consumer_index() < 0 || request.consumer_index() >= job->options.num_consumers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientHeartbeatRequest.consumer_index ", request.consumer_index(), " is outside [0, ",
        job->options.num_consumers(), ") for job ", job->id));
  }
  // Tasks every consumer has read to the end are finished, whoever produced them.
  bool finished_any = false;
  for (int64_t task_id : request.completed_task_ids()) {
    const CoordinatorState::Task* task = state_.FindTask(task_id);
    if (task == nullptr || task->job_id != job->id || task->finished) continue;
    absl::flat_hash_set<int64_t>& consumers = completed_by_[task_id];
    consumers.insert(request.consumer_index());
    if (static_cast<int64_t>(consumers.size()) < job->options.num_consumers()) continue;
    completed_by_.erase(task_id);
    Log(absl::StrCat("task ", task_id, " (job ", job->id, ", index ", task->index,
                     ") finished: every consumer received its end"));
    RETURN_IF_ERROR(FinishTaskLocked(task_id));
    finished_any = true;
  }
  if (finished_any) RETURN_IF_ERROR(MakeRangesLocked());
  FillTaskInfosLocked(*job, response->mutable_tasks());
  response->set_job_finished(job->finished);
  const int64_t made = static_cast<int64_t>(job->task_ids.size());
  response->set_num_tasks(job->ranges ? job->num_ranges : made);
  response->set_num_tasks_created(made);
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

absl::Status Coordinator::GetSplit(const proto::GetSplitRequest& request,
                                   proto::GetSplitResponse* response) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckLivenessLocked());
  const CoordinatorState::Job* job = state_.FindJob(request.job_id());
  if (job == nullptr) return JobNotFound("GetSplitRequest.job_id", request.job_id());
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
