// WorkerServer: an input worker process's core. It serves GrpcWorkerService on host:port
// (port 0: any free port), heartbeats the coordinator every heartbeat_interval with its address
// and task states, starts a TaskRunner for each new task the coordinator assigns and stops the
// ones it is told to stop.
//
// A task assigned to this worker starts at once, not at the next heartbeat: a watch thread keeps
// a WatchAssignment long-poll open at the coordinator (docs/SERVICE.md, "Assignment watch"),
// which answers it as soon as this worker's assignment changes after the version of the last
// heartbeat answer applied here; the watch then wakes the heartbeat thread, whose heartbeat
// fetches the new tasks (and the tasks to stop). The heartbeat interval is for liveness only.
// A coordinator without the RPC (UNIMPLEMENTED) leaves the worker on heartbeats alone.
//
// A task that finishes (or fails) is reported at once, not at the next interval: its buffer
// wakes the heartbeat thread (StepBufferOptions::on_change), which is otherwise idle between
// heartbeats (no polling). So is a task's first step (TaskRunnerOptions::on_first_step), for
// the coordinator's failure policy.
//
// Heartbeats that fail are retried with exponential backoff (heartbeat_interval doubling up to
// max_backoff) for as long as the server runs; the worker keeps serving what it has meanwhile.
// A task is reported finished once every consumer has received its end (not merely when the
// pipeline ended), so a worker lost before that point gets its task reassigned.
//
// Pipelines are built on a thread of their own (one task at a time), not on the heartbeat
// thread nor under the server's lock: a slow build (a remote listing, a plugin loading) must
// not hold up heartbeats, or the coordinator would take it for a death. A task being built is
// reported active. A task whose pipeline ends with a transient error (UNAVAILABLE,
// DEADLINE_EXCEEDED, ...: GetSplit gave up while the coordinator was down) is given back at
// the next heartbeat (handed_back_tasks) and dropped here; the coordinator runs it again,
// here or elsewhere, and its consumers reconnect as after a worker death.
//
//   ASSIGN_OR_RETURN(auto worker, WorkerServer::Start({.coordinator_address = "host:5000"}));
//   ... worker->address() ...
//   worker->Drain(absl::Seconds(30));  // SIGTERM: hand the tasks back, end streams, stop
//
// Thread-safe.
#ifndef SLUICE_WORKER_WORKER_SERVER_H_
#define SLUICE_WORKER_WORKER_SERVER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "core/data/data_roots.h"
#include "core/data/dataset_limits.h"
#include "core/rpc/grpc_security.h"
#include "worker/worker_load_meter.h"
#include "worker/grpc_worker_service.h"
#include "worker/task_runner.h"

namespace sluice {

struct WorkerServerOptions {
  // The coordinator, "host:port". Required.
  std::string coordinator_address;
  // Interface to bind and the host consumers dial; the advertised address is host:port.
  std::string host = "127.0.0.1";
  // 0: any free port; port() tells which.
  int port = 0;
  // Per task: bytes of steps buffered ahead of the slowest consumer (at least one step).
  size_t buffer_bytes = size_t{256} << 20;
  // Per task (coordinated reads): bytes of steps every consumer has read kept in memory on top
  // of buffer_bytes, so that a consumer that comes late or reconnects while its steps are still
  // kept reads them from memory instead of a private replay (StepBuffer, "Retention window").
  size_t retention_bytes = size_t{64} << 20;
  // Per task of a job shared across trainers: bytes of steps its window keeps for the trainers
  // (worker/cross_trainer_window.h), instead of buffer_bytes.
  size_t cross_trainer_window_bytes = size_t{64} << 20;
  // A trainer of such a task with no stream open on this worker for this long is dropped from
  // the task's window, so that it no longer holds a lossless producer (--drop_departed_trainers_after).
  absl::Duration cross_trainer_drop_departed_after = absl::Minutes(5);
  // Each wait between heartbeats (and each backoff after a failed one) is spread uniformly
  // over [1 - heartbeat_jitter, 1 + heartbeat_jitter] times its nominal value, so that workers
  // started (or cut off) together do not reach the coordinator in waves.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  double heartbeat_jitter = 0.1;
  // Keep a WatchAssignment long-poll open (see the file comment), each asking to wait at most
  // assignment_watch_wait (the coordinator caps it with its max_assignment_watch). After a
  // failed watch, the next waits for the next heartbeat answer (or a heartbeat_interval).
  // Off: new tasks start at the next heartbeat.
  bool watch_assignments = true;
  absl::Duration assignment_watch_wait = absl::Seconds(30);
  // Cap of the backoff between failed heartbeats; once a heartbeat answer has said the
  // coordinator's worker_timeout, at most a quarter of it, so that a worker reconnecting to a
  // restarted coordinator is heard from before that coordinator would declare it dead.
  absl::Duration max_backoff = absl::Seconds(10);
  // Deadline of each coordinator RPC.
  absl::Duration rpc_deadline = absl::Seconds(10);
  // A consumer whose stream reaches this worker before its task (FindTask) waits at most this
  // long for the heartbeat it triggers and for the task's pipeline to be built, instead of
  // being refused and retrying after its backoff (see FindTask).
  absl::Duration unknown_task_wait = absl::Seconds(5);
  WorkerServiceOptions service;
  // The executor of every pipeline built here. Its check_graph, when set, runs before the
  // data-root and dataset-limit checks Start() adds (tests delay or fail builds with it).
  ExecutorOptions executor;
  // StepBufferOptions::detach_unattached_after.
  absl::Duration detach_unattached_after = absl::Seconds(10);
  // Receives one line per significant event; unset: stderr.
  std::function<void(absl::string_view)> log;
  // This worker's server: TLS, token (StreamSteps), request size (docs/SERVICE.md,
  // "Security"). Consumer messages are small, so the limit is low.
  ServerSecurity security = {.max_receive_message_bytes = 4 << 20};
  // How it dials the coordinator (TLS, client certificate, token).
  ChannelSecurity coordinator_security;
  // Tasks whose graphs name files outside these folders fail with PERMISSION_DENIED (none: no
  // restriction); graphs over these bounds with INVALID_ARGUMENT. Checked on every graph the
  // worker builds (ExecutorOptions::check_graph). Opens and connections follow the process's
  // roots, which main() installs (InstallProcessDataRoots), not this field.
  DataRoots data_roots;
  DatasetLimits dataset_limits;
};

class WorkerServer : public TaskLookup {
 public:
  // Binds and starts serving and heartbeating. INVALID_ARGUMENT without a coordinator address,
  // UNAVAILABLE naming host:port when it cannot bind. The coordinator need not be up yet.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(WorkerServerOptions options);
  ~WorkerServer() override;  // Stop()

