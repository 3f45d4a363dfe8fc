#include "client/task_streams.h"

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "client/consumer_secrets.h"
#include "client/read_order.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/grpc_security.h"
#include "client/task_stream_call.h"
#include "core/rpc/shm_mapping_cache.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/grpc_status.h"
#include "core/util/backoff.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"
#include "core/util/transient_error.h"
#include "proto/worker.pb.h"

namespace sluice {
namespace {

uint64_t RandomConsumerId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

}  // namespace

bool Retryable(const absl::Status& s) { return IsTransientTaskError(s.code()); }

int ReceiveLimitBytes(int64_t receive_budget_bytes) {
  constexpr int64_t kFloor = int64_t{256} << 20;
  constexpr int64_t kHeaders = int64_t{1} << 20;
  const int64_t budget = std::max<int64_t>(receive_budget_bytes, kFloor);
  const int64_t max = std::numeric_limits<int>::max();
  return static_cast<int>(budget >= max - kHeaders ? max : budget + kHeaders);
}

uint64_t ProcessConsumerInstance() {
  static const uint64_t instance = RandomConsumerId();
  return instance;
}

std::shared_ptr<grpc::Channel> LimitedChannel(const std::string& address,
                                              const ChannelLimits& limits) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  ApplyChannelLimits(limits, &args);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::shared_ptr<grpc::Channel> DefaultChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each consumer gets its own connection rather than one shared by the whole process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A restarted coordinator or worker is reached again within a second (core/rpc/grpc_security.h).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

namespace {

// The spec calls ask for compact headers with: the per-replica spec's leaves, unless the
// options say no or a leaf has no dtype (a worker would refuse that spec).
std::shared_ptr<const CompactSpec> CompactSpecFor(const ServiceStepSourceOptions& options) {
  if (!options.compact_headers) return nullptr;
  CompactSpec spec = CompactSpec::FromElementSpec(options.per_replica_spec);
  for (const TensorSpec& leaf : spec.leaves()) {
    if (leaf.dtype == DType::kInvalid) return nullptr;
  }
  return std::make_shared<const CompactSpec>(std::move(spec));
}

// The options with an allocator: without one, every call of this consumer shares one pool of
// idle receive buffers (kDefaultIdleHostBytes and a quarter of the receive budget at most, or
// as much as keeps the buffers idle and out within the budget), so that the memory they keep
// does not grow with the number of workers (a pool per call kept up to 16 MiB for each of them).
ServiceStepSourceOptions WithSharedAllocator(ServiceStepSourceOptions options) {
  if (!options.allocator) {
    const size_t budget = static_cast<size_t>(std::max<int64_t>(options.receive_budget_bytes, 0));
    options.allocator = PooledHostAllocator(std::min(kDefaultIdleHostBytes, budget / 4), budget);
  }
  return options;
}

}  // namespace

TaskStreams::TaskStreams(ServiceStepSourceOptions options)
    : view_received_slices_(options.view_received_slices && !options.allocator),
      options_(WithSharedAllocator(std::move(options))),
      compact_spec_(CompactSpecFor(options_)),
      consumer_id_(RandomConsumerId()),
      consumer_instance_(options_.consumer_instance != 0 ? options_.consumer_instance
                                                         : ProcessConsumerInstance()),
      boot_id_(options_.shared_memory ? HostBootId() : std::string()),
      random_(options_.random ? options_.random : EntropyRandomSource()) {
  coordinator_ = proto::CoordinatorService::NewStub(NewChannel(options_.coordinator_address));
}

std::shared_ptr<grpc::Channel> TaskStreams::NewChannel(const std::string& address) const {
  if (options_.channel_factory) return options_.channel_factory(address);
  ChannelLimits limits;
  limits.max_receive_message_bytes = ReceiveLimit();
  limits.keepalive_time = options_.keepalive_time;
  limits.keepalive_timeout = options_.keepalive_timeout;
  return LimitedChannel(address, limits);
}

int TaskStreams::ReceiveLimit() const {
  return options_.max_receive_message_bytes > 0
             ? options_.max_receive_message_bytes
             : ReceiveLimitBytes(options_.receive_budget_bytes);
}

TaskStreams::~TaskStreams() { Shutdown(); }

absl::Status TaskStreams::Start(ReadOrder* order) {
  order_ = order;
  const std::string job = absl::StrCat("job ", options_.job_id, "'s ");
  ASSIGN_OR_RETURN(monitor_, StartThread(job + "stream monitor", [this] { Monitor(); }));
  ASSIGN_OR_RETURN(credit_thread_, StartThread(job + "credit sender", [this] { CreditLoop(); }));
  ASSIGN_OR_RETURN(connector_, StartThread(job + "stream connector", [this] { ConnectLoop(); }));
  return absl::OkStatus();
}

bool TaskStreams::HasUnreportedEnds() const {
  absl::MutexLock lock(&mu_);
  return !completed_.empty();
}

std::shared_ptr<grpc::Channel> TaskStreams::ChannelTo(const std::string& address) {
  absl::MutexLock lock(&channels_mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  auto channel = NewChannel(address);
  channels_[address] = channel;
  return channel;
}

absl::StatusOr<proto::ClientHeartbeatResponse> TaskStreams::Heartbeat(
    std::optional<absl::Duration> deadline) {
  proto::ClientHeartbeatRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_job_id(options_.job_id);
  request.set_consumer_index(options_.consumer_index);
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : completed_) request.add_completed_task_ids(id);
    if (consumer_secret_ == 0) {
      consumer_secret_ = ProcessConsumerSecrets::Get().Find(
          options_.coordinator_address, options_.job_id, options_.consumer_index);
    }
    request.set_consumer_secret(consumer_secret_);
  }
  view_.FillRequest(&request);
  {
    // A report lost with a failed call is gone: the next one covers a new interval.
    const InputWaitMeter::Report wait = wait_meter_.TakeReport();
    request.set_input_wait_us(wait.wait_us);
    request.set_steps_consumed(wait.steps);
    request.set_report_interval_us(wait.interval_us);
  }
  grpc::ClientContext context;
  const absl::Duration timeout = deadline.value_or(options_.rpc_deadline);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  proto::ClientHeartbeatResponse response;
  absl::Status s = FromGrpcStatus(coordinator_->ClientHeartbeat(&context, request, &response));
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("ClientHeartbeat to coordinator ",
                                               options_.coordinator_address, ": ", s.message()));
  }
  if (response.consumer_secret() != 0) {
    {
      absl::MutexLock lock(&mu_);
      consumer_secret_ = response.consumer_secret();
    }
    ProcessConsumerSecrets::Get().Set(options_.coordinator_address, options_.job_id,
                                      options_.consumer_index, response.consumer_secret());
  }
  return view_.Apply(response);
}

