// A shared token on every RPC: the client adds `authorization: Bearer <token>` to each call's
// metadata (an interceptor on its channel), the server's handlers check it first thing.
//
//   // server, at the top of each handler:
//   if (grpc::Status s = auth_.Check(*context); !s.ok()) return s;
//   // client:
//   channel = CreateCustomChannelWithInterceptors(address, creds, args,
//                                                 TokenInterceptors(token));
//
// A call without the token, or with another one, is UNAUTHENTICATED "missing or invalid token"
// and learns nothing else (no dataset, job or address). The comparison takes the same time
// whatever the caller sent (it depends only on the expected token's length). The token is read
// from a file, never a flag, so that it does not show in `ps`.
//
// Thread safety: TokenAuth is immutable and thread-safe.
#ifndef SLUICE_CORE_TOKEN_AUTH_H_
#define SLUICE_CORE_TOKEN_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/client_interceptor.h"

namespace sluice {

inline constexpr char kAuthorizationMetadata[] = "authorization";
inline constexpr char kUnauthenticatedMessage[] = "missing or invalid token";

// The token in `path` without surrounding whitespace (a trailing newline is common).
// NOT_FOUND naming the path when it cannot be read, INVALID_ARGUMENT when it holds no token or
// characters that cannot go in gRPC metadata.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// True when a and b are equal; the time taken depends only on b's length.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

class TokenAuth {
 public:
  // An empty token: no check, every call passes.
  explicit TokenAuth(std::string token = "") : token_(std::move(token)) {}

  bool enabled() const { return !token_.empty(); }

  // OK when disabled or when the call carries `authorization: Bearer <token>`; else
  // UNAUTHENTICATED with kUnauthenticatedMessage.
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
};

// Interceptor factories for a client channel that send `token` on every call; none when the
// token is empty.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors(const std::string& token);

}  // namespace sluice

#endif  // SLUICE_CORE_TOKEN_AUTH_H_
