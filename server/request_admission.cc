#include "server/request_admission.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/rpc/caller_identity.h"
#include "core/rpc/grpc_status.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

// "host:port" -> "host", "[::1]:5" -> "::1"; no port: the whole address.
absl::string_view AddressHost(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close != absl::string_view::npos) return address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return address;
  return address.substr(0, colon);
}

// A certificate name against a host: equal ignoring case, or "*.rest" against one more label.
bool NameMatches(absl::string_view name, absl::string_view host) {
  if (absl::EqualsIgnoreCase(name, host)) return true;
  if (!absl::StartsWith(name, "*.")) return false;
  const size_t dot = host.find('.');
  return dot != absl::string_view::npos && dot > 0 &&
         absl::EqualsIgnoreCase(name.substr(1), host.substr(dot));
}

}  // namespace

std::string RequestAdmission::OpenServiceWarning(absl::string_view host, bool authenticated) {
  if (authenticated) return "";
  if (absl::StartsWith(host, "127.") || host == "::1" || host == "[::1]" ||
      absl::EqualsIgnoreCase(host, "localhost")) {
    return "";
  }
  return absl::StrCat(
      "no authentication (no --token_file, --worker_token_file/--trainer_token_file/"
      "--admin_token_file or --tls_client_auth) while listening on ",
      host,
      ": any caller that reaches it can act as a worker, trainer or operator (docs/SERVICE.md, "
      "\"Identity and roles\")");
}

absl::Status RequestAdmission::CheckWorkerAddress(const grpc::ServerContextBase& context,
                                                  absl::string_view worker_address) {
  const std::vector<std::string> names = CallerCertificateNames(context);
  if (names.empty()) return absl::OkStatus();
  const absl::string_view host = AddressHost(worker_address);
  for (const std::string& name : names) {
    if (NameMatches(name, host)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("WorkerHeartbeatRequest.worker_address ", worker_address,
                   ": the host is not a subject alternative name of the caller's certificate (",
                   absl::StrJoin(names, ", "), "); a worker may only advertise its own address"));
}

RequestAdmission::RequestAdmission(RoleTokens tokens, DataRoots roots, DatasetLimits limits,
                                   AdmissionRates rates, CallerIdentityFunction identify)
    : auth_(std::move(tokens)),
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
