#include "core/rpc/role_auth.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/rpc/token_auth.h"

namespace sluice {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

}  // namespace

std::string RoleNames(RoleSet roles) {
  std::vector<absl::string_view> names;
  if (roles & kWorkerRole) names.push_back("worker");
  if (roles & kTrainerRole) names.push_back("trainer");
  if (roles & kAdminRole) names.push_back("admin");
  if (names.empty()) return "none";
  return absl::StrJoin(names, " or ");
}

RoleSet RoleAuth::Granted(const grpc::ServerContextBase& context) const {
  if (!enabled()) return kEveryRole;
  const std::pair<const std::string*, RoleSet> configured[] = {
      {&tokens_.every_role, kEveryRole},
      {&tokens_.worker, kWorkerRole},
      {&tokens_.trainer, kTrainerRole},
      {&tokens_.admin, kAdminRole},
  };
  RoleSet granted = 0;
  const auto& metadata = context.client_metadata();
  auto [begin, end] = metadata.equal_range(kAuthorizationMetadata);
  for (auto it = begin; it != end; ++it) {
    const absl::string_view value(it->second.data(), it->second.size());
    if (!absl::StartsWith(value, kBearer)) continue;
    const absl::string_view token = value.substr(kBearer.size());
    // Not short-circuited: every configured token is compared in full.
    for (const auto& [expected, roles] : configured) {
      if (expected->empty()) continue;
      if (ConstantTimeEquals(token, *expected)) granted |= roles;
    }
  }
  return granted;
}

grpc::Status RoleAuth::Check(const grpc::ServerContextBase& context, RoleSet needed,
                             absl::string_view method) const {
  const RoleSet granted = Granted(context);
  if (granted & needed) return grpc::Status::OK;
  if (granted == 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat(kUnauthenticatedMessage, ": ", method, " needs the ",
                                     RoleNames(needed), " role"));
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(method, " needs the ", RoleNames(needed),
                                   " role; the caller's token grants ", RoleNames(granted)));
}

}  // namespace sluice
