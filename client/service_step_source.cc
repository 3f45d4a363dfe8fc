#include "client/service_step_source.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rpc/grpc_status.h"
#include "core/util/backoff.h"
#include "core/util/status_macros.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/worker.pb.h"

namespace sluice {
namespace {

constexpr char kStreamStepsMethod[] = "/sluice.proto.WorkerService/StreamSteps";

using Stream = grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kAborted ||
         s.code() == absl::StatusCode::kCancelled ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

std::shared_ptr<grpc::Channel> DefaultChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each consumer gets its own connection rather than one shared by the whole process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

struct ServiceStepSource::Task {
  int64_t task_id = 0;
  int64_t task_index = 0;
  std::thread reader;

  // Guarded by the source's mu_.
  struct Queued {
    std::vector<Element> replicas;
    int64_t cost = 0;  // StepCreditBytes
  };
  std::deque<Queued> queue;
  bool ended = false;
  absl::Status error;
  int64_t next_step = 0;  // the first task step not received yet
  // Flow control (bytes, see StepCreditBytes): the cost of the queued steps, and the credit
  // granted on the current call that its steps have not used yet (negative after a step larger
  // than the credit). `calling`: the call takes credit grants (Task::stream is set).
  int64_t held = 0;
  int64_t outstanding = 0;
  bool calling = false;
  bool reader_done = false;  // the reader thread has returned: joining it does not wait

  // The current call, for cancelling: where and when it was opened (the monitor cancels it
  // when a later heartbeat places the task elsewhere) and when its end of task arrived (the
  // monitor cancels a call still waiting for the worker's status end_grace later). call_mu is
  // never held across a blocking gRPC call, so cancelling never waits for a stuck call: a call
  // to a frozen worker (SIGSTOP: no TCP error) blocks until it is cancelled.
  absl::Mutex call_mu;
  grpc::ClientContext* context ABSL_GUARDED_BY(call_mu) = nullptr;
  std::string address ABSL_GUARDED_BY(call_mu);
  absl::Time opened ABSL_GUARDED_BY(call_mu);
  absl::Time end_received ABSL_GUARDED_BY(call_mu) = absl::InfiniteFuture();

