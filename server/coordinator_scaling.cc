// Coordinator: autoscaling (docs/AUTOSCALING.md). The heartbeats' load reports go into
// load_ (server/job_load.h); once per scaling_interval the ticker's CheckWorkerLiveness takes
// each running job's window and asks scaling_ (server/scaling_policy.h) for the desired
// number of workers, which GetStatus and the metrics show. Nothing here is journaled: a
// restarted coordinator measures afresh, starting from the live workers it finds.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/coordinator.h"

namespace sluice {

void Coordinator::NoteWorkerLoadLocked(int64_t worker_id,
                                       const proto::WorkerHeartbeatRequest& request) {
  load_.AddWorkerCpu(worker_id, request.cpu_busy_fraction(), request.report_interval_us());
  for (const proto::TaskProgress& p : request.task_progress()) {
    const CoordinatorState::Task* task = state_.FindTask(p.task_id());
    // Only the tasks this worker runs: a worker speaks for its own production.
    if (task == nullptr || task->finished || task->worker_id != worker_id) continue;
    load_.AddTaskRate(task->job_id, p.steps_per_second(), request.report_interval_us());
  }
}

void Coordinator::NoteConsumerLoadLocked(int64_t job_id,
                                         const proto::ClientHeartbeatRequest& request) {
  load_.AddConsumerReport(job_id, request.input_wait_us(), request.steps_consumed(),
                          request.report_interval_us());
}

void Coordinator::MaybeDecideScalingLocked() {
  const absl::Time now = clock_->Now();
  if (!last_scaling_decision_.has_value()) {
    last_scaling_decision_ = now;  // the first window starts now
    return;
  }
  const absl::Duration interval = now - *last_scaling_decision_;
  if (interval < options_.scaling_interval) return;
  last_scaling_decision_ = now;

  // Each running job's live workers (a worker's task list holds its unfinished tasks only) and
  // their CPU, in one pass over the live workers.
  struct JobWorkers {
    int64_t workers = 0;
    double cpu_sum = 0;
    int64_t cpu_reports = 0;
  };
  absl::flat_hash_map<int64_t, JobWorkers> by_job;
  absl::flat_hash_set<int64_t> live;
  std::vector<int64_t> worker_jobs;
  for (const auto& [id, w] : state_.workers()) {
    if (!w.alive) continue;
    live.insert(id);
    worker_jobs.clear();
    for (int64_t t : w.task_ids) {
      const CoordinatorState::Task* task = state_.FindTask(t);
      if (task != nullptr && !task->finished) worker_jobs.push_back(task->job_id);
    }
    std::sort(worker_jobs.begin(), worker_jobs.end());
    worker_jobs.erase(std::unique(worker_jobs.begin(), worker_jobs.end()), worker_jobs.end());
    const double cpu = load_.WorkerCpu(id);
    for (int64_t job : worker_jobs) {
      JobWorkers& jw = by_job[job];
      ++jw.workers;
      if (cpu >= 0) {
        jw.cpu_sum += cpu;
        ++jw.cpu_reports;
      }
    }
  }
  std::vector<JobWindow> windows;
  std::vector<JobLoadWindow> loads;
  absl::flat_hash_set<int64_t> running;
  absl::flat_hash_map<int64_t, JobWorkersSeen> workers_now;
  for (const auto& [id, job] : state_.jobs()) {
    if (job.finished) continue;
    running.insert(id);
    const JobLoadWindow load = load_.TakeWindow(id);
    const JobWorkers& jw = by_job[id];
    JobWindow w;
    w.job_id = id;
    w.workers = jw.workers;
    w.wait_fraction = load.WaitFraction();
    w.steps_per_second = load.StepsPerSecond();
    // Enough of the interval reported (one consumer's half at least), by workers that did not
    // change in it nor in the interval before (the first interval after a change is the new
    // workers' warm-up: their first ranges, their consumers' streams).
    auto before = scaling_job_workers_.find(id);
    const int64_t unchanged = before != scaling_job_workers_.end() &&
                                      before->second.workers == jw.workers
                                  ? before->second.unchanged + 1
                                  : 0;
    w.measured = load.consumer_seconds >= 0.5 * absl::ToDoubleSeconds(interval) && unchanged >= 2;
    workers_now[id] = {jw.workers, unchanged};
    if (!job.ranges) {
      // A static or DYNAMIC job has a fixed set of tasks: more workers than its unfinished
      // ones would get nothing to do.
      int64_t unfinished = 0;
      for (int64_t t : job.task_ids) {
        const CoordinatorState::Task* task = state_.FindTask(t);
        if (task != nullptr && !task->finished) ++unfinished;
      }
      w.max_useful_workers = unfinished;
    }
    windows.push_back(w);
    loads.push_back(load);
  }
  load_.RetainJobs(running);
  load_.RetainWorkers(live);
  scaling_job_workers_ = std::move(workers_now);

  const ScalingDecision decision =
      scaling_.Decide(now, windows, static_cast<int64_t>(live.size()));
  ++scaling_decisions_;
  job_loads_.clear();
  for (size_t i = 0; i < windows.size(); ++i) {
    proto::JobLoad& l = job_loads_[windows[i].job_id];
    const JobWorkers& jw = by_job[windows[i].job_id];
    l.set_wait_fraction(windows[i].wait_fraction);
    l.set_steps_per_second(windows[i].steps_per_second);
    l.set_produced_steps_per_second(loads[i].steps_produced /
                                    std::max(absl::ToDoubleSeconds(interval), 1e-9));
    l.set_workers(windows[i].workers);
    l.set_worker_cpu_busy(jw.cpu_reports > 0 ? jw.cpu_sum / jw.cpu_reports : 0);
    l.set_consumers_reporting(loads[i].consumer_reports);
    l.set_bound(JobBoundName(decision.jobs[i].bound));
    l.set_desired_workers(decision.jobs[i].desired_workers);
  }
  if (!decision.change.empty()) {
    scaling_last_change_ = decision.change;
    Log(absl::StrCat("autoscaling: desired workers ", decision.change));
  }
}

void Coordinator::FillScalingStatusLocked(proto::ScalingStatus* s) const {
  const int64_t live = NumLiveWorkersLocked();
  s->set_desired_workers(last_scaling_decision_.has_value() && scaling_decisions_ > 0
                             ? scaling_.total_desired()
                             : std::clamp<int64_t>(live, options_.scaling.min_workers,
                                                   std::max(options_.scaling.min_workers,
                                                            options_.scaling.max_workers)));
  s->set_live_workers(live);
  s->set_min_workers(options_.scaling.min_workers);
  s->set_max_workers(options_.scaling.max_workers);
  s->set_decisions(scaling_decisions_);
  s->set_decision_interval_seconds(absl::ToDoubleSeconds(options_.scaling_interval));
  s->set_reports_refused(load_.refused());
  s->set_reports_clamped(load_.clamped());
  s->set_last_change(scaling_last_change_);
}

void Coordinator::FillJobLoadLocked(int64_t job_id, proto::JobStatus* s) const {
  auto it = job_loads_.find(job_id);
  if (it != job_loads_.end()) *s->mutable_load() = it->second;
}

}  // namespace sluice
