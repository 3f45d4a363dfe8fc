// RequestAdmission: what the coordinator's gRPC adapter checks before a request reaches the
// Coordinator: the shared token on every call, and on RegisterDataset the graph bounds and the
// data roots (the coordinator itself lists and indexes files for some policies, so it reads
// only under its roots too). docs/SERVICE.md, "Security".
//
//   if (grpc::Status s = admission_.Authenticate(*context); !s.ok()) return s;
//
// Thread safety: immutable; thread-safe.
#ifndef SLUICE_SERVER_REQUEST_ADMISSION_H_
#define SLUICE_SERVER_REQUEST_ADMISSION_H_

#include <string>

#include "core/data/data_roots.h"
#include "core/data/dataset_limits.h"
#include "core/rpc/token_auth.h"
#include "grpcpp/server_context.h"
#include "proto/coordinator.pb.h"

namespace sluice {

class RequestAdmission {
 public:
  // Admits everything (no token, no roots) within the default graph bounds.
  RequestAdmission() = default;
  RequestAdmission(std::string token, DataRoots roots, DatasetLimits limits)
      : auth_(std::move(token)), roots_(std::move(roots)), limits_(limits) {}

  // TokenAuth::Check: OK, or UNAUTHENTICATED "missing or invalid token".
  grpc::Status Authenticate(const grpc::ServerContextBase& context) const {
    return auth_.Check(context);
  }

  // INVALID_ARGUMENT for a graph (or pipeline expression) over the bounds, PERMISSION_DENIED
  // for a file outside the data roots. A pipeline expression that does not parse is left to
  // the Coordinator, which reports the parser's error.
  grpc::Status CheckDataset(const proto::RegisterDatasetRequest& request) const;

 private:
  TokenAuth auth_;
  DataRoots roots_;
  DatasetLimits limits_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_REQUEST_ADMISSION_H_
