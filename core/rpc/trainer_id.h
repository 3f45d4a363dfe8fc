// Trainer ids of shared jobs (proto JobOptions.cross_trainer): client input that both the
// coordinator (GetOrCreateJobRequest.trainer_id) and the workers (StreamRequest.trainer_id)
// check the same way, and the bounds on trainers per job.
#ifndef SLUICE_CORE_RPC_TRAINER_ID_H_
#define SLUICE_CORE_RPC_TRAINER_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sluice {

// The longest trainer id accepted, in bytes.
inline constexpr size_t kMaxTrainerIdBytes = 128;
// Trainers of one shared job: CrossTrainerOptions.max_trainers when 0, and its upper bound.
inline constexpr int64_t kDefaultMaxTrainers = 16;
inline constexpr int64_t kMaxTrainersPerJob = 64;
// Dropped trainers (no stream for --drop_departed_trainers_after) remembered, to refuse them if
// they come back: per task window on a worker (and reported in each heartbeat), and per job on
// the coordinator. The oldest is forgotten beyond these.
inline constexpr size_t kMaxDroppedTrainersPerWindow = 64;
inline constexpr size_t kMaxDroppedTrainersPerJob = 1024;

// OK for a non-empty id of at most `max_bytes` bytes of printable ASCII without spaces;
// INVALID_ARGUMENT otherwise, naming `where`, the id (shortened, made printable) and the rule.
absl::Status ValidateTrainerId(absl::string_view trainer_id, absl::string_view where,
                               size_t max_bytes = kMaxTrainerIdBytes);

// `trainer_id` shortened and made printable, quoted, for an error message.
std::string QuoteTrainerId(absl::string_view trainer_id);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_TRAINER_ID_H_