  int port() const { return port_; }
  // The bulk data channel's port (WorkerServiceOptions::data_port, on host); 0 when it is off.
  int data_port() const { return service_->data_port(); }
  // "host:port", what consumers dial.
  const std::string& address() const { return address_; }
  // True once a heartbeat has succeeded; the coordinator's worker id.
  bool registered() const;
  int64_t worker_id() const;
  // This process's incarnation as the coordinator sees it (never 0).
  uint64_t process_incarnation() const { return process_incarnation_; }

  // Leaves the cluster within `timeout`: stops heartbeating and sends the coordinator one
  // heartbeat with `draining` set, so that it reassigns this worker's unfinished tasks at once;
  // then ends every open stream with UNAVAILABLE ("worker ... draining": consumers reopen the
  // task on its new worker) and shuts the server down. If the coordinator does not answer,
  // it drains as a worker that just stops: it stops producing and serves the steps already
  // buffered until every stream ended or `timeout` passed (the coordinator reassigns the tasks
  // after its worker_timeout).
  void Drain(absl::Duration timeout);
  // Stops everything now: streams end with UNAVAILABLE, as when the process dies.
  void Stop();

  // TaskLookup.
  // The runner of `task_id` of `job_id`. A consumer learns its task from the coordinator and
  // may dial this worker before the task reached it (the assignment watch, the heartbeat it
  // wakes and the pipeline build are in flight): a task unknown here makes the heartbeat
  // thread fetch the assignment at once, and the call waits for the answer to a heartbeat
  // sent after it arrived, then for the task's build, so that the consumer's first call gets
  // its task rather than a refusal and a retry after its backoff. Blocks at most
  // unknown_task_wait (and returns as soon as that answer says the task is not ours; at once
  // while the last heartbeat failed).
  // UNAVAILABLE when the task is not (or no longer) this worker's, or the job differs.
  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t job_id, int64_t task_id) override;
  // The task runners this worker holds now (metrics: worker/worker_metrics.h).
  std::vector<std::shared_ptr<TaskRunner>> TaskRunners() const;

  // What the tasks this worker has stopped and dropped (the coordinator's tasks_to_stop) had
  // done. Their per-task metrics end with them; adding these keeps the worker's totals monotone.
  struct StoppedTaskTotals {
    int64_t tasks = 0;
    int64_t steps_delivered = 0;
    int64_t bytes_delivered = 0;
    int64_t steps_produced = 0;
    int64_t replays = 0;          // TaskRunner::replays()
    int64_t retention_hits = 0;   // StepBuffer::Stats::retention_hits
  };
  // The runners held now and the totals of those dropped, taken together: a task counts in
  // exactly one of them.
  struct TaskSnapshot {
    std::vector<std::shared_ptr<TaskRunner>> runners;
    StoppedTaskTotals stopped;
  };
  TaskSnapshot Tasks() const;

 private:
  explicit WorkerServer(WorkerServerOptions options);
  void HeartbeatLoop();
  // The watch thread (watch_assignments): long-polls WatchAssignment while the server runs.
  void WatchLoop();
  // One watch with the last answer's version; whether the assignment changed since.
  absl::StatusOr<bool> WatchOnce(uint64_t incarnation, uint64_t version);
  // The watch may start: registered (an answer applied), or stopping.
  bool WatchDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A heartbeat answer newer than the watched one was applied, or stopping.
  bool WatchedVersionPassedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds the pipelines of the tasks heartbeat answers handed over (to_build_), one at a
  // time, without mu_, and adds their runners to tasks_; exits once stopping_.
  void BuildLoop();
  bool BuildDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A runner for `task` (TaskRunner::Start), or a Failed one holding the build's error.
  std::shared_ptr<TaskRunner> StartTaskRunner(const proto::TaskDef& task) const;
  absl::Status Heartbeat(bool draining = false,
                         absl::Duration deadline = absl::InfiniteDuration());
  void Log(absl::string_view line) const;

