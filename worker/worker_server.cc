#include "worker/worker_server.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/rpc_metrics.h"
#include "core/tensor/host_memory.h"
#include "core/util/backoff.h"
#include "core/util/jitter.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"
#include "core/util/transient_error.h"
#include "worker/stream_request.h"
#include "worker/worker_metrics.h"

namespace sluice {
namespace {

// DYNAMIC tasks: splits from the coordinator's GetSplit, retrying transient errors.
class CoordinatorSplitProvider : public SplitProvider {
 public:
  CoordinatorSplitProvider(proto::CoordinatorService::Stub* stub, proto::TaskDef task,
                           absl::Duration rpc_deadline)
      : stub_(stub), task_(std::move(task)), rpc_deadline_(rpc_deadline) {}

  absl::StatusOr<std::optional<Dataset>> NextSplit() override {
    proto::GetSplitRequest request;
    request.set_job_id(task_.job_id());
    request.set_task_id(task_.task_id());
    // Asking by position makes a retry, and a replay of the task by another worker, get the
    // same splits as before.
    request.set_task_split_index(next_split_index_);
    Backoff backoff(absl::Milliseconds(50), absl::Seconds(2));
    const absl::Time give_up = absl::Now() + rpc_deadline_ * 6;
    while (true) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_deadline_));
      proto::GetSplitResponse response;
      absl::Status s = FromGrpcStatus(stub_->GetSplit(&context, request, &response));
      if (s.ok()) {
        if (response.end_of_splits()) return std::optional<Dataset>();
        ASSIGN_OR_RETURN(Dataset split, Dataset::FromDef(response.dataset()));
        ++next_split_index_;
        return std::optional<Dataset>(std::move(split));
      }
      const absl::Duration wait = backoff.Next();
      // Transient (core/util/transient_error.h): the coordinator unreachable or slow, or
      // CANCELLED, which this call (never cancelled here) gets from a coordinator shutting down
      // while it waited, e.g. for its journal sync. Asking again by position gets the same split.
      if (!IsTransientTaskError(s.code()) || absl::Now() + wait > give_up) {
        return absl::Status(s.code(), absl::StrCat("GetSplit for task ", task_.task_id(),
                                                   " from the coordinator: ", s.message()));
      }
      absl::SleepFor(wait);
    }
  }

 private:
  proto::CoordinatorService::Stub* stub_;  // owned by the WorkerServer, which outlives tasks
  const proto::TaskDef task_;
  const absl::Duration rpc_deadline_;
  int64_t next_split_index_ = 0;  // this run of the task's position in its split sequence
};

}  // namespace

