// Per-role bearer tokens: workers, trainers (consumers) and operators authenticate separately,
// and each server method checks the role it needs. docs/SERVICE.md, "Security".
//
//   RoleAuth auth({.worker = w, .trainer = t, .admin = a});
//   // at the top of WorkerHeartbeat:
//   if (grpc::Status s = auth.Check(*context, kWorkerRole, "WorkerHeartbeat"); !s.ok()) return s;
//
// A token grants the roles it was configured for; `every_role` (the historical shared
// --token_file) grants all three. With no token configured at all every call passes (an open
// service; the coordinator warns about it at start when it listens beyond loopback).
//
//   no configured token in the call      UNAUTHENTICATED "missing or invalid token: <method>
//                                        needs the <role> role"
//   a token without the needed role      PERMISSION_DENIED "<method> needs the <role> role;
//                                        the caller's token grants <roles>"
//
// Every configured token is compared in constant time whatever the call carries
// (ConstantTimeEquals), so a refusal says nothing about how close a guess was.
//
// Thread safety: RoleAuth is immutable and thread-safe.
#ifndef SLUICE_CORE_RPC_ROLE_AUTH_H_
#define SLUICE_CORE_RPC_ROLE_AUTH_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace sluice {

// A set of roles, as bits.
using RoleSet = uint32_t;
inline constexpr RoleSet kWorkerRole = 1;   // sluice-worker: heartbeats, splits
inline constexpr RoleSet kTrainerRole = 2;  // consumers: datasets, jobs, client heartbeats
inline constexpr RoleSet kAdminRole = 4;    // operators: status (sluicectl status)
inline constexpr RoleSet kEveryRole = kWorkerRole | kTrainerRole | kAdminRole;

// "worker", "trainer", "admin" joined with " or " ("none" for an empty set).
std::string RoleNames(RoleSet roles);

// The tokens of a server; each empty string: that token is not configured.
struct RoleTokens {
  std::string every_role = {};  // --token_file: all roles
  std::string worker = {};      // --worker_token_file
  std::string trainer = {};     // --trainer_token_file
  std::string admin = {};       // --admin_token_file

  bool any() const {
    return !every_role.empty() || !worker.empty() || !trainer.empty() || !admin.empty();
  }
};

class RoleAuth {
 public:
  explicit RoleAuth(RoleTokens tokens = {}) : tokens_(std::move(tokens)) {}

  bool enabled() const { return tokens_.any(); }

  // The roles the call's bearer token grants: kEveryRole when no token is configured, 0 when
  // the call carries none of the configured tokens.
  RoleSet Granted(const grpc::ServerContextBase& context) const;

  // OK when the call's token grants any role of `needed`; else the errors above, `method`
  // naming the call.
  grpc::Status Check(const grpc::ServerContextBase& context, RoleSet needed,
                     absl::string_view method) const;

 private:
  RoleTokens tokens_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_ROLE_AUTH_H_
