// Coordinator, ranges and splits: handing RANGES jobs' ranges of steps to workers with room,
// and DYNAMIC jobs' splits (GetSplit) (coordinator.h).
#include "server/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
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

Coordinator::~Coordinator() {
  stopping_.store(true);
  replanner_.reset();  // waits for a re-plan already running; those queued return at once
}

const Coordinator::RangesJob* Coordinator::CachedRangesJobLocked(
    const CoordinatorState::Job& job) const {
  auto it = ranges_jobs_.find(job.id);
  if (it != ranges_jobs_.end() &&
      google::protobuf::util::MessageDifferencer::Equals(it->second->options, job.options)) {
    return it->second.get();
  }
  return nullptr;  // after a restart, or an entry left by a request that failed and was undone
}

void Coordinator::RequestReplanLocked(const CoordinatorState::Job& job) {
  if (replans_.contains(job.id)) return;  // one at a time per job
  const CoordinatorState::Dataset* ds = state_.FindDataset(job.options.dataset_id());
  if (ds == nullptr) {
    // Cannot be planned at all: an attempt that failed (without a trip to the planner).
    absl::Status s = RangesAttemptFailedLocked(
        job.id, absl::NotFoundError(absl::StrCat("job ", job.id, ": unknown dataset ",
                                                 job.options.dataset_id())));
    if (!s.ok()) Log(s.ToString());
    return;
  }
  const uint64_t ticket = ++last_replan_ticket_;
  replans_[job.id] = ticket;
  Log(absl::StrCat("job ", job.id, ": planning its ranges again (after a restart), without the "
                   "lock"));
  replanner_->Schedule([this, job_id = job.id, ticket, def = ds->def, options = job.options,
                        steps = job.steps_per_epoch] {
    if (stopping_.load()) return;
    ReplanRangesJob(job_id, ticket, def, options, steps);
  });
}

void Coordinator::ReplanRangesJob(int64_t job_id, uint64_t ticket,
                                  const proto::DatasetDef& dataset_def,
                                  const proto::JobOptions& options, int64_t steps_per_epoch) {
  if (options_.before_replanning) options_.before_replanning(job_id);
  // Planned again from the dataset, which must still give the same steps; reads the data.
  absl::StatusOr<std::unique_ptr<RangesJob>> planned =
      [&]() -> absl::StatusOr<std::unique_ptr<RangesJob>> {
    try {
      ASSIGN_OR_RETURN(Dataset dataset, Dataset::FromDef(dataset_def));
      ASSIGN_OR_RETURN(GlobalOrderPlan plan, PlanGlobalOrder(dataset));
      if (plan.steps_per_epoch != steps_per_epoch) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", job_id, ": its dataset now has ", plan.steps_per_epoch,
            " steps per epoch, it had ", steps_per_epoch, " when the job was created"));
      }
      ASSIGN_OR_RETURN(RangeCut cut, CutJob(options, plan.steps_per_epoch));
      return std::make_unique<RangesJob>(RangesJob{options, std::move(dataset), plan, cut});
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job ", job_id, ": out of memory planning its ranges again"));
    }
  }();
  DurableLock lock(this);
  absl::Status s = ApplyReplanLocked(job_id, ticket, options, std::move(planned));
  if (!s.ok()) Log(s.ToString());
}

absl::Status Coordinator::ApplyReplanLocked(int64_t job_id, uint64_t ticket,
                                            const proto::JobOptions& options,
                                            absl::StatusOr<std::unique_ptr<RangesJob>> planned) {
  auto it = replans_.find(job_id);
  if (it == replans_.end() || it->second != ticket) return absl::OkStatus();  // job removed
  replans_.erase(it);
  const CoordinatorState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished ||
      !google::protobuf::util::MessageDifferencer::Equals(job->options, options)) {
    return absl::OkStatus();  // the job changed while it planned: the plan is stale
  }
  if (CachedRangesJobLocked(*job) != nullptr) return absl::OkStatus();  // planned meanwhile
  if (!planned.ok()) return RangesAttemptFailedLocked(job_id, planned.status());
  ranges_jobs_[job_id] = *std::move(planned);
  return MakeRangesLocked();
}

