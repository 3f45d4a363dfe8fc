// The data plane's wire codec, shared by the worker (encode) and the client (decode).
//
// A StepFrame travels as one grpc::ByteBuffer laid out as
//
//   [fixed32 little-endian L][L bytes: serialized proto::StepFrameHeader][payload]
//
// where the payload is, for every step, every piece and every tensor of the header in order,
// TensorHeader.byte_size raw bytes: a numeric tensor's packed little-endian data, or a string
// tensor's elements back to back (their lengths in TensorHeader.string_lengths). Nothing else
// follows. Example: one step with one piece holding an int32 tensor [1, 2] is
// [L][header{steps{task_step:0 pieces{tensors{dtype:INT32 shape:2 byte_size:8}}}}][01 00 00 00
// 02 00 00 00].
//
// Encoding is zero-copy for numeric tensors of kZeroCopyMinBytes or more: their slices point at
// the tensors' own buffers and hold a reference that is dropped when gRPC is done with the
// bytes. Smaller tensors and strings are copied next to the header (fewer, larger slices).
// Decoding copies every tensor's bytes exactly once, from the received slices straight into
// one buffer per frame from an injectable TensorAllocator (pinned host memory, a pool, ...):
// the frame's numeric tensors are views of it at 64-byte aligned offsets (one allocation a
// frame, however many steps and tensors it carries; the buffer lives while any of them does).
// Error messages are built only on the error path.
//
// Consumer -> worker messages (StreamRequest, CreditGrant) are [fixed32 L][ConsumerMessage].
//
// All functions are thread-compatible and never crash on malformed input.
#ifndef SLUICE_CORE_STEP_FRAME_H_
#define SLUICE_CORE_STEP_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "sluice/tensor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/worker.pb.h"

namespace sluice {

// One consumer's share of one step: the pieces of its local replicas, each piece the leaves of
// one element in flatten order.
struct WireStep {
  int64_t task_step = 0;
  int64_t global_step = -1;      // the job's step for step-sharded tasks, else -1
  int64_t num_real_pieces = 0;   // of the whole step; the rest are size-0 dummies
  std::vector<std::vector<Tensor>> pieces;
};

struct StepFrame {
  std::vector<WireStep> steps;
  bool end_of_task = false;
  // Not OK: the task failed after these steps (StepFrameHeader.error_code / error_message).
  absl::Status status;
};

// Allocates the destination buffer of one decoded frame's numeric tensors, `bytes` (> 0).
// Returning nullptr makes decoding fail with RESOURCE_EXHAUSTED.
using TensorAllocator = std::function<std::shared_ptr<TensorBuffer>(size_t bytes)>;

// 64-byte aligned host memory that is not zero-filled (every byte is overwritten by decoding).
std::shared_ptr<TensorBuffer> AllocateUninitializedHost(size_t bytes);

// Numeric tensors at least this large are sent from their own buffers; smaller ones are copied.
inline constexpr size_t kZeroCopyMinBytes = 4096;

// Bytes of tensor payload the frame carries (what a bandwidth figure counts).
size_t StepPayloadBytes(const WireStep& step);

// What a step costs against a consumer's byte credit (proto/worker.proto, WIRE_VERSION_2): its
// payload bytes plus kStepCreditOverheadBytes, so that steps of size-0 tensors are not free.
// The worker computes the same figure from the pieces it sends (worker/consumer_frame.h).
inline constexpr size_t kStepCreditOverheadBytes = 64;
size_t StepCreditBytes(const WireStep& step);
// The credit at which a worker sends the consumer's next step whatever its cost: window -
// window / 4 (at least 1). The consumer grants whenever a quarter of its window is free, so a
// stream blocked on a step larger than its credit always gets there.
int64_t CreditForAnyStep(int64_t window_bytes);

// Encodes `frame`. INVALID_ARGUMENT for an invalid tensor or a tensor not in host memory.
absl::Status EncodeStepFrame(const StepFrame& frame, grpc::ByteBuffer* out);

// Decodes a frame. DATA_LOSS when bytes are missing or left over (a short or padded frame),
// INVALID_ARGUMENT when the header does not parse or describes an impossible tensor (bad
// dtype, negative dimension, byte_size inconsistent with the shape), RESOURCE_EXHAUSTED when the
// allocator fails. `allocator` may be empty (AllocateUninitializedHost). On error *out is
// unspecified.
absl::Status DecodeStepFrame(const grpc::ByteBuffer& buffer, const TensorAllocator& allocator,
                             StepFrame* out);

// [fixed32 L][ConsumerMessage] framing for the consumer's messages.
grpc::ByteBuffer EncodeConsumerMessage(const proto::ConsumerMessage& message);
// DATA_LOSS / INVALID_ARGUMENT as DecodeStepFrame.
absl::Status DecodeConsumerMessage(const grpc::ByteBuffer& buffer, proto::ConsumerMessage* out);

}  // namespace sluice

#endif  // SLUICE_CORE_STEP_FRAME_H_