  const WorkerServerOptions options_;
  std::unique_ptr<GrpcWorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::CoordinatorService::Stub> coordinator_;
  int port_ = 0;
  std::string address_;
  // Drawn once per WorkerServer (WorkerHeartbeatRequest.process_incarnation): a restart at the
  // same address is a new worker to the coordinator, never the old one resumed.
  uint64_t process_incarnation_ = 0;

  // Wakes the heartbeat thread between heartbeats: a task's buffer changed (it may have
  // finished or failed), or the server stops. A leaf lock, held only to set or wait for the
  // flag and never while calling out, so buffers may signal it from any thread under any lock
  // (mu_ included: Heartbeat detaches consumers under it). Shared with the task runners'
  // callbacks, which a stream may hold after the server is gone.
  class Wake {
   public:
    void Signal() {
      absl::MutexLock lock(&mu_);
      signaled_ = true;
      cv_.Signal();
    }
    void Clear() {
      absl::MutexLock lock(&mu_);
      signaled_ = false;
    }
    // Waits until Signal() or `until`.
    void WaitUntil(absl::Time until) {
      absl::MutexLock lock(&mu_);
      while (!signaled_ && absl::Now() < until) cv_.WaitWithDeadline(&mu_, until);
    }

   private:
    absl::Mutex mu_;
    absl::CondVar cv_;
    bool signaled_ ABSL_GUARDED_BY(mu_) = false;
  };
  const std::shared_ptr<Wake> wake_ = std::make_shared<Wake>();

  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<TaskRunner>> tasks_ ABSL_GUARDED_BY(mu_);
  StoppedTaskTotals stopped_totals_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // heartbeats stop
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t worker_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Finished (or deterministically failed) tasks the coordinator has been told about; a task
  // finishing or failing that is not in it makes the next heartbeat go at once (so that a
  // RANGES job's next range is made sooner, and a failed job fails sooner).
  absl::flat_hash_set<int64_t> reported_finished_ ABSL_GUARDED_BY(mu_);
  bool UnreportedFinishLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tasks started here whose first step the coordinator has not heard of: a task's first step
  // is reported at once (TaskRunnerOptions::on_first_step wakes the heartbeat thread), so that
  // the coordinator's failure policy sees that a worker dying afterwards was making progress.
  absl::flat_hash_set<int64_t> first_step_unreported_ ABSL_GUARDED_BY(mu_);
  bool UnreportedFirstStepLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // (job id, consumer index) the coordinator last listed gone
  // (WorkerHeartbeatResponse.gone_consumers), already detached from this worker's buffers.
  absl::flat_hash_set<std::pair<int64_t, int64_t>> gone_consumers_ ABSL_GUARDED_BY(mu_);
  // Versioned heartbeat answers: the incarnation and version of the last answer applied, sent
  // back so that the coordinator skips new_tasks while this worker's assignment is unchanged.
  uint64_t known_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t known_version_ ABSL_GUARDED_BY(mu_) = 0;
  // CPU busy fraction and per-task rates for each heartbeat (docs/AUTOSCALING.md).
  WorkerLoadMeter load_meter_ ABSL_GUARDED_BY(mu_){
      nullptr, &ProcessCpuSeconds, static_cast<int>(std::thread::hardware_concurrency())};
  // The coordinator's worker_timeout from its last answer (WorkerHeartbeatResponse
  // .worker_timeout_ms); zero until one said it.
  absl::Duration coordinator_worker_timeout_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::thread heartbeat_thread_;
  // The assignment watch: the version it watches from, the call in flight (cancelled by
  // Stop/Drain), and whether its answer asks the heartbeat thread for a heartbeat now.
  uint64_t watched_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t watched_version_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* watch_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool assignment_changed_ ABSL_GUARDED_BY(mu_) = false;
  // Heartbeats sent, and the highest of them answered (applied or failed): FindTask waits for
  // the answer to one sent after a consumer asked for a task unknown here.
  uint64_t heartbeats_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t heartbeats_answered_ ABSL_GUARDED_BY(mu_) = 0;
  // The last heartbeat failed: FindTask does not wait for an answer then.
  bool last_heartbeat_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watch_thread_;
  // Tasks handed over and not yet built (BuildLoop): queued in to_build_, and in building_
  // until their runner is in tasks_ (heartbeats list them as active meanwhile). A task the
  // coordinator stops while it is built is in cancelled_builds_ and dropped once built.
  std::deque<proto::TaskDef> to_build_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> building_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> cancelled_builds_ ABSL_GUARDED_BY(mu_);
  std::thread build_thread_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_WORKER_SERVER_H_
