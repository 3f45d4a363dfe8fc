// TLS and mutual TLS on every channel of an in-process cluster: consumers read a job end to
// end over TLS; a client that trusts another CA, or dials in plaintext, fails the handshake
// (UNAVAILABLE once its retry deadline passes); under mTLS a client without a certificate, or
// with one from another CA, is refused, and workers (presenting their own certificate) work,
// each only under an address its certificate names.
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/rpc/grpc_security.h"
#include "proto/coordinator.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/ci_environment.h"
#include "tests/security/secure_cluster.h"
#include "tests/security/test_certs.h"

namespace sluice {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveOpenssl()) return;
    dir_ = new std::string(MakeTempDir("sluice-tls-"));
    absl::StatusOr<TestCerts> certs = MakeTestCerts(*dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new TestCerts(*certs);
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) RemoveTree(*dir_);
    delete dir_;
    delete certs_;
    dir_ = nullptr;
    certs_ = nullptr;
  }
  void SetUp() override {
    if (certs_ == nullptr) {
      // scripts/test.sh installs openssl: under CI=true its absence fails, not skips.
      if (InCi()) FAIL() << "the openssl command is not installed; CI=true requires it";
      GTEST_SKIP() << "the openssl command is not installed (apt-get install openssl)";
    }
  }

  // Server TLS with the suite's server certificate; mTLS when `client_auth`.
  static ServerSecurity Server(bool client_auth) {
    ServerSecurity s;
    s.tls = {.cert_file = certs_->server_cert, .key_file = certs_->server_key,
             .ca_file = certs_->ca, .client_auth = client_auth};
    return s;
  }
  // What a worker dials the coordinator with: the CA, and its own certificate as client.
  static ChannelSecurity WorkerChannel() {
    ChannelSecurity c;
    c.tls = {.enabled = true, .ca_file = certs_->ca, .cert_file = certs_->server_cert,
             .key_file = certs_->server_key};
    return c;
  }
  static ServiceOptions Client(const std::string& ca, const std::string& cert = "",
                               const std::string& key = "") {
    ServiceOptions o;
    o.security.tls = true;
    o.security.tls_ca_file = ca;
    o.security.tls_cert_file = cert;
    o.security.tls_key_file = key;
    o.retry_deadline = absl::Seconds(2);
    o.sharding_policy = ServiceShardingPolicy::kData;
    return o;
  }

  static std::string* dir_;
  static TestCerts* certs_;
};
std::string* TlsTest::dir_ = nullptr;
TestCerts* TlsTest::certs_ = nullptr;

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST_F(TlsTest, JobReadsEndToEndOverTls) {
  auto cluster = SecureCluster::Start({.num_workers = 2,
                                       .coordinator_security = Server(false),
                                       .worker_security = Server(false),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto ds = Dataset::Parse("range(40).batch(4)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ReadResult r = ReadAll((*cluster)->address(), *ds, Client(certs_->ca));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Sorted(r.values), Range(40));
  EXPECT_EQ(r.steps, 10);
}

TEST_F(TlsTest, ClientTrustingAnotherCaFailsTheHandshake) {
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(false),
                                       .worker_security = Server(false),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ReadResult r = ReadAll((*cluster)->address(), *ds, Client(certs_->other_ca));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_TRUE(r.values.empty());
}

TEST_F(TlsTest, PlaintextClientCannotTalkToTlsServer) {
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(false),
                                       .worker_security = Server(false),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions plain;
  plain.retry_deadline = absl::Seconds(2);
  ReadResult r = ReadAll((*cluster)->address(), *ds, plain);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
}

TEST_F(TlsTest, WorkerTrustingAnotherCaNeverRegisters) {
  ChannelSecurity wrong = WorkerChannel();
  wrong.tls.ca_file = certs_->other_ca;
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(false),
                                       .worker_security = Server(false),
                                       .worker_to_coordinator = wrong,
                                       .wait_for_workers = false});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::SleepFor(absl::Milliseconds(500));  // several heartbeat attempts
  EXPECT_EQ((*cluster)->num_registered(), 0);
}

TEST_F(TlsTest, MutualTlsWithTheRightClientCertificateWorks) {
  auto cluster = SecureCluster::Start({.num_workers = 2,
                                       .coordinator_security = Server(true),
                                       .worker_security = Server(true),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto ds = Dataset::Parse("range(24).batch(3)");
  ASSERT_TRUE(ds.ok());
  ReadResult r = ReadAll((*cluster)->address(), *ds,
                         Client(certs_->ca, certs_->client_cert, certs_->client_key));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Sorted(r.values), Range(24));
}

// The mTLS path binds a worker's advertised address to its certificate: a worker of the same CA
// whose certificate names another host cannot heartbeat as the real worker (which it could
// otherwise strip of its tasks, or report them finished), while it may heartbeat as itself.
TEST_F(TlsTest, MutualTlsBindsAWorkersAdvertisedAddressToItsCertificate) {
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(true),
                                       .worker_security = Server(true),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();  // the real worker (SAN 127.0.0.1) registered
  ChannelSecurity elsewhere;
  elsewhere.tls = {.enabled = true, .ca_file = certs_->ca, .cert_file = certs_->elsewhere_cert,
                   .key_file = certs_->elsewhere_key};
  absl::StatusOr<GrpcChannelFactory> channels = MakeChannelFactory(elsewhere);
  ASSERT_TRUE(channels.ok()) << channels.status();
  auto stub = proto::CoordinatorService::NewStub((*channels)((*cluster)->address()));
  auto heartbeat = [&](const std::string& address) {
    proto::WorkerHeartbeatRequest request;
    request.set_wire_version(proto::WIRE_VERSION_1);
    request.set_worker_address(address);
    request.set_draining(true);
    proto::WorkerHeartbeatResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->WorkerHeartbeat(&context, request, &response);
  };
  const std::string victim = (*cluster)->worker(0)->address();
  const grpc::Status forged = heartbeat(victim);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED) << forged.error_message();
  EXPECT_NE(forged.error_message().find(victim), std::string::npos) << forged.error_message();
  EXPECT_NE(forged.error_message().find("worker-elsewhere.test"), std::string::npos)
      << forged.error_message();
  EXPECT_EQ((*cluster)->num_registered(), 1);
  // Its own names pass (a DNS name, case aside, and an IP address).
  EXPECT_TRUE(heartbeat("Worker-Elsewhere.test:5000").ok());
  EXPECT_TRUE(heartbeat("10.9.8.7:5000").ok());
  // The real worker still reads a job end to end: the forged draining heartbeat did nothing.
  auto ds = Dataset::Parse("range(12).batch(3)");
  ASSERT_TRUE(ds.ok());
  ReadResult r = ReadAll((*cluster)->address(), *ds,
                         Client(certs_->ca, certs_->client_cert, certs_->client_key));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Sorted(r.values), Range(12));
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutACertificate) {
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(true),
                                       .worker_security = Server(true),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ReadResult r = ReadAll((*cluster)->address(), *ds, Client(certs_->ca));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_TRUE(r.values.empty());
}

