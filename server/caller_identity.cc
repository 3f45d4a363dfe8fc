#include "server/caller_identity.h"

#include "absl/strings/match.h"
#include "core/rpc/caller_identity.h"

namespace sluice {

std::string PeerHost(absl::string_view peer) {
  if (peer.empty()) return "unknown";
  absl::string_view rest;
  if (absl::StartsWith(peer, "ipv4:")) {
    rest = peer.substr(5);
    const size_t colon = rest.rfind(':');
    return std::string(colon == absl::string_view::npos ? rest : rest.substr(0, colon));
  }
  if (absl::StartsWith(peer, "ipv6:")) {
    rest = peer.substr(5);
    if (absl::StartsWith(rest, "[")) {
      const size_t close = rest.find(']');
      if (close != absl::string_view::npos) return std::string(rest.substr(1, close - 1));
    }
    return std::string(rest);
  }
  return std::string(peer);
}

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
