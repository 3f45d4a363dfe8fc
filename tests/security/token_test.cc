// The shared token on every RPC: each coordinator method and the worker's StreamSteps answer a
// call without the token, or with another one, UNAUTHENTICATED "missing or invalid token" and
// nothing else; with the token they work; a consumer and a worker without it get nowhere; the
// gRPC health service stays open for probes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rpc/grpc_security.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/security/secure_cluster.h"
#include "tests/security/test_certs.h"

namespace sluice {
namespace {

constexpr char kToken[] = "s3cret-Token_0123456789";

std::unique_ptr<proto::CoordinatorService::Stub> Stub(const std::string& address,
                                                      const std::string& token) {
  auto channels = MakeChannelFactory({.token = token});
  EXPECT_TRUE(channels.ok()) << channels.status();
  return proto::CoordinatorService::NewStub((*channels)(address));
}

grpc::Status Call(const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return rpc(&context);
}

// Every coordinator method once, with plausible requests; the statuses in method order.
std::vector<std::pair<std::string, grpc::Status>> CallEveryMethod(
    proto::CoordinatorService::Stub* stub) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  reg.set_pipeline("range(8).batch(4)");
  proto::RegisterDatasetResponse reg_response;
  out.emplace_back("RegisterDataset", Call([&](grpc::ClientContext* c) {
                     return stub->RegisterDataset(c, reg, &reg_response);
                   }));
  proto::GetOrCreateJobRequest job;
  job.set_wire_version(proto::WIRE_VERSION_1);
  job.mutable_options()->set_dataset_id(reg_response.dataset_id());
  job.mutable_options()->set_num_consumers(1);
  job.mutable_options()->set_replicas_per_consumer(1);
  proto::GetOrCreateJobResponse job_response;
  out.emplace_back("GetOrCreateJob", Call([&](grpc::ClientContext* c) {
                     return stub->GetOrCreateJob(c, job, &job_response);
                   }));
  proto::GetElementSpecRequest spec;
  spec.set_job_id(job_response.job_id());
  proto::GetElementSpecResponse spec_response;
  out.emplace_back("GetElementSpec", Call([&](grpc::ClientContext* c) {
                     return stub->GetElementSpec(c, spec, &spec_response);
                   }));
  proto::WorkerHeartbeatRequest whb;
  whb.set_wire_version(proto::WIRE_VERSION_1);
  whb.set_worker_address("127.0.0.1:1");
  proto::WorkerHeartbeatResponse whb_response;
  out.emplace_back("WorkerHeartbeat", Call([&](grpc::ClientContext* c) {
                     return stub->WorkerHeartbeat(c, whb, &whb_response);
                   }));
  proto::ClientHeartbeatRequest chb;
  chb.set_wire_version(proto::WIRE_VERSION_1);
  chb.set_job_id(job_response.job_id());
  proto::ClientHeartbeatResponse chb_response;
  out.emplace_back("ClientHeartbeat", Call([&](grpc::ClientContext* c) {
                     return stub->ClientHeartbeat(c, chb, &chb_response);
                   }));
  proto::GetSplitRequest split;
  split.set_job_id(job_response.job_id());
  proto::GetSplitResponse split_response;
  out.emplace_back("GetSplit", Call([&](grpc::ClientContext* c) {
                     return stub->GetSplit(c, split, &split_response);
                   }));
  proto::GetStatusRequest status;
  proto::GetStatusResponse status_response;
  out.emplace_back("GetStatus", Call([&](grpc::ClientContext* c) {
                     return stub->GetStatus(c, status, &status_response);
                   }));
  return out;
}

// Opens StreamSteps on `address` and sends a StreamRequest; the call's final status.
grpc::Status StreamStepsOnce(const std::string& address, const std::string& token,
                             int64_t job_id, int64_t task_id) {
  auto channels = MakeChannelFactory({.token = token});
  EXPECT_TRUE(channels.ok());
  std::shared_ptr<grpc::Channel> channel = (*channels)(address);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::internal::RpcMethod method("/sluice.proto.WorkerService/StreamSteps",
                                         grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(), method, &context));
  proto::ConsumerMessage m;
  m.mutable_request()->set_wire_version(proto::WIRE_VERSION_2);
  m.mutable_request()->set_job_id(job_id);
  m.mutable_request()->set_task_id(task_id);
  m.mutable_request()->set_initial_credit_bytes(1 << 20);
  m.mutable_request()->set_window_bytes(1 << 20);
  stream->Write(EncodeConsumerMessage(m));
  stream->WritesDone();
  grpc::ByteBuffer frame;
  for (int i = 0; i < 100000 && stream->Read(&frame); ++i) {
  }
  return stream->Finish();
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerSecurity s;
    s.token = kToken;
    auto cluster = SecureCluster::Start({.num_workers = 1,
                                         .coordinator_security = s,
                                         .worker_security = s,
                                         .worker_to_coordinator = {.token = kToken}});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }
  std::unique_ptr<SecureCluster> cluster_;
};

