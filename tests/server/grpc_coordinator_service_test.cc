#include "server/grpc_coordinator_service.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "sluice/dataset.h"
#include "core/obs/metrics.h"
#include "core/rpc/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Every call has a deadline, so that a broken server fails the test instead of hanging it.
constexpr int kCallSeconds = 30;

class GrpcCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorServerOptions options;
    options.port = 0;
    // Liveness is the impl test's business; here no worker may time out on a slow machine.
    options.coordinator.worker_timeout = absl::Hours(1);
    options.coordinator.log = [](absl::string_view) {};
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = proto::CoordinatorService::NewStub(channel_);
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kCallSeconds));
    return ctx;
  }

  grpc::Status Register(const std::string& pipeline, proto::RegisterDatasetResponse* resp) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    return stub_->RegisterDataset(Context().get(), req, resp);
  }

  grpc::Status Heartbeat(const std::string& address, proto::WorkerHeartbeatResponse* resp) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    return stub_->WorkerHeartbeat(Context().get(), req, resp);
  }

  // grpc.health.v1.Health/Check for the server as a whole, through a generic stub (the
  // health proto's generated code is not installed); returns the raw response bytes.
  std::string HealthCheck(grpc::Status* status) {
    grpc::GenericStub generic(channel_);
    grpc::ByteBuffer request;  // HealthCheckRequest{service: ""} serializes to nothing
    grpc::Slice empty("");
    request = grpc::ByteBuffer(&empty, 1);
    grpc::ByteBuffer response;
    auto ctx = Context();
    absl::Notification done;
    generic.UnaryCall(ctx.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        *status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (status->ok() && response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return bytes;
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::CoordinatorService::Stub> stub_;
};

TEST_F(GrpcCoordinatorTest, EveryRpcWorksThroughARealChannel) {
  proto::RegisterDatasetResponse ds;
  ASSERT_TRUE(Register("range(20).batch(4)", &ds).ok());
  EXPECT_THAT(ds.dataset_id(), ::testing::StartsWith("ds-"));

  proto::WorkerHeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("127.0.0.1:1", &hb).ok());
  EXPECT_EQ(hb.worker_id(), 1);

  proto::GetOrCreateJobRequest job_req;
  job_req.set_wire_version(proto::WIRE_VERSION_1);
  job_req.set_job_name("train");
  job_req.mutable_options()->set_dataset_id(ds.dataset_id());
  job_req.mutable_options()->set_num_consumers(1);
  job_req.mutable_options()->set_replicas_per_consumer(2);
  job_req.mutable_options()->set_sharding_policy(proto::SHARDING_DYNAMIC);
  job_req.mutable_options()->set_split_size(8);
  proto::GetOrCreateJobResponse job;
  grpc::Status s = stub_->GetOrCreateJob(Context().get(), job_req, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(job.created());

  proto::GetElementSpecRequest spec_req;
  spec_req.set_job_id(job.job_id());
  proto::GetElementSpecResponse spec;
  ASSERT_TRUE(stub_->GetElementSpec(Context().get(), spec_req, &spec).ok());
  EXPECT_EQ(spec.num_replicas(), 2);
  EXPECT_EQ(spec.per_replica_spec().specs_size(), 1);

  ASSERT_TRUE(Heartbeat("127.0.0.1:1", &hb).ok());
  ASSERT_EQ(hb.new_tasks_size(), 1);
  const int64_t task = hb.new_tasks(0).task_id();

  proto::ClientHeartbeatRequest client_req;
  client_req.set_wire_version(proto::WIRE_VERSION_1);
  client_req.set_job_id(job.job_id());
  proto::ClientHeartbeatResponse client;
  ASSERT_TRUE(stub_->ClientHeartbeat(Context().get(), client_req, &client).ok());
  ASSERT_EQ(client.tasks_size(), 1);
  EXPECT_EQ(client.tasks(0).worker_address(), "127.0.0.1:1");

  proto::GetSplitRequest split_req;
  split_req.set_job_id(job.job_id());
  split_req.set_task_id(task);
  int splits = 0;
  for (int i = 0; i < 10; ++i) {
    proto::GetSplitResponse split;
    ASSERT_TRUE(stub_->GetSplit(Context().get(), split_req, &split).ok());
    if (split.end_of_splits()) break;
    EXPECT_TRUE(Dataset::FromDef(split.dataset()).ok());
    ++splits;
  }
  EXPECT_EQ(splits, 3);  // 20 elements, 8 per split

  proto::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), proto::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.num_datasets(), 1);
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_TRUE(status.workers(0).alive());
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.jobs(0).job_name(), "train");
  EXPECT_EQ(status.jobs(0).options().replicas_per_consumer(), 2);
}

