// An in-process cluster on port 0 (coordinator + workers, as tests/worker/
// service_cluster_test.cc) whose servers take ServerSecurity, data roots and bounds, and a
// consumer that reads a job through DistributeDatasetFromService with ServiceSecurity.
#ifndef SLUICE_TESTS_SECURITY_SECURE_CLUSTER_H_
#define SLUICE_TESTS_SECURITY_SECURE_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "worker/worker_server.h"

namespace sluice {

struct SecureClusterOptions {
  int num_workers = 2;
  ServerSecurity coordinator_security = {};
  // Per-role tokens of the coordinator (core/rpc/role_auth.h); none: coordinator_security.token.
  RoleTokens coordinator_roles = {};
  DataRoots coordinator_roots = {};
  DatasetLimits coordinator_limits = {};
  ServerSecurity worker_security = {};
  ChannelSecurity worker_to_coordinator = {};
  DataRoots worker_roots = {};
  // Wait for every worker to register (false when they are expected not to).
  bool wait_for_workers = true;
};

class SecureCluster {
 public:
  static absl::StatusOr<std::unique_ptr<SecureCluster>> Start(SecureClusterOptions options);
  ~SecureCluster();

  std::string address() const { return coordinator_->address(); }
  WorkerServer* worker(int i) { return workers_[i].get(); }
  int num_registered() const;

 private:
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
};

// What one consumer read: the int64 values of every step (replicas concatenated) and the
// number of elements of any dtype.
struct ReadResult {
  absl::Status status;
  std::vector<int64_t> values;
  int64_t elements = 0;
  int64_t steps = 0;
};

// Reads `dataset` to its end (at most 10000 steps) as consumer 0 of 1 with one replica.
ReadResult ReadAll(const std::string& coordinator, const Dataset& dataset, ServiceOptions options);

}  // namespace sluice

#endif  // SLUICE_TESTS_SECURITY_SECURE_CLUSTER_H_
