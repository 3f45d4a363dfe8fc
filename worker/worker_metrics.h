// Worker metrics: what a WorkerServer exports to a MetricsRegistry (evaluated at scrape time
// from its task runners), and the per-task progress its heartbeats carry.
//
//   sluice_worker_registered                                  1 once the coordinator knows it
//   sluice_worker_tasks{state="running"|"finished"}           tasks held
//   sluice_worker_memory_charged_bytes                        the process's memory budget in use
//                                                             (steps and tensors held, any task)
//   sluice_worker_steps_delivered_total{job,task}             steps written to streams (each
//   sluice_worker_bytes_delivered_total{job,task}             consumer's copy counts), frame bytes
//   sluice_worker_task_steps_produced_total{job,task}         task progress: steps produced
//   sluice_worker_buffer_bytes{job,task}                      buffer fill
//   sluice_worker_buffer_capacity_bytes{job,task}             its budget
//   sluice_worker_buffer_steps{job,task}
//   sluice_worker_retained_bytes{job,task}                    the retention window's fill
//   sluice_worker_retained_steps{job,task}                    (released steps kept for late or
//   sluice_worker_retention_capacity_bytes{job,task}          reconnecting consumers), its size
//   sluice_worker_retention_hits_total{job,task}              streams served from the window
//                                                             (each a replay avoided)
//   sluice_worker_task_replays_total{job,task}                private replays started
//   sluice_worker_consumer_lag_steps{job,task,consumer}       steps produced minus the consumer's
//                                                             position (coordinated; independent
//                                                             jobs: consumer="any", buffered steps)
// Tasks of jobs shared across trainers (worker/cross_trainer_window.h), per trainer id:
//   sluice_worker_trainer_lag_steps{job,task,trainer}         steps it has not read yet
//   sluice_worker_trainer_skipped_steps_total{job,task,trainer}  steps it missed (skipping mode)
//   sluice_worker_trainer_steps_read_total{job,task,trainer}  steps its consumers took
//   sluice_worker_window_evicted_steps_total{job,task}        steps that left the window
// The executor (ExecutorMetrics, process-wide):
//   sluice_worker_threads                                     the shared thread pool's threads
//   sluice_worker_autotune_parallelism                        the most num_parallel_calls=
//                                                             AUTOTUNE may use (the pool's size)
//   sluice_worker_map_parallelism{op}                         what AUTOTUNE chose for the live
//                                                             parallel maps of that op label
//   sluice_worker_op_elements_total{op}                       per op of the tasks' pipelines,
//   sluice_worker_op_calls_total{op}                          summed over tasks (with
//   sluice_worker_op_seconds_total{op}                        --op_metrics; core/data/op_profile.h):
//   sluice_worker_op_self_seconds_total{op}                   op = "op 2 (batch)"
// Errors by gRPC code come from the RPC interceptor (core/rpc/rpc_metrics.h):
// sluice_rpc_server_handled_total{service="sluice.proto.WorkerService",method="StreamSteps",code}.
//
// Thread safety: thread-safe.
#ifndef SLUICE_WORKER_WORKER_METRICS_H_
#define SLUICE_WORKER_WORKER_METRICS_H_

#include <memory>

#include "core/data/op_profile.h"
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

// Exports the process's thread pool and, when `profile` is set, the per-op profile every task's
// pipeline records into (ExecutorOptions::profile). nullptr registry: MetricsRegistry::Default().
class ExecutorMetrics {
 public:
  explicit ExecutorMetrics(std::shared_ptr<OpProfile> profile, MetricsRegistry* registry = nullptr);

 private:
  MetricsRegistry::CollectorHandle handle_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_WORKER_METRICS_H_
