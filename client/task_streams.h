// TaskStreams: the per-task StreamSteps calls behind ServiceStepSource, the machinery its three
// read orders share (client/read_order.h). Protocol: docs/SERVICE.md.
//
// For every task opened (AddTaskLocked) a reader thread asks the coordinator for the task's
// worker, opens a StreamSteps call there, decodes each frame straight into buffers from the
// allocator and queues the steps on the task's TaskStream; the read order hands them out
// (PopLocked). When a call breaks (worker gone, UNAVAILABLE) the reader asks the coordinator
// again and reopens the call at the first task step not received, with exponential backoff,
// until retry_deadline passes without progress; then, and for any other error, the task's
// `error` is set, naming the task and the worker. At the end of the task (the frame with
// end_of_task) the reader half-closes and waits for the call's status with no lock held; the
// task's `ended` is set as soon as the end arrives, so nobody waits for that status.
//
// Flow control in bytes (task_stream_credits.cc): each stream's window (set_window: the
// consumer's receive budget over the streams open at once) bounds the cost of its queued steps
// plus the credit granted and not yet used. A credit thread sends one CreditGrant when a quarter
// of a stream's window is free; the caller's thread (PopLocked) only wakes it. Independent reads
// (options.independent) send a consumer_id on every call and acknowledge the steps received in
// each grant, so that a reconnect loses and duplicates nothing.
//
// A monitor thread asks ClientHeartbeat every heartbeat_interval (sooner after WakeMonitorLocked),
// reporting the tasks whose end arrived (completed_task_ids); hands each answer to the read
// order (ReadOrder::OnHeartbeatLocked); cancels a call whose task a heartbeat sent after the
// call opened places on another worker (the reader then reconnects there), and a call whose end
// arrived end_grace ago and still waits for the worker's status. A failure answer that is not
// retryable (the job is gone) is kept as monitor_error.
//
// Locking: one mutex (mu) guards every TaskStream's queue and state and this object's state; the
// read orders hold it while they look at the tasks, and wait on cv(), which is signalled
// whenever a step, an end, an error or a heartbeat arrives. Lock order: TaskStream::write_mu,
// TaskStream::call_mu, mu. Shutdown (also the destructor) cancels the calls and joins every
// thread; nothing is opened after it. A call whose end arrived is first given until end_grace
// after that end to get the worker's status (the worker counts this consumer's end only on a
// call that ends uncancelled); a heartbeat does not cancel such a call either.
#ifndef SLUICE_CLIENT_TASK_STREAMS_H_
#define SLUICE_CLIENT_TASK_STREAMS_H_

#include <cstdint>
#include <deque>
#include <functional>
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
#include "client/heartbeat_view.h"
#include "client/service_step_source.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "sluice/element.h"

namespace sluice {

class ReadOrder;

// Whether a failed call or heartbeat may be retried: the transient codes of
// core/util/transient_error.h (UNAVAILABLE, ABORTED, CANCELLED, DEADLINE_EXCEEDED).
bool Retryable(const absl::Status& s);

// One task's stream. Unless said otherwise, fields are guarded by the owning TaskStreams' mu.
struct TaskStream {
  int64_t task_id = 0;
  int64_t task_index = 0;
  std::thread reader;

  struct Queued {
    std::vector<Element> replicas;
    int64_t cost = 0;  // StepCreditBytes
  };
  std::deque<Queued> queue;  // received, not yet handed out
  bool ended = false;        // the end of the task arrived (after every step in `queue`)
  absl::Status error;        // the task failed (after the steps in `queue`)
  int64_t next_step = 0;     // the first task step not received yet
  // Flow control (bytes, see StepCreditBytes): the cost of the queued steps, and the credit
  // granted on the current call that its steps have not used yet (negative after a step larger
  // than the credit). `calling`: the call takes credit grants (`stream` is set).
  int64_t held = 0;
  int64_t outstanding = 0;
  bool calling = false;
  bool reader_done = false;  // the reader thread has returned: joining it does not wait

  // The current call, for cancelling: where and when it was opened (the monitor cancels it
  // when a later heartbeat places the task elsewhere) and when its end of task arrived (the
  // monitor cancels a call still waiting for the worker's status end_grace later; set before
  // the end is handed to the consumer, so a Shutdown right after it already spares the call
  // until it has half-closed). call_mu is
  // never held across a blocking gRPC call, so cancelling never waits for a stuck call: a call
  // to a frozen worker (SIGSTOP: no TCP error) blocks until it is cancelled.
  absl::Mutex call_mu;
  grpc::ClientContext* context ABSL_GUARDED_BY(call_mu) = nullptr;
  std::string address ABSL_GUARDED_BY(call_mu);
  absl::Time opened ABSL_GUARDED_BY(call_mu);
  absl::Time end_received ABSL_GUARDED_BY(call_mu) = absl::InfiniteFuture();

  // Serializes the call's writes (the request, credit grants, the half-close).
  using Stream = grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
  absl::Mutex write_mu;
  Stream* stream ABSL_GUARDED_BY(write_mu) = nullptr;  // null once writes are done
};

class TaskStreams {
 public:
  using FlowStats = ServiceStepSource::FlowStats;

  // Connects nothing yet: the coordinator's channel is made here, calls are opened by
  // AddTaskLocked. options.receive_budget_bytes must be positive (ServiceStepSource::Create
  // checks it).
  explicit TaskStreams(ServiceStepSourceOptions options);
  ~TaskStreams();  // Shutdown()

  const ServiceStepSourceOptions& options() const { return options_; }

