// InputOptions, AutoShardPolicy and InputContext: the knobs of tf.distribute input, in C++.
#ifndef SLUICE_CLIENT_INPUT_OPTIONS_H_
#define SLUICE_CLIENT_INPUT_OPTIONS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "sluice/auto_shard_policy.h"

namespace sluice {

// tf.distribute.InputReplicationMode.
enum class InputReplicationMode { kPerWorker, kPerReplica };

// tf.distribute.InputOptions, plus the auto-shard policy (in TF a dataset option:
// options.experimental_distribute.auto_shard_policy).
struct InputOptions {
  // Prefetch into accelerator memory; false keeps elements on the host.
  bool experimental_fetch_to_device = true;
  // PER_WORKER: one input pipeline per worker; PER_REPLICA: one per replica.
  InputReplicationMode experimental_replication_mode = InputReplicationMode::kPerWorker;
  // Run the dataset on the device (PER_REPLICA only).
  bool experimental_place_dataset_on_device = false;
  // Device-side prefetch depth per replica; 0 disables.
  int64_t experimental_per_replica_buffer_size = 1;
  // How experimental_distribute_dataset shards across input workers.
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::kAuto;
};

// tf.distribute.InputContext: what distribute_datasets_from_function's dataset_fn is told.
class InputContext {
 public:
  InputContext(int64_t num_input_pipelines = 1, int64_t input_pipeline_id = 0,
               int64_t num_replicas_in_sync = 1)
      : num_input_pipelines_(num_input_pipelines),
        input_pipeline_id_(input_pipeline_id),
        num_replicas_in_sync_(num_replicas_in_sync) {}

  int64_t num_input_pipelines() const { return num_input_pipelines_; }
  int64_t input_pipeline_id() const { return input_pipeline_id_; }
  int64_t num_replicas_in_sync() const { return num_replicas_in_sync_; }

  // global_batch_size / num_replicas_in_sync; INVALID_ARGUMENT (TF's ValueError) when it does
  // not divide evenly.
  absl::StatusOr<int64_t> GetPerReplicaBatchSize(int64_t global_batch_size) const;

 private:
  int64_t num_input_pipelines_;
  int64_t input_pipeline_id_;
  int64_t num_replicas_in_sync_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_INPUT_OPTIONS_H_
