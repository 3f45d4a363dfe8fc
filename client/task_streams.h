// TaskStreams: the per-task StreamSteps calls behind ServiceStepSource, the machinery its three
// read orders share (client/read_order.h). Protocol: docs/SERVICE.md.
//
// The calls use gRPC's callback API (client/task_stream_call.cc): a consumer holds no thread per
// task stream, only gRPC's own callback threads and three of its own (the connector, the monitor
// and the credit thread), however many tasks it reads.
//
// For every task opened (AddTaskLocked) the connector thread asks the coordinator for the task's
// worker (one ClientHeartbeat serves every task waiting to connect) and opens a StreamSteps call
// there (a TaskStreams::Call reactor); each frame is decoded on gRPC's callback thread straight
// into buffers from the allocator and its steps are queued on the task's TaskStream; the read
// order hands them out (PopLocked). One read is outstanding on a call until its end: the
// worker's sending is bounded by the credit this consumer grants, so reading never outruns the
// budget. When a call breaks (worker gone, UNAVAILABLE) the task goes back to the connector,
// which asks the coordinator again and reopens the call at the first task step not received,
// with exponential backoff, until retry_deadline passes without progress; then, and for any
// other error, the task's `error` is set, naming the task and the worker. At the end of the
// task (the frame with end_of_task) the call half-closes and waits for the worker's status; the
// task's `ended` is set as soon as the end arrives, so nobody waits for that status.
//
// Flow control in bytes (task_stream_credits.cc): each stream's window (set_window: the
// consumer's receive budget, less one byte, over the streams open at once) bounds the cost of
// its queued steps plus the credit granted and not yet used. A grant (one CreditGrant when a
// quarter of a stream's window is free) is written by the credit thread, or by gRPC's thread
// when the call's previous write completes; the caller's thread (PopLocked) only wakes the
// credit thread.
//
// Steps larger than the window (the raise): every call tells its worker a window_bytes whose
// CreditForAnyStep is window + 1, so that a worker sends a step larger than its credit only when
// its credit is window + 1, which no stream reaches through grants. A caller that has waited
// options.raise_credit_after for a task's step (WaitForStepLocked; no wait once a step larger
// than the window has arrived) raises that task's credit to window + 1 (RaiseLocked), and only
// one task at a time holds the raise: another is raised only once the holder has received a
// step since its raise and is back within its window (the caller took its step). So at most
// one step larger than a window is held or on its way, whatever the number of streams:
// held + outstanding <= budget, or at most budget - 1 + (step - window) while such a step is
// held (docs/SERVICE.md, "Flow control"). A raise only helps a stream whose credit is below
// the step its worker holds back; so while the credit of every stream the caller waits for
// covers the largest step received so far, the caller waits
// options.raise_credit_after_covered (or raise_credit_after if longer) before raising: a
// trainer that merely outruns its pipeline sends no raise per frame (each one a CreditGrant
// through gRPC's threads on both ends), and a step larger than any before still comes, that
// much later, once.
//
// A call has at most one write in flight (the request, a grant, or the half-close). Independent
// reads (options.independent) send a consumer_id on every call and acknowledge the steps
// received in each grant, so that a reconnect loses and duplicates nothing.
//
// A monitor thread asks ClientHeartbeat every heartbeat_interval (sooner after WakeMonitorLocked),
// reporting the tasks whose end arrived (completed_task_ids); hands each answer to the read
// order (ReadOrder::OnHeartbeatLocked); cancels a call whose task a heartbeat sent after the
// call opened places on another worker (the task then reconnects there), and a call whose end
// arrived end_grace ago and still waits for the worker's status. A failure answer that is not
// retryable (the job is gone) is kept as monitor_error.
//
// Locking: one mutex (mu) guards every TaskStream, every call's state and this object's state;
// the read orders hold it while they look at the tasks, and wait on cv(), which is signalled
// whenever a step, an end, an error, a call's end or a heartbeat arrives. gRPC operations
// (StartRead, StartWrite, TryCancel, ...) are started under mu: gRPC 1.51 runs no reaction
// inline (every callback is scheduled), and none blocks. No reaction waits for anything.
// Shutdown (also the destructor) stops the connector and the monitor, cancels the calls and
// waits until every call has reached OnDone (no reaction runs after it returns); nothing is
// opened after it. A call whose end arrived is first given until end_grace after that end to
// get the worker's status (the worker counts this consumer's end only on a call that ends
// uncancelled); a heartbeat does not cancel such a call either.
#ifndef SLUICE_CLIENT_TASK_STREAMS_H_
#define SLUICE_CLIENT_TASK_STREAMS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
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
#include "absl/types/span.h"
#include "client/heartbeat_view.h"
#include "client/input_wait_meter.h"
#include "core/util/backoff.h"
#include "client/service_step_source.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "sluice/element.h"

