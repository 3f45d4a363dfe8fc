// CoordinatorCallerIdentity: who is calling the coordinator, as the string the per-identity
// quotas and rate limits (docs/SERVICE.md, "Admission") are kept under: the authenticated
// identity when the call has one (a client certificate, "x509:<name>", or a bearer token,
// "token:<hash>": core/rpc/caller_identity.h), else the host of the call's peer address
// ("127.0.0.1", "::1"), so that one machine's unauthenticated callers share their limits.
//
// Thread safety: a pure function; thread-safe.
#ifndef SLUICE_SERVER_CALLER_IDENTITY_H_
#define SLUICE_SERVER_CALLER_IDENTITY_H_

#include <functional>
#include <string>

#include "core/rpc/caller_identity.h"  // PeerHost
#include "grpcpp/server_context.h"

namespace sluice {

// The identity of the caller of `context`'s call: its certificate or token identity, else its
// peer's host, or the whole peer string when it has no host (a Unix socket: "unix:/path").
// Never empty ("unknown" without a peer).
std::string CoordinatorCallerIdentity(const grpc::ServerContextBase& context);

// How the gRPC adapter finds a call's identity: CoordinatorCallerIdentity, or a test's fake.
using CallerIdentityFunction = std::function<std::string(const grpc::ServerContextBase&)>;

}  // namespace sluice

#endif  // SLUICE_SERVER_CALLER_IDENTITY_H_
