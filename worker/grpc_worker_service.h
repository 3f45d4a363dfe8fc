// GrpcWorkerService: the worker's data plane, the raw bidi method
// `/sluice.proto.WorkerService/StreamSteps` over grpc::ByteBuffer (protocol: docs/SERVICE.md,
// framing: core/rpc/step_frame.h).
//
// One call serves one consumer's stream of one task: the first message is a StreamRequest; the
// worker then sends StepFrames as steps are available and credits allow (several steps per
// frame up to max_frame_steps / max_frame_bytes; a small frame waits at most coalesce_wait
// for more steps to join it), the consumer's CreditGrants arriving on a
// reader thread of the call. Frames carry the consumer's pieces only (its R replicas in
// coordinated mode). The stream ends with a frame with end_of_task and status OK once the
// consumer half-closes, or with a frame carrying the pipeline's error (error_code/message) and
// that error as the call's status. A task this worker does not run is UNAVAILABLE (the consumer
// asks the coordinator again and retries); a malformed request is INVALID_ARGUMENT.
//
// Writes use buffer_hint whenever another frame is ready to follow at once, never on the first
// write (gRPC 1.51 can hang a call whose first write is hinted, PERF_NOTES.md) nor on a frame
// after which the stream would wait (the hint would hold it back).
//
// The handler only sequences the call; its parts are stream_request.h (the first message),
// consumer_credits.h (credits and the close handshake) and consumer_frame.h (what a frame
// carries, when a write is buffered).
//
// Synchronous gRPC API: each call runs on a gRPC thread of its own. Thread-safe.
#ifndef SLUICE_WORKER_GRPC_WORKER_SERVICE_H_
#define SLUICE_WORKER_GRPC_WORKER_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "core/rpc/token_auth.h"
#include "worker/task_runner.h"

namespace sluice {

inline constexpr char kStreamStepsMethod[] = "/sluice.proto.WorkerService/StreamSteps";

// Finds the runner of a task on this worker (WorkerServer in production).
class TaskLookup {
 public:
  virtual ~TaskLookup() = default;
  // UNAVAILABLE when this worker does not run the task (not yet, or no longer).
  virtual absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t job_id,
                                                               int64_t task_id) = 0;
};

struct WorkerServiceOptions {
  // Steps are batched into one frame up to these limits (at least one step a frame).
  size_t max_frame_steps = 64;
  size_t max_frame_bytes = size_t{1} << 20;
  // Coalescing: a frame whose steps cost less than coalesce_bytes waits up to coalesce_wait for
  // more steps to join it (until the frame is full, the credit is spent, the task ends, or a
  // step does not fit), never longer; zero sends what is ready at once.
  size_t coalesce_bytes = size_t{64} << 10;
  absl::Duration coalesce_wait = absl::Microseconds(500);
  // How often a waiting stream checks whether its call was cancelled.
  absl::Duration poll_interval = absl::Milliseconds(50);
  // After the last frame, how long to wait for the consumer to half-close before cancelling.
  absl::Duration close_grace = absl::Seconds(5);
  // Shared token every call must carry (core/rpc/token_auth.h); empty: none.
  std::string token;
};

class GrpcWorkerService : public grpc::Service {
 public:
  // `tasks` is borrowed and must outlive the service.
  GrpcWorkerService(TaskLookup* tasks, WorkerServiceOptions options = {});

 private:
  grpc::Status StreamSteps(grpc::ServerContext* context,
                           grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream);
  // Adds to `steps` (a frame about to be sent with `credit` left before it) the steps that
  // become ready within coalesce_wait while the frame is small (see WorkerServiceOptions);
  // sets *end when the task ends meanwhile.
  void Coalesce(StepReader* reader, const StepLimits& limits, int64_t credit,
                std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end) const;

  TaskLookup* const tasks_;
  const WorkerServiceOptions options_;
  const TokenAuth auth_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_GRPC_WORKER_SERVICE_H_
