// StepStream: the gRPC callback reactor serving one StreamSteps call (grpc_worker_service.h has
// the protocol and the frame rules). No thread of its own and none blocked while it waits:
//  - reads (the StreamRequest, then CreditGrants, then the half-close) are reactor reads, each
//    CreditGrant applied in OnReadDone (consumer_credits.h);
//  - steps are pulled from the StepReader when there are some: when none is buffered for this
//    consumer, the stream registers a one-shot wake-up with the step buffer
//    (StepBuffer::NotifyWhenReady), which a push of a step this stream can take (or the end,
//    an error, a superseding stream) fires; the wake-up runs the stream on the service's pump
//    pool;
//  - one write is in flight at a time; steps that arrive meanwhile join the next frame;
//  - a small frame waits up to coalesce_wait for more steps (a grpc::Alarm bounds the wait);
//  - after the last frame, close_grace for the consumer's half-close (a grpc::Alarm), then the
//    call is cancelled.
// Lifetime: gRPC deletes nothing; OnDone() deletes the stream. Wake-ups, alarms and posted work
// reach it through a shared Link that OnDone() clears first, so none of them touches a deleted
// stream; OnDone() also removes its registration with the step buffer.
#ifndef SLUICE_WORKER_STEP_STREAM_H_
#define SLUICE_WORKER_STEP_STREAM_H_

#include "core/rpc/token_auth.h"
#include "core/util/thread_pool.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "worker/grpc_worker_service.h"

namespace sluice {

// What every stream of one GrpcWorkerService shares; all borrowed, outliving the streams.
struct StepStreamEnv {
  TaskLookup* tasks = nullptr;
  const WorkerServiceOptions* options = nullptr;
  const TokenAuth* auth = nullptr;
  ThreadPool* pump = nullptr;  // runs wake-ups, alarms and frames
  ThreadPool* open = nullptr;  // opens streams (finding a task may build a private replay)
  std::shared_ptr<ReplaySlots> replays;  // bounds the private replays alive at once
  ShmFdServer* shm_fds = nullptr;  // null: no shared memory
  ShmSegmentPool* shm_pool = nullptr;  // set with shm_fds
  std::string boot_id;             // this host's (HostBootId)
  BulkListener* bulk = nullptr;    // null: no bulk data channel
};

// A new reactor for one StreamSteps call; it deletes itself in OnDone().
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStepStream(
    grpc::CallbackServerContext* context, const StepStreamEnv& env);

}  // namespace sluice

#endif  // SLUICE_WORKER_STEP_STREAM_H_