TaskStream* TaskStreams::AddTaskLocked(int64_t task_id, int64_t task_index) {
  auto task = std::make_shared<TaskStream>();
  task->task_id = task_id;
  task->task_index = task_index;
  task->backoff = std::make_unique<Backoff>(absl::Milliseconds(20), absl::Seconds(1));
  task->last_progress = absl::Now();
  task->connect_wanted = true;
  connecting_.push_back(task);
  connector_cv_.Signal();
  TaskStream* t = task.get();
  tasks_[task_id] = std::move(task);
  return t;
}

std::vector<TaskStream*> TaskStreams::AddAllTasksLocked(
    const proto::ClientHeartbeatResponse& response) {
  std::vector<proto::TaskInfo> infos(response.tasks().begin(), response.tasks().end());
  std::sort(infos.begin(), infos.end(), [](const proto::TaskInfo& a, const proto::TaskInfo& b) {
    return a.task_index() < b.task_index();
  });
  std::vector<TaskStream*> added;
  for (const proto::TaskInfo& info : infos) {
    added.push_back(AddTaskLocked(info.task_id(), info.task_index()));
  }
  return added;
}

bool TaskStreams::HasTaskLocked(int64_t task_id) const { return tasks_.contains(task_id); }

void TaskStreams::RetireLocked(TaskStream* task) {
  auto owned = tasks_.find(task->task_id);
  retired_.push_back(std::move(owned->second));
  tasks_.erase(owned);
}