TEST_F(TokenTest, EveryCoordinatorMethodRefusesMissingOrWrongToken) {
  for (const std::string& token : {std::string(), std::string("wrong-token"),
                                  std::string(kToken) + "x", std::string(kToken).substr(1)}) {
    auto stub = Stub(cluster_->address(), token);
    for (const auto& [method, status] : CallEveryMethod(stub.get())) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << " with token '" << token << "': " << status.error_message();
      // Nothing else: no dataset, job, worker or address in the answer.
      EXPECT_EQ(status.error_message(), "missing or invalid token") << method;
    }
  }
}

TEST_F(TokenTest, EveryCoordinatorMethodAnswersTheRightToken) {
  auto stub = Stub(cluster_->address(), kToken);
  for (const auto& [method, status] : CallEveryMethod(stub.get())) {
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method << ": " << status.error_message();
  }
  // A bearer header with other metadata around it still works.
  grpc::ClientContext context;
  context.AddMetadata("x-other", "1");
  proto::GetStatusResponse response;
  auto plain = Stub(cluster_->address(), "");
  context.AddMetadata("authorization", std::string("Bearer ") + kToken);
  EXPECT_TRUE(plain->GetStatus(&context, proto::GetStatusRequest(), &response).ok());
  EXPECT_GE(response.workers_size(), 1);
}

TEST_F(TokenTest, WorkerStreamRefusesMissingOrWrongToken) {
  const std::string worker = cluster_->worker(0)->address();
  for (const std::string& token : {std::string(), std::string("wrong")}) {
    grpc::Status s = StreamStepsOnce(worker, token, 1, 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    EXPECT_EQ(s.error_message(), "missing or invalid token");
  }
  // With the token the call reaches the service: this worker runs no such task (UNAVAILABLE).
  grpc::Status s = StreamStepsOnce(worker, kToken, 12345, 678);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(TokenTest, ConsumerWithTheTokenReadsAndWithoutItIsRefused) {
  auto ds = Dataset::Parse("range(20).batch(5)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  o.security.token = kToken;
  ReadResult ok = ReadAll(cluster_->address(), *ds, o);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.values.size(), 20u);

  o.security.token = "";
  ReadResult refused = ReadAll(cluster_->address(), *ds, o);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnauthenticated) << refused.status;
  EXPECT_NE(refused.status.message().find("missing or invalid token"), std::string::npos);
}

TEST_F(TokenTest, WorkerWithoutTheTokenNeverRegisters) {
  ServerSecurity s;
  s.token = kToken;
  auto other = SecureCluster::Start({.num_workers = 1,
                                     .coordinator_security = s,
                                     .worker_security = s,
                                     .worker_to_coordinator = {.token = "not-the-token"},
                                     .wait_for_workers = false});
  ASSERT_TRUE(other.ok()) << other.status();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ((*other)->num_registered(), 0);
  auto stub = Stub((*other)->address(), kToken);
  proto::GetStatusResponse response;
  ASSERT_TRUE(Call([&](grpc::ClientContext* c) {
                return stub->GetStatus(c, proto::GetStatusRequest(), &response);
              }).ok());
  EXPECT_EQ(response.workers_size(), 0);
}

TEST_F(TokenTest, HealthServiceStaysOpenForProbes) {
  auto channels = MakeChannelFactory({});
  ASSERT_TRUE(channels.ok());
  std::shared_ptr<grpc::Channel> channel = (*channels)(cluster_->address());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ByteBuffer request;  // HealthCheckRequest{} is empty
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), method, &context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST(TokenAuthTest, ConstantTimeEqualsAndTokenFiles) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  const std::string dir = MakeTempDir("sluice-token-");
  ASSERT_TRUE(WriteFile(dir + "/token", "  tok-123\n"));
  auto token = ReadTokenFile(dir + "/token");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "tok-123");
  ASSERT_TRUE(WriteFile(dir + "/blank", "\n \n"));
  EXPECT_EQ(ReadTokenFile(dir + "/blank").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WriteFile(dir + "/spaces", "a b"));
  EXPECT_EQ(ReadTokenFile(dir + "/spaces").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  RemoveTree(dir);
}

}  // namespace
}  // namespace sluice
