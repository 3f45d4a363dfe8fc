#include "server/grpc_coordinator_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/rpc_metrics.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "grpc/impl/codegen/grpc_types.h"

namespace sluice {
namespace {

// A call whose caller gave up (its deadline passed, its connection was cut) while it waited
// for a thread: dropped before any work, so that in a restart storm the calls clients already
// retried do not run a second time behind the retries (GetOrCreateJob also looks again after
// planning its job).
grpc::Status Abandoned() {
  return grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled the call");
}

}  // namespace

grpc::Status GrpcCoordinatorService::RegisterDataset(grpc::ServerContext* context,
                                                     const proto::RegisterDatasetRequest* request,
                                                     proto::RegisterDatasetResponse* response) {
  grpc::Status a = admission_.Authenticate(*context, kTrainerRole | kAdminRole, "RegisterDataset");
  if (!a.ok()) return a;
  if (CallerGaveUp(*context, "RegisterDataset")) return Abandoned();
  const std::string caller = admission_.Identify(*context);
  if (grpc::Status a = admission_.AdmitCreate(caller, "RegisterDataset"); !a.ok()) return a;
  if (grpc::Status a = admission_.CheckDataset(*request); !a.ok()) return a;
  return ToGrpcStatus(coordinator_->RegisterDataset(*request, response, caller));
}

grpc::Status GrpcCoordinatorService::GetOrCreateJob(grpc::ServerContext* context,
                                                    const proto::GetOrCreateJobRequest* request,
                                                    proto::GetOrCreateJobResponse* response) {
  grpc::Status a = admission_.Authenticate(*context, kTrainerRole, "GetOrCreateJob");
  if (!a.ok()) return a;
  if (CallerGaveUp(*context, "GetOrCreateJob")) return Abandoned();
  const std::string caller = admission_.Identify(*context);
  if (grpc::Status a = admission_.AdmitCreate(caller, "GetOrCreateJob"); !a.ok()) return a;
  return ToGrpcStatus(coordinator_->GetOrCreateJob(*request, response, caller,
                                                   [context] { return context->IsCancelled(); }));
}

grpc::Status GrpcCoordinatorService::GetElementSpec(grpc::ServerContext* context,
                                                    const proto::GetElementSpecRequest* request,
                                                    proto::GetElementSpecResponse* response) {
  grpc::Status a = admission_.Authenticate(*context, kTrainerRole, "GetElementSpec");
  if (!a.ok()) return a;
  if (CallerGaveUp(*context, "GetElementSpec")) return Abandoned();
  return ToGrpcStatus(coordinator_->GetElementSpec(*request, response));
}

namespace {

// The stack block a heartbeat's arena starts with: a worker's request with a few tasks and
// the answer fit (the arena's own header takes part of it).
constexpr size_t kHeartbeatArenaBlock = 2048;

// One raw heartbeat: the caller's role (`needed`), then the request parsed from
// `request_bytes`, `method` run on it, and its answer serialized into `response_bytes`;
// counted in `metrics`. Finishes the
// call before returning (the coordinator never blocks on the network).
template <typename Request, typename Response, typename Method>
grpc::ServerUnaryReactor* ServeHeartbeat(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request_bytes,
                                         grpc::ByteBuffer* response_bytes,
                                         const RequestAdmission& admission, RoleSet needed,
                                         const RpcMethodMetrics& metrics,
                                         const char* method_name, Method method) {
  metrics.Started();
  grpc::Status status = admission.Authenticate(*context, needed, method_name);
  if (status.ok() && context->IsCancelled()) status = Abandoned();
  if (status.ok()) {
    // The request and the answer live on an arena whose first block is on this stack: a
    // heartbeat's strings and repeated fields cost no malloc/free pair each (larger answers,
    // a full ClientHeartbeat of a job with many tasks, spill into heap blocks the arena frees).
    alignas(8) char first_block[kHeartbeatArenaBlock];
    google::protobuf::ArenaOptions arena_options;
    arena_options.initial_block = first_block;
    arena_options.initial_block_size = sizeof(first_block);
    google::protobuf::Arena arena(arena_options);
    Request* request = google::protobuf::Arena::CreateMessage<Request>(&arena);
    // The reader only reads the buffer (the const_cast is for its constructor's signature).
    bool parsed = request_bytes->Valid();
    if (parsed) {
      grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(request_bytes));
      parsed = request->ParseFromZeroCopyStream(&reader) && reader.status().ok();
    }
    if (!parsed) {
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            MalformedRequestMessage(method_name));
    } else {
      Response* response = google::protobuf::Arena::CreateMessage<Response>(&arena);
      status = ToGrpcStatus(method(*request, response));
      bool own_buffer = false;
      if (status.ok()) {
        status = grpc::SerializationTraits<Response>::Serialize(*response, response_bytes,
                                                               &own_buffer);
      }
    }
  }
  metrics.Handled(status.error_code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcCoordinatorService::WorkerHeartbeat(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeHeartbeat<proto::WorkerHeartbeatRequest, proto::WorkerHeartbeatResponse>(
      context, request, response, admission_, kWorkerRole, worker_heartbeat_metrics_,
      kWorkerHeartbeatMethod, [this, context](const auto& req, auto* resp) {
        RETURN_IF_ERROR(RequestAdmission::CheckWorkerAddress(*context, req.worker_address()));
        return coordinator_->WorkerHeartbeat(req, resp);
      });
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::ClientHeartbeat(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeHeartbeat<proto::ClientHeartbeatRequest, proto::ClientHeartbeatResponse>(
      context, request, response, admission_, kTrainerRole, client_heartbeat_metrics_,
      kClientHeartbeatMethod,
      [this](const auto& req, auto* resp) { return coordinator_->ClientHeartbeat(req, resp); });
}

grpc::Status GrpcCoordinatorService::GetSplit(grpc::ServerContext* context,
                                              const proto::GetSplitRequest* request,
                                              proto::GetSplitResponse* response) {
  grpc::Status a = admission_.Authenticate(*context, kWorkerRole, "GetSplit");
  if (!a.ok()) return a;
  if (CallerGaveUp(*context, "GetSplit")) return Abandoned();
  return ToGrpcStatus(coordinator_->GetSplit(*request, response));
}

grpc::Status GrpcCoordinatorService::ReleaseConsumer(grpc::ServerContext* context,
                                                     const proto::ReleaseConsumerRequest* request,
                                                     proto::ReleaseConsumerResponse* response) {
  grpc::Status a = admission_.Authenticate(*context, kTrainerRole, "ReleaseConsumer");
  if (!a.ok()) return a;
  if (CallerGaveUp(*context, "ReleaseConsumer")) return Abandoned();
  return ToGrpcStatus(coordinator_->ReleaseConsumer(*request, response));
}

grpc::Status GrpcCoordinatorService::GetStatus(grpc::ServerContext* context,
                                               const proto::GetStatusRequest* request,
                                               proto::GetStatusResponse* response) {
  grpc::Status a = admission_.Authenticate(*context, kAdminRole, "GetStatus");
  if (!a.ok()) return a;
  if (CallerGaveUp(*context, "GetStatus")) return Abandoned();
  if (grpc::Status a = admission_.AdmitStatusPoll(admission_.Identify(*context)); !a.ok()) {
    return a;
  }
  return ToGrpcStatus(coordinator_->GetStatus(*request, response));
}

namespace {

// One WatchAssignment call: finished by the coordinator's watch callback (from whatever
// thread notifies it), or at once on error. Deleted when both OnDone and Start are through
// (the callback may finish the call, and gRPC run OnDone, before Start returns).
class AssignmentWatchReactor final : public grpc::ServerUnaryReactor {
 public:
  AssignmentWatchReactor(Coordinator* coordinator, proto::WatchAssignmentResponse* response)
      : coordinator_(coordinator), response_(response) {}

  // Registers the watch (or finishes with `admitted` when it is an error).
  void Start(const grpc::Status& admitted, const proto::WatchAssignmentRequest& request) {
    if (!admitted.ok()) {
      Finish(admitted);
    } else {
      absl::StatusOr<uint64_t> id =
          coordinator_->WatchAssignment(request, [this](bool changed) {
            response_->set_changed(changed);
            Finish(grpc::Status::OK);
          });
      if (!id.ok()) {
        Finish(ToGrpcStatus(id.status()));
      } else {
        bool cancel = false;
        {
          absl::MutexLock lock(&mu_);
          id_ = *id;
          cancel = cancelled_;
        }
        if (cancel && *id != 0) coordinator_->CancelAssignmentWatch(*id);
      }
    }
    Unref();
  }

  void OnCancel() override {
    uint64_t id = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      id = id_;
    }
    if (id != 0) coordinator_->CancelAssignmentWatch(id);  // no-op once answered
  }
  void OnDone() override { Unref(); }

 private:
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  Coordinator* const coordinator_;
  proto::WatchAssignmentResponse* const response_;
  std::atomic<int> refs_{2};  // Start's and OnDone's
  absl::Mutex mu_;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* GrpcCoordinatorService::WatchAssignment(
    grpc::CallbackServerContext* context, const proto::WatchAssignmentRequest* request,
    proto::WatchAssignmentResponse* response) {
  grpc::Status admitted = admission_.Authenticate(*context, kWorkerRole, "WatchAssignment");
  if (admitted.ok()) {
    admitted = ToGrpcStatus(RequestAdmission::CheckWorkerAddress(*context,
                                                                 request->worker_address()));
  }
  auto* reactor = new AssignmentWatchReactor(coordinator_, response);
  reactor->Start(admitted, *request);
  return reactor;
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    CoordinatorServerOptions options) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->host_ = options.host;
  absl::Duration interval = options.liveness_interval;
  if (interval <= absl::ZeroDuration()) {
    interval = std::min(options.coordinator.worker_timeout / 4, absl::Seconds(1));
    interval = std::max(interval, absl::Milliseconds(10));
  }
  // The ticker's period: the coordinator sees its own stalls against it.
  options.coordinator.liveness_interval = interval;
  // With a work_dir, this replays the journal: a corrupt one is an error here.
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(options.coordinator);
  if (!coordinator.ok()) return coordinator.status();
  s->coordinator_ = *std::move(coordinator);
  // The shared token grants every role beside the per-role ones.
  if (options.role_tokens.every_role.empty()) {
    options.role_tokens.every_role = options.security.token;
  }
  s->service_ = std::make_unique<GrpcCoordinatorService>(
      s->coordinator_.get(),
      RequestAdmission(options.role_tokens, options.data_roots, options.dataset_limits,
                       options.admission_rates, options.caller_identity),
      options.before_cancellation_check);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Without this, Linux lets a second server bind the same port and split the traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const std::string listen = absl::StrCat(options.host, ":", options.port);
  if (absl::Status secured = AddSecureListeningPort(options.security, listen, &builder, &s->port_);
      !secured.ok()) {
    return secured;
  }
  builder.RegisterService(s->service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // Replaces AddSecureListeningPort's list: keep its interceptor, first so that
  // the metrics see the rewritten status (core/rpc/grpc_security.h).
  // The heartbeats check and count themselves (GrpcCoordinatorService::SelfServedMethods).
  interceptors.push_back(
      MakeMalformedRequestInterceptorFactory(GrpcCoordinatorService::SelfServedMethods()));
  interceptors.push_back(MakeRpcMetricsInterceptorFactory(  // core/rpc/rpc_metrics.h
      nullptr, GrpcCoordinatorService::SelfServedMethods()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("coordinator: cannot listen on ", listen, " (address in use or invalid?)"));
  }

  CoordinatorServer* raw = s.get();
  ASSIGN_OR_RETURN(s->ticker_, StartThread("the coordinator's liveness ticker", [raw, interval] {
                     raw->TickerLoop(interval);
                   }));
  return s;
}

void CoordinatorServer::TickerLoop(absl::Duration interval) {
  while (!stop_.WaitForNotificationWithTimeout(interval)) coordinator_->CheckWorkerLiveness();
}

std::string CoordinatorServer::address() const { return absl::StrCat(host_, ":", port_); }

void CoordinatorServer::Shutdown(absl::Duration deadline) {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // Waiting watches are answered now, not cancelled at the deadline: workers watch again.
  // (No coordinator: Start failed before making one, e.g. on a corrupt journal.)
  if (coordinator_ != nullptr) coordinator_->CloseAssignmentWatches();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    server_->Wait();
  }
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(absl::ZeroDuration()); }

}  // namespace sluice