namespace sluice {

class ReadOrder;
class TaskStreamCall;

// Whether a failed call or heartbeat may be retried: the transient codes of
// core/util/transient_error.h (UNAVAILABLE, ABORTED, CANCELLED, DEADLINE_EXCEEDED).
bool Retryable(const absl::Status& s);

// One task's stream. Fields are guarded by the owning TaskStreams' mu.
struct TaskStream {
  int64_t task_id = 0;
  int64_t task_index = 0;

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
  // than the credit). `calling`: the call takes credit grants.
  int64_t held = 0;
  int64_t outstanding = 0;
  // `outstanding`, also readable without mu: the call checks each frame against it before
  // decoding (FrameCreditLimit). Written under mu with `outstanding`.
  std::atomic<int64_t> credit{0};
  bool calling = false;
  // The current call's credit was raised to window + 1 (TaskStreams::RaiseLocked) and no step
  // has arrived on it since.
  bool raised = false;
  // Nothing runs for the task any more: no call, no reconnect to come (it ended, failed, or
  // the consumer shut down).
  bool done = false;

  // The current call (until its OnDone), where and when it was opened (the monitor cancels it
  // when a later heartbeat places the task elsewhere) and when its end of task arrived (the
  // monitor cancels a call still waiting for the worker's status end_grace later; set under
  // mu in the same section that queues the end, so a Shutdown right after the consumer sees it
  // already spares the call until it has half-closed).
  TaskStreamCall* call = nullptr;
  std::string address;
  absl::Time opened;
  absl::Time end_received = absl::InfiniteFuture();

  // Reconnecting (the connector thread): whether the task waits for a call to be opened, and
  // not before when; the last progress (a step received), the backoff between attempts and
  // the last failure, for the error once retry_deadline passes without progress.
  bool connect_wanted = false;
  absl::Time connect_at = absl::InfinitePast();
  absl::Time last_progress;
  std::unique_ptr<Backoff> backoff;
  absl::Status last_error;
  std::string last_address;
  // Deterministic errors a worker's stream ended with, asked about again: the error may have
  // been local to that worker, whose coordinator then moves the task (docs/SERVICE.md,
  // "Failure policy"), so the consumer asks the coordinator where the task is (or the job's
  // error) before it gives up. Reset by progress.
  int deterministic_retries = 0;
  // retry_deadline passed without progress: the connector asks the coordinator once more (a
  // failed job's error, with its code, is the answer then) and the task fails.
  bool last_ask = false;
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
  // The trainer's input wait, reported in every Heartbeat (docs/AUTOSCALING.md).
  InputWaitMeter& wait_meter() { return wait_meter_; }
  // Whether WaitForStepLocked starts the caller's wait on wait_meter() (true: the step source's
  // caller is the trainer; false once a wrapper times its own callers' waits instead:
  // ServiceStepSource::TakeOverWaitMeter). Only calls that block start one, so a step that is
  // ready costs no clock read (the caller ends every call with InputWaitMeter::EndCall).
  bool time_caller_waits() const { return time_caller_waits_.load(std::memory_order_relaxed); }
  void set_time_caller_waits(bool on) { time_caller_waits_.store(on, std::memory_order_relaxed); }

  // Each stream's window in bytes (at least 1; the budget less one byte, over the streams: the
  // byte is the raise's). Set once, before any task is added.
  void set_window(int64_t window_bytes);
  // Starts the connector, the monitor and the credit threads. `order` gets every heartbeat answer and must
  // outlive Shutdown(). RESOURCE_EXHAUSTED naming the thread that could not start (Shutdown()
  // stops those that did).
  absl::Status Start(ReadOrder* order);
  // Cancels every call (one whose end arrived once it has returned, or end_grace after its
  // end), waits until every call has reached its OnDone, and joins every thread. Idempotent.
  void Shutdown();

  absl::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  // Signalled whenever a step, an end, an error or a heartbeat answer arrives, and at Shutdown.
  absl::CondVar& cv() { return cv_; }
  bool shutdown_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_; }

