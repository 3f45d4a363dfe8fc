#include "client/service_job_options.h"

namespace sluice {

proto::ShardingPolicy ShardingPolicyToProto(ServiceShardingPolicy policy) {
  switch (policy) {
    case ServiceShardingPolicy::kAuto: return proto::SHARDING_AUTO;
    case ServiceShardingPolicy::kFile: return proto::SHARDING_FILE;
    case ServiceShardingPolicy::kData: return proto::SHARDING_DATA;
    case ServiceShardingPolicy::kHint: return proto::SHARDING_HINT;
    case ServiceShardingPolicy::kOff: return proto::SHARDING_OFF;
    case ServiceShardingPolicy::kDynamic: return proto::SHARDING_DYNAMIC;
  }
  return proto::SHARDING_AUTO;
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
  return jo;
}

}  // namespace sluice