WorkerServer::WorkerServer(WorkerServerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(WorkerServerOptions options) {
  if (options.coordinator_address.empty()) {
    return absl::InvalidArgumentError("WorkerServer: coordinator_address is required");
  }
  options.service.token = options.security.token;
  if (options.service.data_host.empty()) options.service.data_host = options.host;
  // The bulk socket is plaintext: a worker serving over TLS keeps every byte on gRPC.
  if (!options.security.tls.cert_file.empty()) options.service.bulk_data = false;
  auto admission = GraphAdmission(options.data_roots, options.dataset_limits);
  if (options.executor.check_graph) {
    // The caller's check first (tests delay or fail builds through it), then the data roots.
    options.executor.check_graph = [first = std::move(options.executor.check_graph),
                                    admission](const proto::DatasetDef& def) -> absl::Status {
      RETURN_IF_ERROR(first(def));
      return admission ? admission(def) : absl::OkStatus();
    };
  } else {
    options.executor.check_graph = std::move(admission);
  }
  std::unique_ptr<WorkerServer> w(new WorkerServer(std::move(options)));
  ASSIGN_OR_RETURN(w->service_, GrpcWorkerService::Create(w.get(), w->options_.service));
  grpc::ServerBuilder builder;
  const std::string bind = absl::StrCat(w->options_.host, ":", w->options_.port);
  RETURN_IF_ERROR(AddSecureListeningPort(w->options_.security, bind, &builder, &w->port_));
  builder.RegisterService(w->service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // Replaces AddSecureListeningPort's list: keep its interceptor, first so that
  // the metrics see the rewritten status (core/rpc/grpc_security.h).
  interceptors.push_back(MakeMalformedRequestInterceptorFactory());
  interceptors.push_back(MakeRpcMetricsInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  builder.SetMaxSendMessageSize(-1);
  // Consumers send StreamRequests and CreditGrants only: the receive limit is the largest of
  // those (kMaxConsumerMessageBytes), lowered further by --max_request_bytes
  // (security.max_receive_message_bytes, AddSecureListeningPort set it).
  const int request_limit = w->options_.security.max_receive_message_bytes;
  builder.SetMaxReceiveMessageSize(request_limit > 0
                                       ? std::min(request_limit, kMaxConsumerMessageBytes)
                                       : kMaxConsumerMessageBytes);
  // A consumer gone silent (a partition, a frozen process) holding a stream that waits for
  // credit: keepalive pings end its connection, hence its streams (docs/SERVICE.md).
  AddServerKeepalive(w->options_.service.keepalive_time, w->options_.service.keepalive_timeout,
                     &builder);
  w->server_ = builder.BuildAndStart();
  if (w->server_ == nullptr || w->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("WorkerServer: cannot bind ", bind));
  }
  w->address_ = absl::StrCat(w->options_.host, ":", w->port_);
  do {
    w->process_incarnation_ = EntropyRandomSource()();
  } while (w->process_incarnation_ == 0);
  ASSIGN_OR_RETURN(GrpcChannelFactory channels,
                   MakeChannelFactory(w->options_.coordinator_security));
  w->coordinator_ = proto::CoordinatorService::NewStub(channels(w->options_.coordinator_address));
  WorkerServer* raw = w.get();
  // Started once: a worker that cannot start them does not start (w's destructor stops it).
  ASSIGN_OR_RETURN(w->build_thread_,
                   StartThread("the worker's pipeline builder", [raw] { raw->BuildLoop(); }));
  ASSIGN_OR_RETURN(w->heartbeat_thread_,
                   StartThread("the worker's heartbeat", [raw] { raw->HeartbeatLoop(); }));
  if (w->options_.watch_assignments) {
    ASSIGN_OR_RETURN(w->watch_thread_, StartThread("the worker's assignment watch",
                                                   [raw] { raw->WatchLoop(); }));
  }
  return w;
}

WorkerServer::~WorkerServer() { Stop(); }

void WorkerServer::Log(absl::string_view line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::cerr << "sluice-worker " << address_ << ": " << line << std::endl;
  }
}

bool WorkerServer::registered() const {
  absl::MutexLock lock(&mu_);
  return worker_id_ != 0;
}

int64_t WorkerServer::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

absl::StatusOr<std::shared_ptr<TaskRunner>> WorkerServer::FindTask(int64_t job_id,
                                                                   int64_t task_id) {
  absl::MutexLock lock(&mu_);
  const absl::Time give_up = absl::Now() + options_.unknown_task_wait;
  // While heartbeats fail (the coordinator is down) no answer is coming: refuse at once rather
  // than hold an open-pool thread, which streams of known tasks need, for unknown_task_wait.
  if (!tasks_.contains(task_id) && !building_.contains(task_id) && !stopping_ &&
      !last_heartbeat_failed_) {
    // The next heartbeat goes now (the heartbeat thread wakes for assignment_changed_), and
    // it is sent after this call arrived, so after the coordinator made the task the consumer
    // names: its answer lists the task if it is ours.
    const uint64_t answer = heartbeats_sent_ + 1;
    assignment_changed_ = true;
    wake_->Signal();
    auto answered = [this, answer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || heartbeats_answered_ >= answer;
    };
    mu_.AwaitWithDeadline(absl::Condition(&answered), give_up);
  }
  // A task handed over is built on build_thread_: wait for its runner.
  auto built = [this, task_id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !building_.contains(task_id);
  };
  mu_.AwaitWithDeadline(absl::Condition(&built), give_up);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() || it->second->task().job_id() != job_id) {
    return absl::UnavailableError(absl::StrCat("worker ", address_, " does not run task ",
                                               task_id, " of job ", job_id));
  }
  return it->second;
}

