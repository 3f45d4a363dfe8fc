// An in-process Sluice cluster on port 0 for tests: one CoordinatorServer and N WorkerServers
// in this process, and consumers (trainer processes, here threads) reading through
// DistributeDatasetFromService.
//
//   Cluster cluster(3);                       // every worker registered on return
//   auto results = ConsumeAll(cluster.address(), Dataset::Range(100).Batch(8), options,
//                             /*consumers=*/2, /*replicas=*/2);
//   ExpectExactlyOnce(results, 100);
//
// Thread safety: a Cluster is driven by one test thread; Consume* may run on several.
#ifndef SLUICE_TESTS_WORKER_IN_PROCESS_CLUSTER_H_
#define SLUICE_TESTS_WORKER_IN_PROCESS_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sluice/dataset.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "worker/worker_server.h"

namespace sluice {

class Cluster {
 public:
  // Starts the coordinator and `num_workers` workers (100 ms heartbeats) and waits, bounded,
  // until every worker has registered, so that a job made next gets one task per worker.
  // `tune`, when set, adjusts each worker's options (this one's and AddWorker's) before it
  // starts.
  explicit Cluster(int num_workers, absl::Duration worker_timeout = absl::Seconds(10),
                   size_t buffer_bytes = size_t{64} << 20,
                   std::function<void(WorkerServerOptions*)> tune = nullptr);

  // Starts one more worker (it registers at its first heartbeat).
  void AddWorker(size_t buffer_bytes = size_t{64} << 20);

  std::string address() const { return coordinator_->address(); }
  Coordinator& coordinator() { return coordinator_->coordinator(); }
  WorkerServer* worker(int i) { return workers_[i].get(); }
  int num_workers() const { return static_cast<int>(workers_.size()); }

 private:
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
  std::function<void(WorkerServerOptions*)> tune_;
};

// What one consumer read: per step, per local replica, the int64 values of its single leaf.
struct Consumed {
  absl::Status status;
  std::vector<std::vector<std::vector<int64_t>>> steps;
  DistributedElementSpec spec;
  // The iterator's checkpoint after the last step read (when it has one).
  std::optional<IteratorCheckpoint> checkpoint;
};

// Reads `ds` through the service as one consumer with `replicas` CPU replicas (devices CPU:0..),
// to the end of data or `max_steps` steps (bounded at 100000), calling fn(step, value) for each
// step; sets *spec (the element spec) and *checkpoint (after the last step) when given. The
// first error other than the end of data.
absl::Status ForEachStep(const std::string& coordinator, const Dataset& ds,
                         ServiceOptions options, int64_t replicas,
                         const std::function<void(int64_t, const PerReplica<Element>&)>& fn,
                         int64_t max_steps = -1, DistributedElementSpec* spec = nullptr,
                         std::optional<IteratorCheckpoint>* checkpoint = nullptr);

// Reads `ds` through the service as one consumer with `replicas` CPU replicas, to the end of
// data or `max_steps` steps (-1: no limit; the loop is bounded at 100000 steps anyway), calling
// after_step after each step.
Consumed Consume(const std::string& coordinator, const Dataset& ds, ServiceOptions options,
                 int64_t replicas, std::function<void(int64_t step)> after_step = nullptr,
                 int64_t max_steps = -1);

// `consumers` consumers (threads) of one job, consumer c with consumer_index c.
std::vector<Consumed> ConsumeAll(const std::string& coordinator, const Dataset& ds,
                                 ServiceOptions options, int64_t consumers, int64_t replicas,
                                 std::function<void(int64_t, int64_t)> after_step = nullptr,
                                 int64_t max_steps = -1);

// Every element of range(n) exactly once across all consumers and replicas (gtest
// expectations).
void ExpectExactlyOnce(const std::vector<Consumed>& results, int64_t n);

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_IN_PROCESS_CLUSTER_H_
