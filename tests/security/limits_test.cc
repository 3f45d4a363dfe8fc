// Bounds and bad input: dataset graphs over the limits and requests over the size limit are
// refused, bytes that are not a message (on the coordinator's methods and the worker's framed
// stream) are INVALID_ARGUMENT, and the servers keep serving. Plugins: a pipeline naming a
// plugin op the worker was not started with fails cleanly and loads nothing.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "core/data/dataset_limits.h"
#include "core/rpc/grpc_security.h"
#include "core/data/plugin_loader.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/dataset.pb.h"
#include "tests/security/secure_cluster.h"

namespace sluice {
namespace {

grpc::Status RawUnary(const std::string& address, const std::string& method,
                      const std::string& bytes) {
  auto channels = MakeChannelFactory({});
  EXPECT_TRUE(channels.ok());
  std::shared_ptr<grpc::Channel> channel = (*channels)(address);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
      &context, request, &response);
}

grpc::Status Register(const std::string& address, const std::string& pipeline) {
  auto channels = MakeChannelFactory({});
  EXPECT_TRUE(channels.ok());
  auto stub = proto::CoordinatorService::NewStub((*channels)(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  proto::RegisterDatasetRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_pipeline(pipeline);
  proto::RegisterDatasetResponse response;
  return stub->RegisterDataset(&context, request, &response);
}

TEST(LimitsTest, GraphBounds) {
  proto::DatasetDef flat;
  flat.mutable_source()->mutable_range()->set_stop(10);
  for (int i = 0; i < 6; ++i) flat.add_ops()->mutable_skip()->set_count(1);
  EXPECT_TRUE(CheckDatasetLimits(flat, {.max_ops = 6}).ok());
  absl::Status many = CheckDatasetLimits(flat, {.max_ops = 5});
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument) << many;
  EXPECT_NE(many.message().find("6 ops"), std::string::npos) << many;
  EXPECT_EQ(CheckDatasetLimits(flat, {.max_bytes = 4}).code(), absl::StatusCode::kInvalidArgument);

  // Interleave functions nested 20 deep.
  proto::DatasetDef deep = flat;
  proto::DatasetDef* level = &deep;
  for (int i = 0; i < 20; ++i) level = level->add_ops()->mutable_interleave()->mutable_fn();
  absl::Status nested = CheckDatasetLimits(deep, {.max_nesting = 16});
  EXPECT_EQ(nested.code(), absl::StatusCode::kInvalidArgument) << nested;
  EXPECT_NE(nested.message().find("16"), std::string::npos) << nested;
  EXPECT_TRUE(CheckDatasetLimits(deep, {.max_nesting = 32}).ok());
  EXPECT_EQ(CheckPipelineLimits(std::string(100, 'x'), {.max_bytes = 99}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LimitsTest, CoordinatorRefusesOversizedAndMalformedRequestsAndKeepsServing) {
  ServerSecurity small;
  small.max_receive_message_bytes = 64 << 10;
  auto cluster = SecureCluster::Start({.num_workers = 1,
                                       .coordinator_security = small,
                                       .coordinator_limits = {.max_ops = 5}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string address = (*cluster)->address();

  grpc::Status too_many = Register(address, "range(10).skip(1).skip(1).skip(1).skip(1).skip(1).batch(1)");
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << too_many.error_message();

  // Over the receive limit: refused by gRPC before any handler.
  grpc::Status huge = Register(address, "range(10)" + std::string(100 << 10, ' '));
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << huge.error_message();

  // Bytes that are no RegisterDatasetRequest.
  for (const std::string& garbage :
       {std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 10), std::string("\x0a\x05xy", 4),
        std::string("\x12\x80\x80\x80\x80\x10", 6)}) {
    grpc::Status s =
        RawUnary(address, "/sluice.proto.CoordinatorService/RegisterDataset", garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "[" << s.error_message() << "]";
  }
  grpc::Status no_method = RawUnary(address, "/sluice.proto.CoordinatorService/Nope", "");
  EXPECT_EQ(no_method.error_code(), grpc::StatusCode::UNIMPLEMENTED);

  // Still serving.
  EXPECT_TRUE(Register(address, "range(8).batch(4)").ok());
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  ReadResult r = ReadAll(address, *ds, o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.values.size(), 8u);
}

TEST(LimitsTest, WorkerRejectsGarbageOnItsStreamAndKeepsServing) {
  auto cluster = SecureCluster::Start({.num_workers = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string worker = (*cluster)->worker(0)->address();
  for (const std::string& garbage :
       {std::string("garbage"), std::string("\x00\x00\x00\x10\xff\xff", 6),
        std::string("\xff\xff\xff\x7f", 4), std::string("\x02\x00\x00\x00\xff\xff", 6)}) {
    auto channels = MakeChannelFactory({});
    ASSERT_TRUE(channels.ok());
    std::shared_ptr<grpc::Channel> channel = (*channels)(worker);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::internal::RpcMethod method("/sluice.proto.WorkerService/StreamSteps",
                                           grpc::internal::RpcMethod::BIDI_STREAMING);
    std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel.get(), method, &context));
    grpc::Slice slice(garbage);
    stream->Write(grpc::ByteBuffer(&slice, 1));
    stream->WritesDone();
    grpc::ByteBuffer frame;
    for (int i = 0; i < 100 && stream->Read(&frame); ++i) {
    }
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "garbage of " << garbage.size() << " bytes: " << s.error_message();
  }
  auto ds = Dataset::Parse("range(12).batch(4)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  ReadResult r = ReadAll((*cluster)->address(), *ds, o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.values.size(), 12u);
}

bool PluginLibraryMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("sluice_example_plugin") != std::string::npos;
}

TEST(PluginRestrictionTest, PipelineNamingAnUnloadedPluginFailsAndLoadsNothing) {
  // A plugin is named by op only: no field of the graph can carry a library path.
  const google::protobuf::Descriptor* fn = proto::PluginFn::descriptor();
  ASSERT_EQ(fn->field_count(), 2);
  EXPECT_EQ(fn->field(0)->name(), "op");
  EXPECT_EQ(fn->field(1)->name(), "args");

  auto cluster = SecureCluster::Start({.num_workers = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(PluginRegistry::Global().OpNames().empty());
  for (const std::string& pipeline :
       {std::string("range(8).map(cast(tf.float32)).map(plugin('scale', factor=2.0)).batch(4)"),
        std::string("range(8).map(plugin('/tmp/libevil.so')).batch(4)")}) {
    // The client refuses it before it leaves the process...
    auto ds = Dataset::Parse(pipeline);
    ASSERT_FALSE(ds.ok()) << pipeline;
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << ds.status();
    EXPECT_THAT(std::string(ds.status().message()),
                ::testing::HasSubstr("no loaded plugin provides op"));
    // ...and so does the coordinator when a client sends it anyway (raw RegisterDataset).
    grpc::Status remote = Register((*cluster)->address(), pipeline);
    EXPECT_EQ(remote.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << pipeline;
    EXPECT_THAT(remote.error_message(), ::testing::HasSubstr("no loaded plugin provides op"))
        << pipeline;
  }
  EXPECT_TRUE(PluginRegistry::Global().OpNames().empty());
  EXPECT_FALSE(PluginLibraryMapped());
  // And the cluster still serves.
  auto ds = Dataset::Parse("range(8).batch(4)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  ReadResult r = ReadAll((*cluster)->address(), *ds, o);
  EXPECT_TRUE(r.status.ok()) << r.status;
}

}  // namespace
}  // namespace sluice