std::vector<std::shared_ptr<TaskRunner>> WorkerServer::TaskRunners() const {
  return Tasks().runners;
}

WorkerServer::TaskSnapshot WorkerServer::Tasks() const {
  absl::MutexLock lock(&mu_);
  TaskSnapshot out;
  out.runners.reserve(tasks_.size());
  for (const auto& [id, runner] : tasks_) out.runners.push_back(runner);
  out.stopped = stopped_totals_;
  return out;
}

absl::Status WorkerServer::Heartbeat(bool draining, absl::Duration deadline) {
  proto::WorkerHeartbeatRequest request;
  uint64_t sequence = 0;  // this heartbeat's, counted in heartbeats_sent_
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_worker_address(address_);
  request.set_process_incarnation(process_incarnation_);
  request.set_draining(draining);
  request.set_max_element_bytes(ProcessMemoryBudget().limits().element_bytes);
  {
    absl::MutexLock lock(&mu_);
    request.set_known_incarnation(known_incarnation_);
    request.set_known_version(known_version_);
    assignment_changed_ = false;  // this heartbeat fetches the change
    sequence = ++heartbeats_sent_;
    for (const auto& [id, runner] : tasks_) {
      if (runner->finished()) {
        request.add_finished_task_ids(id);
      } else if (absl::Status transient = runner->TransientError();
                 !transient.ok() && !draining) {
        // Given back: the coordinator runs it again (here or elsewhere), no death counted.
        proto::TaskFailure* f = request.add_handed_back_tasks();
        f->set_task_id(id);
        f->set_code(static_cast<int>(transient.code()));
        f->set_message(std::string(transient.message()));
      } else {
        request.add_active_task_ids(id);
        // Failure policy: the coordinator fails the job and tells this worker to stop it.
        if (absl::Status error = runner->DeterministicError(); !error.ok()) {
          proto::TaskFailure* f = request.add_failed_tasks();
          f->set_task_id(id);
          f->set_code(static_cast<int>(error.code()));
          f->set_message(std::string(error.message()));
          if (std::optional<int64_t> limit = RefusedElementLimit(error)) {
            f->set_element_limit_bytes(*limit);
          }
        }
      }
      FillTaskProgress(*runner, request.add_task_progress());
    }
    // Tasks whose pipelines are being built (BuildLoop) run here already, as far as the
    // coordinator is concerned.
    for (int64_t id : building_) request.add_active_task_ids(id);
    load_meter_.Fill(&request);
  }
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + std::min(options_.rpc_deadline, deadline)));
  proto::WorkerHeartbeatResponse response;
  const absl::Status sent =
      FromGrpcStatus(coordinator_->WorkerHeartbeat(&context, request, &response));

  std::vector<std::shared_ptr<TaskRunner>> to_close;
  absl::MutexLock lock(&mu_);
  // Applied below (under this lock) or failed: FindTask's waiters look again either way.
  heartbeats_answered_ = std::max(heartbeats_answered_, sequence);
  last_heartbeat_failed_ = !sent.ok();
  RETURN_IF_ERROR(sent);
  if (stopping_) return absl::OkStatus();
  reported_finished_.insert(request.finished_task_ids().begin(),
                            request.finished_task_ids().end());
  for (const proto::TaskFailure& f : request.failed_tasks()) reported_finished_.insert(f.task_id());
  for (const proto::TaskProgress& p : request.task_progress()) {
    if (p.steps_produced() > 0) first_step_unreported_.erase(p.task_id());
  }
  if (worker_id_ != response.worker_id()) {
    Log(absl::StrCat("registered with coordinator ", options_.coordinator_address,
                     " as worker ", response.worker_id()));
    worker_id_ = response.worker_id();
  }
  // Runners given back: dropped before the new tasks, which may list them again.
  for (const proto::TaskFailure& back : request.handed_back_tasks()) {
    auto it = tasks_.find(back.task_id());
    if (it == tasks_.end()) continue;
    Log(absl::StrCat("task ", back.task_id(), " given back to the coordinator after a ",
                     "transient error: ", back.message()));
    to_close.push_back(std::move(it->second));
    tasks_.erase(it);
    reported_finished_.erase(back.task_id());
    first_step_unreported_.erase(back.task_id());
  }
  // Built on build_thread_, without mu_: a slow build (a remote listing, a large plan) must
  // not hold up heartbeats, or the coordinator would take it for a death.
  for (const proto::TaskDef& task : response.new_tasks()) {
    if (tasks_.contains(task.task_id()) || building_.contains(task.task_id())) continue;
    building_.insert(task.task_id());
    to_build_.push_back(task);
  }
  for (int64_t id : response.tasks_to_stop()) {
    if (building_.contains(id)) cancelled_builds_.insert(id);  // BuildLoop drops it
    auto it = tasks_.find(id);
    if (it == tasks_.end()) continue;
    to_close.push_back(std::move(it->second));
    tasks_.erase(it);
    reported_finished_.erase(id);
    first_step_unreported_.erase(id);
  }
  // Consumers the coordinator declared gone: this worker's buffers stop holding steps for them
  // (once each time they go; a stream of theirs still open ends CANCELLED, and a consumer
  // that comes back reattaches, from memory or through a replay).
  absl::flat_hash_set<std::pair<int64_t, int64_t>> gone;
  for (const proto::ConsumerRef& c : response.gone_consumers()) {
    gone.insert({c.job_id(), c.consumer_index()});
  }
  for (const auto& [job_id, consumer] : gone) {
    if (gone_consumers_.contains({job_id, consumer})) continue;
    for (auto& [id, runner] : tasks_) {
      if (runner->task().job_id() == job_id) runner->buffer()->Detach(consumer);
    }
    Log(absl::StrCat("consumer ", consumer, " of job ", job_id,
                     " is gone (coordinator): its tasks here stop holding steps for it"));
  }
  gone_consumers_ = std::move(gone);
  known_incarnation_ = response.incarnation();
  known_version_ = response.version();
  if (response.worker_timeout_ms() > 0) {
    coordinator_worker_timeout_ = absl::Milliseconds(response.worker_timeout_ms());
  }
  for (auto& r : to_close) {
    r->Close();  // readers still holding it see UNAVAILABLE; it delivers nothing more
    ++stopped_totals_.tasks;
    stopped_totals_.steps_delivered += r->steps_delivered();
    stopped_totals_.bytes_delivered += r->bytes_delivered();
    const StepBuffer::Stats stats = r->buffer()->stats();
    stopped_totals_.steps_produced += stats.steps_produced;
    stopped_totals_.replays += r->replays();
    stopped_totals_.retention_hits += stats.retention_hits;
  }
  return absl::OkStatus();
}

