// The coordinator's JobOptions for a consumer's ServiceOptions: the one place that turns the
// client's public options into the wire form (client-internal; thread-safe, pure).
#ifndef SLUICE_CLIENT_SERVICE_JOB_OPTIONS_H_
#define SLUICE_CLIENT_SERVICE_JOB_OPTIONS_H_

#include <cstdint>
#include <string>

#include "proto/coordinator.pb.h"
#include "sluice/service.h"

namespace sluice {

proto::ShardingPolicy ShardingPolicyToProto(ServiceShardingPolicy policy);

// JobOptions for `dataset_id` read by options.num_consumers consumers of `replicas` replicas.
proto::JobOptions JobOptionsProto(const ServiceOptions& options, const std::string& dataset_id,
                                  int64_t replicas);

}  // namespace sluice

#endif  // SLUICE_CLIENT_SERVICE_JOB_OPTIONS_H_
