// The shared token on every RPC: each coordinator method and the worker's StreamSteps answer a
// call without the token, or with another one, UNAUTHENTICATED "missing or invalid token" and
// nothing else; with the token they work; a consumer and a worker without it get nowhere; the
// gRPC health service stays open for probes. Per-role tokens: each method accepts only its
// role's token (PERMISSION_DENIED naming the role otherwise), a trainer cannot forge a worker's
// heartbeat, and a consumer reads with the trainer token only.
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/rpc/grpc_security.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/role_auth.h"
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
  proto::WatchAssignmentRequest watch;
  watch.set_wire_version(proto::WIRE_VERSION_1);
  watch.set_worker_address("127.0.0.1:1");
  watch.set_wait_ms(1);  // answered at once anyway: it knows no version
  proto::WatchAssignmentResponse watch_response;
  out.emplace_back("WatchAssignment", Call([&](grpc::ClientContext* c) {
                     return stub->WatchAssignment(c, watch, &watch_response);
                   }));
  proto::GetStatusRequest status;
  proto::GetStatusResponse status_response;
  out.emplace_back("GetStatus", Call([&](grpc::ClientContext* c) {
                     return stub->GetStatus(c, status, &status_response);
                   }));
  // Last: it ends the job. With the secret the heartbeat was handed (0, refused by the
  // coordinator after the role check, when the heartbeat was refused).
  proto::ReleaseConsumerRequest release;
  release.set_wire_version(proto::WIRE_VERSION_1);
  release.set_job_id(job_response.job_id());
  release.set_consumer_secret(chb_response.consumer_secret());
  proto::ReleaseConsumerResponse release_response;
  out.emplace_back("ReleaseConsumer", Call([&](grpc::ClientContext* c) {
                     return stub->ReleaseConsumer(c, release, &release_response);
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
      EXPECT_TRUE(absl::StartsWith(status.error_message(), "missing or invalid token: "))
          << method << ": " << status.error_message();
      EXPECT_EQ(status.error_message().find("127.0.0.1"), std::string::npos) << method;
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

// Per-role tokens (core/rpc/role_auth.h): workers, trainers and operators hold different
// tokens, and each coordinator method accepts only its role's.
constexpr char kWorkerToken[] = "worker-Token_0123456789";
constexpr char kTrainerToken[] = "trainer-Token_0123456789";
constexpr char kAdminToken[] = "admin-Token_0123456789";

class RoleTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerSecurity trainers_only;
    trainers_only.token = kTrainerToken;  // what the workers require of consumers
    auto cluster = SecureCluster::Start(
        {.num_workers = 1,
         .coordinator_roles = {.worker = kWorkerToken, .trainer = kTrainerToken,
                               .admin = kAdminToken},
         .worker_security = trainers_only,
         .worker_to_coordinator = {.token = kWorkerToken}});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }
  std::unique_ptr<SecureCluster> cluster_;
};

TEST_F(RoleTokenTest, EachCoordinatorMethodAcceptsOnlyItsRole) {
  const std::map<std::string, std::set<std::string>> allowed = {
      {kWorkerToken, {"WorkerHeartbeat", "GetSplit", "WatchAssignment"}},
      {kTrainerToken,
       {"RegisterDataset", "GetOrCreateJob", "GetElementSpec", "ClientHeartbeat",
        "ReleaseConsumer"}},
      {kAdminToken, {"RegisterDataset", "GetStatus"}},
  };
  const std::map<std::string, std::string> needs = {
      {"RegisterDataset", "needs the trainer or admin role"},
      {"GetOrCreateJob", "needs the trainer role"},
      {"GetElementSpec", "needs the trainer role"},
      {"WorkerHeartbeat", "needs the worker role"},
      {"ClientHeartbeat", "needs the trainer role"},
      {"GetSplit", "needs the worker role"},
      {"WatchAssignment", "needs the worker role"},
      {"GetStatus", "needs the admin role"},
      {"ReleaseConsumer", "needs the trainer role"},
  };
  for (const auto& [token, methods] : allowed) {
    auto stub = Stub(cluster_->address(), token);
    for (const auto& [method, status] : CallEveryMethod(stub.get())) {
      if (methods.contains(method)) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
        EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method << " with " << token << ": " << status.error_message();
        continue;
      }
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << method << " with " << token << ": " << status.error_message();
      EXPECT_TRUE(absl::StrContains(status.error_message(), needs.at(method)))
          << status.error_message();
      EXPECT_FALSE(absl::StrContains(status.error_message(), token)) << status.error_message();
    }
  }
  // No token, or an unknown one: UNAUTHENTICATED, naming the role the method needs.
  for (const std::string& token : {std::string(), std::string(kWorkerToken) + "x"}) {
    auto stub = Stub(cluster_->address(), token);
    for (const auto& [method, status] : CallEveryMethod(stub.get())) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
      EXPECT_TRUE(absl::StrContains(status.error_message(), needs.at(method)))
          << status.error_message();
    }
  }
}

