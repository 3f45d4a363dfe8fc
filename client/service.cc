#include "sluice/service.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/collective.h"
#include "client/consumer_release.h"
#include "client/device_prefetcher.h"
#include "client/end_of_data_agreement.h"
#include "client/service_job_options.h"
#include "client/service_security.h"
#include "client/service_step_source.h"
#include "core/rpc/coordinator_call.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/dataset.pb.h"

namespace sluice {

absl::StatusOr<DistributedDataset> DistributeDatasetFromService(const MirroredStrategy& strategy,
                                                                const Dataset& dataset,
                                                                const ServiceOptions& options) {
  if (options.coordinator_address.empty()) {
    return absl::InvalidArgumentError("ServiceOptions.coordinator_address is required");
  }
  if (options.num_consumers < 1 || options.consumer_index < 0 ||
      options.consumer_index >= options.num_consumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions: consumer_index ", options.consumer_index,
                     " must be in [0, num_consumers = ", options.num_consumers, ")"));
  }
  if (options.receive_budget_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.receive_budget_bytes must be at least 1, got ",
                     options.receive_budget_bytes));
  }
  if (options.per_replica_buffer_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.per_replica_buffer_size must be >= 0, got ",
                     options.per_replica_buffer_size));
  }
  if (const Collective* c = options.end_of_data_collective; c != nullptr) {
    if (options.read_mode != ServiceReadMode::kIndependent) {
      return absl::InvalidArgumentError(
          "ServiceOptions.end_of_data_collective applies to independent reads only (coordinated "
          "reads already end together)");
    }
    if (c->size() != options.num_consumers || c->rank() != options.consumer_index) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ServiceOptions.end_of_data_collective is rank ", c->rank(), " of ", c->size(),
          "; this consumer is ", options.consumer_index, " of ", options.num_consumers));
    }
  }
  if (options.num_consumers > 1 && options.job_name.empty()) {
    // An empty name makes a job of this process alone: every consumer would get its own and
    // wait for peers that never join (coordinated) or read a share of data nobody else reads.
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.job_name is required with num_consumers = ", options.num_consumers,
        ": without a name every consumer shares, each process would get a job of its own and "
        "wait for peers that never join; give every consumer the same job_name"));
  }
  if (options.cross_trainer.enabled && options.job_name.empty()) {
    return absl::InvalidArgumentError(
        "ServiceOptions.cross_trainer needs a job_name: trainers share the job of that name");
  }
  if (options.sharding_policy == ServiceShardingPolicy::kRanges) {
    const ServiceOrder& o = options.order;
    if (o.num_epochs < 1 || o.range_steps < 0 || o.shuffle_block_size < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ServiceOptions.order: num_epochs must be at least 1 (got ", o.num_epochs,
          "), range_steps and shuffle_block_size non-negative (got ", o.range_steps, ", ",
          o.shuffle_block_size, ")"));
    }
  }
  if (options.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ServiceOptions.heartbeat_interval must be positive");
  }
  const int64_t replicas = strategy.num_local_replicas();
  // The workers' frames are bounded by the receive budget (ReceiveLimitBytes), and keepalive
  // ends calls to a worker gone silent.
  ChannelLimits limits;
  limits.max_receive_message_bytes = ReceiveLimitBytes(options.receive_budget_bytes);
  limits.keepalive_time = options.keepalive_time;
  limits.keepalive_timeout = options.keepalive_timeout;
  ASSIGN_OR_RETURN(ChannelFactory channels, ServiceChannelFactory(options.security, limits));
  const std::shared_ptr<grpc::Channel> coordinator = channels(options.coordinator_address);
  auto stub = proto::CoordinatorService::NewStub(coordinator);

  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  *reg.mutable_dataset() = dataset.def();
  proto::RegisterDatasetResponse reg_response;
  RETURN_IF_ERROR(CallCoordinator(options.coordinator_address, options.rpc_deadline,
                                  options.retry_deadline, "RegisterDataset",
                                  [&](grpc::ClientContext* c) {
                                    return stub->RegisterDataset(c, reg, &reg_response);
                                  }));

  RETURN_IF_ERROR(CheckResume(options, reg_response.dataset_id()));
  // The spec first, from the options the job will have: a spec this client refuses must fail
  // before the job exists, or the job's tasks would run on the workers for nobody.
  proto::GetElementSpecRequest spec_request;
  *spec_request.mutable_options() = JobOptionsProto(options, reg_response.dataset_id(), replicas);
  proto::GetElementSpecResponse spec_response;
  RETURN_IF_ERROR(CallCoordinator(options.coordinator_address, options.rpc_deadline,
                                  options.retry_deadline, "GetElementSpec",
                                  [&](grpc::ClientContext* c) {
                                    return stub->GetElementSpec(c, spec_request, &spec_response);
                                  }));
  ASSIGN_OR_RETURN(ElementSpec replica_spec,
                   ElementSpecFromProto(spec_response.per_replica_spec()));

  proto::GetOrCreateJobRequest job;
  job.set_wire_version(proto::WIRE_VERSION_1);
  job.set_job_name(ServiceJobName(options));
  *job.mutable_options() = JobOptionsProto(options, reg_response.dataset_id(), replicas);
  job.set_trainer_id(options.trainer_id);
  proto::GetOrCreateJobResponse job_response;
  RETURN_IF_ERROR(CallCoordinator(options.coordinator_address, options.rpc_deadline,
                                  options.retry_deadline, "GetOrCreateJob",
                                  [&](grpc::ClientContext* c) {
                                    return stub->GetOrCreateJob(c, job, &job_response);
                                  }));

  DistributedElementSpec spec = replica_spec.Map([replicas](const TensorSpec& s) {
    return PerReplicaSpec{std::vector<TensorSpec>(static_cast<size_t>(replicas), s)};
  });

  ServiceStepSourceOptions source;
  source.coordinator_address = options.coordinator_address;
  source.channel_factory = channels;
  // The job's consumer is released when the dataset and all its iterators are gone.
  source.release = std::make_shared<ConsumerRelease>(ConsumerRelease::Options{
      .coordinator_address = options.coordinator_address,
      .job_id = job_response.job_id(),
      .consumer_index = options.consumer_index,
      .channel = coordinator,
      .deadline = std::min(options.rpc_deadline, absl::Seconds(2))});
  source.job_id = job_response.job_id();
  source.consumer_index = options.consumer_index;
  source.num_local_replicas = replicas;
  source.independent = options.read_mode == ServiceReadMode::kIndependent;
  source.trainer_id = options.cross_trainer.enabled ? options.trainer_id : std::string();
  source.per_replica_spec = replica_spec;
  source.pieces_are_cut = replicas * options.num_consumers > 1;
  source.rpc_deadline = options.rpc_deadline;
  source.retry_deadline = options.retry_deadline;
  source.receive_budget_bytes = options.receive_budget_bytes;
  source.heartbeat_interval = options.heartbeat_interval;
  source.shared_memory = options.shared_memory;
  source.bulk_data = options.bulk_data;
  source.bulk_receive_timeout = options.bulk_receive_timeout;
  // A RANGES job that fell back to DATA (no random access) is read round-robin like DATA.
  source.sequential = options.sharding_policy == ServiceShardingPolicy::kRanges &&
                      job_response.fallback_reason().empty();
  if (Resumable(options)) {
    source.checkpoint_job_key = CheckpointJobKey(options, reg_response.dataset_id());
    source.start_step = options.resume_from.has_value() ? options.resume_from->step : 0;
    source.steps_per_epoch = job_response.steps_per_epoch() > 0 ? job_response.steps_per_epoch()
                                                                : -1;
  }
  InputOptions prefetch;
  prefetch.experimental_fetch_to_device = options.fetch_to_device;
  prefetch.experimental_per_replica_buffer_size = options.per_replica_buffer_size;
  source.allocator =
      options.allocator ? options.allocator : ReceiveAllocatorFor(strategy.devices(), prefetch);
  // Steps received into pinned memory are bound for a real GPU: lock the segments likewise.
  if (!options.allocator && source.allocator) source.shared_memory_devices = DefaultDeviceMemory();
  Collective* agreement = options.end_of_data_collective;
  StepSourceFactory factory = [source,
                               agreement]() -> absl::StatusOr<std::unique_ptr<StepSource>> {
    ASSIGN_OR_RETURN(std::unique_ptr<ServiceStepSource> s, ServiceStepSource::Create(source));
    if (agreement != nullptr) {
      return std::unique_ptr<StepSource>(std::make_unique<EndOfDataAgreement>(
          std::move(s), agreement, source.per_replica_spec, source.num_local_replicas));
    }
    return std::unique_ptr<StepSource>(std::move(s));
  };
  // Wrapping is the strategy's, as in TF (a tf.data service dataset distributed by a
  // one-device MirroredStrategy gives plain values, however many consumers share the job).
  return DistributedDataset(
      std::move(spec), PrefetchToDevices(std::move(factory), strategy.devices(), prefetch),
      WrappingFor(strategy.layout().num_workers, replicas));
}

}  // namespace sluice
