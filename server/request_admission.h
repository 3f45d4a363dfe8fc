// RequestAdmission: what the coordinator's gRPC adapter checks before a request reaches the
// Coordinator: the caller's role on every call (per-role tokens, core/rpc/role_auth.h), on
// WorkerHeartbeat the advertised address against the caller's certificate, on RegisterDataset
// the graph bounds and the data roots (the coordinator itself lists and indexes files for some
// policies, so it reads only under its roots too), and per caller identity (caller_identity.h)
// the rate of status polls and of requests that create state (RegisterDataset,
// GetOrCreateJob). docs/SERVICE.md, "Security" and "Admission". The quotas on what an identity
// holds are the Coordinator's (CoordinatorOptions::max_jobs_per_identity and the others), as
// they need its state.
//
//   if (grpc::Status s = admission_.Authenticate(*context, kAdminRole, "GetStatus");
//       !s.ok()) return s;
//   const std::string caller = admission_.Identify(*context);
//   if (grpc::Status s = admission_.AdmitStatusPoll(caller); !s.ok()) return s;
//
// Thread safety: thread-safe (copies share their rate limiters).
#ifndef SLUICE_SERVER_REQUEST_ADMISSION_H_
#define SLUICE_SERVER_REQUEST_ADMISSION_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/data/data_roots.h"
#include "core/data/dataset_limits.h"
#include "core/rpc/role_auth.h"
#include "grpcpp/server_context.h"
#include "proto/coordinator.pb.h"
#include "server/caller_identity.h"
#include "server/rate_limiter.h"

namespace sluice {

// Per-identity rates (token buckets, rate_limiter.h). A rate of 0 or less: no limit.
struct AdmissionRates {
  // GetStatus calls per second of one identity (a page counts as a call), and the burst it
  // may spend at once (sluicectl status following pages).
  double status_per_second = 100;
  double status_burst = 200;
  // RegisterDataset and GetOrCreateJob calls per second of one identity, and their burst.
  double creates_per_second = 200;
  double creates_burst = 400;
  // Identities tracked at most (RateLimiterOptions::max_keys).
  size_t max_identities = 10000;
  // Time source. Borrowed: must outlive the admission. nullptr: the real clock.
  Clock* clock = nullptr;
};

class RequestAdmission {
 public:
  // Admits everything (no token, no roots, no rate limit) within the default graph bounds.
  RequestAdmission() : RequestAdmission(RoleTokens(), DataRoots(), DatasetLimits(), NoRates()) {}
  // `identify` finds a call's identity; nullptr: CoordinatorCallerIdentity.
  RequestAdmission(RoleTokens tokens, DataRoots roots, DatasetLimits limits,
                   AdmissionRates rates = AdmissionRates(),
                   CallerIdentityFunction identify = nullptr);
  // `token` grants every role (the shared --token_file).
  RequestAdmission(std::string token, DataRoots roots, DatasetLimits limits,
                   AdmissionRates rates = AdmissionRates(),
                   CallerIdentityFunction identify = nullptr)
      : RequestAdmission(RoleTokens{.every_role = std::move(token)}, std::move(roots), limits,
                         rates, std::move(identify)) {}

  // RoleAuth::Check: OK when the call's token grants a role of `needed`; UNAUTHENTICATED
  // "missing or invalid token: ..." or PERMISSION_DENIED naming `method` and the role.
  grpc::Status Authenticate(const grpc::ServerContextBase& context, RoleSet needed,
                            absl::string_view method) const {
    return auth_.Check(context, needed, method);
  }
  bool authenticates() const { return auth_.enabled(); }

  // The warning a coordinator logs once at start when it listens on `host` beyond loopback
  // (not 127.x, ::1 or localhost) without any authentication (no token of any kind, no
  // client certificates): any caller that reaches it is every role. Empty when there is
  // nothing to warn about.
  static std::string OpenServiceWarning(absl::string_view host, bool authenticated);

  // A worker is the address it advertises only if its certificate says so: when the caller
  // presented a verified client certificate (mutual TLS), the host of `worker_address`
  // ("host:port", "[v6]:port") must be one of the certificate's subject alternative names (a
  // "*.domain" name matches one label). PERMISSION_DENIED naming the address and the
  // certificate's names otherwise; OK without a client certificate (the role check is all).
  static absl::Status CheckWorkerAddress(const grpc::ServerContextBase& context,
                                         absl::string_view worker_address);

  // INVALID_ARGUMENT for a graph (or pipeline expression) over the bounds, PERMISSION_DENIED
  // for a file outside the data roots. A pipeline expression that does not parse is left to
  // the Coordinator, which reports the parser's error.
  grpc::Status CheckDataset(const proto::RegisterDatasetRequest& request) const;

  // The identity the call's limits and quotas are kept under (CoordinatorCallerIdentity by default).
  std::string Identify(const grpc::ServerContextBase& context) const { return identify_(context); }
  // RESOURCE_EXHAUSTED naming the limit (status_per_second) and its flag when `caller` polls
  // status faster than AdmissionRates allow; OK otherwise.
  grpc::Status AdmitStatusPoll(absl::string_view caller) const;
  // The same for RegisterDataset and GetOrCreateJob (creates_per_second).
  grpc::Status AdmitCreate(absl::string_view caller, absl::string_view method) const;

 private:
  static AdmissionRates NoRates() {
    AdmissionRates r;
    r.status_per_second = 0;
    r.creates_per_second = 0;
    return r;
  }

  RoleAuth auth_;
  DataRoots roots_;
  DatasetLimits limits_;
  CallerIdentityFunction identify_;
  std::shared_ptr<RateLimiter> status_polls_;
  std::shared_ptr<RateLimiter> creates_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_REQUEST_ADMISSION_H_
