#include "core/rpc/caller_identity.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/io/aws_sigv4.h"
#include "core/rpc/token_auth.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"

namespace sluice {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

// The values of `property` in the call's verified peer identity (empty without TLS).
std::vector<std::string> PeerProperty(const grpc::ServerContextBase& context,
                                      const char* property) {
  std::vector<std::string> out;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return out;
  for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
    out.emplace_back(value.data(), value.size());
  }
  return out;
}

}  // namespace

std::vector<std::string> CallerCertificateNames(const grpc::ServerContextBase& context) {
  return PeerProperty(context, GRPC_X509_SAN_PROPERTY_NAME);
}

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

std::string CallerIdentity(const grpc::ServerContextBase& context) {
  if (std::vector<std::string> names = CallerCertificateNames(context); !names.empty()) {
    return absl::StrCat("x509:", names.front());
  }
  if (std::vector<std::string> cn = PeerProperty(context, GRPC_X509_CN_PROPERTY_NAME);
      !cn.empty()) {
    return absl::StrCat("x509:", cn.front());
  }
  const auto& metadata = context.client_metadata();
  auto [begin, end] = metadata.equal_range(kAuthorizationMetadata);
  for (auto it = begin; it != end; ++it) {
    const absl::string_view value(it->second.data(), it->second.size());
    if (!absl::StartsWith(value, kBearer)) continue;
    return absl::StrCat("token:", Sha256Hex(value.substr(kBearer.size())).substr(0, 16));
  }
  const std::string peer = context.peer();
  if (!peer.empty()) return absl::StrCat("peer:", PeerHost(peer));
  return "anonymous";
}

}  // namespace sluice
