// The coordinator's JobOptions for a consumer's ServiceOptions: the one place that turns the
// client's public options into the wire form, and that says which sequence a job's iterator
// checkpoints belong to (client-internal; thread-safe, pure).
#ifndef SLUICE_CLIENT_SERVICE_JOB_OPTIONS_H_
#define SLUICE_CLIENT_SERVICE_JOB_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"
#include "sluice/service.h"

namespace sluice {

proto::ShardingPolicy ShardingPolicyToProto(ServiceShardingPolicy policy);
proto::ShuffleMode ShuffleToProto(ServiceShuffle shuffle);

// JobOptions for `dataset_id` read by options.num_consumers consumers of `replicas` replicas
// (start_step from options.resume_from).
proto::JobOptions JobOptionsProto(const ServiceOptions& options, const std::string& dataset_id,
                                  int64_t replicas);

// Whether iterators of such a job can be checkpointed: coordinated reads with kRanges or kData.
bool Resumable(const ServiceOptions& options);

// IteratorCheckpoint::job_key of a job made from these options over `dataset_id`: the dataset
// and what fixes the order of its global steps (not the number of consumers, replicas, workers
// or tasks, which a resumed job may change).
std::string CheckpointJobKey(const ServiceOptions& options, const std::string& dataset_id);

// INVALID_ARGUMENT naming the mismatch when options.resume_from is set but does not belong to
// this dataset and order, or the options cannot resume. OK without resume_from.
absl::Status CheckResume(const ServiceOptions& options, const std::string& dataset_id);

// The job the consumer joins: job_name, or job_name + "@" + the step when resuming (empty
// stays empty: a job of this process alone).
std::string ServiceJobName(const ServiceOptions& options);

}  // namespace sluice

#endif  // SLUICE_CLIENT_SERVICE_JOB_OPTIONS_H_
