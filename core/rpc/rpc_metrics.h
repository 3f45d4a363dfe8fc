// RPC metrics for gRPC servers: a server interceptor that counts every call a server handles by
// service, method and status code, into a MetricsRegistry:
//
//   sluice_rpc_server_started_total{service="sluice.proto.CoordinatorService",method="GetStatus"}
//   sluice_rpc_server_handled_total{service=...,method=...,code="OK"}
//
// Errors by code are the handled_total samples whose code is not OK. Install it when building a
// server:
//
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> i;
//   i.push_back(MakeRpcMetricsInterceptorFactory());
//   builder.experimental().SetInterceptorCreators(std::move(i));
//
// Thread safety: the factory and its interceptors are thread-safe.
#ifndef SLUICE_CORE_RPC_METRICS_H_
#define SLUICE_CORE_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/obs/metrics.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"

namespace sluice {

// `registry` is borrowed and must outlive every server built with the factory; nullptr:
// MetricsRegistry::Default(). The methods in `self_counted` ("/package.Service/Method") get no
// interceptor: their handlers count themselves with RpcMethodMetrics (a server's hottest
// methods: an interceptor costs each call two objects and a pass through gRPC's interception
// machinery on every batch of the call).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRpcMetricsInterceptorFactory(MetricsRegistry* registry = nullptr,
                                 std::vector<std::string> self_counted = {});

// The samples the interceptor makes, for one method whose handler counts its own calls: call
// Started() when the handler begins and Handled(code) with the status it answers.
// Thread-safe.
class RpcMethodMetrics {
 public:
  // `full_method` is "/package.Service/Method"; `registry` as above.
  explicit RpcMethodMetrics(absl::string_view full_method, MetricsRegistry* registry = nullptr);

  void Started() const;
  void Handled(grpc::StatusCode code) const;

 private:
  static constexpr int kNumCodes = 17;  // OK .. UNAUTHENTICATED

  CounterFamily* started_;
  CounterFamily* handled_;
  std::vector<std::string> started_labels_;  // service, method
  // service, method, code name: by code (built once, not on every call).
  std::vector<std::vector<std::string>> handled_labels_;
  // Each sample's place once its first call bound it (CounterFamily::AddAndBind), so that
  // later calls skip the key; bound lazily, so that a code never answered has no sample.
  mutable std::atomic<double*> started_sample_{nullptr};
  mutable std::array<std::atomic<double*>, kNumCodes> handled_samples_{};
};

// "OK", "CANCELLED", ..., "UNAUTHENTICATED": the canonical name of a gRPC status code.
std::string GrpcCodeName(int code);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_METRICS_H_
