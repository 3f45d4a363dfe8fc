// RequestAdmission: what the coordinator's gRPC adapter checks before a request reaches the
// Coordinator: the caller's role on every call (per-role tokens, core/rpc/role_auth.h), on
// WorkerHeartbeat the advertised address against the caller's certificate, and on
// RegisterDataset the graph bounds and the data roots (the coordinator itself lists and indexes
// files for some policies, so it reads only under its roots too). docs/SERVICE.md, "Security".
//
//   if (grpc::Status s = admission_.Authenticate(*context, kWorkerRole, "WorkerHeartbeat");
//       !s.ok()) return s;
//
// Thread safety: immutable; thread-safe.
#ifndef SLUICE_SERVER_REQUEST_ADMISSION_H_
#define SLUICE_SERVER_REQUEST_ADMISSION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/data/data_roots.h"
#include "core/data/dataset_limits.h"
#include "core/rpc/role_auth.h"
#include "grpcpp/server_context.h"
#include "proto/coordinator.pb.h"

namespace sluice {

class RequestAdmission {
 public:
  // Admits everything (no token, no roots) within the default graph bounds.
  RequestAdmission() = default;
  RequestAdmission(RoleTokens tokens, DataRoots roots, DatasetLimits limits)
      : auth_(std::move(tokens)), roots_(std::move(roots)), limits_(limits) {}
  // `token` grants every role (the shared --token_file).
  RequestAdmission(std::string token, DataRoots roots, DatasetLimits limits)
      : RequestAdmission(RoleTokens{.every_role = std::move(token)}, std::move(roots), limits) {}

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

 private:
  RoleAuth auth_;
  DataRoots roots_;
  DatasetLimits limits_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_REQUEST_ADMISSION_H_
