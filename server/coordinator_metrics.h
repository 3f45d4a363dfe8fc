// Coordinator metrics: what a Coordinator exports to a MetricsRegistry, computed at scrape
// time from its GetStatus answer.
//
//   sluice_coordinator_workers{state="alive"|"dead"}
//   sluice_coordinator_worker_heartbeat_age_seconds{worker,address}   -1 before the first one
//   sluice_coordinator_worker_tasks{worker,address}                   unfinished tasks held
//   sluice_coordinator_jobs{state="running"|"finished"}
//   sluice_coordinator_datasets
//   sluice_coordinator_tasks{job,state="unassigned"|"assigned"|"finished"}
//   sluice_coordinator_job_tasks_finished{job,name} / _job_tasks_total{job,name}
//   sluice_coordinator_job_progress_ratio{job,name}   finished tasks / tasks (ranges, under
//                                                     SHARDING_RANGES)
//   sluice_coordinator_job_steps_delivered_total{job,name}, _job_bytes_delivered_total,
//   sluice_coordinator_job_steps_produced_total        the workers' heartbeat reports
//   sluice_coordinator_desired_workers              the autoscaling decision (docs/AUTOSCALING.md)
//   sluice_coordinator_scaling_reports_refused_total / _clamped_total   bad load reports
//   sluice_coordinator_job_input_wait_ratio{job,name}, _job_consumed_steps_per_second,
//   _job_produced_steps_per_second, _job_workers, _job_input_bound (0/1),
//   _job_desired_workers                             running jobs, last decision interval
// RPC counts and errors by method and code come from the RPC interceptor (core/rpc/rpc_metrics.h).
//
// Thread safety: thread-safe.
#ifndef SLUICE_SERVER_COORDINATOR_METRICS_H_
#define SLUICE_SERVER_COORDINATOR_METRICS_H_

#include "core/obs/metrics.h"
#include "server/coordinator.h"

namespace sluice {

// Exports one coordinator's metrics while it lives. Destroy it before the coordinator.
class CoordinatorMetrics {
 public:
  // `coordinator` and `registry` are borrowed; nullptr registry: MetricsRegistry::Default().
  explicit CoordinatorMetrics(Coordinator* coordinator, MetricsRegistry* registry = nullptr);

 private:
  MetricsRegistry::CollectorHandle handle_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_COORDINATOR_METRICS_H_
