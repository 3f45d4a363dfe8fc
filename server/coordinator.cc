// Coordinator: construction, the journal (records, batches, snapshots, replay) and logging.
// The RPCs and their helpers are in coordinator_jobs.cc, coordinator_workers.cc and
// coordinator_ranges.cc (coordinator.h is the contract of all four).
#include "server/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <random>
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
#include "server/job_options.h"
#include "server/task_planner.h"

namespace sluice {
namespace {

// A fresh incarnation for versioned heartbeat answers (never 0: callers send 0 for "none").
uint64_t RandomIncarnation() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, std::unique_ptr<ThreadPool> replanner)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      versions_(RandomIncarnation()),
      watchers_(static_cast<size_t>(std::max<int64_t>(options_.max_assignment_watches, 1))),
      replanner_(std::move(replanner)) {}

namespace {
// The lines of the DurableLock this thread holds (Coordinator::Log), if any.
thread_local std::vector<std::string>* held_lock_log_lines = nullptr;
}  // namespace

void Coordinator::Log(absl::string_view line) const {
  if (held_lock_log_lines != nullptr) {
    held_lock_log_lines->emplace_back(line);
    return;
  }
  EmitLog(line);
}

void Coordinator::EmitLog(absl::string_view line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::cerr << "sluice-coordinator: " << line << std::endl;
  }
}


absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> replanner,
                   ThreadPool::Create(1, "the coordinator's replanner"));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), std::move(replanner)));
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
  if (journal_now) RETURN_IF_ERROR(journal_->Write({update}).status());
  VersionedChanges changes = ChangesOfLocked(update);
  TrackTaskRunsLocked(update);
  absl::Status s = state_.Apply(update);
  if (!s.ok()) {
    // Every update was validated first: this is a coordinator bug, not a bad request.
    return absl::InternalError(absl::StrCat("coordinator state rejected its own update: ",
                                            s.message()));
  }
  for (const auto& [job_id, task_id] : changes.tasks) versions_.TaskChanged(job_id, task_id);
  for (int64_t worker_id : changes.workers) {
    versions_.WorkerChanged(worker_id);
    watchers_.Notify(worker_id);  // its watch answers now: tasks reach it without waiting
  }
  if (update.has_remove_job()) {
    versions_.ForgetJob(update.remove_job().job_id());
    consumer_claims_.ForgetJob(update.remove_job().job_id());
  }
  if (in_batch_) batch_.push_back(update);
  if (journal_now) MaybeSnapshotLocked();
  return absl::OkStatus();
}


Coordinator::VersionedChanges Coordinator::ChangesOfLocked(const proto::Update& update) const {
  VersionedChanges out;
  auto unfinished_tasks_of = [&](const std::vector<int64_t>& ids) {
    for (int64_t t : ids) {
      const CoordinatorState::Task* task = state_.FindTask(t);
      if (task == nullptr || task->finished) continue;
      out.tasks.emplace_back(task->job_id, t);
      out.workers.push_back(task->worker_id);
    }
  };
  switch (update.kind_case()) {
    case proto::Update::kCreateJob:
      out.tasks.emplace_back(update.create_job().job_id(), 0);
      break;
    case proto::Update::kCreateTask:
      out.tasks.emplace_back(update.create_task().job_id(), update.create_task().task_id());
      out.workers.push_back(update.create_task().worker_id());
      break;
    case proto::Update::kAssignTask:
      if (const CoordinatorState::Task* t = state_.FindTask(update.assign_task().task_id())) {
        out.tasks.emplace_back(t->job_id, t->id);
        out.workers.push_back(t->worker_id);
        out.workers.push_back(update.assign_task().worker_id());
      }
      break;
    case proto::Update::kFinishTask:
      unfinished_tasks_of({update.finish_task().task_id()});
      break;
    case proto::Update::kFinishJob:
      out.tasks.emplace_back(update.finish_job().job_id(), 0);
      break;
    case proto::Update::kFailJob:
      if (const CoordinatorState::Job* job = state_.FindJob(update.fail_job().job_id())) {
        unfinished_tasks_of(job->task_ids);
      }
      out.tasks.emplace_back(update.fail_job().job_id(), 0);
      break;
    case proto::Update::kConsumerReleased:
      // A coordinated job's workers stop holding steps for the consumer (gone_consumers):
      // their watches answer now.
      if (const CoordinatorState::Job* job = state_.FindJob(update.consumer_released().job_id())) {
        unfinished_tasks_of(job->task_ids);
      }
      break;
    case proto::Update::kWorkerDied:
      if (const CoordinatorState::Worker* w = state_.FindWorker(update.worker_died().worker_id())) {
        unfinished_tasks_of(w->task_ids);
      }
      out.workers.push_back(update.worker_died().worker_id());
      break;
    case proto::Update::kRegisterWorker:
      out.workers.push_back(update.register_worker().worker_id());
      break;
    case proto::Update::kRemoveJob:
      if (const CoordinatorState::Job* job = state_.FindJob(update.remove_job().job_id())) {
        for (int64_t t : job->task_ids) {
          if (const CoordinatorState::Task* task = state_.FindTask(t)) {
            out.workers.push_back(task->worker_id);
          }
        }
      }
      break;
    default:
      break;  // no change a heartbeat answer shows
  }
  return out;
}


