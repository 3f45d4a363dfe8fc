// The first message of a StreamSteps call (grpc_worker_service.h): a StreamRequest, checked
// before the worker looks up the task. Pure; thread-safe.
#ifndef SLUICE_WORKER_STREAM_REQUEST_H_
#define SLUICE_WORKER_STREAM_REQUEST_H_

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/worker.pb.h"

namespace sluice {

// The StreamRequest in `first`. INVALID_ARGUMENT for bad framing, bytes that are no
// ConsumerMessage, a first message that is not a StreamRequest, or window_bytes <= 0;
// FAILED_PRECONDITION for a wire version other than WIRE_VERSION_2 (a consumer of a release
// whose credits were in steps sends WIRE_VERSION_1). Messages start "StreamSteps: ".
absl::StatusOr<proto::StreamRequest> ParseStreamRequest(const grpc::ByteBuffer& first);

}  // namespace sluice

#endif  // SLUICE_WORKER_STREAM_REQUEST_H_
