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

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "core/obs/metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace sluice {

// `registry` is borrowed and must outlive every server built with the factory; nullptr:
// MetricsRegistry::Default().
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRpcMetricsInterceptorFactory(MetricsRegistry* registry = nullptr);

// "OK", "CANCELLED", ..., "UNAUTHENTICATED": the canonical name of a gRPC status code.
std::string GrpcCodeName(int code);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_METRICS_H_