absl::Status Coordinator::RangesAttemptFailedLocked(int64_t job_id, const absl::Status& error) {
  // This job's problem, not the heartbeat's: keep serving the others, retry it later (the data
  // may come back), and after the last attempt fail it where everyone sees it (journaled: its
  // consumers and GetStatus get the error, its name is freed when it is removed).
  const CoordinatorState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished) return absl::OkStatus();
  RangeRetry& retry = failed_jobs_[job_id];
  ++retry.attempts;
  const int64_t attempts = std::max<int64_t>(1, options_.ranges_plan_attempts);
  retry.error = absl::Status(
      error.code() == absl::StatusCode::kOk ? absl::StatusCode::kInternal : error.code(),
      absl::StrCat("job ", job_id, job->name.empty() ? "" : absl::StrCat(" (", job->name, ")"),
                   " cannot make its ranges (attempt ", retry.attempts, " of ", attempts,
                   ", ranges_plan_attempts): ", error.message()));
  retry.next = clock_->Now() + options_.ranges_retry_interval;
  Log(retry.error.ToString());
  if (retry.attempts >= attempts) {
    const absl::Status failure = retry.error;
    failed_jobs_.erase(job_id);
    return FailJobLocked(job_id, JobEnd::kFailed, failure);
  }
  return absl::OkStatus();
}

void Coordinator::TEST_AwaitReplans() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_map<int64_t, uint64_t>* r) { return r->empty(); }, &replans_));
}

absl::StatusOr<Dataset> Coordinator::NextRangeLocked(const CoordinatorState::Job& job,
                                                     const RangesJob& rj, GlobalRange* range) {
  *range = rj.cut.Range(static_cast<int64_t>(job.task_ids.size()));
  const int64_t begin = range->first_step - range->epoch_first_step;
  return GlobalOrderRange(rj.dataset, rj.plan, OrderOptions(job.options.order()), range->epoch,
                          begin, begin + range->num_steps);
}

absl::Status Coordinator::MakeRangesLocked() {
  const int64_t cap = std::max<int64_t>(1, options_.ranges_per_worker);
  const absl::Time now = clock_->Now();
  // Only the ranges jobs (every worker heartbeat gets here; most jobs are not ranges jobs).
  std::vector<int64_t> jobs;
  for (int64_t id : state_.ranges_jobs()) {
    const CoordinatorState::Job& job = *state_.FindJob(id);
    auto retry = failed_jobs_.find(id);
    if (!job.finished && !job.all_ranges_made() &&
        (retry == failed_jobs_.end() || now >= retry->second.next)) {
      jobs.push_back(id);
    }
  }
  for (int64_t job_id : jobs) {
    // Planning reads the data: never under the lock. A job without its plan gets its ranges
    // once the planner thread has made it (ApplyReplanLocked calls this again).
    const RangesJob* rj = CachedRangesJobLocked(*state_.FindJob(job_id));
    if (rj == nullptr) {
      RequestReplanLocked(*state_.FindJob(job_id));
      continue;
    }
    while (true) {
      const CoordinatorState::Job* job = state_.FindJob(job_id);
      if (job->all_ranges_made()) break;
      // The live worker with the fewest unfinished ranges of this job, if below the cap.
      int64_t best = 0;
      int64_t best_load = cap;
      for (const auto& [wid, w] : state_.workers()) {
        if (!w.alive) continue;
        int64_t load = 0;  // Worker::task_ids holds its unfinished tasks only
        for (int64_t t : w.task_ids) load += state_.tasks().at(t).job_id == job_id ? 1 : 0;
        if (load < best_load) {
          best = wid;
          best_load = load;
        }
      }
      if (best == 0) break;
      GlobalRange range;
      absl::StatusOr<Dataset> piece = NextRangeLocked(*job, *rj, &range);
      if (!piece.ok()) {
        RETURN_IF_ERROR(RangesAttemptFailedLocked(job_id, piece.status()));
        break;
      }
      failed_jobs_.erase(job_id);  // planned again after a failed attempt
      RETURN_IF_ERROR(CreateTaskLocked(job_id, piece->def(), /*step_sharded=*/false, best,
                                       /*skip_steps=*/0, &range));
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::GetSplit(const proto::GetSplitRequest& request,
                                   proto::GetSplitResponse* response) {
  DurableLock lock(this);
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

}  // namespace sluice
