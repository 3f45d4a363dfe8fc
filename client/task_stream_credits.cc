// TaskStreams' flow control in bytes: windows, credit grants (the credit thread, and a call's
// completed write), the raise for steps larger than a window, and the totals of FlowStats. See
// client/task_streams.h.
#include "client/task_streams.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "client/task_stream_call.h"
#include "core/rpc/step_frame.h"
#include "proto/worker.pb.h"

namespace sluice {

void TaskStreams::set_window(int64_t window_bytes) {
  window_ = std::max<int64_t>(window_bytes, 1);
  // The smallest window_bytes whose CreditForAnyStep (x - x / 4) is window_ + 1: start below it
  // and step up (CreditForAnyStep grows by at most 1 per byte, so the first hit is exact).
  int64_t x = std::max<int64_t>(window_ + 1 + (window_ + 1) / 3 - 2, 1);
  while (CreditForAnyStep(x) <= window_) ++x;
  any_step_window_ = x;
}

int64_t TaskStreams::FreeLocked(const TaskStream& task) const {
  const int64_t limit = task.calling && task.raised ? window_ + 1 : window_;
  return limit - task.held - task.outstanding;
}

int64_t TaskStreams::GrantQuantum() const { return std::max<int64_t>(window_ / 4, 1); }

void TaskStreams::SetOutstandingLocked(TaskStream* task, int64_t outstanding) {
  // A credit below 0 (after a step larger than it) lets the worker send nothing: it counts as 0
  // in the total, which is what the workers may still send.
  outstanding_ += std::max<int64_t>(outstanding, 0) - std::max<int64_t>(task->outstanding, 0);
  task->outstanding = outstanding;
  task->credit.store(outstanding, std::memory_order_relaxed);
  peak_ = std::max(peak_, held_ + outstanding_);
  cv_.SignalAll();  // a WaitForFlowStats caller
}

void TaskStreams::ReceivedLocked(TaskStream* task, int64_t cost) {
  task->held += cost;
  task->raised = false;  // the raise is spent (or was not needed): back to the window
  if (cost > window_) large_steps_ = true;
  held_ += cost;
  largest_step_ = std::max(largest_step_, cost);
  received_bytes_ += cost;
  ++steps_received_;
  SetOutstandingLocked(task, task->outstanding - cost);
}

void TaskStreams::PopLocked(TaskStream* task, std::vector<Element>* replicas) {
  TaskStream::Queued& front = task->queue.front();
  *replicas = std::move(front.replicas);
  const int64_t before = FreeLocked(*task);
  task->held -= front.cost;
  held_ -= front.cost;
  task->queue.pop_front();
  // Wake the credit thread only when this pop makes a grant due (a quarter of the window free).
  const int64_t quantum = GrantQuantum();
  if (task->calling && before < quantum && FreeLocked(*task) >= quantum) credit_cv_.Signal();
}

bool TaskStreams::GrantDueLocked(const TaskStream& task) const {
  return task.calling && FreeLocked(task) >= (task.raised ? 1 : GrantQuantum());
}

bool TaskStreams::RaiseFreeLocked(int64_t task_id) const {
  if (raise_holder_ < 0 || raise_holder_ == task_id) return true;
  auto it = tasks_.find(raise_holder_);
  if (it == tasks_.end()) return true;  // retired: read to its end, it holds nothing
  const TaskStream& holder = *it->second;
  return !(holder.calling && holder.raised) &&
         holder.held + std::max<int64_t>(holder.outstanding, 0) <= window_;
}

bool TaskStreams::RaiseLocked(TaskStream* task) {
  if (task->calling && task->raised) return true;
  if (!task->calling || !task->queue.empty() || GrantDueLocked(*task) ||
      !RaiseFreeLocked(task->task_id)) {
    return false;
  }
  raise_holder_ = task->task_id;
  task->raised = true;
  credit_cv_.Signal();
  return true;
}

void TaskStreams::WaitForStepLocked(absl::Span<TaskStream* const> wanted,
                                    absl::Time waiting_since, absl::Duration max_wait) {
  if (time_caller_waits()) wait_meter_.BeginWait();  // ended by the caller's EndCall
  const absl::Time now = absl::Now();
  absl::Time until = now + max_wait;  // InfiniteFuture for an infinite max_wait
  // Once steps larger than a window have come, the next one is likely too: raise at once.
  // While every wanted stream's credit covers the largest step received so far, the wait is
  // most likely the pipeline's, not the credit's: raise only after raise_credit_after_covered.
  bool credit_may_hold_back = false;
  for (const TaskStream* t : wanted) {
    if (largest_step_ == 0 || t->outstanding < largest_step_) credit_may_hold_back = true;
  }
  const absl::Duration raise_after =
      credit_may_hold_back ? options_.raise_credit_after
                           : std::max(options_.raise_credit_after,
                                      options_.raise_credit_after_covered);
  const absl::Time raise_at = large_steps_ ? waiting_since : waiting_since + raise_after;
  if (now < raise_at) {
    until = std::min(until, raise_at);
  } else {
    for (TaskStream* t : wanted) {
      if (RaiseLocked(t)) break;
    }
  }
  cv_.WaitWithDeadline(&mu_, until);
}

proto::ConsumerMessage TaskStreams::TakeGrantLocked(TaskStream* task) {
  // At least 1 when GrantDueLocked; 0 for a call's shared-memory notice alone.
  const int64_t n = std::max<int64_t>(FreeLocked(*task), 0);
  SetOutstandingLocked(task, task->outstanding + n);
  if (n > 0) ++(task->raised ? credit_raises_ : credit_grants_);  // not a notice alone
  proto::ConsumerMessage m;
  m.mutable_credit()->set_bytes(n);
  // Acknowledges what arrived, so that the worker can let it go (independent reads: the steps
  // it handed to this consumer; coordinated: the ones it kept in case this call broke).
  m.mutable_credit()->set_received_steps(task->next_step);
  return m;
}

void TaskStreams::CreditLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    // A call with a write in flight grants when that write completes (on gRPC's thread).
    for (auto& [id, task] : tasks_) {
      if (task->call != nullptr && !task->call->writing_locked() && GrantDueLocked(*task)) {
        task->call->WriteLocked();
      }
    }
    credit_cv_.Wait(&mu_);
  }
}

TaskStreams::FlowStats TaskStreams::flow_stats() const {
  absl::MutexLock lock(&mu_);
  return FlowStatsLocked();
}

TaskStreams::FlowStats TaskStreams::FlowStatsLocked() const {
  FlowStats f;
  f.budget_bytes = options_.receive_budget_bytes;
  f.window_bytes = window_;
  f.held_bytes = held_;
  f.outstanding_bytes = outstanding_;
  f.peak_bytes = peak_;
  f.received_bytes = received_bytes_;
  f.steps_received = steps_received_;
  f.credit_grants = credit_grants_;
  f.credit_raises = credit_raises_;
  return f;
}

bool TaskStreams::WaitForFlowStats(const std::function<bool(const FlowStats&)>& predicate,
                                   absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!predicate(FlowStatsLocked())) {
    if (cv_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      return predicate(FlowStatsLocked());
    }
  }
  return true;
}

}  // namespace sluice