void TaskStreams::DropDoneRetiredLocked() {
  // A call may still wait for the status of a worker frozen after sending the end: its task
  // stays retired (the monitor cancels the call after end_grace, Shutdown before it returns).
  std::erase_if(retired_, [](const std::shared_ptr<TaskStream>& t) { return t->done; });
}

void TaskStreams::WakeMonitorLocked() {
  monitor_wanted_ = true;
  monitor_cv_.Signal();
}

absl::Duration TaskStreams::NextHeartbeatWait() {
  absl::MutexLock lock(&mu_);
  return Jittered(options_.heartbeat_interval, options_.heartbeat_jitter, random_);
}

void TaskStreams::Monitor() {
  while (true) {
    const absl::Duration wait = NextHeartbeatWait();
    {
      absl::MutexLock lock(&mu_);
      const absl::Time until = absl::Now() + wait;
      while (!shutdown_ && !monitor_wanted_ && absl::Now() < until) {
        monitor_cv_.WaitWithDeadline(&mu_, until);
      }
      if (shutdown_) return;
      monitor_wanted_ = false;
    }
    CancelEndedCalls(absl::Now());
    const absl::Time sent = absl::Now();
    absl::StatusOr<proto::ClientHeartbeatResponse> hb = Heartbeat();
    if (hb.ok()) {
      OnHeartbeat(*hb, sent);
    } else if (!Retryable(hb.status())) {
      // The job is gone (finished and removed, or unknown): a RANGES reader waiting for its
      // next task would wait forever. Readers of open tasks report their own errors.
      absl::MutexLock lock(&mu_);
      if (monitor_error_.ok()) monitor_error_ = hb.status();
      cv_.SignalAll();
    }
  }
}

void TaskStreams::CancelEndedCalls(absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto cancel = [&](TaskStream& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (task.call != nullptr && now - task.end_received > options_.end_grace) {
      task.call->CancelLocked();
    }
  };
  for (auto& [id, task] : tasks_) cancel(*task);
  for (auto& task : retired_) cancel(*task);
}

void TaskStreams::OnHeartbeat(const proto::ClientHeartbeatResponse& response,
                              absl::Time sent) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  if (order_ != nullptr) order_->OnHeartbeatLocked(response);
  // Reported ends the coordinator has taken: the task is no longer listed as unfinished.
  absl::flat_hash_set<int64_t> unfinished;
  for (const proto::TaskInfo& info : response.tasks()) {
    if (!info.finished()) unfinished.insert(info.task_id());
  }
  absl::erase_if(completed_, [&](int64_t id) { return !unfinished.contains(id); });
  for (const proto::TaskInfo& info : response.tasks()) {
    auto it = tasks_.find(info.task_id());
    if (it == tasks_.end() || info.worker_address().empty()) continue;
    TaskStream& task = *it->second;
    // Only a heartbeat sent after the stream opened can say the stream is on the wrong worker.
    // A call whose end arrived is left to finish: cancelling it would lose the worker's count
    // of this consumer's end (see Shutdown).
    if (task.call != nullptr && task.address != info.worker_address() && sent > task.opened &&
        task.end_received == absl::InfiniteFuture()) {
      task.call->CancelLocked();
    }
  }
}

