// Admission control over gRPC (docs/SERVICE.md, "Admission"): one client creating anonymous
// jobs without end, registering large datasets again and again and polling status in a loop
// is refused with RESOURCE_EXHAUSTED naming the limit and its flag, while another identity's
// jobs and status and the workers' heartbeats go on. The caller identity comes from a test
// metadata key (CoordinatorServerOptions::caller_identity), as several identities cannot
// come from one loopback host; the rate limiters run on a fake clock (no wall-clock bound).
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/grpc_coordinator_service.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr int kCallSeconds = 30;  // every call's deadline: a broken server fails, not hangs
constexpr char kIdentityKey[] = "x-sluice-test-identity";

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorServerOptions options;
    options.port = 0;
    options.coordinator.worker_timeout = absl::Hours(1);
    options.coordinator.log = [](absl::string_view) {};
    options.coordinator.max_jobs_per_identity = 5;
    options.coordinator.max_datasets_per_identity = 4;
    options.admission_rates.status_per_second = 1;
    options.admission_rates.status_burst = 10;
    options.admission_rates.creates_per_second = 1;
    options.admission_rates.creates_burst = 1000;  // the quotas come first here
    options.admission_rates.clock = &clock_;
    options.caller_identity = [](const grpc::ServerContextBase& context) {
      auto it = context.client_metadata().find(kIdentityKey);
      return it == context.client_metadata().end()
                 ? std::string("anonymous")
                 : std::string(it->second.data(), it->second.size());
    };
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = proto::CoordinatorService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> As(const std::string& identity) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kCallSeconds));
    ctx->AddMetadata(kIdentityKey, identity);
    return ctx;
  }

  grpc::Status Register(const std::string& identity, const std::string& pipeline,
                        std::string* id = nullptr) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    proto::RegisterDatasetResponse resp;
    grpc::Status s = stub_->RegisterDataset(As(identity).get(), req, &resp);
    if (id != nullptr) *id = resp.dataset_id();
    return s;
  }

  grpc::Status Job(const std::string& identity, const std::string& dataset_id) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(dataset_id);
    o->set_num_consumers(1);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(proto::SHARDING_OFF);
    o->set_num_tasks(1);
    proto::GetOrCreateJobResponse resp;
    return stub_->GetOrCreateJob(As(identity).get(), req, &resp);
  }

  grpc::Status Status(const std::string& identity) {
    proto::GetStatusResponse resp;
    return stub_->GetStatus(As(identity).get(), proto::GetStatusRequest(), &resp);
  }

  grpc::Status WorkerHeartbeat() {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address("127.0.0.1:7001");
    proto::WorkerHeartbeatResponse resp;
    return stub_->WorkerHeartbeat(As("worker").get(), req, &resp);
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<proto::CoordinatorService::Stub> stub_;
};

TEST_F(AdmissionTest, AGreedyClientIsRefusedWhileOthersProceed) {
  ASSERT_TRUE(WorkerHeartbeat().ok());
  std::string dataset;
  ASSERT_TRUE(Register("greedy", "range(400).batch(4)", &dataset).ok());

  // Anonymous jobs without end: refused at the quota, naming it; bounded loop.
  grpc::Status refused;
  int created = 0;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    refused = Job("greedy", dataset);
    created += refused.ok() ? 1 : 0;
    ASSERT_TRUE(WorkerHeartbeat().ok()) << "the worker's heartbeats go on";
  }
  EXPECT_EQ(created, 5);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("max_jobs_per_identity"));

  // Large datasets registered again and again (each a new graph): refused at the quota.
  std::string big = "from_tensor_slices([";
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&big, i == 0 ? "" : ", ", i);
  big += "])";
  refused = grpc::Status::OK;
  int registered = 1;  // the one above
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    refused = Register("greedy", absl::StrCat(big, ".take(", i + 1, ")"));
    registered += refused.ok() ? 1 : 0;
  }
  EXPECT_EQ(registered, 4);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("max_datasets_per_identity"));

  // Status polled in a loop: the burst, then refused naming the rate limit.
  refused = grpc::Status::OK;
  int polled = 0;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    refused = Status("greedy");
    polled += refused.ok() ? 1 : 0;
  }
  EXPECT_EQ(polled, 10);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--max_status_per_second"));

  // Meanwhile another identity registers, creates a job and polls status; the worker
  // heartbeats.
  std::string theirs;
  EXPECT_TRUE(Register("trainer", "range(40).batch(4)", &theirs).ok());
  EXPECT_TRUE(Job("trainer", theirs).ok());
  EXPECT_TRUE(Job("trainer", dataset).ok());
  EXPECT_TRUE(Status("trainer").ok());
  EXPECT_TRUE(WorkerHeartbeat().ok());
  // The greedy client's rate comes back with time (its quota with its jobs' end).
  EXPECT_FALSE(Status("greedy").ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(Status("greedy").ok());
}

}  // namespace
}  // namespace sluice