  // Serializes the call's writes (the request, credit grants, the half-close).
  // Lock order: write_mu, call_mu, the source's mu_.
  absl::Mutex write_mu;
  Stream* stream ABSL_GUARDED_BY(write_mu) = nullptr;  // null once writes are done
};

namespace {

uint64_t RandomConsumerId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

}  // namespace

ServiceStepSource::ServiceStepSource(ServiceStepSourceOptions options)
    : options_(std::move(options)), consumer_id_(RandomConsumerId()) {}

std::shared_ptr<grpc::Channel> ServiceStepSource::ChannelTo(const std::string& address) {
  absl::MutexLock lock(&channels_mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  auto channel = options_.channel_factory ? options_.channel_factory(address)
                                          : DefaultChannel(address);
  channels_[address] = channel;
  return channel;
}

absl::StatusOr<proto::ClientHeartbeatResponse> ServiceStepSource::Heartbeat(
    std::optional<absl::Duration> deadline) {
  proto::ClientHeartbeatRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_job_id(options_.job_id);
  request.set_consumer_index(options_.consumer_index);
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : completed_) request.add_completed_task_ids(id);
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
  return response;
}

absl::StatusOr<std::unique_ptr<ServiceStepSource>> ServiceStepSource::Create(
    ServiceStepSourceOptions options) {
  if (options.num_local_replicas < 1 || options.receive_budget_bytes < 1) {
    return absl::InvalidArgumentError(
        "ServiceStepSource: num_local_replicas and receive_budget_bytes must be positive");
  }
  std::unique_ptr<ServiceStepSource> source(new ServiceStepSource(std::move(options)));
  const ServiceStepSourceOptions& o = source->options_;
  source->coordinator_ = proto::CoordinatorService::NewStub(
      o.channel_factory ? o.channel_factory(o.coordinator_address)
                        : DefaultChannel(o.coordinator_address));
  const absl::Time give_up = absl::Now() + o.retry_deadline;
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  proto::ClientHeartbeatResponse tasks;
  while (true) {
    absl::StatusOr<proto::ClientHeartbeatResponse> hb = source->Heartbeat();
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
    const int64_t streams =
        o.sequential ? std::min<int64_t>(o.max_open_tasks, std::max<int64_t>(tasks.num_tasks(), 1))
                     : std::max<int64_t>(tasks.tasks_size(), 1);
    source->window_ = std::max<int64_t>(o.receive_budget_bytes / std::max<int64_t>(streams, 1), 1);
  }
  {
    absl::MutexLock lock(&source->mu_);
    if (o.sequential) {
      source->num_tasks_ = tasks.num_tasks();
    } else {
      std::vector<proto::TaskInfo> infos(tasks.tasks().begin(), tasks.tasks().end());
      std::sort(infos.begin(), infos.end(),
                [](const proto::TaskInfo& a, const proto::TaskInfo& b) {
                  return a.task_index() < b.task_index();
                });
      for (const proto::TaskInfo& info : infos) {
        source->rotation_.push_back(source->AddTaskLocked(info.task_id(), info.task_index()));
      }
    }
  }
  if (o.sequential) source->OnHeartbeat(tasks, absl::Now());
  ServiceStepSource* raw = source.get();
  source->monitor_ = std::thread([raw] { raw->Monitor(); });
  source->credit_thread_ = std::thread([raw] { raw->CreditLoop(); });
  return source;
}

ServiceStepSource::Task* ServiceStepSource::AddTaskLocked(int64_t task_id, int64_t task_index) {
  auto task = std::make_shared<Task>();
  task->task_id = task_id;
  task->task_index = task_index;
  Task* t = task.get();
  tasks_[task_id] = std::move(task);
  t->reader = std::thread([this, t] {
    ReadTask(t);
    absl::MutexLock lock(&mu_);
    t->reader_done = true;
  });
  return t;
}

void ServiceStepSource::Monitor() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time until = absl::Now() + options_.heartbeat_interval;
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
      // The job is gone (finished and removed, or unknown): a sequential reader waiting for
      // its next task would wait forever. Readers of open tasks report their own errors.
      absl::MutexLock lock(&mu_);
      if (monitor_error_.ok()) monitor_error_ = hb.status();
      cv_.SignalAll();
    }
  }
}

void ServiceStepSource::CancelEndedCalls(absl::Time now) {
  std::vector<std::shared_ptr<Task>> all;
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

void ServiceStepSource::OnHeartbeat(const proto::ClientHeartbeatResponse& response,
                                    absl::Time sent) {
  // Open tasks and where they are now. Owned here too: once the lock is released the caller
  // may retire a task (read to its end) and free it.
  std::vector<std::pair<std::shared_ptr<Task>, std::string>> placed;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    if (options_.sequential) {
      num_tasks_ = response.num_tasks();
      for (const proto::TaskInfo& info : response.tasks()) {
        const int64_t index = info.task_index();
        if (index < next_index_ || index >= next_index_ + options_.max_open_tasks ||
            tasks_.contains(info.task_id())) {
          continue;
        }
        by_index_[index] = AddTaskLocked(info.task_id(), index);
      }
      cv_.SignalAll();
    }
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
    if (task->context != nullptr && task->address != address && sent > task->opened) {
      task->context->TryCancel();
    }
  }
}

ServiceStepSource::~ServiceStepSource() {
  std::vector<Task*> all;
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
  for (Task* task : all) {
    absl::MutexLock lock(&task->call_mu);
    if (task->context != nullptr) task->context->TryCancel();
  }
  for (Task* task : all) {
    if (task->reader.joinable()) task->reader.join();
  }
  if (credit_thread_.joinable()) credit_thread_.join();
}

absl::StatusOr<IteratorCheckpoint> ServiceStepSource::CheckpointAfter(
    int64_t steps_returned) const {
  if (options_.checkpoint_job_key.empty()) {
    return absl::UnimplementedError(
        "the job's order is not deterministic (sharding policy other than RANGES or DATA, or "
        "independent reads)");
  }
  IteratorCheckpoint c;
  c.job_key = options_.checkpoint_job_key;
  c.step = options_.start_step + steps_returned;
  if (options_.steps_per_epoch > 0) {
    c.epoch = c.step / options_.steps_per_epoch;
    c.step_in_epoch = c.step % options_.steps_per_epoch;
  }
  return c;
}

