// What one StreamSteps frame carries to one consumer, and when a write may be buffered
// (grpc_worker_service.h). Pure functions; thread-safe.
#ifndef SLUICE_WORKER_CONSUMER_FRAME_H_
#define SLUICE_WORKER_CONSUMER_FRAME_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/support/byte_buffer.h"
#include "worker/step_buffer.h"

namespace sluice {

// The frame of `steps` for one consumer, as views for StepFrameEncoder: in coordinated mode
// only its pieces (replicas [consumer * replicas, (consumer + 1) * replicas) of each step),
// otherwise every piece. The views borrow the steps' pieces (no tensor is copied) and are
// valid while `steps` is. Replaces *out.
void ConsumerFrameViews(const std::vector<std::shared_ptr<const TaskStep>>& steps,
                        bool coordinated, int64_t consumer, int64_t replicas,
                        std::vector<WireStepView>* out);

// What `step` costs against this consumer's byte credit: StepCreditBytes of the frame step
// ConsumerFrameViews would make of it (its pieces' payload bytes + kStepCreditOverheadBytes).
size_t ConsumerStepCost(const TaskStep& step, bool coordinated, int64_t consumer,
                        int64_t replicas);

// A frame without steps carrying `status` (the stream's last frame on an error).
grpc::ByteBuffer ErrorFrame(const absl::Status& status);

// Whether the write of a frame may use gRPC's buffer_hint: only when another frame is ready to
// follow at once (`next_ready`: the reader has a step that fits the credit left, or the end),
// never on the call's first write (gRPC 1.51 can hang a call whose first write is hinted,
// PERF_NOTES.md) nor on the last. A hinted frame waits in gRPC for the next write: hinting a
// frame the stream would not follow at once could hold it back while the consumer waits for it.
bool UseBufferHint(bool first_write, bool end_of_task, bool next_ready);

}  // namespace sluice

#endif  // SLUICE_WORKER_CONSUMER_FRAME_H_