// The scenario: any caller sends WorkerHeartbeat{worker_address=victim,
// finished_task_ids=[T]}. With a shared token (or none) the task was finished and the rest of
// its data skipped; a trainer's token cannot speak for a worker.
TEST_F(RoleTokenTest, ATrainerCannotForgeAWorkersHeartbeat) {
  auto trainer = Stub(cluster_->address(), kTrainerToken);
  auto admin = Stub(cluster_->address(), kAdminToken);
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  reg.set_pipeline("range(1000000).batch(4)");
  proto::RegisterDatasetResponse reg_response;
  ASSERT_TRUE(
      Call([&](grpc::ClientContext* c) { return trainer->RegisterDataset(c, reg, &reg_response); })
          .ok());
  proto::GetOrCreateJobRequest job;
  job.set_wire_version(proto::WIRE_VERSION_1);
  job.mutable_options()->set_dataset_id(reg_response.dataset_id());
  job.mutable_options()->set_num_consumers(1);
  job.mutable_options()->set_replicas_per_consumer(1);
  job.mutable_options()->set_sharding_policy(proto::SHARDING_OFF);
  proto::GetOrCreateJobResponse job_response;
  ASSERT_TRUE(
      Call([&](grpc::ClientContext* c) { return trainer->GetOrCreateJob(c, job, &job_response); })
          .ok());
  proto::GetStatusResponse status;
  ASSERT_TRUE(Call([&](grpc::ClientContext* c) {
                return admin->GetStatus(c, proto::GetStatusRequest(), &status);
              }).ok());
  ASSERT_EQ(status.jobs_size(), 1);
  ASSERT_EQ(status.jobs(0).tasks_size(), 1);
  const proto::TaskInfo task = status.jobs(0).tasks(0);
  ASSERT_EQ(task.worker_address(), cluster_->worker(0)->address());

  proto::WorkerHeartbeatRequest forged;
  forged.set_wire_version(proto::WIRE_VERSION_1);
  forged.set_worker_address(task.worker_address());
  forged.add_finished_task_ids(task.task_id());
  forged.set_draining(true);
  proto::WorkerHeartbeatResponse forged_response;
  const grpc::Status refused = Call([&](grpc::ClientContext* c) {
    return trainer->WorkerHeartbeat(c, forged, &forged_response);
  });
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();

  ASSERT_TRUE(Call([&](grpc::ClientContext* c) {
                return admin->GetStatus(c, proto::GetStatusRequest(), &status);
              }).ok());
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_FALSE(status.jobs(0).finished());
  ASSERT_EQ(status.jobs(0).tasks_size(), 1);
  EXPECT_EQ(status.jobs(0).tasks(0).worker_address(), task.worker_address())
      << "the forged draining heartbeat stripped the worker of its task";
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_TRUE(status.workers(0).alive());
}

TEST_F(RoleTokenTest, AConsumerReadsWithTheTrainerTokenAndNotWithTheWorkers) {
  auto ds = Dataset::Parse("range(20).batch(5)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  o.security.token = kTrainerToken;
  ReadResult ok = ReadAll(cluster_->address(), *ds, o);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.values.size(), 20u);

  o.security.token = kWorkerToken;
  ReadResult refused = ReadAll(cluster_->address(), *ds, o);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kPermissionDenied) << refused.status;
  EXPECT_TRUE(absl::StrContains(refused.status.message(), "needs the trainer"))
      << refused.status;
}

TEST(RoleNamesTest, NamesEveryRoleInTheSet) {
  EXPECT_EQ(RoleNames(kWorkerRole), "worker");
  EXPECT_EQ(RoleNames(kTrainerRole | kAdminRole), "trainer or admin");
  EXPECT_EQ(RoleNames(kEveryRole), "worker or trainer or admin");
  EXPECT_EQ(RoleNames(0), "none");
}

}  // namespace
}  // namespace sluice
