#include "core/rpc/token_auth.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "core/rpc/tls_credentials.h"
#include "grpcpp/support/interceptor.h"

namespace sluice {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationMetadata, *header_);
    }
    methods->Proceed();
  }

 private:
  std::shared_ptr<const std::string> header_;
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token)
      : header_(std::make_shared<const std::string>(absl::StrCat(kBearer, token))) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(header_);
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, ReadSecretFile(path, "--token_file"));
  std::string token(absl::StripAsciiWhitespace(content));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token_file ", path, " holds no token"));
  }
  for (char c : token) {
    // Printable ASCII without spaces: what an HTTP/2 header value can carry unchanged.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--token_file ", path, ": the token must be printable ASCII without spaces"));
    }
  }
  return token;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of b is visited whatever a holds; a's length only enters through the XOR.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | (x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

grpc::Status TokenAuth::Check(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  bool ok = false;
  auto [begin, end] = metadata.equal_range(kAuthorizationMetadata);
  for (auto it = begin; it != end; ++it) {
    const absl::string_view value(it->second.data(), it->second.size());
    if (value.size() < kBearer.size() || value.substr(0, kBearer.size()) != kBearer) continue;
    // Not short-circuited: each value is compared in full.
    ok = ConstantTimeEquals(value.substr(kBearer.size()), token_) || ok;
  }
  if (ok) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kUnauthenticatedMessage);
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors(const std::string& token) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (!token.empty()) out.push_back(std::make_unique<TokenInterceptorFactory>(token));
  return out;
}

}  // namespace sluice