void TaskStreams::Shutdown() {
  if (joined_) return;
  joined_ = true;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    cv_.SignalAll();
    monitor_cv_.SignalAll();
    credit_cv_.SignalAll();
    connector_cv_.SignalAll();
  }
  if (monitor_.joinable()) monitor_.join();
  // No call is opened after this: every call there will be has its task's call slot set.
  if (connector_.joinable()) connector_.join();
  {
    absl::MutexLock lock(&mu_);
    std::vector<TaskStream*> all;
    for (auto& [id, task] : tasks_) all.push_back(task.get());
    for (auto& task : retired_) all.push_back(task.get());
    // A call whose end arrived has half-closed and waits for the worker's status: let it
    // finish (until end_grace after the end, as the monitor would) before cancelling. The
    // worker counts this consumer's end only when it sees the half-close on a call not
    // cancelled, and that count is what lets it report the task finished when the coordinator
    // cannot hear it from this consumer (the coordinator is down now and this process is about
    // to exit). Each call's OnDone signals cv_.
    while (true) {
      const absl::Time now = absl::Now();
      absl::Time next = absl::InfiniteFuture();
      for (TaskStream* task : all) {
        if (task->call == nullptr || task->end_received == absl::InfiniteFuture()) continue;
        const absl::Time until = task->end_received + options_.end_grace;
        if (until > now) next = std::min(next, until);
      }
      if (next == absl::InfiniteFuture()) break;
      cv_.WaitWithDeadline(&mu_, next);
    }
    for (TaskStream* task : all) {
      if (task->call != nullptr) task->call->CancelLocked();
    }
  }
  // Every call reaches OnDone (a cancelled one promptly); none may outlive this object.
  {
    std::unique_lock<std::mutex> lock(live_mu_);
    live_cv_.wait(lock, [this] { return live_calls_ == 0; });
  }
  if (credit_thread_.joinable()) credit_thread_.join();
}

void TaskStreams::CallGone() {
  std::lock_guard<std::mutex> lock(live_mu_);
  --live_calls_;
  live_cv_.notify_all();  // under the lock: the waiter may destroy it once it sees zero
}

std::string TaskStreams::TaskName(const TaskStream& task) const {
  return absl::StrCat("task ", task.task_id, " (index ", task.task_index, ") of job ",
                      options_.job_id);
}

void TaskStreams::FailLocked(TaskStream* task, absl::Status s) {
  task->error = std::move(s);
  task->done = true;
  cv_.SignalAll();
}

absl::Status TaskStreams::NoProgressErrorLocked(const TaskStream& task) const {
  return absl::UnavailableError(absl::StrCat(
      TaskName(task), ": no progress for ", absl::FormatDuration(options_.retry_deadline),
      task.last_address.empty() ? std::string()
                                : absl::StrCat("; worker ", task.last_address, " unavailable"),
      ": ", task.last_error.message()));
}

void TaskStreams::RetryLaterLocked(const std::shared_ptr<TaskStream>& task) {
  const absl::Time now = absl::Now();
  const bool past_deadline = now - task->last_progress > options_.retry_deadline;
  if (past_deadline && task->last_ask) return FailLocked(task.get(), NoProgressErrorLocked(*task));
  task->last_ask = past_deadline;
  task->connect_wanted = true;
  task->connect_at = past_deadline ? now : now + task->backoff->Next();
  connecting_.push_back(task);
  connector_cv_.Signal();
}

void TaskStreams::ConnectLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    std::vector<std::shared_ptr<TaskStream>> due;
    std::vector<std::shared_ptr<TaskStream>> later;
    for (auto& task : connecting_) {
      if (task->connect_at <= now) {
        task->connect_wanted = false;
        due.push_back(std::move(task));
      } else {
        next = std::min(next, task->connect_at);
        later.push_back(std::move(task));
      }
    }
    connecting_.swap(later);
    if (due.empty()) {
      connector_cv_.WaitWithDeadline(&mu_, next);
      continue;
    }
    // One heartbeat, with no lock held, tells every due task where its worker is.
    mu_.Unlock();
    absl::StatusOr<proto::ClientHeartbeatResponse> hb = Heartbeat();
    for (auto& task : due) ConnectTask(task, hb);
    mu_.Lock();
  }
}

