#include "client/task_streams.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/read_order.h"
#include "core/rpc/grpc_security.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/step_frame.h"
#include "core/util/backoff.h"
#include "core/util/transient_error.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/worker.pb.h"

namespace sluice {
namespace {

constexpr char kStreamStepsMethod[] = "/sluice.proto.WorkerService/StreamSteps";

using Stream = TaskStream::Stream;

uint64_t RandomConsumerId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

// The task's call has returned (its status arrived, or it was cancelled).
bool CallDone(TaskStream* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(task->call_mu) {
  return task->context == nullptr;
}

}  // namespace

bool Retryable(const absl::Status& s) { return IsTransientTaskError(s.code()); }

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

TaskStreams::TaskStreams(ServiceStepSourceOptions options)
    : options_(std::move(options)), consumer_id_(RandomConsumerId()),
      random_(options_.random ? options_.random : EntropyRandomSource()) {
  coordinator_ = proto::CoordinatorService::NewStub(
      options_.channel_factory ? options_.channel_factory(options_.coordinator_address)
                               : DefaultChannel(options_.coordinator_address));
}

TaskStreams::~TaskStreams() { Shutdown(); }

void TaskStreams::Start(ReadOrder* order) {
  order_ = order;
  monitor_ = std::thread([this] { Monitor(); });
  credit_thread_ = std::thread([this] { CreditLoop(); });
}

bool TaskStreams::HasUnreportedEnds() const {
  absl::MutexLock lock(&mu_);
  return !completed_.empty();
}

std::shared_ptr<grpc::Channel> TaskStreams::ChannelTo(const std::string& address) {
  absl::MutexLock lock(&channels_mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  auto channel = options_.channel_factory ? options_.channel_factory(address)
                                          : DefaultChannel(address);
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
  }
  view_.FillRequest(&request);
  grpc::ClientContext context;
  const absl::Duration timeout = deadline.value_or(options_.rpc_deadline);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  proto::ClientHeartbeatResponse response;
  absl::Status s = FromGrpcStatus(coordinator_->ClientHeartbeat(&context, request, &response));
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("ClientHeartbeat to coordinator ",
                                               options_.coordinator_address, ": ", s.message()));
  }
  return view_.Apply(response);
}

TaskStream* TaskStreams::AddTaskLocked(int64_t task_id, int64_t task_index) {
  auto task = std::make_shared<TaskStream>();
  task->task_id = task_id;
  task->task_index = task_index;
  TaskStream* t = task.get();
  tasks_[task_id] = std::move(task);
  t->reader = std::thread([this, t] {
    ReadTask(t);
    absl::MutexLock lock(&mu_);
    t->reader_done = true;
  });
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

std::vector<std::shared_ptr<TaskStream>> TaskStreams::TakeReturnedRetiredLocked() {
  // A reader may still wait for the status of a worker frozen after sending the end: it stays
  // retired (the monitor cancels it after end_grace, Shutdown joins it).
  std::vector<std::shared_ptr<TaskStream>> returned;
  std::vector<std::shared_ptr<TaskStream>> waiting;
  for (auto& task : retired_) {
    (task->reader_done ? returned : waiting).push_back(std::move(task));
  }
  retired_.swap(waiting);
  return returned;
}

void TaskStreams::JoinReaders(const std::vector<std::shared_ptr<TaskStream>>& tasks) {
  for (auto& task : tasks) {
    if (task->reader.joinable()) task->reader.join();
  }
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
  std::vector<std::shared_ptr<TaskStream>> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, task] : tasks_) all.push_back(task);
    all.insert(all.end(), retired_.begin(), retired_.end());
  }
  for (auto& task : all) {
    absl::MutexLock clock(&task->call_mu);
    if (task->context != nullptr && now - task->end_received > options_.end_grace) {
      task->context->TryCancel();
    }
  }
}

void TaskStreams::OnHeartbeat(const proto::ClientHeartbeatResponse& response,
                              absl::Time sent) {
  // Open tasks and where they are now. Owned here too: once the lock is released the caller
  // may retire a task (read to its end) and free it.
  std::vector<std::pair<std::shared_ptr<TaskStream>, std::string>> placed;
  {
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
      placed.emplace_back(it->second, info.worker_address());
    }
  }
  for (auto& [task, address] : placed) {
    absl::MutexLock clock(&task->call_mu);
    // Only a heartbeat sent after the stream opened can say the stream is on the wrong worker.
    // A call whose end arrived is left to finish: cancelling it would lose the worker's count
    // of this consumer's end (see Shutdown).
    if (task->context != nullptr && task->address != address && sent > task->opened &&
        task->end_received == absl::InfiniteFuture()) {
      task->context->TryCancel();
    }
  }
}

