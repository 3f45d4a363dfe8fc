#include "client/service_step_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/coordinated_read.h"
#include "client/independent_read.h"
#include "client/ranges_read.h"
#include "client/read_order.h"
#include "client/task_streams.h"
#include "core/util/backoff.h"

namespace sluice {

ServiceStepSource::ServiceStepSource(std::unique_ptr<TaskStreams> streams,
                                     std::unique_ptr<ReadOrder> order)
    : streams_(std::move(streams)), order_(std::move(order)) {}

absl::StatusOr<std::unique_ptr<ServiceStepSource>> ServiceStepSource::Create(
    ServiceStepSourceOptions options) {
  if (options.num_local_replicas < 1 || options.receive_budget_bytes < 1) {
    return absl::InvalidArgumentError(
        "ServiceStepSource: num_local_replicas and receive_budget_bytes must be positive");
  }
  auto streams = std::make_unique<TaskStreams>(std::move(options));
  const ServiceStepSourceOptions& o = streams->options();
  const absl::Time give_up = absl::Now() + o.retry_deadline;
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  proto::ClientHeartbeatResponse tasks;
  while (true) {
    absl::StatusOr<proto::ClientHeartbeatResponse> hb = streams->Heartbeat();
    // A sequential job may have no task made yet (or none at all: a resumed job at its end).
    if (hb.ok() && (o.sequential || hb->tasks_size() > 0)) {
      tasks = *std::move(hb);
      break;
    }
    if (!hb.ok() && !Retryable(hb.status())) return hb.status();
    const absl::Duration wait = backoff.Next();
    if (absl::Now() + wait > give_up) {
      if (!hb.ok()) return hb.status();
      return absl::UnavailableError(absl::StrCat("job ", o.job_id, " has no tasks after ",
                                                 absl::FormatDuration(o.retry_deadline),
                                                 " (coordinator ", o.coordinator_address, ")"));
    }
    absl::SleepFor(wait);
  }
  {
    // One receive budget shared by the streams open at once: every task of a round-robin job
    // (each is needed once per round), or the max_open_tasks next ranges of a sequential one.
    // One byte is kept back for the raise (task_streams.h).
    const int64_t streams_open =
        o.sequential ? std::min<int64_t>(o.max_open_tasks, std::max<int64_t>(tasks.num_tasks(), 1))
                     : std::max<int64_t>(tasks.tasks_size(), 1);
    streams->set_window(std::max<int64_t>(
        (o.receive_budget_bytes - 1) / std::max<int64_t>(streams_open, 1), 1));
  }
  std::unique_ptr<ReadOrder> order;
  if (o.sequential) {
    order = std::make_unique<RangesRead>(streams.get(), tasks);
  } else if (o.independent) {
    order = std::make_unique<IndependentRead>(streams.get(), tasks);
  } else {
    order = std::make_unique<CoordinatedRead>(streams.get(), tasks);
  }
  if (absl::Status s = streams->Start(order.get()); !s.ok()) {
    streams->Shutdown();  // before `order` goes
    return s;
  }
  return std::unique_ptr<ServiceStepSource>(
      new ServiceStepSource(std::move(streams), std::move(order)));
}

ServiceStepSource::~ServiceStepSource() { streams_->Shutdown(); }

absl::StatusOr<IteratorCheckpoint> ServiceStepSource::CheckpointAfter(
    int64_t steps_returned) const {
  const ServiceStepSourceOptions& options = streams_->options();
  if (options.checkpoint_job_key.empty()) {
    return absl::UnimplementedError(
        "the job's order is not deterministic (sharding policy other than RANGES or DATA, or "
        "independent reads)");
  }
  IteratorCheckpoint c;
  c.job_key = options.checkpoint_job_key;
  c.step = options.start_step + steps_returned;
  if (options.steps_per_epoch > 0) {
    c.epoch = c.step / options.steps_per_epoch;
    c.step_in_epoch = c.step % options.steps_per_epoch;
  }
  return c;
}

InputWaitMeter* ServiceStepSource::TakeOverWaitMeter() {
  streams_->set_time_caller_waits(false);
  return &streams_->wait_meter();
}

ServiceStepSource::FlowStats ServiceStepSource::flow_stats() const {
  return streams_->flow_stats();
}

bool ServiceStepSource::WaitForFlowStats(const std::function<bool(const FlowStats&)>& predicate,
                                         absl::Duration timeout) const {
  return streams_->WaitForFlowStats(predicate, timeout);
}

absl::Status ServiceStepSource::GetNextStep(std::vector<Element>* replicas, bool* end_of_data) {
  const bool was_finished = finished_;
  // The time this call blocks is the trainer's input wait (docs/AUTOSCALING.md): started by
  // TaskStreams::WaitForStepLocked when the call has to wait, ended here.
  const bool timed = streams_->time_caller_waits();
  absl::Status s = NextStep(replicas, end_of_data);
  if (timed) streams_->wait_meter().EndCall(s.ok() && !*end_of_data);
  if (s.ok() && *end_of_data && !was_finished && streams_->HasUnreportedEnds()) {
    // The ends just received would otherwise be reported only by the monitor's next heartbeat,
    // which may never come now (the caller is done): one last report, best effort.
    (void)streams_->Heartbeat(std::min(streams_->options().rpc_deadline, absl::Seconds(2)));
  }
  return s;
}

absl::Status ServiceStepSource::NextStep(std::vector<Element>* replicas, bool* end_of_data) {
  if (!status_.ok()) return status_;
  if (finished_) {
    *end_of_data = true;
    return absl::OkStatus();
  }
  absl::Status s = order_->Next(replicas, end_of_data);
  if (!s.ok()) {
    status_ = s;
  } else if (*end_of_data) {
    finished_ = true;
  }
  return s;
}

}  // namespace sluice
