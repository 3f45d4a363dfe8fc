// Worker metrics: what a WorkerServer exports to a MetricsRegistry (evaluated at scrape time
// from its task runners), and the per-task progress its heartbeats carry.
//
//   sluice_worker_registered                                  1 once the coordinator knows it
//   sluice_worker_tasks{state="running"|"finished"}           tasks held
//   sluice_worker_steps_delivered_total{job,task}             steps written to streams (each
//   sluice_worker_bytes_delivered_total{job,task}             consumer's copy counts), frame bytes
//   sluice_worker_task_steps_produced_total{job,task}         task progress: steps produced
//   sluice_worker_buffer_bytes{job,task}                      buffer fill
//   sluice_worker_buffer_capacity_bytes{job,task}             its budget
//   sluice_worker_buffer_steps{job,task}
//   sluice_worker_consumer_lag_steps{job,task,consumer}       steps produced minus the consumer's
//                                                             position (coordinated; independent
//                                                             jobs: consumer="any", buffered steps)
// Errors by gRPC code come from the RPC interceptor (core/rpc/rpc_metrics.h):
// sluice_rpc_server_handled_total{service="sluice.proto.WorkerService",method="StreamSteps",code}.
//
// Thread safety: thread-safe.
#ifndef SLUICE_WORKER_WORKER_METRICS_H_
#define SLUICE_WORKER_WORKER_METRICS_H_

#include "core/obs/metrics.h"
#include "proto/coordinator.pb.h"
#include "worker/task_runner.h"

namespace sluice {

class WorkerServer;

// The progress of `runner` as a heartbeat reports it.
void FillTaskProgress(TaskRunner& runner, proto::TaskProgress* progress);

// Exports one worker's metrics while it lives. Destroy it before the worker.
class WorkerMetrics {
 public:
  // `worker` and `registry` are borrowed; nullptr registry: MetricsRegistry::Default().
  explicit WorkerMetrics(WorkerServer* worker, MetricsRegistry* registry = nullptr);

 private:
  MetricsRegistry::CollectorHandle handle_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_WORKER_METRICS_H_
