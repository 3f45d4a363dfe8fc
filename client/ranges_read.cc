#include "client/ranges_read.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {

RangesRead::RangesRead(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks)
    : streams_(streams), options_(streams->options()) {
  absl::MutexLock lock(&streams_->mu());
  OnHeartbeatLocked(tasks);
}

void RangesRead::OnHeartbeatLocked(const proto::ClientHeartbeatResponse& response) {
  num_tasks_ = response.num_tasks();
  for (const proto::TaskInfo& info : response.tasks()) {
    const int64_t index = info.task_index();
    if (index < next_index_ || index >= next_index_ + options_.max_open_tasks ||
        streams_->HasTaskLocked(info.task_id())) {
      continue;
    }
    by_index_[index] = streams_->AddTaskLocked(info.task_id(), index);
  }
  streams_->cv().SignalAll();
}

absl::Status RangesRead::Next(std::vector<Element>* replicas, bool* end_of_data) {
  absl::MutexLock lock(&streams_->mu());
  absl::Status s = NextLocked(replicas, end_of_data);
  // Forget the ended tasks whose calls are over; the caller reads on without waiting for the
  // others.
  streams_->DropDoneRetiredLocked();
  return s;
}

absl::Status RangesRead::NextLocked(std::vector<Element>* replicas, bool* end_of_data) {
  absl::Time waiting_since = absl::Now();
  const absl::Time called = waiting_since;
  int64_t waiting_for = next_index_;
  while (true) {
    if (num_tasks_ >= 0 && next_index_ >= num_tasks_) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    TaskStream* wanted = nullptr;  // the task read now, when open
    auto it = by_index_.find(next_index_);
    if (it != by_index_.end()) {
      TaskStream* t = it->second;
      wanted = t;
      if (!t->queue.empty()) {
        streams_->PopLocked(t, replicas);
        *end_of_data = false;
        return absl::OkStatus();
      }
      if (!t->error.ok()) return t->error;
      if (t->ended) {
        // Read to its end: its reader is finishing; join it later, outside the lock.
        by_index_.erase(it);
        streams_->RetireLocked(t);
        ++next_index_;
        streams_->WakeMonitorLocked();  // open the tasks now in the window
        continue;
      }
    } else {
      const absl::Status monitor_error = streams_->monitor_error_locked();
      if (!monitor_error.ok()) return monitor_error;
      if (waiting_for != next_index_) {
        waiting_for = next_index_;
        waiting_since = absl::Now();
      }
      if (absl::Now() - waiting_since > options_.retry_deadline) {
        return absl::UnavailableError(absl::StrCat(
            "task ", next_index_, " of the ", num_tasks_, " of job ", options_.job_id,
            " was not made or assigned to a worker within ",
            absl::FormatDuration(options_.retry_deadline), " (coordinator ",
            options_.coordinator_address, ")"));
      }
    }
    // Raises the task's credit once the caller has waited for its step long enough
    // (TaskStreams::WaitForStepLocked: raise_credit_after, or raise_credit_after_covered).
    streams_->WaitForStepLocked(
        wanted != nullptr ? absl::MakeConstSpan(&wanted, 1) : absl::Span<TaskStream* const>(),
        called, options_.heartbeat_interval);
  }
}

}  // namespace sluice