// The heartbeats take raw bytes and count their own metrics (no interceptor runs on them): a
// request that does not parse is INVALID_ARGUMENT naming the method, as on the other methods,
// and every call is counted once, by its code.
TEST_F(GrpcCoordinatorTest, MalformedHeartbeatsAreInvalidArgumentAndEveryCallIsCountedOnce) {
  CounterFamily* started = MetricsRegistry::Default().Counter("sluice_rpc_server_started_total", "");
  CounterFamily* handled = MetricsRegistry::Default().Counter("sluice_rpc_server_handled_total", "");
  const std::string service = "sluice.proto.CoordinatorService";
  for (const std::string method : {"WorkerHeartbeat", "ClientHeartbeat"}) {
    SCOPED_TRACE(method);
    const double started0 = started->Value({service, method});
    const double invalid0 = handled->Value({service, method, "INVALID_ARGUMENT"});
    const std::string full = "/" + service + "/" + method;
    grpc::Slice garbage(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 10));
    grpc::ByteBuffer request(&garbage, 1);
    grpc::ByteBuffer response;
    grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), grpc::internal::RpcMethod(full.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
        Context().get(), request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(full + ": malformed request"));
    EXPECT_EQ(started->Value({service, method}), started0 + 1);
    EXPECT_EQ(handled->Value({service, method, "INVALID_ARGUMENT"}), invalid0 + 1);
  }
  // A good heartbeat of each: OK, counted once.
  const double worker_ok0 = handled->Value({service, "WorkerHeartbeat", "OK"});
  const double worker_started0 = started->Value({service, "WorkerHeartbeat"});
  proto::WorkerHeartbeatResponse worker;
  ASSERT_TRUE(Heartbeat("w:1", &worker).ok());
  EXPECT_GT(worker.worker_id(), 0);
  EXPECT_EQ(started->Value({service, "WorkerHeartbeat"}), worker_started0 + 1);
  EXPECT_EQ(handled->Value({service, "WorkerHeartbeat", "OK"}), worker_ok0 + 1);
  // An error from the coordinator keeps its code: a consumer of no job is NOT_FOUND.
  const double not_found0 = handled->Value({service, "ClientHeartbeat", "NOT_FOUND"});
  proto::ClientHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_job_id(12345);
  proto::ClientHeartbeatResponse resp;
  grpc::Status s = stub_->ClientHeartbeat(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(handled->Value({service, "ClientHeartbeat", "NOT_FOUND"}), not_found0 + 1);
}

// A call whose caller gave up before the handler got to it (a restart storm: clients retried
// while the call waited for a thread) is dropped before any work: CANCELLED "the caller
// cancelled the call", counted so, and nothing registered. The hook holds the handler until
// the server has seen the cancellation (bounded: 3000 x 10 ms), which makes the order certain.
TEST_F(GrpcCoordinatorTest, ACallCancelledBeforeItsHandlerRunsIsDroppedBeforeAnyWork) {
  absl::Notification entered;
  std::atomic<bool> saw_cancel{false};
  CoordinatorServerOptions options;
  options.port = 0;
  options.coordinator.worker_timeout = absl::Hours(1);
  options.coordinator.log = [](absl::string_view) {};
  options.before_cancellation_check = [&](const grpc::ServerContextBase& context,
                                          absl::string_view method) {
    if (method != "RegisterDataset" || entered.HasBeenNotified()) return;
    entered.Notify();
    for (int i = 0; i < 3000 && !context.IsCancelled(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    saw_cancel = context.IsCancelled();
  };
  server_.reset();
  auto server = CoordinatorServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  stub_ = proto::CoordinatorService::NewStub(channel_);

  CounterFamily* handled = MetricsRegistry::Default().Counter("sluice_rpc_server_handled_total", "");
  const std::string service = "sluice.proto.CoordinatorService";
  auto handled_calls = [&] {
    double n = 0;
    for (const char* code : {"OK", "CANCELLED"}) {
      n += handled->Value({service, "RegisterDataset", code});
    }
    return n;
  };
  const double handled0 = handled_calls();
  const double cancelled0 = handled->Value({service, "RegisterDataset", "CANCELLED"});
  auto ctx = Context();
  grpc::Status status;
  std::thread call([&] {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline("range(20).batch(4)");
    proto::RegisterDatasetResponse resp;
    status = stub_->RegisterDataset(ctx.get(), req, &resp);
  });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(kCallSeconds)));
  ctx->TryCancel();
  call.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 3000 && handled_calls() == handled0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(handled_calls(), handled0 + 1) << "the cancelled call's handler never finished";
  ASSERT_TRUE(saw_cancel.load()) << "the server never saw the cancellation";
  EXPECT_EQ(handled->Value({service, "RegisterDataset", "CANCELLED"}), cancelled0 + 1);
  EXPECT_EQ(server_->coordinator().TEST_TableSizes().datasets, 0u)
      << "the cancelled call registered its dataset";
  // The server goes on serving: the same request from a caller that waits registers it.
  proto::RegisterDatasetResponse ds;
  ASSERT_TRUE(Register("range(20).batch(4)", &ds).ok());
  EXPECT_EQ(server_->coordinator().TEST_TableSizes().datasets, 1u);
}

