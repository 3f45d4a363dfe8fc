// Which errors are transient: worth retrying elsewhere or later, as opposed to errors that a
// retry of the same work would meet again. The failure policy of the service rests on it
// (docs/SERVICE.md, "Failure policy"): a task whose pipeline fails with a transient error is
// left to the retry paths (consumers reconnect, the task moves with a dead worker); any other
// error fails the task's job once.
#ifndef SLUICE_CORE_UTIL_TRANSIENT_ERROR_H_
#define SLUICE_CORE_UTIL_TRANSIENT_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sluice {

// UNAVAILABLE, CANCELLED, ABORTED and DEADLINE_EXCEEDED: a peer gone or busy, a call cut or
// too slow. Every other code (OK aside) is deterministic: INVALID_ARGUMENT, RESOURCE_EXHAUSTED
// from a memory budget, DATA_LOSS from a corrupt file, NOT_FOUND, PERMISSION_DENIED, ...
inline bool IsTransientTaskError(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kCancelled ||
         code == absl::StatusCode::kAborted || code == absl::StatusCode::kDeadlineExceeded;
}

// What a consumer reading a task that its worker closed is told, given the task's pipeline
// status (OK while it runs): the pipeline's own error when it failed deterministically, else
// UNAVAILABLE `message` (read it elsewhere). A worker closes a failed task as soon as the
// coordinator moves it or fails its job, which can be before a consumer read the error: that
// consumer must still get the error, with its code, not a retryable close it would retry until
// its deadline.
inline absl::Status ClosedTaskStatus(const absl::Status& pipeline, absl::string_view message) {
  if (!pipeline.ok() && !IsTransientTaskError(pipeline.code())) return pipeline;
  return absl::UnavailableError(message);
}

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_TRANSIENT_ERROR_H_