void TaskStreams::Shutdown() {
  if (joined_) return;
  joined_ = true;
  std::vector<TaskStream*> all;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    cv_.SignalAll();
    monitor_cv_.SignalAll();
    credit_cv_.SignalAll();
    for (auto& [id, task] : tasks_) all.push_back(task.get());
    for (auto& task : retired_) all.push_back(task.get());
  }
  if (monitor_.joinable()) monitor_.join();
  // No task is added after shutdown_: `all` is complete.
  // A call whose end arrived has half-closed and waits for the worker's status: let it finish
  // (until end_grace after the end, as the monitor would) before cancelling. The worker counts
  // this consumer's end only when it sees the half-close on a call not cancelled, and that
  // count is what lets it report the task finished when the coordinator cannot hear it from
  // this consumer (the coordinator is down now and this process is about to exit).
  for (TaskStream* task : all) {
    absl::MutexLock lock(&task->call_mu);
    if (task->context == nullptr || task->end_received == absl::InfiniteFuture()) continue;
    task->call_mu.AwaitWithDeadline(absl::Condition(&CallDone, task),
                                    task->end_received + options_.end_grace);
  }
  for (TaskStream* task : all) {
    absl::MutexLock lock(&task->call_mu);
    if (task->context != nullptr) task->context->TryCancel();
  }
  for (TaskStream* task : all) {
    if (task->reader.joinable()) task->reader.join();
  }
  if (credit_thread_.joinable()) credit_thread_.join();
}

void TaskStreams::ReadTask(TaskStream* task) {
  const std::string name = absl::StrCat("task ", task->task_id, " (index ", task->task_index,
                                        ") of job ", options_.job_id);
  absl::Time last_progress = absl::Now();
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  absl::Status last_error;
  std::string last_address;
  auto fail = [&](absl::Status s) {
    absl::MutexLock lock(&mu_);
    task->error = std::move(s);
    cv_.SignalAll();
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
    }
    std::string address;
    absl::StatusOr<proto::ClientHeartbeatResponse> hb = Heartbeat();
    if (hb.ok()) {
      bool found = false;
      for (const proto::TaskInfo& info : hb->tasks()) {
        if (info.task_id() != task->task_id) continue;
        found = true;
        address = info.worker_address();
      }
      if (!found) {
        return fail(absl::NotFoundError(
            absl::StrCat(name, ": the coordinator ", options_.coordinator_address,
                         " no longer lists the task")));
      }
      if (address.empty()) last_error = absl::UnavailableError("the task has no worker yet");
    } else if (!Retryable(hb.status())) {
      return fail(hb.status());
    } else {
      last_error = hb.status();
    }
    if (!address.empty()) {
      bool progress = false;
      absl::Status s = StreamOnce(task, address, &progress);
      if (progress) {
        last_progress = absl::Now();
        backoff.Reset();
      }
      if (s.ok()) return;  // the end of the task
      {
        absl::MutexLock lock(&mu_);
        if (shutdown_) return;
      }
      if (!Retryable(s)) {
        return fail(absl::Status(s.code(), absl::StrCat(name, " on worker ", address, ": ",
                                                        s.message())));
      }
      last_error = s;
      last_address = address;
    }
    if (absl::Now() - last_progress > options_.retry_deadline) {
      return fail(absl::UnavailableError(absl::StrCat(
          name, ": no progress for ", absl::FormatDuration(options_.retry_deadline),
          last_address.empty() ? std::string()
                               : absl::StrCat("; worker ", last_address, " unavailable"),
          ": ", last_error.message())));
    }
    absl::MutexLock lock(&mu_);
    const absl::Time until = absl::Now() + backoff.Next();
    while (!shutdown_ && absl::Now() < until) cv_.WaitWithDeadline(&mu_, until);
  }
}

