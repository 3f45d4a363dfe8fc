// Coordinator, ranges and splits: handing RANGES jobs' ranges of steps to workers with room,
// and DYNAMIC jobs' splits (GetSplit) (coordinator.h).
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


absl::StatusOr<Dataset> Coordinator::NextRangeLocked(const CoordinatorState::Job& job,
                                                     GlobalRange* range) {
  ASSIGN_OR_RETURN(const RangesJob* rj, RangesJobLocked(job));
  *range = rj->cut.Range(static_cast<int64_t>(job.task_ids.size()));
  const int64_t begin = range->first_step - range->epoch_first_step;
  return GlobalOrderRange(rj->dataset, rj->plan, OrderOptions(job.options.order()), range->epoch,
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
      absl::StatusOr<Dataset> piece = NextRangeLocked(*job, &range);
      if (!piece.ok()) {
        // This job's problem, not the heartbeat's: keep serving the others, retry it later
        // (the data may come back), and after the last attempt fail it where everyone sees
        // it (journaled: its consumers and GetStatus get the error, its name is freed when it
        // is removed).
        RangeRetry& retry = failed_jobs_[job_id];
        ++retry.attempts;
        const int64_t attempts = std::max<int64_t>(1, options_.ranges_plan_attempts);
        retry.error = absl::Status(
            piece.status().code() == absl::StatusCode::kOk ? absl::StatusCode::kInternal
                                                          : piece.status().code(),
            absl::StrCat("job ", job_id, job->name.empty() ? "" : absl::StrCat(" (", job->name, ")"),
                         " cannot make its ranges (attempt ", retry.attempts, " of ",
                         attempts, ", ranges_plan_attempts): ", piece.status().message()));
        retry.next = now + options_.ranges_retry_interval;
        Log(retry.error.ToString());
        if (retry.attempts >= attempts) {
          const absl::Status error = retry.error;
          failed_jobs_.erase(job_id);
          RETURN_IF_ERROR(FailJobLocked(job_id, error));
        }
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
