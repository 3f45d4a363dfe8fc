// CallerIdentity (core/rpc/caller_identity.h), what per-caller quotas and logs key on: the
// peer's host in plaintext, a fingerprint of the bearer token (never the token; the same for
// callers sharing a token, different for different tokens), and under mutual TLS a name from
// the client certificate, which outranks any token.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "core/rpc/caller_identity.h"
#include "core/rpc/grpc_security.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/security/test_certs.h"

namespace sluice {
namespace {

// Answers GetStatus, recording who called.
class IdentityEcho final : public proto::CoordinatorService::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext* context, const proto::GetStatusRequest*,
                         proto::GetStatusResponse*) override {
    absl::MutexLock lock(&mu_);
    last_ = CallerIdentity(*context);
    names_ = CallerCertificateNames(*context).size();
    return grpc::Status::OK;
  }
  std::string last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }
  size_t names() {
    absl::MutexLock lock(&mu_);
    return names_;
  }

 private:
  absl::Mutex mu_;
  std::string last_ ABSL_GUARDED_BY(mu_);
  size_t names_ ABSL_GUARDED_BY(mu_) = 0;
};

class EchoServer {
 public:
  explicit EchoServer(const ServerSecurity& security) {
    grpc::ServerBuilder builder;
    status_ = AddSecureListeningPort(security, "127.0.0.1:0", &builder, &port_);
    builder.RegisterService(&echo_);
    server_ = builder.BuildAndStart();
  }
  ~EchoServer() {
    if (server_ != nullptr) server_->Shutdown();
  }
  bool ok() const { return status_.ok() && server_ != nullptr && port_ != 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // The identity the server saw for one call over `security`; "" when the call failed.
  std::string IdentityOf(const ChannelSecurity& security) {
    absl::StatusOr<GrpcChannelFactory> channels = MakeChannelFactory(security);
    EXPECT_TRUE(channels.ok()) << channels.status();
    if (!channels.ok()) return "";
    auto stub = proto::CoordinatorService::NewStub((*channels)(address()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    proto::GetStatusResponse response;
    grpc::Status s = stub->GetStatus(&context, proto::GetStatusRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return s.ok() ? echo_.last() : "";
  }
  IdentityEcho& echo() { return echo_; }

 private:
  absl::Status status_;
  int port_ = 0;
  IdentityEcho echo_;
  std::unique_ptr<grpc::Server> server_;
};

TEST(CallerIdentityTest, PlaintextWithoutATokenIsThePeersHost) {
  EchoServer server(ServerSecurity{});
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server.IdentityOf({}), "peer:127.0.0.1");
  EXPECT_EQ(server.echo().names(), 0u);
}

TEST(CallerIdentityTest, ATokenIsAFingerprintSharedByItsHoldersAndNeverTheToken) {
  EchoServer server(ServerSecurity{});
  ASSERT_TRUE(server.ok());
  const std::string a = server.IdentityOf({.token = "token-A-0123456789"});
  const std::string a_again = server.IdentityOf({.token = "token-A-0123456789"});
  const std::string b = server.IdentityOf({.token = "token-B-0123456789"});
  EXPECT_TRUE(absl::StartsWith(a, "token:")) << a;
  EXPECT_EQ(a.size(), 6u + 16u) << a;
  EXPECT_EQ(a, a_again);
  EXPECT_NE(a, b);
  EXPECT_FALSE(absl::StrContains(a, "token-A")) << a;
}

TEST(CallerIdentityTest, AClientCertificateNamesTheCallerWhateverItsToken) {
  if (!HaveOpenssl()) GTEST_SKIP() << "the openssl command is not installed";
  const std::string dir = MakeTempDir("sluice-identity-");
  absl::StatusOr<TestCerts> certs = MakeTestCerts(dir);
  ASSERT_TRUE(certs.ok()) << certs.status();
  ServerSecurity security;
  security.tls = {.cert_file = certs->server_cert, .key_file = certs->server_key,
                  .ca_file = certs->ca, .client_auth = true};
  EchoServer server(security);
  ASSERT_TRUE(server.ok());
  ChannelSecurity elsewhere;
  elsewhere.tls = {.enabled = true, .ca_file = certs->ca, .cert_file = certs->elsewhere_cert,
                   .key_file = certs->elsewhere_key};
  elsewhere.token = "token-A-0123456789";
  const std::string identity = server.IdentityOf(elsewhere);
  EXPECT_TRUE(identity == "x509:worker-elsewhere.test" || identity == "x509:10.9.8.7")
      << identity;
  EXPECT_EQ(server.echo().names(), 2u);  // DNS:worker-elsewhere.test, IP:10.9.8.7
  RemoveTree(dir);
}

}  // namespace
}  // namespace sluice