TEST_F(TlsTest, MutualTlsRefusesACertificateFromAnotherCa) {
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(true),
                                       .worker_security = Server(true),
                                       .worker_to_coordinator = WorkerChannel()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ReadResult r =
      ReadAll((*cluster)->address(), *ds,
              Client(certs_->ca, certs_->other_client_cert, certs_->other_client_key));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_TRUE(r.values.empty());
}

TEST_F(TlsTest, MutualTlsRefusesAWorkerWithoutACertificate) {
  ChannelSecurity no_cert;
  no_cert.tls = {.enabled = true, .ca_file = certs_->ca};
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = Server(true),
                                       .worker_security = Server(true),
                                       .worker_to_coordinator = no_cert,
                                       .wait_for_workers = false});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ((*cluster)->num_registered(), 0);
}

TEST_F(TlsTest, BadFilesAreReportedByName) {
  ServerSecurity s = Server(false);
  s.tls.key_file = certs_->server_cert;  // a certificate where the key should be
  auto bad_key = MakeServerCredentials(s.tls);
  EXPECT_EQ(bad_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_key.status().message().find(certs_->server_cert), std::string::npos);
  s.tls.key_file = *dir_ + "/missing.key";
  EXPECT_EQ(MakeServerCredentials(s.tls).status().code(), absl::StatusCode::kNotFound);
  TlsServerFiles mtls_without_ca{.cert_file = certs_->server_cert,
                                 .key_file = certs_->server_key,
                                 .client_auth = true};
  EXPECT_EQ(MakeServerCredentials(mtls_without_ca).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A client whose CA file is missing fails before dialing, naming it.
  ServiceOptions o = Client(*dir_ + "/missing-ca.pem");
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ReadResult r = ReadAll("127.0.0.1:1", *ds, o);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
  EXPECT_NE(r.status.message().find("missing-ca.pem"), std::string::npos) << r.status;
}

}  // namespace
}  // namespace sluice