void TaskStreams::ConnectTask(const std::shared_ptr<TaskStream>& task,
                              const absl::StatusOr<proto::ClientHeartbeatResponse>& hb) {
  std::string address;
  absl::Status attempt;
  if (hb.ok()) {
    bool found = false;
    for (const proto::TaskInfo& info : hb->tasks()) {
      if (info.task_id() != task->task_id) continue;
      found = true;
      address = info.worker_address();
    }
    if (!found) {
      absl::MutexLock lock(&mu_);
      return FailLocked(task.get(), absl::NotFoundError(absl::StrCat(
                                        TaskName(*task), ": the coordinator ",
                                        options_.coordinator_address,
                                        " no longer lists the task")));
    }
    if (address.empty()) attempt = absl::UnavailableError("the task has no worker yet");
  } else if (!Retryable(hb.status())) {
    absl::MutexLock lock(&mu_);
    return FailLocked(task.get(), hb.status());
  } else {
    attempt = hb.status();
  }
  std::shared_ptr<grpc::Channel> channel;
  if (!address.empty()) channel = ChannelTo(address);
  absl::MutexLock lock(&mu_);
  if (shutdown_) {
    task->done = true;
    cv_.SignalAll();
    return;
  }
  if (address.empty()) {
    task->last_error = attempt;
    return RetryLaterLocked(task);
  }
  // The coordinator still places the task, and the job has not failed: no more tries.
  if (task->last_ask) return FailLocked(task.get(), NoProgressErrorLocked(*task));
  proto::ConsumerMessage first;
  proto::StreamRequest* request = first.mutable_request();
  request->set_wire_version(proto::WIRE_VERSION_2);
  request->set_job_id(options_.job_id);
  request->set_task_id(task->task_id);
  request->set_consumer_index(options_.consumer_index);
  request->set_start_step(task->next_step);
  // The new call's credit: the window less what this task already holds (an earlier call's
  // steps not consumed yet); an earlier call's unused credit is gone with it.
  const int64_t initial = std::max<int64_t>(window_ - task->held, 0);
  request->set_initial_credit_bytes(initial);
  // Not window_ itself: the worker sends a step larger than its credit only at window_ + 1
  // (CreditForAnyStep of this), a credit only a raise reaches (see task_streams.h).
  request->set_window_bytes(any_step_window_);
  // Independent reads: next_step counts the steps received, and the id lets the worker send
  // again what an earlier call sent and this consumer did not receive.
  if (options_.independent) request->set_consumer_id(consumer_id_);
  if (!options_.trainer_id.empty()) request->set_trainer_id(options_.trainer_id);
  // Another process claiming this consumer_index is refused by the worker.
  request->set_consumer_instance(consumer_instance_);
  if (!boot_id_.empty()) {
    // Warm segments: this process's key, and the segments of this worker it may hand back.
    proto::ShmOffer* offer = request->mutable_shm_offer();
    offer->set_boot_id(boot_id_);
    ShmMappingCache& mappings = ProcessShmMappingCache();
    offer->set_consumer_key(mappings.consumer_key());
    for (uint64_t id : mappings.IdleIds(address)) offer->add_idle_segment_ids(id);
  }
  if (options_.bulk_data && !bulk_unreachable_.contains(address)) {
    request->mutable_bulk_offer()->set_enabled(true);
    request->mutable_bulk_offer()->set_inband_headers(options_.bulk_inband_headers &&
                                                      BulkInbandHeadersFromEnvironment());
  }
  if (compact_spec_ != nullptr) {
    request->set_compact_headers(true);
    compact_spec_->ToProto(request->mutable_compact_spec());
  }
  // This consumer decodes every codec; the worker uses the job's (if any) when it is remote.
  if (options_.accept_compression) {
    request->add_accepted_compression(proto::WIRE_COMPRESSION_LZ4);
    request->add_accepted_compression(proto::WIRE_COMPRESSION_ZSTD);
  }
  {
    std::lock_guard<std::mutex> live(live_mu_);
    ++live_calls_;
  }
  auto* call = new TaskStreamCall(this, task, std::move(channel), address);
  SetOutstandingLocked(task.get(), initial);
  task->calling = true;
  task->raised = false;
  task->call = call;
  task->address = address;
  task->opened = absl::Now();
  task->end_received = absl::InfiniteFuture();
  call->StartLocked(first);
}

}  // namespace sluice