  // ClientHeartbeat with the tasks whose end arrived and that the coordinator has not yet
  // reported finished; deadline: the RPC deadline by default. Errors name the coordinator.
  absl::StatusOr<proto::ClientHeartbeatResponse> Heartbeat(
      std::optional<absl::Duration> deadline = std::nullopt);
  // Whether some task's end is not yet known to the coordinator (the next Heartbeat reports it).
  bool HasUnreportedEnds() const;

  // Each stream's window in bytes. Set once, before any task is added.
  void set_window(int64_t window_bytes) { window_ = window_bytes; }
  // Starts the monitor and the credit threads. `order` gets every heartbeat answer and must
  // outlive Shutdown().
  void Start(ReadOrder* order);
  // Cancels every call (one whose end arrived once it has returned, or end_grace after its
  // end) and joins every thread. Idempotent.
  void Shutdown();

  absl::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  // Signalled whenever a step, an end, an error or a heartbeat answer arrives, and at Shutdown.
  absl::CondVar& cv() { return cv_; }
  bool shutdown_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_; }

  // Adds a task and starts its reader. Requires !shutdown_locked().
  TaskStream* AddTaskLocked(int64_t task_id, int64_t task_index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds every task of `response`, in task_index order.
  std::vector<TaskStream*> AddAllTasksLocked(const proto::ClientHeartbeatResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasTaskLocked(int64_t task_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the task's first queued step to *replicas (the queue must not be empty), waking the
  // credit thread when this makes a grant due.
  void PopLocked(TaskStream* task, std::vector<Element>* replicas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task read to its end leaves the open tasks; its reader (possibly still waiting for the
  // worker's status) is joined by JoinReturnedRetired or Shutdown.
  void RetireLocked(TaskStream* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the retired tasks whose readers have returned; the caller joins them outside the
  // lock (JoinReaders).
  std::vector<std::shared_ptr<TaskStream>> TakeReturnedRetiredLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void JoinReaders(const std::vector<std::shared_ptr<TaskStream>>& tasks);
  // Asks the monitor for a heartbeat now (e.g. a task not open yet is wanted).
  void WakeMonitorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A non-retryable heartbeat failure the monitor saw (the job is gone); OK if none.
  absl::Status monitor_error_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return monitor_error_;
  }

  // The monitor's next wait between heartbeats: heartbeat_interval with its jitter.
  absl::Duration NextHeartbeatWait() ABSL_LOCKS_EXCLUDED(mu_);

  // Handles a heartbeat answer sent at `sent` (see the file comment).
  void OnHeartbeat(const proto::ClientHeartbeatResponse& response, absl::Time sent);

  FlowStats flow_stats() const;
  bool WaitForFlowStats(const std::function<bool(const FlowStats&)>& predicate,
                        absl::Duration timeout) const;

 private:
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  // The monitor thread.
  void Monitor();
  // Cancels the calls that received their end of task more than end_grace before `now` and
  // still wait for the worker's status.
  void CancelEndedCalls(absl::Time now);
  // The reader thread of a task: calls (StreamOnce) and reconnects until the end or a failure.
  void ReadTask(TaskStream* task);
  // One StreamSteps call on `address`; returns how it ended (OK at the end of the task) and
  // sets *progress if any step arrived.
  absl::Status StreamOnce(TaskStream* task, const std::string& address, bool* progress);

  // Flow control (task_stream_credits.cc).
  int64_t FreeLocked(const TaskStream& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t GrantQuantum() const;
  void SetOutstandingLocked(TaskStream* task, int64_t outstanding)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Accounts for a step received on the task's current call.
  void ReceivedLocked(TaskStream* task, int64_t cost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The credit thread: grants credit to the streams with a quarter of their window free.
  void CreditLoop();
  void GrantCredits(TaskStream* task);
  FlowStats FlowStatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceStepSourceOptions options_;
  // Independent reads: this iterator's id on every call (StreamRequest.consumer_id).
  const uint64_t consumer_id_;
  std::unique_ptr<proto::CoordinatorService::Stub> coordinator_;
  // The job's tasks from versioned heartbeat answers: requests send its version, deltas are
  // merged into it, and Heartbeat() returns it as a full answer.
  HeartbeatView view_;
  // The jitter of the monitor's waits (options_.random, or seeded from the system).
  RandomSource random_ ABSL_GUARDED_BY(mu_);
  ReadOrder* order_ = nullptr;  // set by Start
  std::thread monitor_;
  std::thread credit_thread_;
  // Set before any task is added.
  int64_t window_ = 1;

  absl::Mutex channels_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(channels_mu_);

  // Guards every task's queue and state (one lock: the caller waits on any task).
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  absl::CondVar credit_cv_;  // a grant may be due, or shutdown_
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool joined_ = false;  // Shutdown ran (only the owner's thread calls it)
  // Flow control totals over all tasks (FlowStats).
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t credit_grants_ ABSL_GUARDED_BY(mu_) = 0;
  // The open tasks, by task id. Shared: the monitor holds the tasks it is cancelling while the
  // caller may retire them.
  absl::flat_hash_map<int64_t, std::shared_ptr<TaskStream>> tasks_ ABSL_GUARDED_BY(mu_);
  // Tasks read to their end whose reader threads are still to be joined; a reader is joined
  // once it has returned (TaskStream::reader_done).
  std::vector<std::shared_ptr<TaskStream>> retired_ ABSL_GUARDED_BY(mu_);
  // Tasks whose end this consumer received and that the coordinator has not yet reported
  // finished: every heartbeat reports them (ClientHeartbeatRequest.completed_task_ids).
  absl::flat_hash_set<int64_t> completed_ ABSL_GUARDED_BY(mu_);
  absl::Status monitor_error_ ABSL_GUARDED_BY(mu_);
  // Wakes the monitor early.
  absl::CondVar monitor_cv_;
  bool monitor_wanted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_TASK_STREAMS_H_
