// ServiceStepSource: the StepSource behind DistributeDatasetFromService (sluice/service.h).
//
// It learns the job's tasks and their workers from ClientHeartbeat and opens one StreamSteps
// call per task (docs/SERVICE.md). A reader thread per task receives frames, decodes them
// straight into buffers from the allocator and queues the steps.
//
// Flow control in bytes: the consumer has one receive budget (receive_budget_bytes) shared by
// the streams open at once, each getting window = budget / streams (every task of a round-robin
// job, or the max_open_tasks next ranges of a sequential one: the tasks it reads next). A step
// costs StepCreditBytes (core/rpc/step_frame.h). Per stream, the cost of the steps queued and
// not yet returned plus the credit granted and not yet used never exceeds the window (a step
// larger than its credit flows alone once the credit is 3/4 of the window, CreditForAnyStep). Credit goes back
// in batches: when a quarter of a stream's window is free, a credit thread of the source (never
// the caller's thread, which only signals it) sends one CreditGrant for all of it.
//
// Coordinated mode follows the schedule of docs/SERVICE.md: tasks round-robin in task order,
// one step each, a task leaving the rotation at its end; the data ends when every task has.
// Independent mode takes the next step of whichever task has one. Sequential mode (a
// SHARDING_RANGES job: task i is range i of the job's global steps) reads task 0 to its end,
// then task 1, ...; the tasks are made by the coordinator as workers have room, so a monitor
// thread keeps asking ClientHeartbeat and opens the streams of the next max_open_tasks tasks
// ahead as they appear; the data ends after the last of the job's num_tasks.
//
// Independent reads: the worker keeps the steps it sent this consumer until acknowledged (credit
// grants carry the count received; a new call starts from it, under the same random
// consumer_id), so a broken call that the worker survives loses no step.
//
// Failures: when a stream breaks (worker gone, UNAVAILABLE), its reader asks the coordinator
// for the task's worker (possibly a new one) and reopens the stream at the first task step it
// has not received, retrying with exponential backoff until retry_deadline has passed without
// progress; then, and for any other error, GetNextStep fails with a message naming the task and
// the worker address. A stream that does not break but whose task the coordinator has moved to
// another worker (the old worker's link was cut: no TCP error arrives, only the coordinator's
// heartbeat timeout) is cancelled by the monitor, so the reader moves too. A call that
// delivered its end of task is not waited for: the caller reads on at once, even if the worker
// froze before sending the call's status (the monitor cancels such a call after end_grace).
//
// Not thread-safe (one caller at a time, like the DistributedIterator that owns it); the
// destructor cancels the streams and joins the reader threads.
#ifndef SLUICE_CLIENT_SERVICE_STEP_SOURCE_H_
#define SLUICE_CLIENT_SERVICE_STEP_SOURCE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sluice/element.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "sluice/distributed_dataset.h"

namespace sluice {

using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

// Insecure channels with no message size limits.
std::shared_ptr<grpc::Channel> DefaultChannel(const std::string& address);

struct ServiceStepSourceOptions {
  std::string coordinator_address;
  int64_t job_id = 0;
  int64_t consumer_index = 0;
  int64_t num_local_replicas = 1;
  bool independent = false;
  // The spec of one replica's value: decoded leaves are packed into its structure.
  ElementSpec per_replica_spec;
  absl::Duration rpc_deadline = absl::Seconds(10);
  absl::Duration retry_deadline = absl::Seconds(60);
  // The receive budget in bytes, shared by the open streams (see above). At least 1.
  int64_t receive_budget_bytes = int64_t{64} << 20;
  TensorAllocator allocator;
  ChannelFactory channel_factory;  // empty: DefaultChannel
  // SHARDING_RANGES: read tasks in task_index order, each to its end (see above).
  bool sequential = false;
  // Sequential: tasks streamed at once (the one being read and the next ones).
  int64_t max_open_tasks = 8;
  // How often the monitor asks ClientHeartbeat (new tasks, moved tasks).
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  // A call whose end of task arrived but whose worker has not sent the call's status this long
  // after (the worker froze right after the end) is cancelled by the monitor, which frees its
  // reader thread. The end and the steps before it are the caller's as soon as they arrive.
  absl::Duration end_grace = absl::Seconds(5);
  // Checkpoints (CheckpointAfter): empty job key = not resumable. The job's first step in
  // its sequence and its epoch length (-1: unknown).
  std::string checkpoint_job_key;
  int64_t start_step = 0;
  int64_t steps_per_epoch = -1;
};

class ServiceStepSource : public StepSource {
 public:
  // Waits (up to retry_deadline) until the coordinator reports the job's tasks, then opens
  // their streams. UNAVAILABLE naming the coordinator when it does not answer.
  static absl::StatusOr<std::unique_ptr<ServiceStepSource>> Create(ServiceStepSourceOptions options);
  ~ServiceStepSource() override;

  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override;
  absl::StatusOr<IteratorCheckpoint> CheckpointAfter(int64_t steps_returned) const override;