  // Adds a task and has the connector open its call. Requires !shutdown_locked().
  TaskStream* AddTaskLocked(int64_t task_id, int64_t task_index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds every task of `response`, in task_index order.
  std::vector<TaskStream*> AddAllTasksLocked(const proto::ClientHeartbeatResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasTaskLocked(int64_t task_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for the streams' next event (cv(), at most max_wait), as a caller that wants a step
  // of one of `wanted` (in preference order; may be empty) and has waited since
  // `waiting_since`: from raise_credit_after on, first raises the first of them that can be
  // raised (RaiseLocked), so that a step larger than its credit can come.
  void WaitForStepLocked(absl::Span<TaskStream* const> wanted, absl::Time waiting_since,
                         absl::Duration max_wait = absl::InfiniteDuration())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the task's first queued step to *replicas (the queue must not be empty), waking the
  // credit thread when this makes a grant due.
  void PopLocked(TaskStream* task, std::vector<Element>* replicas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task read to its end leaves the open tasks; its call (possibly still waiting for the
  // worker's status) ends on its own, or is cancelled by the monitor or Shutdown.
  void RetireLocked(TaskStream* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the retired tasks whose calls have ended (TaskStream::done).
  void DropDoneRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  friend class TaskStreamCall;

  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  // A new channel: options_.channel_factory's, else a LimitedChannel with the options' limits.
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) const;
  // The largest message the channels accept from a worker (max_receive_message_bytes, else
  // ReceiveLimitBytes(receive_budget_bytes)); also the largest frame a bulk socket with in-band
  // headers may announce.
  int ReceiveLimit() const;
  // The monitor thread.
  void Monitor();
  // Cancels the calls that received their end of task more than end_grace before `now` and
  // still wait for the worker's status.
  void CancelEndedCalls(absl::Time now);
  // The connector thread: opens the calls of the tasks that want one (connect_wanted, due at
  // connect_at), one heartbeat per round for all of them.
  void ConnectLoop();
  // One due task, given the round's heartbeat answer: opens its call, schedules another
  // attempt, or fails the task.
  void ConnectTask(const std::shared_ptr<TaskStream>& task,
                   const absl::StatusOr<proto::ClientHeartbeatResponse>& hb);
  // After a failed attempt (a call, or the search for the task's worker) with no call left:
  // the task goes back to the connector after the backoff, or at once for a last ask once
  // retry_deadline has passed without progress (TaskStream::last_ask), after which it fails.
  // The last ask matters when the job failed meanwhile: a worker stops the tasks of a failed
  // job, and a consumer that retried that stop until its deadline would report UNAVAILABLE
  // instead of the job's error.
  void RetryLaterLocked(const std::shared_ptr<TaskStream>& task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE: no progress for retry_deadline, with the task's last error.
  absl::Status NoProgressErrorLocked(const TaskStream& task) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the task's error; it is done.
  void FailLocked(TaskStream* task, absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The task's name in errors.
  std::string TaskName(const TaskStream& task) const;
  // A call reached OnDone and was deleted (live_calls_).
  void CallGone();

  // Flow control (task_stream_credits.cc).
  int64_t FreeLocked(const TaskStream& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t GrantQuantum() const;
  void SetOutstandingLocked(TaskStream* task, int64_t outstanding)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Accounts for a step received on the task's current call.
  void ReceivedLocked(TaskStream* task, int64_t cost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a grant is due on the task's current call (a quarter of its window free, or the
  // raise not yet granted).
  bool GrantDueLocked(const TaskStream& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Raises the task's credit to window + 1 (see the file comment) when its call is open, it
  // has no step queued, no ordinary grant is pending and no other task holds the raise; returns
  // whether the task holds it (now or already).
  bool RaiseLocked(TaskStream* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether no task but `task_id` holds the raise: none was raised, or the last one raised is
  // gone, has received a step since and is back within its window.
  bool RaiseFreeLocked(int64_t task_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Accounts for a grant of FreeLocked bytes and returns the message that carries it.
  proto::ConsumerMessage TakeGrantLocked(TaskStream* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The credit thread: grants credit to the streams with a quarter of their window free whose
  // call has no write in flight (the others grant when that write completes).
  void CreditLoop();
  FlowStats FlowStatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Calls decode numeric tensors as views of gRPC's received slices where they can
  // (options.view_received_slices, and no allocator of the caller's: its memory is wanted).
  const bool view_received_slices_;
  const ServiceStepSourceOptions options_;
  // The per-replica spec's leaves, when options_.compact_headers: every call asks for compact
  // headers with it and decodes with it. Null otherwise.
  const std::shared_ptr<const CompactSpec> compact_spec_;
  // Independent reads: this iterator's id on every call (StreamRequest.consumer_id).
  const uint64_t consumer_id_;
  // StreamRequest.consumer_instance on every call.
  const uint64_t consumer_instance_;
  // This host's boot id, offered to workers for shared memory; empty: shared memory off.
  const std::string boot_id_;
  std::unique_ptr<proto::CoordinatorService::Stub> coordinator_;
  // The job's tasks from versioned heartbeat answers: requests send its version, deltas are
  // merged into it, and Heartbeat() returns it as a full answer.
  HeartbeatView view_;
  // The jitter of the monitor's waits (options_.random, or seeded from the system).
  RandomSource random_ ABSL_GUARDED_BY(mu_);
  ReadOrder* order_ = nullptr;  // set by Start
  std::thread monitor_;
  std::thread credit_thread_;
  std::thread connector_;
  // Set before any task is added: each stream's window, and the window_bytes its calls send
  // (CreditForAnyStep(any_step_window_) == window_ + 1).
  int64_t window_ = 1;
  int64_t any_step_window_ = 2;

  absl::Mutex channels_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(channels_mu_);

  // Guards every task's queue and state (one lock: the caller waits on any task).
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  absl::CondVar credit_cv_;     // a grant may be due, or shutdown_
  absl::CondVar connector_cv_;  // a task wants a call, or shutdown_
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool joined_ = false;  // Shutdown ran (only the owner's thread calls it)
  // Flow control totals over all tasks (FlowStats).
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t credit_grants_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t credit_raises_ ABSL_GUARDED_BY(mu_) = 0;
  // The task that was raised last (RaiseLocked), by id; -1: none yet.
  int64_t raise_holder_ ABSL_GUARDED_BY(mu_) = -1;
  // A step larger than the window has arrived: callers raise without waiting
  // raise_credit_after first.
  bool large_steps_ ABSL_GUARDED_BY(mu_) = false;
  // The largest step cost received so far, over all tasks (0: none yet). A caller waiting for
  // streams whose credit all cover it raises after options_.raise_credit_after_covered.
  int64_t largest_step_ ABSL_GUARDED_BY(mu_) = 0;
  // The open tasks, by task id. Shared: the monitor holds the tasks it is cancelling while the
  // caller may retire them.
  absl::flat_hash_map<int64_t, std::shared_ptr<TaskStream>> tasks_ ABSL_GUARDED_BY(mu_);
  // Tasks read to their end whose calls may still wait for the worker's status.
  std::vector<std::shared_ptr<TaskStream>> retired_ ABSL_GUARDED_BY(mu_);
  // Tasks waiting for the connector (connect_wanted).
  std::vector<std::shared_ptr<TaskStream>> connecting_ ABSL_GUARDED_BY(mu_);
  // Tasks whose end this consumer received and that the coordinator has not yet reported
  // finished: every heartbeat reports them (ClientHeartbeatRequest.completed_task_ids).
  absl::flat_hash_set<int64_t> completed_ ABSL_GUARDED_BY(mu_);
  // Workers whose bulk data port this consumer could not reach: their calls stay on gRPC.
  absl::flat_hash_set<std::string> bulk_unreachable_ ABSL_GUARDED_BY(mu_);
  // The coordinator's secret for this consumer (ClientHeartbeatResponse.consumer_secret),
  // sent back on every heartbeat so that this process's completed reports count; 0 before.
  uint64_t consumer_secret_ ABSL_GUARDED_BY(mu_) = 0;
  InputWaitMeter wait_meter_;
  std::atomic<bool> time_caller_waits_{true};
  absl::Status monitor_error_ ABSL_GUARDED_BY(mu_);
  // Wakes the monitor early.
  absl::CondVar monitor_cv_;
  bool monitor_wanted_ ABSL_GUARDED_BY(mu_) = false;

  // Calls created and not yet through OnDone. A std::mutex, not mu: the last thing a call's
  // OnDone does is to decrement this and notify under the lock, and Shutdown (then the
  // destructor) may destroy the lock as soon as it sees zero.
  std::mutex live_mu_;
  std::condition_variable live_cv_;
  int64_t live_calls_ = 0;  // guarded by live_mu_
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_TASK_STREAMS_H_
