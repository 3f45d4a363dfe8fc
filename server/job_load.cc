#include "server/job_load.h"

#include <algorithm>
#include <cmath>

namespace sluice {
namespace {

bool ValidInterval(int64_t interval_us) {
  return interval_us > 0 && interval_us <= absl::ToInt64Microseconds(kMaxReportInterval);
}

bool ValidRate(double steps, double seconds) {
  return std::isfinite(steps) && steps >= 0 && steps <= kMaxStepsPerSecond * seconds;
}

}  // namespace

double JobLoadWindow::WaitFraction() const {
  return consumer_seconds > 0 ? std::min(wait_seconds / consumer_seconds, 1.0) : 0;
}

double JobLoadWindow::StepsPerSecond() const {
  return consumer_seconds > 0 ? steps_consumed / consumer_seconds : 0;
}

void JobLoadTable::AddConsumerReport(int64_t job_id, int64_t wait_us, int64_t steps,
                                     int64_t interval_us) {
  if (interval_us == 0 && wait_us == 0 && steps == 0) return;  // no report
  const double seconds = static_cast<double>(interval_us) / 1e6;
  if (!ValidInterval(interval_us) || wait_us < 0 ||
      !ValidRate(static_cast<double>(steps), seconds)) {
    ++refused_;
    return;
  }
  if (wait_us > interval_us) {
    ++clamped_;
    wait_us = interval_us;
  }
  JobLoadWindow& w = jobs_[job_id];
  ++w.consumer_reports;
  w.wait_seconds += static_cast<double>(wait_us) / 1e6;
  w.consumer_seconds += seconds;
  w.steps_consumed += static_cast<double>(steps);
}

void JobLoadTable::AddWorkerCpu(int64_t worker_id, double busy_fraction, int64_t interval_us) {
  if (interval_us == 0 && busy_fraction == 0) return;  // no report
  if (!ValidInterval(interval_us) || !std::isfinite(busy_fraction) || busy_fraction < 0) {
    ++refused_;
    return;
  }
  if (busy_fraction > 1) {
    ++clamped_;
    busy_fraction = 1;
  }
  worker_cpu_[worker_id] = busy_fraction;
}

void JobLoadTable::AddTaskRate(int64_t job_id, double steps_per_second, int64_t interval_us) {
  if (steps_per_second == 0) return;  // nothing produced, or not measured
  if (!ValidInterval(interval_us) || !std::isfinite(steps_per_second) || steps_per_second < 0 ||
      steps_per_second > kMaxStepsPerSecond) {
    ++refused_;
    return;
  }
  JobLoadWindow& w = jobs_[job_id];
  const double seconds = static_cast<double>(interval_us) / 1e6;
  w.steps_produced += steps_per_second * seconds;
  w.producer_seconds_max = std::max(w.producer_seconds_max, seconds);
}

JobLoadWindow JobLoadTable::TakeWindow(int64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return JobLoadWindow();
  JobLoadWindow w = it->second;
  it->second = JobLoadWindow();  // kept: the next interval's reports reuse the entry
  return w;
}

void JobLoadTable::RetainJobs(const absl::flat_hash_set<int64_t>& running) {
  absl::erase_if(jobs_, [&](const auto& e) { return !running.contains(e.first); });
}

void JobLoadTable::RetainWorkers(const absl::flat_hash_set<int64_t>& live) {
  absl::erase_if(worker_cpu_, [&](const auto& e) { return !live.contains(e.first); });
}

double JobLoadTable::WorkerCpu(int64_t worker_id) const {
  auto it = worker_cpu_.find(worker_id);
  return it == worker_cpu_.end() ? -1 : it->second;
}

}  // namespace sluice