std::shared_ptr<TaskRunner> WorkerServer::StartTaskRunner(const proto::TaskDef& task) const {
  TaskRunnerOptions o;
  o.buffer_bytes = options_.buffer_bytes;
  o.retention_bytes = options_.retention_bytes;
  o.cross_trainer_window_bytes = options_.cross_trainer_window_bytes;
  o.cross_trainer_drop_departed_after = options_.cross_trainer_drop_departed_after;
  o.on_change = [wake = wake_] { wake->Signal(); };  // maybe finished: report it now
  o.on_first_step = [wake = wake_] { wake->Signal(); };  // report its first step now
  o.detach_unattached_after = options_.detach_unattached_after;
  o.executor = options_.executor;
  proto::CoordinatorService::Stub* stub = coordinator_.get();
  const absl::Duration deadline = options_.rpc_deadline;
  o.splits = [stub, deadline](const proto::TaskDef& t) -> std::unique_ptr<SplitProvider> {
    return std::make_unique<CoordinatorSplitProvider>(stub, t, deadline);
  };
  absl::StatusOr<std::shared_ptr<TaskRunner>> runner = TaskRunner::Start(task, o);
  if (!runner.ok()) {
    // The pipeline cannot be built; its consumers get the error from their streams, and the
    // next heartbeat reports it (failed_tasks, or handed_back_tasks when transient).
    Log(absl::StrCat("task ", task.task_id(), " failed to start: ", runner.status().ToString()));
    return TaskRunner::Failed(task, runner.status());
  }
  Log(absl::StrCat("started task ", task.task_id(), " (job ", task.job_id(), ", index ",
                   task.task_index(), "/", task.num_tasks(), ")"));
  return *std::move(runner);
}

