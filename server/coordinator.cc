// Coordinator: construction, the journal (records, batches, snapshots, replay) and logging.
// The RPCs and their helpers are in coordinator_jobs.cc, coordinator_workers.cc and
// coordinator_ranges.cc (coordinator.h is the contract of all four).
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
#include "server/job_options.h"
#include "server/task_planner.h"

namespace sluice {

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
  liveness_synced_ = false;
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

}  // namespace sluice
