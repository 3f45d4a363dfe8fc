// The first message of a StreamSteps call (grpc_worker_service.h): a StreamRequest, checked
// before the worker looks up the task. Pure; thread-safe.
#ifndef SLUICE_WORKER_STREAM_REQUEST_H_
#define SLUICE_WORKER_STREAM_REQUEST_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/worker.pb.h"

namespace sluice {

// The most leaves a StreamRequest's compact_spec may have (a value with more leaves streams
// with full headers).
inline constexpr int kMaxCompactSpecLeaves = 16384;

// The largest message a consumer sends on a StreamSteps call: a StreamRequest whose
// compact_spec has kMaxCompactSpecLeaves leaves of rank up to 64 (about 4 MiB), and small
// CreditGrants. The worker's gRPC receive limit (worker_server.h).
inline constexpr int kMaxConsumerMessageBytes = 4 << 20;

// The StreamRequest in `first`. INVALID_ARGUMENT for bad framing, bytes that are no
// ConsumerMessage, a first message that is not a StreamRequest, window_bytes <= 0, a negative
// initial_credit_bytes, or a compact_spec of more than kMaxCompactSpecLeaves leaves;
// FAILED_PRECONDITION for a wire version other than WIRE_VERSION_2 (a consumer of a release
// whose credits were in steps sends WIRE_VERSION_1). Messages start "StreamSteps: ".
absl::StatusOr<proto::StreamRequest> ParseStreamRequest(const grpc::ByteBuffer& first);

// INVALID_ARGUMENT when `request` asks for compact headers with a spec whose leaf count is not
// the task's (`task_leaves`; -1: unknown, not checked).
absl::Status CheckCompactSpecLeaves(const proto::StreamRequest& request, int64_t task_leaves);

}  // namespace sluice

#endif  // SLUICE_WORKER_STREAM_REQUEST_H_