  // Flow control, for tests and metrics. Bytes are credit bytes (StepCreditBytes).
  struct FlowStats {
    int64_t budget_bytes = 0;
    int64_t window_bytes = 0;       // per stream
    int64_t held_bytes = 0;         // received and not yet returned by GetNextStep
    int64_t outstanding_bytes = 0;  // granted to workers and not yet received
    int64_t peak_bytes = 0;         // the largest held + outstanding so far
    int64_t received_bytes = 0;     // in all
    int64_t steps_received = 0;
    int64_t credit_grants = 0;      // CreditGrant messages sent (initial credits not counted)
  };
  FlowStats flow_stats() const;
  // Test hook: waits until `predicate` holds for the stats (re-checked whenever a frame arrives
  // or credit changes), up to `timeout`; returns whether it holds.
  bool WaitForFlowStats(const std::function<bool(const FlowStats&)>& predicate,
                        absl::Duration timeout) const;

 private:
  struct Task;

  explicit ServiceStepSource(ServiceStepSourceOptions options);
  // ClientHeartbeat with the completed tasks; deadline: the RPC deadline by default.
  absl::StatusOr<proto::ClientHeartbeatResponse> Heartbeat(
      std::optional<absl::Duration> deadline = std::nullopt);
  absl::Status NextStep(std::vector<Element>* replicas, bool* end_of_data);
  // Adds a task and starts its reader. Requires !shutdown_.
  Task* AddTaskLocked(int64_t task_id, int64_t task_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The monitor thread: heartbeats every heartbeat_interval (sooner when woken), opens the next
  // sequential tasks, cancels streams of moved tasks.
  void Monitor();
  void OnHeartbeat(const proto::ClientHeartbeatResponse& response, absl::Time sent);
  // Cancels the calls that received their end of task more than end_grace before `now` and
  // still wait for the worker's status.
  void CancelEndedCalls(absl::Time now);
  absl::Status NextSequentialLocked(std::vector<Element>* replicas, bool* end_of_data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  void ReadTask(Task* task);
  // One StreamSteps call on `address`; returns how it ended (OK at the end of the task) and
  // sets *progress if any step arrived.
  absl::Status StreamOnce(Task* task, const std::string& address, bool* progress);
  // Flow control (see the class comment).
  int64_t FreeLocked(const Task& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t GrantQuantum() const;
  void SetOutstandingLocked(Task* task, int64_t outstanding) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the task's first queued step to *replicas.
  void PopLocked(Task* task, std::vector<Element>* replicas) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The credit thread: grants credit to the streams with a quarter of their window free.
  void CreditLoop();
  void GrantCredits(Task* task);
  FlowStats FlowStatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceStepSourceOptions options_;
  // Independent reads: this iterator's id on every call (StreamRequest.consumer_id).
  const uint64_t consumer_id_;
  std::unique_ptr<proto::CoordinatorService::Stub> coordinator_;
  std::thread monitor_;

  absl::Mutex channels_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(channels_mu_);

  // Set in Create before any thread starts.
  int64_t window_ = 1;
  std::thread credit_thread_;

  // Guards every task's queue and state (one lock: the caller waits on any task).
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  absl::CondVar credit_cv_;  // a grant may be due, or shutdown_
  // Flow control totals over all tasks (FlowStats).
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t credit_grants_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Every task read so far (round-robin: all of the job's, made in Create), by task id. Shared:
  // the monitor holds the tasks it is cancelling while the caller may retire them.
  absl::flat_hash_map<int64_t, std::shared_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);

  // The caller's place in the round-robin (coordinated) and the tasks still in it.
  std::vector<Task*> rotation_;
  size_t next_ = 0;
  bool finished_ = false;
  absl::Status status_;

  // Sequential: the open tasks by task_index, the index being read, the job's number of tasks
  // (-1 until the first heartbeat), a failure the monitor saw (the job is gone), and when the
  // caller started waiting for the current index to appear.
  std::map<int64_t, Task*> by_index_ ABSL_GUARDED_BY(mu_);
  int64_t next_index_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_tasks_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status monitor_error_ ABSL_GUARDED_BY(mu_);
  // Tasks read to their end whose reader threads are still to be joined (sequential); a
  // reader is joined once it has returned (Task::reader_done).
  std::vector<std::shared_ptr<Task>> retired_ ABSL_GUARDED_BY(mu_);
  // Tasks whose end this consumer received and that the coordinator has not yet reported
  // finished: every heartbeat reports them (ClientHeartbeatRequest.completed_task_ids).
  absl::flat_hash_set<int64_t> completed_ ABSL_GUARDED_BY(mu_);
  // Wakes the monitor early (the caller moved to a task not open yet).
  absl::CondVar monitor_cv_;
  bool monitor_wanted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_SERVICE_STEP_SOURCE_H_
