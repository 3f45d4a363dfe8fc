// The coordinator over gRPC: GrpcCoordinatorService adapts a Coordinator to
// proto::CoordinatorService (one line per handler), and CoordinatorServer runs it with the gRPC
// health service and reflection on, plus the liveness ticker.
//
//   ASSIGN_OR_RETURN(auto server, CoordinatorServer::Start(options));
//   ... dial absl::StrCat("127.0.0.1:", server->port()) ...
//   server->Shutdown();
//
// Thread safety: both classes are thread-safe.
#ifndef SLUICE_SERVER_GRPC_COORDINATOR_SERVICE_H_
#define SLUICE_SERVER_GRPC_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/coordinator.grpc.pb.h"
#include "core/rpc/grpc_security.h"
#include "core/rpc/rpc_metrics.h"
#include "server/coordinator.h"
#include "server/request_admission.h"

namespace sluice {

// The heartbeats (the calls a fleet makes many of) are callback methods: each runs to its
// answer on the gRPC thread that read it, without a hand-off to a thread of the synchronous
// server's pool (which starts and stops threads as the load changes). They take the raw
// bytes: the handler parses the request (INVALID_ARGUMENT naming the method when it does not
// parse), counts the call's metrics (RpcMethodMetrics) and serializes the answer itself, so
// that no interceptor runs on them (kSelfServedMethods). The other methods are synchronous
// (they may plan a job or build a large status) and go through the interceptors.
// WatchAssignment, a long-poll, is a callback method too: a waiting watch holds no thread (it
// is a callback in the coordinator's AssignmentWatchers until it is answered).
using CoordinatorServiceBase = proto::CoordinatorService::WithRawCallbackMethod_WorkerHeartbeat<
    proto::CoordinatorService::WithRawCallbackMethod_ClientHeartbeat<
        proto::CoordinatorService::WithCallbackMethod_WatchAssignment<
            proto::CoordinatorService::Service>>>;

inline constexpr char kWorkerHeartbeatMethod[] =
    "/sluice.proto.CoordinatorService/WorkerHeartbeat";
inline constexpr char kClientHeartbeatMethod[] =
    "/sluice.proto.CoordinatorService/ClientHeartbeat";

class GrpcCoordinatorService final : public CoordinatorServiceBase {
 public:
  // `coordinator` is borrowed and must outlive the service. Every handler first checks the
  // call with `admission` (the caller's role; WorkerHeartbeat: the advertised address against
  // the caller's certificate; RegisterDataset: graph bounds and data roots).
  // `before_cancellation_check` (test only): called by the unary non-heartbeat handlers right
  // before they look whether the caller gave up (then CANCELLED "the caller cancelled the
  // call", before any work), with the call's context and the method's name.
  using CancellationCheckHook =
      std::function<void(const grpc::ServerContextBase& context, absl::string_view method)>;
  explicit GrpcCoordinatorService(Coordinator* coordinator,
                                  RequestAdmission admission = RequestAdmission(),
                                  CancellationCheckHook before_cancellation_check = nullptr)
      : coordinator_(coordinator),
        admission_(std::move(admission)),
        before_cancellation_check_(std::move(before_cancellation_check)),
        worker_heartbeat_metrics_(kWorkerHeartbeatMethod),
        client_heartbeat_metrics_(kClientHeartbeatMethod) {}

  // The methods whose handlers parse their requests and count their metrics themselves: the
  // interceptor factories must leave them alone (MakeRpcMetricsInterceptorFactory,
  // MakeMalformedRequestInterceptorFactory), or they would be counted twice.
  static std::vector<std::string> SelfServedMethods() {
    return {kWorkerHeartbeatMethod, kClientHeartbeatMethod};
  }

