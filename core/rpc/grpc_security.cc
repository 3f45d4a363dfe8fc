#include "core/rpc/grpc_security.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/server_interceptor.h"

namespace sluice {
namespace {

// gRPC's generated handlers answer a request that protobuf cannot parse with INTERNAL (empty
// message, or "No payload" when there was no message at all) before our handler runs. It is
// the caller's bad input, so it becomes INVALID_ARGUMENT naming the method; the server is
// unaffected either way.
class MalformedRequestInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit MalformedRequestInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status s = methods->GetSendStatus();
      if (s.error_code() == grpc::StatusCode::INTERNAL &&
          (s.error_message().empty() || s.error_message() == "No payload")) {
        methods->ModifySendStatus(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, MalformedRequestMessage(method_)));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

class MalformedRequestInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MalformedRequestInterceptorFactory(std::vector<std::string> self_checked)
      : self_checked_(std::move(self_checked)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const absl::string_view method = info->method() != nullptr ? info->method() : "";
    for (const std::string& m : self_checked_) {
      if (method == m) return nullptr;  // its handler parses the request itself
    }
    return new MalformedRequestInterceptor(std::string(method));
  }

 private:
  const std::vector<std::string> self_checked_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeMalformedRequestInterceptorFactory(std::vector<std::string> self_checked) {
  return std::make_unique<MalformedRequestInterceptorFactory>(std::move(self_checked));
}

std::string MalformedRequestMessage(absl::string_view method) {
  return absl::StrCat(method, ": malformed request (not a valid protocol buffer message)");
}

absl::Status AddSecureListeningPort(const ServerSecurity& security, const std::string& listen,
                                    grpc::ServerBuilder* builder, int* port) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(security.tls));
  builder->AddListeningPort(listen, std::move(credentials), port);
  builder->SetMaxReceiveMessageSize(security.max_receive_message_bytes);
  // Clients' keepalive pings are welcome: gRPC's default answers pings more often than every
  // 5 minutes without data with GOAWAY too_many_pings, ending the calls they keep alive.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(MakeMalformedRequestInterceptorFactory());
  builder->experimental().SetInterceptorCreators(std::move(creators));
  return absl::OkStatus();
}

namespace {

int Millis(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return static_cast<int>(std::clamp<int64_t>(ms, 1, std::numeric_limits<int>::max()));
}

}  // namespace

void ApplyChannelLimits(const ChannelLimits& limits, grpc::ChannelArguments* args) {
  args->SetMaxReceiveMessageSize(limits.max_receive_message_bytes);
  if (limits.keepalive_time == absl::InfiniteDuration()) return;
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(limits.keepalive_time));
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(limits.keepalive_timeout));
  // Pings go on while a call waits for data (the partition this is for): by default gRPC
  // sends only 2 pings without data in between.
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
}

void AddServerKeepalive(absl::Duration time, absl::Duration timeout,
                        grpc::ServerBuilder* builder) {
  if (time == absl::InfiniteDuration()) return;
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(time));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(timeout));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

absl::StatusOr<GrpcChannelFactory> MakeChannelFactory(const ChannelSecurity& security) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(security.tls));
  const std::string token = security.token;
  const std::string server_name = security.tls_server_name;
  const ChannelLimits limits = security.limits;
  return GrpcChannelFactory([credentials, token, server_name,
                             limits](const std::string& address) {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    ApplyChannelLimits(limits, &args);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // A peer that was down (a coordinator restarting, a worker coming back) is reached again
    // within a second of its return: gRPC's default reconnect backoff grows to 120 s, long
    // past any worker_timeout, and a worker whose channel still waits would be declared dead
    // by the restarted coordinator and lose its tasks.
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                   TokenInterceptors(token));
  });
}

absl::StatusOr<ServerSecurity> ServerSecurityFromFlags(const std::string& tls_cert,
                                                       const std::string& tls_key,
                                                       const std::string& tls_ca,
                                                       bool tls_client_auth,
                                                       const std::string& token_file,
                                                       int max_receive_message_bytes) {
  ServerSecurity s;
  s.tls.cert_file = tls_cert;
  s.tls.key_file = tls_key;
  s.tls.ca_file = tls_ca;
  s.tls.client_auth = tls_client_auth;
  RETURN_IF_ERROR(MakeServerCredentials(s.tls).status());
  if (!token_file.empty()) {
    ASSIGN_OR_RETURN(s.token, ReadTokenFile(token_file));
  }
  if (max_receive_message_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_request_bytes must be positive, got ", max_receive_message_bytes));
  }
  s.max_receive_message_bytes = max_receive_message_bytes;
  return s;
}

}  // namespace sluice