bool WorkerServer::BuildDueLocked() const { return stopping_ || !to_build_.empty(); }

void WorkerServer::BuildLoop() {
  while (true) {
    proto::TaskDef task;
    {
      absl::MutexLock lock(&mu_, absl::Condition(this, &WorkerServer::BuildDueLocked));
      if (stopping_) return;
      task = std::move(to_build_.front());
      to_build_.pop_front();
      if (cancelled_builds_.erase(task.task_id()) > 0) {
        building_.erase(task.task_id());
        continue;
      }
    }
    std::shared_ptr<TaskRunner> runner = StartTaskRunner(task);
    {
      absl::MutexLock lock(&mu_);
      building_.erase(task.task_id());
      const bool cancelled = cancelled_builds_.erase(task.task_id()) > 0;
      if (!stopping_ && !cancelled) {
        if (runner->DeterministicError().ok() && runner->TransientError().ok()) {
          first_step_unreported_.insert(task.task_id());
        }
        tasks_[task.task_id()] = std::move(runner);
      }
    }
    if (runner != nullptr) runner->Close();  // stopped or cancelled while it was built
    wake_->Signal();  // a failed build is reported at once
  }
}

bool WorkerServer::UnreportedFirstStepLocked() const {
  for (int64_t id : first_step_unreported_) {
    auto it = tasks_.find(id);
    if (it != tasks_.end() && it->second->buffer()->stats().steps_produced > 0) return true;
  }
  return false;
}

bool WorkerServer::UnreportedFinishLocked() const {
  for (const auto& [id, runner] : tasks_) {
    if (reported_finished_.contains(id)) continue;
    if (runner->finished() || !runner->DeterministicError().ok()) return true;
    // A task given back after a transient error is not hurried: the next heartbeat at its
    // interval gives it back, which paces the retries of a task that keeps failing so.
  }
  return false;
}

void WorkerServer::HeartbeatLoop() {
  const RandomSource random = EntropyRandomSource();
  absl::Duration nominal = absl::ZeroDuration();  // before jitter
  absl::Duration wait = absl::ZeroDuration();
  bool failing = false;
  while (true) {
    // Until the next heartbeat is due, or a task finishes or fails (its buffer wakes us), or
    // the server stops.
    const absl::Time until = absl::Now() + wait;
    while (true) {
      wake_->Clear();  // a change from now on wakes the wait below
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        if (!failing && UnreportedFinishLocked()) break;  // report a finished task now
        if (!failing && UnreportedFirstStepLocked()) break;  // and a task's first step
        if (!failing && assignment_changed_) break;  // fetch a new assignment now
      }
      if (absl::Now() >= until) break;
      wake_->WaitUntil(until);
    }
    absl::Status s = Heartbeat();
    if (s.ok()) {
      if (failing) Log("heartbeats to the coordinator succeed again");
      failing = false;
      nominal = options_.heartbeat_interval;
    } else {
      if (!failing) {
        Log(absl::StrCat("heartbeat to coordinator ", options_.coordinator_address,
                         " failed (retrying with backoff): ", s.ToString()));
      }
      failing = true;
      absl::Duration cap = options_.max_backoff;
      {
        absl::MutexLock lock(&mu_);
        if (coordinator_worker_timeout_ > absl::ZeroDuration()) {
          cap = std::min(cap, coordinator_worker_timeout_ / 4);
        }
      }
      nominal = std::min(std::max(nominal * 2, options_.heartbeat_interval), cap);
    }
    wait = Jittered(nominal, options_.heartbeat_jitter, random);
  }
}

bool WorkerServer::WatchDueLocked() const { return stopping_ || known_version_ != 0; }

bool WorkerServer::WatchedVersionPassedLocked() const {
  return stopping_ || known_version_ != watched_version_ ||
         known_incarnation_ != watched_incarnation_;
}

