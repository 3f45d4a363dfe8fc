#include "sluice/strategy.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/device_name.h"
#include "client/device_prefetcher.h"
#include "client/local_step_source.h"
#include "core/data/distribute/auto_shard.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// TF's _is_statically_shaped: every component fully defined.
bool IsStaticallyShaped(const ElementSpec& spec) {
  for (const TensorSpec& s : spec.Flatten()) {
    if (!s.shape.IsFullyDefined()) return false;
  }
  return true;
}

// TF's _enable_get_next_as_optional for MirroredStrategy (and its multi-worker sibling).
bool PartialBatchHandling(int64_t cardinality, const ElementSpec& spec, bool multi_worker) {
  if (cardinality == kInfiniteCardinality) return false;
  return !IsStaticallyShaped(spec) || multi_worker;
}

DistributedElementSpec PerReplicaSpecOf(const ElementSpec& spec, int64_t num_local_replicas) {
  return spec.Map([num_local_replicas](const TensorSpec& s) {
    return PerReplicaSpec{std::vector<TensorSpec>(static_cast<size_t>(num_local_replicas), s)};
  });
}

// input_util.py's checks of InputOptions.
absl::Status ValidateOptions(const InputOptions& options) {
  if (options.experimental_replication_mode != InputReplicationMode::kPerReplica &&
      options.experimental_place_dataset_on_device) {
    return absl::InvalidArgumentError(
        "When `experimental_place_dataset_on_device` is set for dataset placement, you must "
        "also specify `PER_REPLICA` for the replication mode");
  }
  if (options.experimental_replication_mode == InputReplicationMode::kPerReplica &&
      options.experimental_fetch_to_device && options.experimental_place_dataset_on_device) {
    return absl::InvalidArgumentError(
        "`experimental_place_dataset_on_device` can not be set to True when "
        "experimental_fetch_to_device is True and replication mode is set to `PER_REPLICA`");
  }
  if (options.experimental_per_replica_buffer_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("experimental_per_replica_buffer_size must be >= 0, got ",
                     options.experimental_per_replica_buffer_size));
  }
  return absl::OkStatus();
}

StepSourceFactory MakeFactory(std::vector<LocalPipeline> pipelines,
                              LocalStepSourceOptions options) {
  return [pipelines = std::move(pipelines),
          options]() -> absl::StatusOr<std::unique_ptr<StepSource>> {
    ASSIGN_OR_RETURN(std::unique_ptr<LocalStepSource> source,
                     LocalStepSource::Create(pipelines, options));
    return std::unique_ptr<StepSource>(std::move(source));
  };
}

}  // namespace

absl::StatusOr<MirroredStrategy> MirroredStrategy::Create(const std::vector<std::string>& devices,
                                                          InputWorkerLayout layout) {
  if (devices.empty()) {
    return absl::InvalidArgumentError("MirroredStrategy needs at least one device");
  }
  if (layout.num_workers < 1 || layout.worker_index < 0 ||
      layout.worker_index >= layout.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad input worker layout: worker_index ", layout.worker_index, " of num_workers ",
        layout.num_workers, " (need num_workers >= 1 and 0 <= worker_index < num_workers)"));
  }
  std::vector<Device> parsed;
  std::set<std::string> seen;
  for (const std::string& name : devices) {
    ASSIGN_OR_RETURN(Device d, ParseDeviceName(name));
    if (!seen.insert(d.name()).second) {
      // TF: "No duplicates allowed in `devices` argument".
      return absl::InvalidArgumentError(absl::StrCat(
          "No duplicates allowed in `devices` argument: \"", name, "\" names ", d.name(),
          " again (devices: ", absl::StrJoin(devices, ", "), ")"));
    }
    parsed.push_back(std::move(d));
  }
  AssignDeviceMemory(&parsed, NumCudaDevices());
  return MirroredStrategy(std::move(parsed), layout);
}

