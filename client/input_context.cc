#include "absl/strings/str_cat.h"
#include "sluice/input_options.h"

namespace sluice {

absl::StatusOr<int64_t> InputContext::GetPerReplicaBatchSize(int64_t global_batch_size) const {
  if (num_replicas_in_sync_ <= 0 || global_batch_size % num_replicas_in_sync_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "The `global_batch_size` ", global_batch_size,
        " is not divisible by `num_replicas_in_sync` ", num_replicas_in_sync_));
  }
  return global_batch_size / num_replicas_in_sync_;
}

}  // namespace sluice
