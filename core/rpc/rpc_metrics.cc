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

RpcFamilies Families(MetricsRegistry* registry) {
  if (registry == nullptr) registry = &MetricsRegistry::Default();
  RpcFamilies f;
  f.started = registry->Counter("sluice_rpc_server_started_total",
                                "RPCs the server started, by service and method.",
                                {"service", "method"});
  f.handled = registry->Counter(
      "sluice_rpc_server_handled_total",
      "RPCs the server completed, by service, method and gRPC status code (errors: code != OK).",
      {"service", "method", "code"});
  return f;
}

// "/package.Service/Method" -> {"package.Service", "Method"}.
std::pair<std::string, std::string> SplitMethod(absl::string_view full) {
  if (!full.empty() && full[0] == '/') full.remove_prefix(1);
  const size_t slash = full.find('/');
  if (slash == absl::string_view::npos) return {"", std::string(full)};
  return {std::string(full.substr(0, slash)), std::string(full.substr(slash + 1))};
}


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
  RpcMetricsInterceptorFactory(MetricsRegistry* registry, std::vector<std::string> self_counted)
      : families_(Families(registry)), self_counted_(std::move(self_counted)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    absl::string_view full = info->method() != nullptr ? info->method() : "";
    for (const std::string& m : self_counted_) {
      if (full == m) return nullptr;  // its handler counts it
    }
    auto [service, method] = SplitMethod(full);
    return new RpcMetricsInterceptor(families_, std::move(service), std::move(method));
  }

 private:
  const RpcFamilies families_;
  const std::vector<std::string> self_counted_;
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
MakeRpcMetricsInterceptorFactory(MetricsRegistry* registry,
                                 std::vector<std::string> self_counted) {
  return std::make_unique<RpcMetricsInterceptorFactory>(registry, std::move(self_counted));
}

RpcMethodMetrics::RpcMethodMetrics(absl::string_view full_method, MetricsRegistry* registry) {
  const RpcFamilies f = Families(registry);
  started_ = f.started;
  handled_ = f.handled;
  auto [service, method] = SplitMethod(full_method);
  started_labels_ = {service, method};
  for (int code = 0; code < kNumCodes; ++code) {
    handled_labels_.push_back({service, method, GrpcCodeName(code)});
  }
}

void RpcMethodMetrics::Started() const {
  // Two first calls at once may both bind: each adds its 1, and both find the same place.
  if (double* sample = started_sample_.load(std::memory_order_acquire); sample != nullptr) {
    started_->AddAt(sample);
  } else {
    started_sample_.store(started_->AddAndBind(started_labels_), std::memory_order_release);
  }
}

void RpcMethodMetrics::Handled(grpc::StatusCode code) const {
  const int c = static_cast<int>(code);
  if (c >= 0 && c < kNumCodes) {
    std::atomic<double*>& bound = handled_samples_[static_cast<size_t>(c)];
    if (double* sample = bound.load(std::memory_order_acquire); sample != nullptr) {
      handled_->AddAt(sample);
    } else {
      bound.store(handled_->AddAndBind(handled_labels_[static_cast<size_t>(c)]),
                  std::memory_order_release);
    }
  } else {
    handled_->Add({started_labels_[0], started_labels_[1], GrpcCodeName(c)});
  }
}

}  // namespace sluice
