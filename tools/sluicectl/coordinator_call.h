// CallCoordinator: one coordinator RPC from sluicectl, retried with backoff while UNAVAILABLE /
// DEADLINE_EXCEEDED until a deadline (the service commands' --retry_deadline). Errors name the
// RPC and the coordinator's address. Thread-compatible (a function template).
#ifndef SLUICE_TOOLS_SLUICECTL_COORDINATOR_CALL_H_
#define SLUICE_TOOLS_SLUICECTL_COORDINATOR_CALL_H_

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/util/backoff.h"
#include "core/rpc/grpc_status.h"

namespace sluice {

// One coordinator RPC, retried with backoff while UNAVAILABLE / DEADLINE_EXCEEDED until
// `retry_deadline`; errors name the RPC and the coordinator.
template <typename Rpc>
absl::Status CallCoordinator(const std::string& address, absl::Duration retry_deadline,
                             const char* what, Rpc rpc) {
  const absl::Time give_up = absl::Now() + retry_deadline;
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
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

#endif  // SLUICE_TOOLS_SLUICECTL_COORDINATOR_CALL_H_