void ServiceStepSource::ReadTask(Task* task) {
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

absl::Status ServiceStepSource::StreamOnce(Task* task, const std::string& address,
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
    std::vector<Task::Queued> steps;
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
      Task::Queued step;
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
      task->held += step.cost;
      held_ += step.cost;
      received_bytes_ += step.cost;
      ++steps_received_;
      SetOutstandingLocked(task, task->outstanding - step.cost);
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
  if (ended) {
    absl::MutexLock clock(&task->call_mu);
    task->end_received = absl::Now();
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

int64_t ServiceStepSource::FreeLocked(const Task& task) const {
  return window_ - task.held - task.outstanding;
}

int64_t ServiceStepSource::GrantQuantum() const { return std::max<int64_t>(window_ / 4, 1); }

void ServiceStepSource::SetOutstandingLocked(Task* task, int64_t outstanding) {
  outstanding_ += outstanding - task->outstanding;
  task->outstanding = outstanding;
  peak_ = std::max(peak_, held_ + outstanding_);
  cv_.SignalAll();  // a WaitForFlowStats caller
}

void ServiceStepSource::PopLocked(Task* task, std::vector<Element>* replicas) {
  Task::Queued& front = task->queue.front();
  *replicas = std::move(front.replicas);
  const int64_t before = FreeLocked(*task);
  task->held -= front.cost;
  held_ -= front.cost;
  task->queue.pop_front();
  // Wake the credit thread only when this pop makes a grant due (a quarter of the window free).
  const int64_t quantum = GrantQuantum();
  if (task->calling && before < quantum && FreeLocked(*task) >= quantum) credit_cv_.Signal();
}

void ServiceStepSource::CreditLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    std::vector<std::shared_ptr<Task>> due;
    const int64_t quantum = GrantQuantum();
    for (auto& [id, task] : tasks_) {
      if (task->calling && FreeLocked(*task) >= quantum) due.push_back(task);
    }
    if (due.empty()) {
      credit_cv_.Wait(&mu_);
      continue;
    }
    mu_.Unlock();
    for (auto& task : due) GrantCredits(task.get());
    due.clear();
    mu_.Lock();
  }
}

void ServiceStepSource::GrantCredits(Task* task) {
  absl::MutexLock wlock(&task->write_mu);
  if (task->stream == nullptr) return;
  int64_t n;
  int64_t received;
  {
    absl::MutexLock lock(&mu_);
    n = FreeLocked(*task);
    if (!task->calling || n < GrantQuantum()) return;
    SetOutstandingLocked(task, task->outstanding + n);
    ++credit_grants_;
    received = task->next_step;
  }
  proto::ConsumerMessage m;
  m.mutable_credit()->set_bytes(n);
  // Independent reads acknowledge what arrived, so that the worker can let it go.
  if (options_.independent) m.mutable_credit()->set_received_steps(received);
  task->stream->Write(EncodeConsumerMessage(m));  // a broken call is noticed by the reader
}

ServiceStepSource::FlowStats ServiceStepSource::flow_stats() const {
  absl::MutexLock lock(&mu_);
  return FlowStatsLocked();
}

ServiceStepSource::FlowStats ServiceStepSource::FlowStatsLocked() const {
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

bool ServiceStepSource::WaitForFlowStats(const std::function<bool(const FlowStats&)>& predicate,
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

absl::Status ServiceStepSource::NextSequentialLocked(std::vector<Element>* replicas,
                                                   bool* end_of_data) {
  absl::Time waiting_since = absl::Now();
  int64_t waiting_for = next_index_;
  while (true) {
    if (num_tasks_ >= 0 && next_index_ >= num_tasks_) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    auto it = by_index_.find(next_index_);
    if (it != by_index_.end()) {
      Task* t = it->second;
      if (!t->queue.empty()) {
        PopLocked(t, replicas);
        *end_of_data = false;
        return absl::OkStatus();
      }
      if (!t->error.ok()) return t->error;
      if (t->ended) {
        // Read to its end: its reader is finishing; join it later, outside the lock.
        by_index_.erase(it);
        auto owned = tasks_.find(t->task_id);
        retired_.push_back(std::move(owned->second));
        tasks_.erase(owned);
        ++next_index_;
        monitor_wanted_ = true;  // open the tasks now in the window
        monitor_cv_.Signal();
        continue;
      }
    } else {
      if (!monitor_error_.ok()) return monitor_error_;
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
    cv_.WaitWithTimeout(&mu_, options_.heartbeat_interval);
  }
}

absl::Status ServiceStepSource::GetNextStep(std::vector<Element>* replicas, bool* end_of_data) {
  const bool was_finished = finished_;
  absl::Status s = NextStep(replicas, end_of_data);
  if (s.ok() && *end_of_data && !was_finished) {
    // The ends just received would otherwise be reported only by the monitor's next heartbeat,
    // which may never come now (the caller is done): one last report, best effort.
    bool pending;
    {
      absl::MutexLock lock(&mu_);
      pending = !completed_.empty();
    }
    if (pending) (void)Heartbeat(std::min(options_.rpc_deadline, absl::Seconds(2)));
  }
  return s;
}

absl::Status ServiceStepSource::NextStep(std::vector<Element>* replicas, bool* end_of_data) {
  if (!status_.ok()) return status_;
  if (finished_) {
    *end_of_data = true;
    return absl::OkStatus();
  }
  if (options_.sequential) {
    std::vector<std::shared_ptr<Task>> retired;
    absl::Status s;
    {
      absl::MutexLock lock(&mu_);
      s = NextSequentialLocked(replicas, end_of_data);
      // Join the readers of ended tasks that have returned. One may still wait for the status
      // of a worker frozen after sending the end: it stays retired (the monitor cancels it
      // after end_grace, the destructor joins it), and the caller reads on.
      std::vector<std::shared_ptr<Task>> waiting;
      for (auto& task : retired_) {
        (task->reader_done ? retired : waiting).push_back(std::move(task));
      }
      retired_.swap(waiting);
    }
    for (auto& task : retired) {
      if (task->reader.joinable()) task->reader.join();
    }
    if (!s.ok()) {
      status_ = s;
      return s;
    }
    if (*end_of_data) {
      finished_ = true;
      return absl::OkStatus();
    }
    return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (rotation_.empty()) {
        finished_ = true;
        *end_of_data = true;
        return absl::OkStatus();
      }
      if (options_.independent) {
        // Whichever task has a step; else wait, unless every task is done or one failed.
        Task* ready = nullptr;
        for (size_t i = 0; i < rotation_.size() && ready == nullptr; ++i) {
          Task* t = rotation_[(next_ + i) % rotation_.size()];
          if (!t->queue.empty()) ready = t;
        }
        if (ready != nullptr) {
          next_ = (next_ + 1) % rotation_.size();
          PopLocked(ready, replicas);
          break;
        }
        bool removed = false;
        for (size_t i = 0; i < rotation_.size(); ++i) {
          if (!rotation_[i]->error.ok()) {
            status_ = rotation_[i]->error;
            return status_;
          }
          if (rotation_[i]->ended) {
            rotation_.erase(rotation_.begin() + static_cast<long>(i));
            removed = true;
            break;
          }
        }
        if (removed) continue;
        cv_.Wait(&mu_);
        continue;
      }
      Task* t = rotation_[next_ % rotation_.size()];
      if (!t->queue.empty()) {
        PopLocked(t, replicas);
        next_ = (next_ + 1) % rotation_.size();
        break;
      }
      if (!t->error.ok()) {
        status_ = t->error;
        return status_;
      }
      if (t->ended) {
        const size_t at = next_ % rotation_.size();
        rotation_.erase(rotation_.begin() + static_cast<long>(at));
        next_ = rotation_.empty() ? 0 : at % rotation_.size();
        continue;
      }
      cv_.Wait(&mu_);
    }
  }
  *end_of_data = false;
  return absl::OkStatus();
}

}  // namespace sluice