TEST_F(GrpcCoordinatorTest, MalformedPipelineIsInvalidArgumentAndTheServerKeepsServing) {
  const std::string bad = "range(10).batch(";
  proto::RegisterDatasetResponse resp;
  grpc::Status s = Register(bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const absl::Status parser = Dataset::Parse(bad).status();
  ASSERT_FALSE(parser.ok());
  EXPECT_EQ(s.error_message(), std::string(parser.message()));
  EXPECT_THAT(s.error_message(), HasSubstr("pipeline expression"));

  // Other bad requests get their own codes over the wire.
  proto::GetOrCreateJobRequest job_req;
  job_req.set_wire_version(proto::WIRE_VERSION_1);
  job_req.mutable_options()->set_dataset_id("ds-missing");
  job_req.mutable_options()->set_num_consumers(1);
  job_req.mutable_options()->set_replicas_per_consumer(1);
  proto::GetOrCreateJobResponse job;
  EXPECT_EQ(stub_->GetOrCreateJob(Context().get(), job_req, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);
  job_req.set_wire_version(proto::WIRE_VERSION_UNSPECIFIED);
  EXPECT_EQ(stub_->GetOrCreateJob(Context().get(), job_req, &job).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  ASSERT_TRUE(Register("range(10).batch(2)", &resp).ok());
  proto::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), proto::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.num_datasets(), 1);
}

TEST_F(GrpcCoordinatorTest, HealthServiceAnswersServing) {
  grpc::Status status;
  const std::string bytes = HealthCheck(&status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  // HealthCheckResponse{status: SERVING (1)}: field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// ServerReflectionInfo (a bidi stream) through a generic stub: list_services must name the
// coordinator service, as grpcurl and grpc_cli would see it.
TEST_F(GrpcCoordinatorTest, ReflectionListsTheCoordinatorService) {
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  auto ctx = Context();
  auto call = generic.PrepareCall(
      ctx.get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  // Waits for the operation tagged `tag`; false if it failed or never completed.
  auto wait = [&cq](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(kCallSeconds);
    if (cq.AsyncNext(&got, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return false;
    return ok && reinterpret_cast<intptr_t>(got) == tag;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(wait(1));
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  grpc::Slice request_bytes(std::string("\x3a\x00", 2));
  grpc::ByteBuffer request(&request_bytes, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(wait(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(wait(3));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  EXPECT_THAT(bytes, HasSubstr("sluice.proto.CoordinatorService"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
  ctx->TryCancel();
  grpc::Status finish;
  call->Finish(&finish, reinterpret_cast<void*>(4));
  void* tag = nullptr;
  bool ok = false;
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(GrpcCoordinatorTest, PortZeroGivesEachServerItsOwnPortAndShutdownIsIdempotent) {
  CoordinatorServerOptions options;
  options.coordinator.log = [](absl::string_view) {};
  auto second = CoordinatorServer::Start(options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT((*second)->port(), 0);
  EXPECT_NE((*second)->port(), server_->port());

  // A port in use cannot be bound.
  CoordinatorServerOptions taken = options;
  taken.port = server_->port();
  EXPECT_EQ(CoordinatorServer::Start(taken).status().code(), absl::StatusCode::kUnavailable);

  server_->Shutdown(absl::Seconds(1));
  server_->Shutdown(absl::Seconds(1));
  proto::GetStatusResponse status;
  auto ctx = Context();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_FALSE(stub_->GetStatus(ctx.get(), proto::GetStatusRequest(), &status).ok());
}

}  // namespace
}  // namespace sluice
