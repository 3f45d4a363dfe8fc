// TaskStreams' flow control in bytes: windows, credit grants (the credit thread, and a call's
// completed write) and the
// totals of FlowStats. See client/task_streams.h.
#include "client/task_streams.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "client/task_stream_call.h"
#include "core/rpc/step_frame.h"
#include "proto/worker.pb.h"

namespace sluice {

int64_t TaskStreams::FreeLocked(const TaskStream& task) const {
  return window_ - task.held - task.outstanding;
}

int64_t TaskStreams::GrantQuantum() const { return std::max<int64_t>(window_ / 4, 1); }

void TaskStreams::SetOutstandingLocked(TaskStream* task, int64_t outstanding) {
  outstanding_ += outstanding - task->outstanding;
  task->outstanding = outstanding;
  peak_ = std::max(peak_, held_ + outstanding_);
  cv_.SignalAll();  // a WaitForFlowStats caller
}

void TaskStreams::ReceivedLocked(TaskStream* task, int64_t cost) {
  task->held += cost;
  held_ += cost;
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
  return task.calling && FreeLocked(task) >= GrantQuantum();
}

proto::ConsumerMessage TaskStreams::TakeGrantLocked(TaskStream* task) {
  const int64_t n = FreeLocked(*task);
  SetOutstandingLocked(task, task->outstanding + n);
  ++credit_grants_;
  proto::ConsumerMessage m;
  m.mutable_credit()->set_bytes(n);
  // Independent reads acknowledge what arrived, so that the worker can let it go.
  if (options_.independent) m.mutable_credit()->set_received_steps(task->next_step);
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
