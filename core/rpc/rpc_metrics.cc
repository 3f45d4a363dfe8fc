#include "core/rpc/rpc_metrics.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/interceptor.h"

namespace sluice {
namespace {

struct RpcFamilies {
  CounterFamily* started;
  CounterFamily* handled;
};

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcFamilies families, std::string service, std::string method)
      : families_(families), service_(std::move(service)), method_(std::move(method)) {
    families_.started->Add({service_, method_});
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      families_.handled->Add(
          {service_, method_, GrpcCodeName(static_cast<int>(methods->GetSendStatus().error_code()))});
    }
    methods->Proceed();
  }

 private:
  const RpcFamilies families_;
  const std::string service_;
  const std::string method_;
};

class RpcMetricsInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(MetricsRegistry* registry) {
    families_.started = registry->Counter("sluice_rpc_server_started_total",
                                          "RPCs the server started, by service and method.",
                                          {"service", "method"});
    families_.handled = registry->Counter(
        "sluice_rpc_server_handled_total",
        "RPCs the server completed, by service, method and gRPC status code (errors: code != OK).",
        {"service", "method", "code"});
  }

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // "/package.Service/Method"
    absl::string_view full = info->method() != nullptr ? info->method() : "";
    if (!full.empty() && full[0] == '/') full.remove_prefix(1);
    const size_t slash = full.find('/');
    std::string service(slash == absl::string_view::npos ? absl::string_view() : full.substr(0, slash));
    std::string method(slash == absl::string_view::npos ? full : full.substr(slash + 1));
    return new RpcMetricsInterceptor(families_, std::move(service), std::move(method));
  }

 private:
  RpcFamilies families_;
};

}  // namespace

std::string GrpcCodeName(int code) {
  static const char* const kNames[] = {
      "OK",       "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return kNames[code];
  }
  return absl::StrCat("CODE_", code);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRpcMetricsInterceptorFactory(MetricsRegistry* registry) {
  return std::make_unique<RpcMetricsInterceptorFactory>(
      registry != nullptr ? registry : &MetricsRegistry::Default());
}

}  // namespace sluice