void Coordinator::MaybeSnapshotLocked() {
  if (!journal_->snapshot_due()) return;
  absl::StatusOr<int64_t> seq = journal_->StartSnapshot();
  if (!seq.ok()) {
    // A failed sync sticks: the DurableLock exits. Anything else: tried again later.
    Log(absl::StrCat("snapshot failed (the journal goes on): ", seq.status().ToString()));
    return;
  }
  // The copy is taken under mu_ (it is the state after every record written so far); the
  // DurableLock writes it after releasing mu_.
  pending_snapshot_ = PendingSnapshot{*seq, state_.Snapshot()};
}


void Coordinator::ReloadFromJournalLocked() {
  state_ = CoordinatorState();
  liveness_synced_ = false;
  finished_synced_ = false;
  versions_.Reset(RandomIncarnation());  // every caller's next answer is full
  watchers_.NotifyAll();  // and every watcher's version is unknown
  absl::Status s = journal_->Reload(&state_);
  if (!s.ok()) {
    // The state is unknown: answering from it could lose or duplicate data. A restart
    // replays the journal.
    Log(absl::StrCat("cannot replay the journal to undo a failed request, exiting: ",
                     s.ToString()));
    std::abort();
  }
  // Runs of tasks the undone request assigned are forgotten with the assignment.
  for (auto it = runs_.begin(); it != runs_.end();) {
    const CoordinatorState::Task* task = state_.FindTask(it->first);
    auto here = it++;
    if (task == nullptr || task->finished || task->worker_id != here->second.worker_id) {
      runs_.erase(here);
    }
  }
}


Coordinator::DurableLock::DurableLock(Coordinator* c) : c_(c) {
  c_->mu_.Lock();
  outer_log_lines_ = held_lock_log_lines;
  held_lock_log_lines = &log_lines_;
}


Coordinator::DurableLock::~DurableLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // journal_ is set once, by Create(), before any request.
  Journal* journal = c_->journal_.get();
  const uint64_t written = journal != nullptr ? journal->written() : 0;
  std::optional<PendingSnapshot> snapshot = std::move(c_->pending_snapshot_);
  c_->pending_snapshot_.reset();
  held_lock_log_lines = outer_log_lines_;
  c_->mu_.Unlock();
  for (const std::string& line : log_lines_) c_->Log(line);  // off the lock
  if (journal == nullptr) return;
  // Also with nothing written: a sync that failed elsewhere (an undo, a snapshot) is fatal.
  absl::Status s = journal->WaitDurable(written);
  if (s.ok() && snapshot.has_value()) {
    absl::Status w = journal->InstallSnapshot(snapshot->seq, snapshot->state);
    if (!w.ok()) c_->Log(absl::StrCat("snapshot failed (the journal goes on): ", w.ToString()));
    s = journal->sync_error();
  }
  if (!s.ok()) {
    c_->Log(absl::StrCat("exiting: ", s.ToString(),
                         " (the records not yet synced may be lost; a restart replays the "
                         "journal)"));
    std::abort();
  }
}


void Coordinator::TEST_AwaitSyncWaiters(int n) {
  Journal* journal = nullptr;
  {
    absl::MutexLock lock(&mu_);
    journal = journal_.get();
  }
  if (journal != nullptr) journal->TEST_AwaitSyncWaiters(n);
}


Coordinator::JournalBatch::JournalBatch(Coordinator* c) : c_(c), outer_(!c->in_batch_) {
  if (outer_) c_->in_batch_ = c_->journal_ != nullptr;
}


absl::Status Coordinator::JournalBatch::Commit() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  done_ = true;
  if (!outer_ || !c_->in_batch_) return absl::OkStatus();
  c_->in_batch_ = false;
  std::vector<proto::Update> updates = std::move(c_->batch_);
  c_->batch_.clear();
  if (updates.empty()) return absl::OkStatus();
  absl::Status s = c_->journal_->Write(updates).status();
  if (!s.ok()) {
    c_->ReloadFromJournalLocked();
    return s;
  }
  c_->MaybeSnapshotLocked();
  return absl::OkStatus();
}


Coordinator::JournalBatch::~JournalBatch() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (done_ || !outer_ || !c_->in_batch_) return;
  c_->in_batch_ = false;
  const bool applied = !c_->batch_.empty();
  c_->batch_.clear();
  if (applied) c_->ReloadFromJournalLocked();
}

}  // namespace sluice
