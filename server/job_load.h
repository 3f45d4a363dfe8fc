// JobLoadTable: the consumers' and workers' load reports of the current decision interval,
// summed per job, and each live worker's CPU busy fraction (docs/AUTOSCALING.md,
// "Measurements"). The coordinator adds every heartbeat's report and, once per decision
// interval, takes each running job's window (TakeWindow) for the ScalingPolicy.
//
// Reports are client input. A consumer report with a negative or NaN field, an interval over
// kMaxReportInterval, or a rate over kMaxStepsPerSecond is refused (counted in refused(), the
// heartbeat itself still answered); a wait longer than its interval is clamped to it, a CPU
// busy fraction over 1 to 1 (counted in clamped()). Memory: one fixed-size entry per job that
// reported (erased by Forget/TakeWindow of the jobs that still run) and per live worker (Retain):
// a report never allocates once its job and worker have an entry.
//
// Thread safety: not thread-safe (the coordinator calls it under its mutex).
#ifndef SLUICE_SERVER_JOB_LOAD_H_
#define SLUICE_SERVER_JOB_LOAD_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"

namespace sluice {

// The longest interval one report may cover, and the highest step rate it may claim.
inline constexpr absl::Duration kMaxReportInterval = absl::Hours(1);
inline constexpr double kMaxStepsPerSecond = 1e7;

// One job's sums over the interval so far.
struct JobLoadWindow {
  int64_t consumer_reports = 0;
  double wait_seconds = 0;      // consumers' time blocked for data
  double consumer_seconds = 0;  // consumers' time covered by reports
  double steps_consumed = 0;
  double steps_produced = 0;  // sum of per-task rate x the worker's report interval
  double producer_seconds_max = 0;  // the longest single worker report interval seen

  // Of consumer_seconds, the part spent waiting (0 without reports).
  double WaitFraction() const;
  // Steps per second per consumer (0 without reports).
  double StepsPerSecond() const;
};

class JobLoadTable {
 public:
  // A consumer of `job_id` reports `wait_us` microseconds waited and `steps` steps consumed
  // over `interval_us`. An interval of 0 is no report (an older client): ignored, not counted.
  void AddConsumerReport(int64_t job_id, int64_t wait_us, int64_t steps, int64_t interval_us);
  // A worker's CPU busy fraction over `interval_us` (0: no report).
  void AddWorkerCpu(int64_t worker_id, double busy_fraction, int64_t interval_us);
  // One task of `job_id` on a worker produced `steps_per_second` over `interval_us`.
  void AddTaskRate(int64_t job_id, double steps_per_second, int64_t interval_us);

  // The job's sums since its last TakeWindow, which starts a new interval.
  JobLoadWindow TakeWindow(int64_t job_id);
  // Drops every job entry not in `running` (jobs that ended or were removed); call after
  // taking their windows.
  void RetainJobs(const absl::flat_hash_set<int64_t>& running);
  // Drops every worker entry not in `live`.
  void RetainWorkers(const absl::flat_hash_set<int64_t>& live);

  // The worker's last reported busy fraction; -1 if it has none.
  double WorkerCpu(int64_t worker_id) const;

  int64_t refused() const { return refused_; }
  int64_t clamped() const { return clamped_; }
  size_t jobs_size() const { return jobs_.size(); }
  size_t workers_size() const { return worker_cpu_.size(); }

 private:
  absl::flat_hash_map<int64_t, JobLoadWindow> jobs_;
  absl::flat_hash_map<int64_t, double> worker_cpu_;
  int64_t refused_ = 0;
  int64_t clamped_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_JOB_LOAD_H_
