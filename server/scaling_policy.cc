#include "server/scaling_policy.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {

const char* JobBoundName(JobBound bound) {
  switch (bound) {
    case JobBound::kInputBound:
      return "input-bound";
    case JobBound::kTrainerBound:
      return "trainer-bound";
    case JobBound::kBalanced:
      return "balanced";
    case JobBound::kUnmeasured:
      break;
  }
  return "unmeasured";
}

ScalingPolicy::ScalingPolicy(ScalingPolicyOptions options) : options_(std::move(options)) {}

int64_t ScalingPolicy::Bounded(int64_t n) const {
  return std::clamp(n, options_.min_workers, std::max(options_.min_workers, options_.max_workers));
}

JobDecision ScalingPolicy::DecideJob(absl::Time now, const JobWindow& w, JobState& s) const {
  JobDecision d;
  d.job_id = w.job_id;
  const int64_t n = std::max<int64_t>(w.workers, 0);
  const int64_t useful = w.max_useful_workers < 0 ? options_.max_workers
                                                  : std::max<int64_t>(w.max_useful_workers, 1);
  const int64_t cap = std::max<int64_t>(std::min(options_.max_workers, useful), 1);
  int64_t desired = s.desired;
  if (!w.measured) {
    d.bound = JobBound::kUnmeasured;
  } else if (w.wait_fraction >= options_.target_wait_fraction) {
    d.bound = JobBound::kInputBound;
    // The workers asked for last time have not all arrived: their effect is not measured yet.
    if (n >= s.desired || n == 0) {
      const double wait = std::min(w.wait_fraction, options_.max_estimated_wait);
      int64_t estimate = static_cast<int64_t>(
          std::ceil(static_cast<double>(std::max<int64_t>(n, 1)) * options_.headroom / (1 - wait)));
      estimate = std::max(estimate, n + 1);
      desired = std::max(desired, estimate);
      if (s.last_was_shrink) {
        // The last shrink went one worker too far: remember the count that sufficed.
        s.floor = s.desired + 1;
      }
    }
  } else if (w.wait_fraction < options_.shrink_wait_fraction) {
    d.bound = JobBound::kTrainerBound;
    if (s.floor > 0 &&
        w.steps_per_second < s.floor_rate * (1 - options_.forget_floor_rate_drop)) {
      if (!s.low_rate_since.has_value()) s.low_rate_since = now;
      if (now - *s.low_rate_since >= options_.scale_in_cooldown) {
        s.floor = 0;  // the demand fell and stayed low: the floor no longer holds
        s.low_rate_since.reset();
      }
    } else {
      s.low_rate_since.reset();
    }
    if (now - s.last_change >= options_.scale_in_cooldown) {
      const int64_t base = std::min(s.desired, std::max<int64_t>(n, 1));
      desired = std::max<int64_t>(std::max<int64_t>(base - 1, s.floor), 1);
      if (desired < s.desired) s.floor_rate = w.steps_per_second;
    }
  } else {
    d.bound = JobBound::kBalanced;
  }
  desired = std::clamp<int64_t>(desired, 1, cap);
  if (desired != s.desired) {
    s.last_was_shrink = desired < s.desired;
    s.desired = desired;
    s.last_change = now;
  }
  d.desired_workers = s.desired;
  return d;
}

ScalingDecision ScalingPolicy::Decide(absl::Time now, const std::vector<JobWindow>& windows,
                                      int64_t live_workers) {
  if (!started_) {
    started_ = true;
    total_ = Bounded(live_workers);
    total_changed_ = now;
  }
  ScalingDecision decision;
  decision.jobs.reserve(windows.size());
  absl::flat_hash_map<int64_t, JobState> seen;
  seen.reserve(windows.size());
  int64_t wanted = options_.min_workers;
  for (const JobWindow& w : windows) {
    JobState s;
    if (auto it = jobs_.find(w.job_id); it != jobs_.end()) {
      s = it->second;
    } else {
      // A new job starts from the workers serving it (at least one), from now.
      s.desired = std::max<int64_t>(w.workers, 1);
      s.last_change = now;
    }
    decision.jobs.push_back(DecideJob(now, w, s));
    wanted = std::max(wanted, s.desired);
    seen[w.job_id] = s;
  }
  jobs_ = std::move(seen);
  wanted = Bounded(wanted);
  const int64_t before = total_;
  if (wanted > total_ ||
      (wanted < total_ && now - total_changed_ >= options_.scale_in_cooldown)) {
    total_ = wanted;
    total_changed_ = now;
  }
  if (total_ != before) {
    decision.change = absl::StrCat(total_ > before ? "grow" : "shrink", " from ", before, " to ",
                                   total_);
    for (const JobDecision& j : decision.jobs) {
      if (j.desired_workers == total_) {
        absl::StrAppend(&decision.change, ": job ", j.job_id, " ", JobBoundName(j.bound));
        break;
      }
    }
  }
  decision.total_desired = total_;
  return decision;
}

}  // namespace sluice