absl::StatusOr<DistributedDataset> MirroredStrategy::ExperimentalDistributeDataset(
    const Dataset& dataset, const InputOptions& options) const {
  RETURN_IF_ERROR(ValidateOptions(options));
  if (options.experimental_replication_mode == InputReplicationMode::kPerReplica) {
    return absl::UnimplementedError(
        "InputReplicationMode.PER_REPLICA is only supported in "
        "`distribute_datasets_from_function`.");
  }
  RETURN_IF_ERROR(dataset.Validate());
  const int64_t num_workers = layout_.num_workers;
  const int64_t replicas = num_local_replicas();
  const int64_t n = num_replicas_in_sync();
  ASSIGN_OR_RETURN(ElementSpec input_spec, dataset.element_spec());
  ASSIGN_OR_RETURN(ElementSpec replica_spec,
                   DistributedPerReplicaSpec(dataset, num_workers, replicas));

  // Every worker's pipeline, so that the other workers' end of data is known here (see
  // local_step_source.h). All rewrites happen now, so that their errors (an unbatched dataset,
  // FILE sharding with too few files) come from this call.
  const int64_t cardinality = dataset.Cardinality();
  const ElementSpec dummy_spec = DynamicBatchDimension(replica_spec);
  std::vector<LocalPipeline> pipelines;
  for (int64_t w = 0; w < num_workers; ++w) {
    ASSIGN_OR_RETURN(Dataset pieces,
                     DistributeForWorker(dataset, options.auto_shard_policy, num_workers, w, n));
    pipelines.push_back(LocalPipeline{std::move(pieces), replicas, dummy_spec,
                                      /*local=*/w == layout_.worker_index});
  }
  LocalStepSourceOptions source_options;
  source_options.partial_batch_handling =
      PartialBatchHandling(cardinality, input_spec, num_workers > 1);
  source_options.run_remote_pipelines = cardinality != kInfiniteCardinality;
  // Iterators on GPU devices prefetch into device memory (client/device_prefetcher.h).
  return DistributedDataset(
      PerReplicaSpecOf(replica_spec, replicas),
      PrefetchToDevices(MakeFactory(std::move(pipelines), source_options), devices_, options),
      WrappingFor(num_workers, replicas));
}

absl::StatusOr<DistributedDataset> MirroredStrategy::DistributeDatasetsFromFunction(
    const std::function<absl::StatusOr<Dataset>(const InputContext&)>& dataset_fn,
    const InputOptions& options) const {
  RETURN_IF_ERROR(ValidateOptions(options));
  if (!dataset_fn) return absl::InvalidArgumentError("dataset_fn is empty");
  const int64_t num_workers = layout_.num_workers;
  const int64_t replicas = num_local_replicas();
  const int64_t n = num_replicas_in_sync();
  const bool per_replica = options.experimental_replication_mode == InputReplicationMode::kPerReplica;
  // PER_WORKER: one pipeline per worker feeding its R replicas in turn; PER_REPLICA: one per
  // replica. This process calls dataset_fn for every pipeline of every worker (the other
  // workers' pipelines run in lockstep to learn their end of data; see local_step_source.h).
  const int64_t pipelines_per_worker = per_replica ? replicas : 1;
  const int64_t num_pipelines = num_workers * pipelines_per_worker;
  std::vector<LocalPipeline> pipelines;
  std::optional<ElementSpec> own_spec;
  int64_t own_cardinality = 0;
  bool any_infinite = false;
  for (int64_t id = 0; id < num_pipelines; ++id) {
    InputContext context(num_pipelines, id, n);
    absl::StatusOr<Dataset> ds = dataset_fn(context);
    if (!ds.ok()) {
      return absl::Status(ds.status().code(),
                          absl::StrCat("dataset_fn for input pipeline ", id, " of ", num_pipelines,
                                       ": ", ds.status().message()));
    }
    RETURN_IF_ERROR(ds->Validate());
    ASSIGN_OR_RETURN(ElementSpec spec, ds->element_spec());
    const int64_t cardinality = ds->Cardinality();
    any_infinite = any_infinite || cardinality == kInfiniteCardinality;
    const bool local = id / pipelines_per_worker == layout_.worker_index;
    if (local && !own_spec.has_value()) {
      own_spec = spec;
      own_cardinality = cardinality;
    }
    pipelines.push_back(LocalPipeline{*std::move(ds), per_replica ? 1 : replicas,
                                      DynamicBatchDimension(spec), local});
  }
  LocalStepSourceOptions source_options;
  source_options.partial_batch_handling =
      PartialBatchHandling(own_cardinality, *own_spec, num_workers > 1);
  source_options.run_remote_pipelines = !any_infinite;
  ElementSpec replica_spec = *own_spec;
  if (num_workers > 1 && source_options.partial_batch_handling) {
    replica_spec = DynamicBatchDimension(replica_spec);
  }
  // Iterators on GPU devices prefetch into device memory (client/device_prefetcher.h).
  return DistributedDataset(
      PerReplicaSpecOf(replica_spec, replicas),
      PrefetchToDevices(MakeFactory(std::move(pipelines), source_options), devices_, options),
      WrappingFor(num_workers, replicas));
}

}  // namespace sluice
