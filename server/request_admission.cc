#include "server/request_admission.h"

#include "sluice/dataset.h"
#include "core/rpc/grpc_status.h"
#include "core/util/status_macros.h"

namespace sluice {

grpc::Status RequestAdmission::CheckDataset(const proto::RegisterDatasetRequest& request) const {
  if (request.has_dataset()) {
    absl::Status s = CheckDatasetLimits(request.dataset(), limits_);
    if (s.ok()) s = roots_.CheckDataset(request.dataset());
    return ToGrpcStatus(s);
  }
  absl::Status s = CheckPipelineLimits(request.pipeline(), limits_);
  if (!s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<Dataset> parsed = Dataset::Parse(request.pipeline());
  if (!parsed.ok()) return grpc::Status::OK;  // the Coordinator reports the parser's error
  s = CheckDatasetLimits(parsed->def(), limits_);
  if (s.ok()) s = roots_.CheckDataset(parsed->def());
  return ToGrpcStatus(s);
}

}  // namespace sluice
