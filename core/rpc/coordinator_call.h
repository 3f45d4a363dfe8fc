// CallCoordinator: one coordinator RPC, retried with jittered backoff while UNAVAILABLE /
// DEADLINE_EXCEEDED until a deadline. Used by the client library (DistributeDatasetFromService)
// and by sluicectl. Errors name the RPC and the coordinator's address. Thread-compatible (a
// function template).
#ifndef SLUICE_CORE_RPC_COORDINATOR_CALL_H_
#define SLUICE_CORE_RPC_COORDINATOR_CALL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/rpc/grpc_status.h"
#include "core/util/backoff.h"
#include "grpcpp/grpcpp.h"

namespace sluice {

// Calls `rpc` (one attempt: a fresh context with `rpc_deadline`) until it succeeds, fails with
// a code other than UNAVAILABLE / DEADLINE_EXCEEDED, or `retry_deadline` passes; errors are
// "<what> on coordinator <address>: <message>" with the RPC's code.
template <typename Rpc>
absl::Status CallCoordinator(const std::string& address, absl::Duration rpc_deadline,
                             absl::Duration retry_deadline, const char* what, Rpc rpc) {
  const absl::Time give_up = absl::Now() + retry_deadline;
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_deadline));
    absl::Status s = FromGrpcStatus(rpc(&context));
    if (s.ok()) return s;
    const bool retry = s.code() == absl::StatusCode::kUnavailable ||
                       s.code() == absl::StatusCode::kDeadlineExceeded;
    const absl::Duration wait = backoff.Next();
    if (!retry || absl::Now() + wait > give_up) {
      return absl::Status(s.code(),
                          absl::StrCat(what, " on coordinator ", address, ": ", s.message()));
    }
    absl::SleepFor(wait);
  }
}

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_COORDINATOR_CALL_H_
