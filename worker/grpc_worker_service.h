// GrpcWorkerService: the worker's data plane, the raw bidi method
// `/sluice.proto.WorkerService/StreamSteps` over grpc::ByteBuffer (protocol: docs/SERVICE.md,
// framing: core/rpc/step_frame.h).
//
// One call serves one consumer's stream of one task: the first message is a StreamRequest; the
// worker then sends StepFrames as steps are available and credits allow (several steps per
// frame up to max_frame_steps / max_frame_bytes; a small frame waits at most coalesce_wait
// for more steps to join it; steps that arrive while a frame is being written join the next),
// the consumer's CreditGrants read as they arrive. Frames carry the consumer's pieces only (its
// R replicas in coordinated mode). The stream ends with a frame with end_of_task and status OK once the
// consumer half-closes, or with a frame carrying the pipeline's error (error_code/message) and
// that error as the call's status. A task this worker does not run is UNAVAILABLE (the consumer
// asks the coordinator again and retries); a malformed request is INVALID_ARGUMENT.
//
// Writes use buffer_hint whenever another frame is ready to follow at once, never on the first
// write (gRPC 1.51 can hang a call whose first write is hinted, PERF_NOTES.md) nor on a frame
// after which the stream would wait (the hint would hold it back).
//
// Each call is a gRPC callback reactor (step_stream.h): no thread per call, none blocked while
// a stream waits for steps or credit (the step buffer wakes the streams a new step concerns),
// so one worker serves thousands of idle streams with a fixed set of threads: gRPC's own and
// the service's pump pool (pump_threads), which runs wake-ups, and its open pool (open_threads),
// which opens streams. Its parts are
// stream_request.h (the first message), consumer_credits.h (credits) and consumer_frame.h
// (what a frame carries, when a write is buffered).
//
// Thread-safe.
#ifndef SLUICE_WORKER_GRPC_WORKER_SERVICE_H_
#define SLUICE_WORKER_GRPC_WORKER_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/support/byte_buffer.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/shm_fd_passing.h"
#include "core/rpc/shm_segment_pool.h"
#include "core/rpc/token_auth.h"
#include "core/util/thread_pool.h"
#include "worker/task_runner.h"

