#include "worker/stream_request.h"

#include "absl/strings/str_cat.h"
#include "core/rpc/step_frame.h"

namespace sluice {

absl::StatusOr<proto::StreamRequest> ParseStreamRequest(const grpc::ByteBuffer& first) {
  proto::ConsumerMessage message;
  absl::Status s = DecodeConsumerMessage(first, &message);
  if (!s.ok()) {
    // Bad framing or bytes that are no ConsumerMessage: the caller's bad input.
    return absl::InvalidArgumentError(absl::StrCat("StreamSteps: ", s.message()));
  }
  if (!message.has_request()) {
    return absl::InvalidArgumentError("StreamSteps: the first message must be a StreamRequest");
  }
  const proto::StreamRequest& request = message.request();
  if (request.wire_version() != proto::WIRE_VERSION_2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "StreamSteps: consumer wire version ", request.wire_version(), ", worker wire version ",
        proto::WIRE_VERSION_2, " (credits in bytes): the consumer and the worker must be of the "
        "same Sluice release"));
  }
  if (request.window_bytes() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: window_bytes must be positive, got ", request.window_bytes()));
  }
  if (request.initial_credit_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: initial_credit_bytes may not be negative, got ",
        request.initial_credit_bytes()));
  }
  if (request.compact_spec_size() > kMaxCompactSpecLeaves) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: a compact_spec of ", request.compact_spec_size(), " leaves (at most ",
        kMaxCompactSpecLeaves, ")"));
  }
  return request;
}

absl::Status CheckCompactSpecLeaves(const proto::StreamRequest& request, int64_t task_leaves) {
  if (!request.compact_headers() || task_leaves < 0 ||
      request.compact_spec_size() == task_leaves) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "StreamSteps: a compact_spec of ", request.compact_spec_size(), " leaves for task ",
      request.task_id(), " of job ", request.job_id(), ", whose values have ", task_leaves,
      " leaves"));
}

}  // namespace sluice