  grpc::Status RegisterDataset(grpc::ServerContext*, const proto::RegisterDatasetRequest* request,
                               proto::RegisterDatasetResponse* response) override;
  grpc::Status GetOrCreateJob(grpc::ServerContext*, const proto::GetOrCreateJobRequest* request,
                              proto::GetOrCreateJobResponse* response) override;
  grpc::Status GetElementSpec(grpc::ServerContext*, const proto::GetElementSpecRequest* request,
                              proto::GetElementSpecResponse* response) override;
  grpc::ServerUnaryReactor* WorkerHeartbeat(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ClientHeartbeat(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::Status GetSplit(grpc::ServerContext*, const proto::GetSplitRequest* request,
                        proto::GetSplitResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext*, const proto::GetStatusRequest* request,
                         proto::GetStatusResponse* response) override;
  // The trainer role (Coordinator::ReleaseConsumer).
  grpc::Status ReleaseConsumer(grpc::ServerContext*, const proto::ReleaseConsumerRequest* request,
                               proto::ReleaseConsumerResponse* response) override;
  // The worker role; the advertised address against the caller's certificate, as for
  // WorkerHeartbeat. Answered when the coordinator's watch is (Coordinator::WatchAssignment);
  // a caller that goes away cancels its watch.
  grpc::ServerUnaryReactor* WatchAssignment(grpc::CallbackServerContext* context,
                                            const proto::WatchAssignmentRequest* request,
                                            proto::WatchAssignmentResponse* response) override;

 private:
  // Whether the caller of `method` gave up (cancelled, deadline passed) before any work.
  bool CallerGaveUp(const grpc::ServerContextBase& context, absl::string_view method) const {
    if (before_cancellation_check_) before_cancellation_check_(context, method);
    return context.IsCancelled();
  }

  Coordinator* const coordinator_;
  const RequestAdmission admission_;
  const CancellationCheckHook before_cancellation_check_;
  const RpcMethodMetrics worker_heartbeat_metrics_;
  const RpcMethodMetrics client_heartbeat_metrics_;
};

struct CoordinatorServerOptions {
  // Interface to listen on; "0.0.0.0" for every interface.
  std::string host = "127.0.0.1";
  // 0: any free port; port() tells which.
  int port = 0;
  // How often the ticker checks worker liveness. Zero: worker_timeout / 4, at most 1 s.
  absl::Duration liveness_interval = absl::ZeroDuration();
  CoordinatorOptions coordinator;
  // TLS, token and request size limit (docs/SERVICE.md, "Security"). security.token grants
  // every role.
  ServerSecurity security;
  // Per-role tokens (core/rpc/role_auth.h): each RPC needs its role (WorkerHeartbeat,
  // WatchAssignment, GetSplit: worker; RegisterDataset: trainer or admin; GetOrCreateJob,
  // GetElementSpec, ClientHeartbeat, ReleaseConsumer: trainer; GetStatus: admin). every_role empty:
  // security.token.
  RoleTokens role_tokens;
  // RegisterDataset refuses graphs naming files outside these folders (none: no restriction)
  // or over these bounds.
  DataRoots data_roots;
  DatasetLimits dataset_limits;
  // Per-identity rate limits (docs/SERVICE.md, "Admission"); the quotas are in `coordinator`.
  AdmissionRates admission_rates;
  // Test only: GrpcCoordinatorService's before_cancellation_check.
  GrpcCoordinatorService::CancellationCheckHook before_cancellation_check;
  // Test only: how a call's identity is found. nullptr: CoordinatorCallerIdentity (the peer's host).
  CallerIdentityFunction caller_identity;
};

class CoordinatorServer {
 public:
  // Builds and starts the server. UNAVAILABLE naming host:port when it cannot bind.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(CoordinatorServerOptions options);

  ~CoordinatorServer();  // Shutdown() with a zero deadline if not done yet.
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const { return port_; }
  // "host:port" as bound.
  std::string address() const;
  Coordinator& coordinator() { return *coordinator_; }

  // Stops accepting calls, gives calls in flight until `deadline` to finish, then cancels
  // them; stops the ticker. Idempotent.
  void Shutdown(absl::Duration deadline = absl::Seconds(5));

 private:
  CoordinatorServer() = default;
  void TickerLoop(absl::Duration interval);

  std::string host_;
  int port_ = 0;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<GrpcCoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  absl::Notification stop_;
  std::thread ticker_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_GRPC_COORDINATOR_SERVICE_H_