namespace sluice {

inline constexpr char kStreamStepsMethod[] = "/sluice.proto.WorkerService/StreamSteps";

// Finds the runner of a task on this worker (WorkerServer in production).
class TaskLookup {
 public:
  virtual ~TaskLookup() = default;
  // UNAVAILABLE when this worker does not run the task (not yet, or no longer). May block for
  // a bounded time (a consumer that arrives before its task: see WorkerServer::FindTask); the
  // service calls it on its open pool, never on gRPC's threads.
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
  // Threads that run the streams' wake-ups (a step ready, a coalescing bound) and open
  // streams (finding a task may build a replay of it); 0: the cores, from 2 to 8.
  int pump_threads = 0;
  // Threads that open streams (parse the request, find the task, build a private replay when
  // the steps asked for are gone): never the pump threads, so a slow replay build delays no
  // other stream's frames.
  int open_threads = 2;
  // Private replays (streams asking for steps no longer in memory) alive at once on this
  // worker, over all tasks; a stream that would need one more is UNAVAILABLE (its consumer
  // retries with backoff).
  int max_concurrent_replays = 8;
  // HTTP/2 keepalive (WorkerServer): the worker pings each consumer's connection after this
  // long without traffic and drops it when a ping is not answered within keepalive_timeout,
  // so that a stream whose consumer went silent (a partition, a frozen process) ends and its
  // consumer_index claim and unacknowledged steps go back. Consumers' own pings are accepted
  // however often (core/rpc/grpc_security.h). absl::InfiniteDuration(): no pings.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // After the last frame, how long to wait for the consumer to half-close before cancelling.
  absl::Duration close_grace = absl::Seconds(5);
  // Shared token every call must carry (core/rpc/token_auth.h); empty: none.
  std::string token;
  // Shared memory for consumers on this host (docs/SERVICE.md "Shared memory"): a stream whose
  // consumer offers this host's boot id gets a segment (charged to the memory budget) of twice
  // its window, clamped to [shm_min_segment_bytes, shm_max_segment_bytes] and to a quarter of
  // the memory budget's room (under 1 MiB of room: none); false: TCP only.
  bool shared_memory = true;
  size_t shm_min_segment_bytes = size_t{8} << 20;
  size_t shm_max_segment_bytes = size_t{256} << 20;
  // Warm segments (core/rpc/shm_segment_pool.h): the most bytes of segments kept after their
  // streams end for later streams of the same consumer process (0: none; charged to the
  // memory budget while kept), and how long one is kept unused.
  size_t shm_pool_bytes = size_t{512} << 20;
  absl::Duration shm_pool_idle = absl::Seconds(30);
  // The bulk data channel (core/rpc/bulk_channel.h, docs/SERVICE.md "Bulk data channel"): a
  // stream whose consumer offers it, and that neither shared memory nor compression serves,
  // sends its frames' numeric bytes on a TCP socket of its own, listening on data_host (the
  // worker's host; empty: every address) at data_port (0: any free port). false, or a port
  // that cannot be bound (logged): every byte on gRPC.
  bool bulk_data = true;
  std::string data_host;
  int data_port = 0;
  // Frames with fewer numeric bytes stay on gRPC (a socket write costs more than it saves).
  size_t bulk_min_bytes = size_t{64} << 10;
  // The bulk sockets' TCP congestion control (BulkListenerOptions::congestion_control); empty:
  // the host's default. One that cannot be set leaves the channel off (logged);
  // sluice-worker checks its --bulk_congestion_control first (CheckBulkCongestionControl).
  std::string bulk_congestion_control;
  // max_frame_bytes for a stream once its bulk socket is up (at least max_frame_bytes): the
  // steps ready when its sender frees up go in one frame up to this (docs/SERVICE.md "Bulk data
  // channel", coalescing). sluice-worker --bulk_max_frame_bytes (CheckBulkMaxFrameBytes).
  size_t bulk_max_frame_bytes = size_t{4} << 20;
  // A consumer's connection gets this long to present its token; a write to a consumer that
  // reads nothing for bulk_write_timeout ends its stream.
  absl::Duration bulk_handshake_timeout = absl::Seconds(5);
  absl::Duration bulk_write_timeout = absl::Seconds(60);
  // Fault tests only (> 0): every stream's bulk socket is cut after this many bytes, in the
  // middle of a frame (BulkSenderFaults::cut_after_bytes).
  uint64_t TEST_bulk_cut_after_bytes = 0;
  // Fault tests only: the next *TEST_bulk_stalls streams that take the bulk channel (each
  // takes one, process-wide for whoever shares the counter) write TEST_bulk_stall_after_bytes
  // bytes on it and then stall, socket open, until their stream ends (BulkSenderFaults).
  std::shared_ptr<std::atomic<int>> TEST_bulk_stalls;
  uint64_t TEST_bulk_stall_after_bytes = 0;
};

// The largest bulk_max_frame_bytes a worker accepts (1 GiB). A frame's steps are in memory
// already (the cap coalesces, it allocates nothing), so the bound is there to catch a value in
// the wrong unit (bytes meant as KiB) and to keep the frame arithmetic far from overflow: a
// frame's header and wake-up are nothing next to a fraction of this.
inline constexpr int64_t kMaxBulkMaxFrameBytes = int64_t{1} << 30;

// A requested bulk_max_frame_bytes (sluice-worker's --bulk_max_frame_bytes) checked against
// `options`: INVALID_ARGUMENT naming `name` and the value unless it lies in
// [options.max_frame_bytes, kMaxBulkMaxFrameBytes] (below max_frame_bytes it would change
// nothing: frames on gRPC hold that much already); OK otherwise.
absl::Status CheckBulkMaxFrameBytes(int64_t bytes, const WorkerServiceOptions& options,
                                    absl::string_view name);

class GrpcWorkerService : public grpc::Service {
 public:
  // The service with its pump and open pools started. `tasks` is borrowed and must outlive the
  // service. The service must outlive the server serving it (shut the server down first: that
  // ends every stream). RESOURCE_EXHAUSTED "cannot start a thread for the worker service's pump
  // pool ..." (or open pool) when the system refuses a thread (core/util/start_thread.h).
  static absl::StatusOr<std::unique_ptr<GrpcWorkerService>> Create(
      TaskLookup* tasks, WorkerServiceOptions options = {});
  ~GrpcWorkerService() override;

  // The bulk data channel's port; 0 when it is off.
  int data_port() const;

 private:
  GrpcWorkerService(TaskLookup* tasks, WorkerServiceOptions options,
                    std::unique_ptr<ThreadPool> pump, std::unique_ptr<ThreadPool> open);

  TaskLookup* const tasks_;
  const WorkerServiceOptions options_;
  const TokenAuth auth_;
  const std::unique_ptr<ThreadPool> pump_;
  const std::unique_ptr<ThreadPool> open_;
  const std::shared_ptr<ReplaySlots> replays_;
  // Hands segments to co-located consumers; null when shared memory is off or unavailable.
  std::unique_ptr<ShmFdServer> shm_fds_;
  // Segments kept between a consumer's streams; null with shm_fds_.
  std::unique_ptr<ShmSegmentPool> shm_pool_;
  const std::string boot_id_;
  // The bulk data channel's listener; null when it is off or could not bind.
  std::unique_ptr<BulkListener> bulk_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_GRPC_WORKER_SERVICE_H_