absl::StatusOr<bool> WorkerServer::WatchOnce(uint64_t incarnation, uint64_t version) {
  proto::WatchAssignmentRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_worker_address(address_);
  request.set_process_incarnation(process_incarnation_);
  request.set_known_incarnation(incarnation);
  request.set_known_version(version);
  request.set_wait_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(
                                               options_.assignment_watch_wait)));
  grpc::ClientContext context;
  // The coordinator answers within the wait (plus its ticker's period); the RPC deadline on
  // top covers the network and a coordinator that caps the wait differently.
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.assignment_watch_wait +
                                          options_.rpc_deadline));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("the worker is stopping");
    watch_call_ = &context;
  }
  proto::WatchAssignmentResponse response;
  grpc::Status status = coordinator_->WatchAssignment(&context, request, &response);
  absl::MutexLock lock(&mu_);
  watch_call_ = nullptr;
  RETURN_IF_ERROR(FromGrpcStatus(status));
  return response.changed();
}

void WorkerServer::WatchLoop() {
  while (true) {
    uint64_t incarnation = 0;
    uint64_t version = 0;
    {
      absl::MutexLock lock(&mu_, absl::Condition(this, &WorkerServer::WatchDueLocked));
      if (stopping_) return;
      incarnation = watched_incarnation_ = known_incarnation_;
      version = watched_version_ = known_version_;
    }
    absl::StatusOr<bool> changed = WatchOnce(incarnation, version);
    if (changed.ok() && !*changed) continue;  // the wait ran out: watch again
    if (!changed.ok() && changed.status().code() == absl::StatusCode::kUnimplemented) {
      Log(absl::StrCat("coordinator ", options_.coordinator_address,
                       " has no WatchAssignment: new tasks start at heartbeats"));
      return;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (changed.ok() && !WatchedVersionPassedLocked()) {
      assignment_changed_ = true;
      wake_->Signal();
    }
    // Until a newer answer is applied (the heartbeat just asked for, or after a failed watch
    // the next one): watching from the same version again would return at once. A heartbeat
    // applied meanwhile may predate the change; the next watch, from its version, says so.
    mu_.AwaitWithTimeout(absl::Condition(this, &WorkerServer::WatchedVersionPassedLocked),
                         options_.heartbeat_interval);
  }
}

void WorkerServer::Drain(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::shared_ptr<TaskRunner>> runners;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
    for (const auto& [id, r] : tasks_) runners.push_back(r);
    if (watch_call_ != nullptr) watch_call_->TryCancel();
  }
  wake_->Signal();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  // Half the time at most for the coordinator, the rest for the streams to end.
  absl::Status told = Heartbeat(/*draining=*/true, timeout / 2);
  if (told.ok()) {
    Log(absl::StrCat("draining: the coordinator reassigned this worker's tasks; ending ",
                     runners.size(), " task(s)' streams"));
    const std::string message = absl::StrCat(
        "worker ", address_,
        " draining: its tasks moved to other workers; ask the coordinator and reconnect");
    for (auto& r : runners) r->Close(message);
  } else {
    Log(absl::StrCat("draining ", runners.size(),
                     " task(s) without the coordinator (it did not answer: ", told.ToString(),
                     "): serving the buffered steps"));
    for (auto& r : runners) r->StopProducing();
  }
  // Streams end on their own (at once after Close, or once their buffered steps are served);
  // Shutdown waits for them until the deadline, then cancels what is left.
  server_->Shutdown(absl::ToChronoTime(deadline));
  Stop();
}

void WorkerServer::Stop() {
  std::vector<std::shared_ptr<TaskRunner>> runners;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    for (auto& [id, r] : tasks_) runners.push_back(r);
    if (watch_call_ != nullptr) watch_call_->TryCancel();
  }
  wake_->Signal();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (build_thread_.joinable()) build_thread_.join();  // after the build under way, if any
  for (auto& r : runners) r->Close();
  if (server_ != nullptr) {  // null when Start failed before it built the server
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_->Wait();
  }
  absl::MutexLock lock(&mu_);
  tasks_.clear();
}

}  // namespace sluice