absl::Status TaskStreams::StreamOnce(TaskStream* task, const std::string& address,
                                     bool* progress) {
  std::shared_ptr<grpc::Channel> channel = ChannelTo(address);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream(grpc::internal::ClientReaderWriterFactory<
                                 grpc::ByteBuffer, grpc::ByteBuffer>::
                                     Create(channel.get(),
                                            grpc::internal::RpcMethod(
                                                kStreamStepsMethod,
                                                grpc::internal::RpcMethod::BIDI_STREAMING,
                                                channel),
                                            &context));
  proto::ConsumerMessage first;
  proto::StreamRequest* request = first.mutable_request();
  request->set_wire_version(proto::WIRE_VERSION_2);
  request->set_job_id(options_.job_id);
  request->set_task_id(task->task_id);
  request->set_consumer_index(options_.consumer_index);
  {
    // shutdown_ is checked with the context registered: the destructor cancels it, or this
    // call does not start.
    absl::MutexLock wlock(&task->write_mu);
    absl::MutexLock clock(&task->call_mu);
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::CancelledError("shutting down");
    request->set_start_step(task->next_step);
    // The new call's credit: the window less what this task already holds (an earlier call's
    // steps not consumed yet); an earlier call's unused credit is gone with it.
    const int64_t initial = std::max<int64_t>(window_ - task->held, 0);
    request->set_initial_credit_bytes(initial);
    request->set_window_bytes(window_);
    // Independent reads: next_step counts the steps received, and the id lets the worker send
    // again what an earlier call sent and this consumer did not receive.
    if (options_.independent) request->set_consumer_id(consumer_id_);
    SetOutstandingLocked(task, initial);
    task->calling = true;
    task->context = &context;
    task->stream = stream.get();
    task->address = address;
    task->opened = absl::Now();
    task->end_received = absl::InfiniteFuture();
  }
  bool sent;
  {
    absl::MutexLock wlock(&task->write_mu);
    sent = stream->Write(EncodeConsumerMessage(first));
  }

  // Until a frame says otherwise: the stream ended early (no end, no error from the worker).
  absl::Status result = absl::UnavailableError("the stream ended before the end of the task");
  bool ended_early = true;
  bool ended = false;
  grpc::ByteBuffer bb;
  while (sent && stream->Read(&bb)) {
    StepFrame frame;
    absl::Status s = DecodeStepFrame(bb, options_.allocator, &frame);
    if (s.ok() && frame.end_of_task && frame.status.ok()) {
      // Noted before the end is handed to the consumer: from then on the trainer may finish
      // and shut down at once, and Shutdown (like a heartbeat) must already see a call whose
      // end arrived, to let it finish instead of cancelling it (the worker counts this
      // consumer's end only on the uncancelled half-close that follows).
      absl::MutexLock clock(&task->call_mu);
      task->end_received = absl::Now();
    }
    std::vector<TaskStream::Queued> steps;
    absl::MutexLock lock(&mu_);
    int64_t expected = task->next_step;
    for (WireStep& w : frame.steps) {
      if (!s.ok()) break;
      if (!options_.independent && w.task_step != expected) {
        s = absl::DataLossError(absl::StrCat("expected task step ", expected, ", received ",
                                             w.task_step));
        break;
      }
      if (static_cast<int64_t>(w.pieces.size()) != options_.num_local_replicas) {
        s = absl::DataLossError(absl::StrCat("task step ", w.task_step, " has ",
                                             w.pieces.size(), " pieces for ",
                                             options_.num_local_replicas, " local replicas"));
        break;
      }
      TaskStream::Queued step;
      step.cost = static_cast<int64_t>(StepCreditBytes(w));
      std::vector<Element>& replicas = step.replicas;
      for (std::vector<Tensor>& leaves : w.pieces) {
        absl::StatusOr<Element> e = Element::Pack(options_.per_replica_spec, std::move(leaves));
        if (!e.ok()) {
          s = absl::DataLossError(absl::StrCat("task step ", w.task_step, ": ",
                                               e.status().message()));
          break;
        }
        replicas.push_back(*std::move(e));
      }
      if (!s.ok()) break;
      steps.push_back(std::move(step));
      ++expected;
    }
    if (!s.ok()) {
      result = s;
      ended_early = false;
      break;
    }
    for (auto& step : steps) {
      ReceivedLocked(task, step.cost);
      task->queue.push_back(std::move(step));
    }
    if (!steps.empty()) *progress = true;
    task->next_step = expected;
    if (!frame.status.ok()) {
      result = frame.status;
      ended_early = false;
      cv_.SignalAll();
      break;
    }
    if (frame.end_of_task) {
      task->ended = true;
      completed_.insert(task->task_id);
      ended = true;
      result = absl::OkStatus();
      cv_.SignalAll();
      break;
    }
    cv_.SignalAll();
  }
  {
    absl::MutexLock wlock(&task->write_mu);
    task->stream = nullptr;  // no more credit grants on this call
    {
      absl::MutexLock lock(&mu_);
      task->calling = false;
      SetOutstandingLocked(task, 0);  // nothing more arrives on this call
    }
    if (ended || !result.ok()) {
      if (!ended && result.code() == absl::StatusCode::kDataLoss) context.TryCancel();
      stream->WritesDone();
    }
  }
  // Waits for the worker's status with no lock held: a worker frozen after sending the end
  // (SIGSTOP) never sends it, and only a cancel (the monitor's, end_grace after the end, or the
  // destructor's) ends this wait. The steps and the end are already queued: the caller does not
  // wait for this (NextStep joins only readers that have returned).
  absl::Status finish = FromGrpcStatus(stream->Finish());
  {
    absl::MutexLock clock(&task->call_mu);
    task->context = nullptr;
  }
  if (ended) return absl::OkStatus();
  // A failure the worker reported in a frame (or a bad frame) is more telling than the call's
  // status; a stream that just ended is explained by the call's status, if it has one.
  if (!ended_early) return result;
  return finish.ok() ? result : finish;
}

}  // namespace sluice
