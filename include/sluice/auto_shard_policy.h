// AutoShardPolicy: how a distributed dataset is split across input workers
// (tf.data.experimental.AutoShardPolicy; TF_SEMANTICS.md). Pure functions; thread-safe.
//
//   ASSIGN_OR_RETURN(AutoShardPolicy p, ParseAutoShardPolicy("file"));  // AutoShardPolicy::kFile
#ifndef SLUICE_AUTO_SHARD_POLICY_H_
#define SLUICE_AUTO_SHARD_POLICY_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

// tf.data.experimental.AutoShardPolicy, same values.
enum class AutoShardPolicy : int { kOff = -1, kAuto = 0, kFile = 1, kData = 2, kHint = 3 };

// "OFF", "AUTO", "FILE", "DATA", "HINT" (any case); INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<AutoShardPolicy> ParseAutoShardPolicy(absl::string_view name);
absl::string_view AutoShardPolicyName(AutoShardPolicy policy);

}  // namespace sluice

#endif  // SLUICE_AUTO_SHARD_POLICY_H_
