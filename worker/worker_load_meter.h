// WorkerLoadMeter: what a worker reports in each heartbeat for the coordinator's autoscaling
// (docs/AUTOSCALING.md, "Measurements"): its process's CPU busy fraction (CPU seconds per
// second of wall time, over its cores) and each task's production rate, both since its
// previous heartbeat.
//
//   WorkerLoadMeter meter(clock, ProcessCpuSeconds, std::thread::hardware_concurrency());
//   ... fill request.task_progress ...
//   meter.Fill(&request);   // cpu_busy_fraction, report_interval_us, each steps_per_second
//
// Memory: the last steps_produced of the tasks in the last heartbeat only.
//
// Thread safety: not thread-safe (the worker fills its heartbeats under its lock).
#ifndef SLUICE_WORKER_WORKER_LOAD_METER_H_
#define SLUICE_WORKER_WORKER_LOAD_METER_H_

#include <cstdint>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "core/util/clock.h"
#include "proto/coordinator.pb.h"

namespace sluice {

// The calling process's user + system CPU time so far (getrusage(RUSAGE_SELF)).
double ProcessCpuSeconds();

class WorkerLoadMeter {
 public:
  // `clock` is borrowed (nullptr: the real one); `cpu_seconds` reads the process's CPU time;
  // `cores` (at least 1 is used) divides it. The first interval starts now.
  WorkerLoadMeter(Clock* clock, std::function<double()> cpu_seconds, int cores);

  // Sets the request's cpu_busy_fraction, cpu_cores and report_interval_us, and each
  // task_progress' steps_per_second from its steps_produced, since the previous Fill. A task
  // first seen counts from 0 (a worker's counts start with the task). Starts the next interval.
  void Fill(proto::WorkerHeartbeatRequest* request);

 private:
  Clock* const clock_;
  const std::function<double()> cpu_seconds_;
  const int cores_;
  absl::Time last_time_;
  double last_cpu_ = 0;
  absl::flat_hash_map<int64_t, int64_t> last_produced_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_WORKER_LOAD_METER_H_
