// MirroredStrategy: synchronous data parallelism over this process's devices, optionally as
// one input worker of several (the per-worker view of MultiWorkerMirroredStrategy).
//
//   ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create({"GPU:0", "GPU:1"}));
//   Dataset ds = Dataset::FromTensorSlices(...).Repeat().Batch(4);
//   ASSIGN_OR_RETURN(DistributedDataset dist, strategy.ExperimentalDistributeDataset(ds));
//
// Without a GPU (or a build without CUDA), "GPU:i" devices use host memory; a one-time warning
// on stderr says so. Thread-safe: a const strategy may be shared.
#ifndef SLUICE_CLIENT_STRATEGY_H_
#define SLUICE_CLIENT_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dataset.h"
#include "sluice/distributed_dataset.h"
#include "sluice/input_options.h"
#include "sluice/per_replica.h"

namespace sluice {

struct Device {
  std::string type;  // "GPU" or "CPU"
  int index = 0;
  // True when the device's memory is host memory (a CPU, or a GPU with no device present).
  bool host_memory = true;
  std::string name() const { return type + ":" + std::to_string(index); }
};

// This process's place among the input workers: worker `worker_index` of `num_workers`, each
// with the same number of local replicas. num_replicas_in_sync = num_workers * local replicas.
struct InputWorkerLayout {
  int64_t num_workers = 1;
  int64_t worker_index = 0;
};

class MirroredStrategy {
 public:
  // Devices as "GPU:0", "/gpu:1", "CPU:0", "/job:worker/replica:0/task:0/device:GPU:0".
  // INVALID_ARGUMENT for an empty list, a malformed or duplicate name, or a bad layout.
  static absl::StatusOr<MirroredStrategy> Create(const std::vector<std::string>& devices,
                                                 InputWorkerLayout layout = {});

  const std::vector<Device>& devices() const { return devices_; }
  const InputWorkerLayout& layout() const { return layout_; }
  int64_t num_local_replicas() const { return static_cast<int64_t>(devices_.size()); }
  int64_t num_replicas_in_sync() const { return layout_.num_workers * num_local_replicas(); }

  // strategy.experimental_distribute_dataset: rebatches the (batched) dataset to per-replica
  // batches by TF's rule and auto-shards it by options.auto_shard_policy. INVALID_ARGUMENT if
  // the dataset is not batched ("Call the `batch` method on the input Dataset ...") and the
  // errors of auto-sharding (FILE with too few files, ...).
  absl::StatusOr<DistributedDataset> ExperimentalDistributeDataset(
      const Dataset& dataset, const InputOptions& options = {}) const;

  // strategy.distribute_datasets_from_function: calls dataset_fn once per input pipeline with
  // its InputContext; no rebatching or auto-sharding. Consecutive elements go to the local
  // replicas in turn.
  absl::StatusOr<DistributedDataset> DistributeDatasetsFromFunction(
      const std::function<absl::StatusOr<Dataset>(const InputContext&)>& dataset_fn,
      const InputOptions& options = {}) const;

  // strategy.run(fn, args=(x,)): fn on each replica's value.
  template <typename T, typename F>
  auto Run(F&& fn, const PerReplica<T>& x) const {
    return x.Run(std::forward<F>(fn));
  }

 private:
  MirroredStrategy(std::vector<Device> devices, InputWorkerLayout layout)
      : devices_(std::move(devices)), layout_(layout) {}

  std::vector<Device> devices_;
  InputWorkerLayout layout_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_STRATEGY_H_
