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
#include "sluice/dataset.h"
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
  //
  // Exactly TF 2.15's behaviour (core/data/distribute/auto_shard.h DistributeForWorker, core/data/distribute/distribute_spec.h),
  // including: one replica in sync does not rebatch (an unbatched dataset is then fine); AUTO
  // and DATA split each batch the legacy way even on one worker (range(8).batch(4) over 3
  // replicas: [0,1],[2,3],[]); a partial last step gives size-0 dummies to replicas without
  // data. element_spec() has one TensorSpec per LOCAL replica. All rewrites run here, so their
  // errors come from this call; pipeline errors come from the iterator.
  // With layout.num_workers > 1 this process plays worker layout.worker_index, and TF's end of
  // data (an all-reduce of has-data across workers) is reproduced by running the other workers'
  // pipelines here in lockstep: a worker out of data gets dummy steps while any other has data.
  // That costs num_workers times the input work unless the dataset is infinite (then they are
  // not run). UNIMPLEMENTED for PER_REPLICA (as TF); INVALID_ARGUMENT for inconsistent options.
  // Prefetching into device memory is not done yet: elements stay in host memory.
  absl::StatusOr<DistributedDataset> ExperimentalDistributeDataset(
      const Dataset& dataset, const InputOptions& options = {}) const;

  // strategy.distribute_datasets_from_function: calls dataset_fn once per input pipeline with
  // its InputContext; no rebatching or auto-sharding. Consecutive elements go to the local
  // replicas in turn.
  //
  // PER_WORKER: one pipeline per worker, InputContext(num_workers, worker, N), its consecutive
  // elements to the worker's replicas in turn. PER_REPLICA: one pipeline per replica,
  // InputContext(num_workers * R, worker * R + replica, N). dataset_fn is called here for every
  // pipeline of every worker, in pipeline order (the other workers' pipelines run in lockstep
  // for the end of data, as above); its errors are returned prefixed with the pipeline id.
  // A partial last step is padded with size-0 dummies, except where TF turns partial-batch
  // handling off (one worker, a finite dataset with fully static shapes): there GetNext() ends
  // at the partial step, as TF's get_next() does, and GetNextAsOptional() still pads it.
  // element_spec(): the dataset's own spec per local replica; with several workers and a
  // dataset not known to be infinite, dimension 0 becomes None (TF's _rebatch_as_dynamic).
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
