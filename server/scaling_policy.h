// ScalingPolicy: how many input workers the coordinator wants, per job and in total, from one
// decision interval's measurements of each job (docs/AUTOSCALING.md, "The policy").
//
//   ScalingPolicy policy({.min_workers = 1, .max_workers = 16});
//   ScalingDecision d = policy.Decide(clock->Now(), {{.job_id = 7, .measured = true,
//                                                     .wait_fraction = 0.3, .workers = 2, ...}});
//   d.total_desired  // 3: 2 workers / (1 - 0.3), with 10% headroom, rounded up
//
// Per job, from the interval's wait fraction W (the part of its consumers' time spent blocked
// waiting for data) and its current workers n:
//   - input-bound (W >= target_wait_fraction): grow to ceil(n * headroom / (1 - W)) (at least
//     n + 1), never below the job's previous desire; not while fewer workers serve the job than
//     it already wants (those asked for have not arrived yet: asking again would overshoot).
//   - trainer-bound (W < shrink_wait_fraction): after scale_in_cooldown since the job's last
//     change, one worker less, but not below the job's floor: a count that proved too small
//     once (a shrink that made the job input-bound again) is not tried again until its
//     consumers' step rate has stayed forget_floor_rate_drop below the rate when that was
//     learned for scale_in_cooldown (a dip of a loaded trainer is not a lower demand).
//   - in between (the hysteresis band) or unmeasured: hold.
// The job's desire is capped by its useful parallelism (a static job's unfinished tasks).
// Total: the largest job's desire (every live worker takes tasks of every job), bounded by
// [min_workers, max_workers]; a decrease of the total waits scale_in_cooldown after its last
// change too, so a job that ends does not drop the pool at once.
//
// State: per job (desire, last change, floor) for the jobs of the last Decide only: bounded by
// the running jobs. Pure: no clock, no I/O; the caller passes the time.
//
// Thread safety: not thread-safe (the coordinator calls it under its mutex).
#ifndef SLUICE_SERVER_SCALING_POLICY_H_
#define SLUICE_SERVER_SCALING_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace sluice {

struct ScalingPolicyOptions {
  // Grow while the consumers wait at least this fraction of their time for data.
  double target_wait_fraction = 0.02;
  // Shrink only while they wait less than this (below target: the hysteresis band between).
  double shrink_wait_fraction = 0.005;
  // Growth estimate multiplier over the linear need n / (1 - W).
  double headroom = 1.1;
  // A wait fraction this close to 1 is taken as this (a starved trainer's rate tells little):
  // one decision grows a job at most headroom / (1 - max_estimated_wait) times.
  double max_estimated_wait = 0.9;
  // No shrink of a job (nor of the total) sooner than this after its last change.
  absl::Duration scale_in_cooldown = absl::Minutes(2);
  // A learned floor is forgotten once the job's step rate stayed this much lower (0.2: by 20%)
  // for scale_in_cooldown.
  double forget_floor_rate_drop = 0.2;
  int64_t min_workers = 1;
  int64_t max_workers = 64;
};

// One job's measurements over one decision interval.
struct JobWindow {
  int64_t job_id = 0;
  // Enough consumer reports covered the interval and the job's workers did not change in it.
  bool measured = false;
  double wait_fraction = 0;
  double steps_per_second = 0;  // per consumer
  int64_t workers = 0;          // live workers holding unfinished tasks of the job
  // The most workers the job can use (a static job's unfinished tasks); -1: no limit.
  int64_t max_useful_workers = -1;
};

enum class JobBound { kUnmeasured, kInputBound, kBalanced, kTrainerBound };
const char* JobBoundName(JobBound bound);  // "input-bound", ...

struct JobDecision {
  int64_t job_id = 0;
  JobBound bound = JobBound::kUnmeasured;
  int64_t desired_workers = 0;
};

struct ScalingDecision {
  int64_t total_desired = 0;
  std::vector<JobDecision> jobs;  // in the order of Decide's windows
  // Why total_desired changed in this decision; empty when it did not.
  std::string change;
};

class ScalingPolicy {
 public:
  // Requires 1 <= min_workers <= max_workers and shrink_wait_fraction <= target_wait_fraction
  // (the coordinator's flags check them).
  explicit ScalingPolicy(ScalingPolicyOptions options);

  // One decision at `now` over the running jobs' windows (jobs missing from `windows` are
  // forgotten). `live_workers` seeds the total the first time (the pool as it is).
  ScalingDecision Decide(absl::Time now, const std::vector<JobWindow>& windows,
                         int64_t live_workers);

  // The total of the last decision (the live workers, bounded, before the first).
  int64_t total_desired() const { return total_; }
  const ScalingPolicyOptions& options() const { return options_; }

 private:
  struct JobState {
    int64_t desired = 0;
    absl::Time last_change;
    int64_t floor = 0;          // 0: none learned
    double floor_rate = 0;      // the step rate when the floor was learned
    bool last_was_shrink = false;
    std::optional<absl::Time> low_rate_since;  // the rate under the floor's since
  };
  JobDecision DecideJob(absl::Time now, const JobWindow& w, JobState& state) const;
  int64_t Bounded(int64_t n) const;

  const ScalingPolicyOptions options_;
  absl::flat_hash_map<int64_t, JobState> jobs_;
  bool started_ = false;
  int64_t total_ = 0;
  absl::Time total_changed_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_SCALING_POLICY_H_
