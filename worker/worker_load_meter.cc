#include "worker/worker_load_meter.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

namespace sluice {

double ProcessCpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

WorkerLoadMeter::WorkerLoadMeter(Clock* clock, std::function<double()> cpu_seconds, int cores)
    : clock_(clock != nullptr ? clock : Clock::Real()),
      cpu_seconds_(std::move(cpu_seconds)),
      cores_(std::max(cores, 1)),
      last_time_(clock_->Now()),
      last_cpu_(cpu_seconds_()) {}

void WorkerLoadMeter::Fill(proto::WorkerHeartbeatRequest* request) {
  const absl::Time now = clock_->Now();
  const double cpu = cpu_seconds_();
  const double seconds = absl::ToDoubleSeconds(now - last_time_);
  const int64_t interval_us = absl::ToInt64Microseconds(now - last_time_);
  if (seconds > 0 && interval_us > 0) {
    request->set_report_interval_us(interval_us);
    request->set_cpu_cores(cores_);
    request->set_cpu_busy_fraction(std::clamp((cpu - last_cpu_) / seconds / cores_, 0.0, 1.0));
  }
  absl::flat_hash_map<int64_t, int64_t> produced;
  produced.reserve(request->task_progress_size());
  for (proto::TaskProgress& p : *request->mutable_task_progress()) {
    auto it = last_produced_.find(p.task_id());
    const int64_t before = it == last_produced_.end() ? 0 : it->second;
    if (seconds > 0 && p.steps_produced() >= before) {
      p.set_steps_per_second(static_cast<double>(p.steps_produced() - before) / seconds);
    }
    produced[p.task_id()] = p.steps_produced();
  }
  last_produced_ = std::move(produced);
  last_time_ = now;
  last_cpu_ = cpu;
}

}  // namespace sluice
