#include "worker/grpc_worker_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/logging.h"
#include "core/util/status_macros.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/server_callback.h"
#include "worker/step_stream.h"

namespace sluice {
namespace {

int PumpThreads(int requested) {
  if (requested > 0) return requested;
  return std::clamp(NumCores(), 2, 8);
}

}  // namespace

absl::Status CheckBulkMaxFrameBytes(int64_t bytes, const WorkerServiceOptions& options,
                                    absl::string_view name) {
  const int64_t least = static_cast<int64_t>(
      std::min<size_t>(options.max_frame_bytes, static_cast<size_t>(kMaxBulkMaxFrameBytes)));
  if (bytes < least || bytes > kMaxBulkMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be in [", least, " (the frame size on gRPC), ", kMaxBulkMaxFrameBytes,
        "] bytes, got ", bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcWorkerService>> GrpcWorkerService::Create(
    TaskLookup* tasks, WorkerServiceOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pump,
                   ThreadPool::Create(PumpThreads(options.pump_threads),
                                      "the worker service's pump pool"));
  ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> open,
                   ThreadPool::Create(std::max(options.open_threads, 1),
                                      "the worker service's open pool"));
  return std::unique_ptr<GrpcWorkerService>(
      new GrpcWorkerService(tasks, options, std::move(pump), std::move(open)));
}

GrpcWorkerService::GrpcWorkerService(TaskLookup* tasks, WorkerServiceOptions options,
                                     std::unique_ptr<ThreadPool> pump,
                                     std::unique_ptr<ThreadPool> open)
    : tasks_(tasks),
      options_(options),
      auth_(options.token),
      pump_(std::move(pump)),
      open_(std::move(open)),
      replays_(std::make_shared<ReplaySlots>(options.max_concurrent_replays)),
      boot_id_(options.shared_memory ? HostBootId() : std::string()) {
  if (!boot_id_.empty()) {
    absl::StatusOr<std::unique_ptr<ShmFdServer>> fds = ShmFdServer::Create();
    if (fds.ok()) {
      shm_fds_ = *std::move(fds);
      shm_pool_ = std::make_unique<ShmSegmentPool>(ShmSegmentPoolOptions{
          .max_bytes = options.shm_pool_bytes, .idle_ttl = options.shm_pool_idle});
    } else {
      LogEvent(LogLevel::kWarning, "worker",
               absl::StrCat("shared memory off: ", fds.status().message()));
    }
  }
  if (options.bulk_data) {
    absl::StatusOr<std::unique_ptr<BulkListener>> bulk = BulkListener::Create(
        {.host = options.data_host,
         .port = options.data_port,
         .handshake_timeout = options.bulk_handshake_timeout,
         .congestion_control = options.bulk_congestion_control});
    if (bulk.ok()) {
      bulk_ = *std::move(bulk);
    } else {
      LogEvent(LogLevel::kWarning, "worker",
               absl::StrCat("bulk data channel off: ", bulk.status().message()));
    }
  }
  AddMethod(new grpc::internal::RpcServiceMethod(
      kStreamStepsMethod, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodCallback(
      0, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
             [this](grpc::CallbackServerContext* context) {
               return NewStepStream(context, StepStreamEnv{.tasks = tasks_,
                                                           .options = &options_,
                                                           .auth = &auth_,
                                                           .pump = pump_.get(),
                                                           .open = open_.get(),
                                                           .replays = replays_,
                                                           .shm_fds = shm_fds_.get(),
                                                           .shm_pool = shm_pool_.get(),
                                                           .boot_id = boot_id_,
                                                           .bulk = bulk_.get()});
             }));
}

GrpcWorkerService::~GrpcWorkerService() = default;

int GrpcWorkerService::data_port() const { return bulk_ == nullptr ? 0 : bulk_->port(); }

}  // namespace sluice
