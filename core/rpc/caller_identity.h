// Who is calling: a short, stable string naming the caller of a server call, for per-caller
// bookkeeping (quotas, rate limits, logs). It never holds a secret.
//
//   const std::string who = CallerIdentity(*context);  // "x509:worker-3.example", ...
//
// In order of preference:
//   "x509:<name>"  a verified client certificate (mutual TLS): its first subject alternative
//                  name (DNS, IP or URI as gRPC reports it), else its common name;
//   "token:<hex>"  a bearer token (`authorization: Bearer <token>`): the first 16 hex digits of
//                  the token's SHA-256, so that callers sharing a token share an identity and
//                  the token itself never shows;
//   "peer:<host>"  neither: the peer's address without its port ("ipv4:127.0.0.1" gives
//                  "peer:127.0.0.1", "ipv6:[::1]:5" gives "peer:::1");
//   "anonymous"    none of these (an in-process call).
// The token is not checked here: call it after the call was authenticated (RoleAuth), or
// accept that an unauthenticated caller may name any "token:" identity it likes.
//
// Thread safety: a pure function of the context; thread-safe.
#ifndef SLUICE_CORE_RPC_CALLER_IDENTITY_H_
#define SLUICE_CORE_RPC_CALLER_IDENTITY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace sluice {

std::string CallerIdentity(const grpc::ServerContextBase& context);

// The subject alternative names (DNS names and IP addresses) of the caller's verified client
// certificate; empty without mutual TLS. What a worker's advertised address is bound to.
std::vector<std::string> CallerCertificateNames(const grpc::ServerContextBase& context);

// The host part of a gRPC peer string: "ipv4:10.0.0.1:5000" -> "10.0.0.1",
// "ipv6:[::1]:5000" -> "::1"; any other form is returned as it is ("unix:/path"), and an empty
// one as "unknown".
std::string PeerHost(absl::string_view peer);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_CALLER_IDENTITY_H_
