// gRPC reflection on the coordinator, used the way grpcurl does: list the services, fetch the
// file that defines sluice.proto.CoordinatorService.GetElementSpec (and its dependencies),
// build the request from those descriptors alone and call the method with it.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "tests/observability/reflection_mirror.pb.h"

namespace sluice {
namespace {

namespace refl = ::sluice::test::reflection;
constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

class ReflectionClient {
 public:
  explicit ReflectionClient(std::shared_ptr<grpc::Channel> channel)
      : channel_(std::move(channel)),
        method_(kReflectionMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel_) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stream_.reset(grpc::internal::ClientReaderWriterFactory<
                  refl::ServerReflectionRequest,
                  refl::ServerReflectionResponse>::Create(channel_.get(), method_, &context_));
  }
  ~ReflectionClient() {
    stream_->WritesDone();
    (void)stream_->Finish();
  }

  refl::ServerReflectionResponse Ask(const refl::ServerReflectionRequest& request) {
    refl::ServerReflectionResponse response;
    EXPECT_TRUE(stream_->Write(request));
    EXPECT_TRUE(stream_->Read(&response));
    return response;
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::internal::RpcMethod method_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<refl::ServerReflectionRequest,
                                           refl::ServerReflectionResponse>>
      stream_;
};

TEST(ReflectionTest, ResolveAndCallGetElementSpecFromReflectedDescriptors) {
  CoordinatorServerOptions options;
  options.coordinator.log = [](absl::string_view) {};
  auto server = CoordinatorServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // A dataset to ask about, registered the ordinary way.
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  reg.set_pipeline("range(12).batch(4)");
  proto::RegisterDatasetResponse registered;
  ASSERT_TRUE((*server)->coordinator().RegisterDataset(reg, &registered).ok());

  auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  ReflectionClient client(channel);

  refl::ServerReflectionRequest list;
  list.set_list_services("*");
  refl::ServerReflectionResponse services = client.Ask(list);
  ASSERT_TRUE(services.has_list_services_response()) << services.DebugString();
  std::set<std::string> names;
  for (const auto& s : services.list_services_response().service()) names.insert(s.name());
  EXPECT_TRUE(names.count("sluice.proto.CoordinatorService")) << services.DebugString();
  EXPECT_TRUE(names.count("grpc.reflection.v1alpha.ServerReflection")) << services.DebugString();

  refl::ServerReflectionRequest symbol;
  symbol.set_file_containing_symbol("sluice.proto.CoordinatorService.GetElementSpec");
  refl::ServerReflectionResponse files = client.Ask(symbol);
  ASSERT_TRUE(files.has_file_descriptor_response()) << files.DebugString();

  // A pool built only from what reflection sent (dependencies come first or later: add until
  // every file went in).
  google::protobuf::DescriptorPool pool;
  std::vector<google::protobuf::FileDescriptorProto> pending;
  for (const std::string& bytes : files.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto f;
    ASSERT_TRUE(f.ParseFromString(bytes));
    pending.push_back(std::move(f));
  }
  for (int round = 0; round < 10 && !pending.empty(); ++round) {
    std::vector<google::protobuf::FileDescriptorProto> later;
    for (auto& f : pending) {
      bool ready = true;
      for (const std::string& dep : f.dependency()) ready = ready && pool.FindFileByName(dep);
      if (!ready || pool.BuildFile(f) == nullptr) later.push_back(std::move(f));
    }
    pending = std::move(later);
  }
  ASSERT_TRUE(pending.empty()) << pending.size() << " files did not build, first "
                               << pending[0].name();
  const google::protobuf::MethodDescriptor* method =
      pool.FindMethodByName("sluice.proto.CoordinatorService.GetElementSpec");
  ASSERT_NE(method, nullptr);
  EXPECT_EQ(method->input_type()->full_name(), "sluice.proto.GetElementSpecRequest");
  EXPECT_EQ(method->output_type()->full_name(), "sluice.proto.GetElementSpecResponse");

  // The request, by field names, as grpcurl -d '{"options": {...}}' would build it.
  google::protobuf::DynamicMessageFactory factory(&pool);
  std::unique_ptr<google::protobuf::Message> request(
      factory.GetPrototype(method->input_type())->New());
  const google::protobuf::FieldDescriptor* options_field =
      method->input_type()->FindFieldByName("options");
  ASSERT_NE(options_field, nullptr);
  google::protobuf::Message* job =
      request->GetReflection()->MutableMessage(request.get(), options_field, &factory);
  const google::protobuf::Reflection* jr = job->GetReflection();
  const google::protobuf::Descriptor* jd = job->GetDescriptor();
  jr->SetString(job, jd->FindFieldByName("dataset_id"), registered.dataset_id());
  jr->SetInt64(job, jd->FindFieldByName("num_consumers"), 1);
  jr->SetInt64(job, jd->FindFieldByName("replicas_per_consumer"), 2);

  std::string request_bytes;
  ASSERT_TRUE(request->SerializeToString(&request_bytes));
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const std::string path =
      std::string("/") + method->service()->full_name() + "/" + method->name();
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), grpc::internal::RpcMethod(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
      &context, request_buffer, &response_buffer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response_buffer.Dump(&slices).ok());
  std::string response_bytes;
  for (const grpc::Slice& s : slices) {
    response_bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  std::unique_ptr<google::protobuf::Message> response(
      factory.GetPrototype(method->output_type())->New());
  ASSERT_TRUE(response->ParseFromString(response_bytes));
  const google::protobuf::Descriptor* rd = response->GetDescriptor();
  EXPECT_EQ(response->GetReflection()->GetInt64(*response, rd->FindFieldByName("num_replicas")), 2);
  EXPECT_TRUE(
      response->GetReflection()->HasField(*response, rd->FindFieldByName("per_replica_spec")));
  // The same answer as the typed call.
  proto::GetElementSpecResponse typed;
  ASSERT_TRUE(typed.ParseFromString(response_bytes));
  EXPECT_EQ(typed.num_replicas(), 2);
  EXPECT_GT(typed.per_replica_spec().ByteSizeLong(), 0u);
}

}  // namespace
}  // namespace sluice
