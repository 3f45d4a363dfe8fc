#include "server/caller_identity.h"

#include "absl/strings/match.h"
#include "core/rpc/caller_identity.h"

namespace sluice {

std::string CoordinatorCallerIdentity(const grpc::ServerContextBase& context) {
  // An authenticated caller (a client certificate, a bearer token) is that identity wherever it
  // calls from; others are kept under their host.
  std::string authenticated = CallerIdentity(context);
  if (absl::StartsWith(authenticated, "x509:") || absl::StartsWith(authenticated, "token:")) {
    return authenticated;
  }
  return PeerHost(context.peer());
}

}  // namespace sluice
