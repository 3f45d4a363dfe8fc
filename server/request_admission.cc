#include "server/request_admission.h"

#include "sluice/dataset.h"
#include "core/rpc/grpc_status.h"
#include "core/util/status_macros.h"
#include "absl/strings/str_cat.h"

namespace sluice {

RequestAdmission::RequestAdmission(std::string token, DataRoots roots, DatasetLimits limits,
                                   AdmissionRates rates, CallerIdentityFunction identify)
    : auth_(std::move(token)),
      roots_(std::move(roots)),
      limits_(limits),
      identify_(identify ? std::move(identify) : CallerIdentityFunction(CoordinatorCallerIdentity)),
      status_polls_(std::make_shared<RateLimiter>(RateLimiterOptions{
          rates.status_per_second, rates.status_burst, rates.max_identities, rates.clock})),
      creates_(std::make_shared<RateLimiter>(RateLimiterOptions{
          rates.creates_per_second, rates.creates_burst, rates.max_identities, rates.clock})) {}

namespace {

grpc::Status OverRate(absl::string_view method, absl::string_view caller,
                      absl::string_view flag, const RateLimiter& limiter) {
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat(method, ": caller \"", caller, "\" is over the rate limit ", flag, " (",
                   limiter.options().per_second, " calls per second, bursts of ",
                   limiter.options().burst, "; the coordinator's flag --", flag,
                   " sets it); slow down"));
}

}  // namespace

grpc::Status RequestAdmission::AdmitStatusPoll(absl::string_view caller) const {
  if (status_polls_->Admit(caller)) return grpc::Status::OK;
  return OverRate("GetStatus", caller, "max_status_per_second", *status_polls_);
}

grpc::Status RequestAdmission::AdmitCreate(absl::string_view caller,
                                           absl::string_view method) const {
  if (creates_->Admit(caller)) return grpc::Status::OK;
  return OverRate(method, caller, "max_creates_per_second", *creates_);
}

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
