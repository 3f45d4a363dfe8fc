// What the coordinator checks and derives from a request's job options before it journals
// anything (coordinator*.cc): the wire version, the options' fields, the global order and its
// cut into ranges, and a readable diff of two options. Pure functions; thread-safe.
#ifndef SLUICE_SERVER_JOB_OPTIONS_H_
#define SLUICE_SERVER_JOB_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/distribute/global_order.h"
#include "proto/coordinator.pb.h"
#include "server/task_planner.h"  // RangeCut

namespace sluice {

// Hex digits of the fingerprint in a dataset id ("ds-" + 16 hex digits).
inline constexpr size_t kDatasetIdDigits = 16;

// OK when `version` is the coordinator's wire version; else FAILED_PRECONDITION naming
// `request` and both versions.
absl::Status CheckWireVersion(int version, absl::string_view request);

// INVALID_ARGUMENT naming the field (`where` is the path of the options message).
absl::Status ValidateJobOptions(const proto::JobOptions& o, absl::string_view where);

// A request's trainer_id against its job options: a shared job (cross_trainer.enabled) needs
// a valid trainer id (core/rpc/trainer_id.h), any other job refuses one. INVALID_ARGUMENT
// naming `where`.trainer_id.
absl::Status ValidateJobTrainer(const proto::JobOptions& o, absl::string_view trainer_id,
                                absl::string_view where);

// The global order of a RANGES job (defaults filled in).
GlobalOrderOptions OrderOptions(const proto::GlobalOrder& order);

// The job's cut into ranges of steps; INVALID_ARGUMENT naming GetOrCreateJobRequest.options.
absl::StatusOr<RangeCut> CutJob(const proto::JobOptions& o, int64_t steps_per_epoch);

// "num_consumers (job has 2, request has 3), ..." for every field that differs.
std::vector<std::string> DifferingFields(const proto::JobOptions& have,
                                         const proto::JobOptions& want);

}  // namespace sluice

#endif  // SLUICE_SERVER_JOB_OPTIONS_H_
