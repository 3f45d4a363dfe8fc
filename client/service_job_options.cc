#include "client/service_job_options.h"

#include "absl/strings/str_cat.h"

namespace sluice {

proto::ShardingPolicy ShardingPolicyToProto(ServiceShardingPolicy policy) {
  switch (policy) {
    case ServiceShardingPolicy::kAuto: return proto::SHARDING_AUTO;
    case ServiceShardingPolicy::kFile: return proto::SHARDING_FILE;
    case ServiceShardingPolicy::kData: return proto::SHARDING_DATA;
    case ServiceShardingPolicy::kHint: return proto::SHARDING_HINT;
    case ServiceShardingPolicy::kOff: return proto::SHARDING_OFF;
    case ServiceShardingPolicy::kDynamic: return proto::SHARDING_DYNAMIC;
    case ServiceShardingPolicy::kRanges: return proto::SHARDING_RANGES;
  }
  return proto::SHARDING_AUTO;
}

proto::ShuffleMode ShuffleToProto(ServiceShuffle shuffle) {
  switch (shuffle) {
    case ServiceShuffle::kNone: return proto::SHUFFLE_NONE;
    case ServiceShuffle::kFull: return proto::SHUFFLE_FULL;
    case ServiceShuffle::kBlock: return proto::SHUFFLE_BLOCK;
  }
  return proto::SHUFFLE_NONE;
}

proto::JobOptions JobOptionsProto(const ServiceOptions& options, const std::string& dataset_id,
                                  int64_t replicas) {
  proto::JobOptions jo;
  jo.set_dataset_id(dataset_id);
  jo.set_num_consumers(options.num_consumers);
  jo.set_replicas_per_consumer(replicas);
  jo.set_sharding_policy(ShardingPolicyToProto(options.sharding_policy));
  jo.set_read_mode(options.read_mode == ServiceReadMode::kIndependent
                       ? proto::READ_MODE_INDEPENDENT
                       : proto::READ_MODE_COORDINATED);
  jo.set_num_tasks(options.num_tasks);
  jo.set_split_size(options.split_size);
  if (options.sharding_policy == ServiceShardingPolicy::kRanges) {
    proto::GlobalOrder* order = jo.mutable_order();
    order->set_seed(options.order.seed);
    order->set_shuffle(ShuffleToProto(options.order.shuffle));
    order->set_shuffle_block_size(options.order.shuffle_block_size);
    order->set_num_epochs(options.order.num_epochs);
    order->set_range_steps(options.order.range_steps);
  }
  if (options.resume_from.has_value()) jo.set_start_step(options.resume_from->step);
  switch (options.compression) {
    case ServiceCompression::kNone:
      break;
    case ServiceCompression::kLz4:
      jo.set_compression(proto::WIRE_COMPRESSION_LZ4);
      break;
    case ServiceCompression::kZstd:
      jo.set_compression(proto::WIRE_COMPRESSION_ZSTD);
      break;
  }
  jo.set_force_compression(options.force_compression);
  if (options.cross_trainer.enabled) {
    proto::CrossTrainerOptions* x = jo.mutable_cross_trainer();
    x->set_enabled(true);
    x->set_lossless(options.cross_trainer.lossless);
    x->set_expected_trainers(options.cross_trainer.expected_trainers);
    x->set_max_trainers(options.cross_trainer.max_trainers);
  }
  return jo;
}

bool Resumable(const ServiceOptions& options) {
  return options.read_mode == ServiceReadMode::kCoordinated &&
         (options.sharding_policy == ServiceShardingPolicy::kRanges ||
          options.sharding_policy == ServiceShardingPolicy::kData);
}

std::string CheckpointJobKey(const ServiceOptions& options, const std::string& dataset_id) {
  if (options.sharding_policy != ServiceShardingPolicy::kRanges) {
    return absl::StrCat(dataset_id, ":data");
  }
  const ServiceOrder& o = options.order;
  return absl::StrCat(dataset_id, ":ranges:seed=", o.seed,
                      ":shuffle=", proto::ShuffleMode_Name(ShuffleToProto(o.shuffle)),
                      ":block=", o.shuffle_block_size, ":epochs=", o.num_epochs);
}

absl::Status CheckResume(const ServiceOptions& options, const std::string& dataset_id) {
  if (!options.resume_from.has_value()) return absl::OkStatus();
  if (!Resumable(options)) {
    return absl::InvalidArgumentError(
        "ServiceOptions.resume_from needs coordinated reads with sharding policy kRanges or "
        "kData");
  }
  const std::string key = CheckpointJobKey(options, dataset_id);
  if (options.resume_from->job_key != key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.resume_from is a checkpoint of '", options.resume_from->job_key,
        "', but this dataset and order are '", key,
        "': resume with the same pipeline, sharding policy and order (seed, shuffle, epochs)"));
  }
  return absl::OkStatus();
}

std::string ServiceJobName(const ServiceOptions& options) {
  if (options.job_name.empty() || !options.resume_from.has_value()) return options.job_name;
  return absl::StrCat(options.job_name, "@", options.resume_from->step);
}

}  // namespace sluice
