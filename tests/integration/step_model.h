// What the multi-process tests compare: the steps consumers printed (`sluicectl run
// --format=json`) against a model of coordinated reads built from TF's rule, independently of
// the service's code.
//
// The model (docs/SERVICE.md, "Coordinated reads"): each task of a job rebatches its own
// element stream into pieces whose sizes cycle through CoordinatedPieceSizes(B, C, R) (TF's
// rebatching, core/data/distribute/rebatch.h), N = C x R pieces a step, a partial last step filled in piece
// order and padded with size-0 pieces; consumers read the tasks round-robin in task order, a
// finished task leaving the rotation; consumer c gets pieces c*R .. c*R+R-1 of each step.
//
// Thread safety: pure functions.
#ifndef SLUICE_TESTS_INTEGRATION_STEP_MODEL_H_
#define SLUICE_TESTS_INTEGRATION_STEP_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice {

// One step as integers: one vector per piece (replica). String tensors (text lines) are read
// as decimal integers.
using ModelStep = std::vector<std::vector<int64_t>>;

// Parses `sluicectl run --format=json` output: one {"step": s, "per_replica": [...]} a line,
// steps numbered 0, 1, ...; each replica's value one rank-1 tensor. INVALID_ARGUMENT naming the
// line otherwise.
absl::StatusOr<std::vector<ModelStep>> ParseRunJson(const std::string& stdout_text);

// One task's steps: `elements` cut into pieces of sizes cycling through `period`
// (CoordinatedPieceSizes), `pieces_per_step` a step, the last step padded with empty pieces.
std::vector<ModelStep> TaskSteps(const std::vector<int64_t>& elements,
                                 const std::vector<int64_t>& period, int64_t pieces_per_step);

// The job's global steps: round r takes step r of every task that still has one, in task order.
std::vector<ModelStep> RoundRobin(const std::vector<std::vector<ModelStep>>& tasks);

// Consumer c's view of the global steps: pieces c*R .. c*R+R-1 of each.
std::vector<ModelStep> ConsumerView(const std::vector<ModelStep>& global, int64_t consumer,
                                    int64_t replicas_per_consumer);

// Joins the consumers' views back into global steps (consumer 0's pieces, then consumer 1's,
// ...); INVALID_ARGUMENT if their step counts differ.
absl::StatusOr<std::vector<ModelStep>> JoinConsumers(const std::vector<std::vector<ModelStep>>& views);

// True if `sizes` (one global step's piece sizes) follow TF's rule: some row of `period`
// (pieces_per_step sizes each) filled in piece order with the step's total (a full step is
// the row itself).
bool FollowsTfRule(const std::vector<int64_t>& sizes, const std::vector<int64_t>& period,
                   int64_t pieces_per_step);

// The piece sizes of a step.
std::vector<int64_t> PieceSizes(const ModelStep& step);

// Human-readable steps for failure messages: "[0 1] [2 3] | [4] []".
std::string DescribeSteps(const std::vector<ModelStep>& steps, size_t max_steps = 40);

}  // namespace sluice

#endif  // SLUICE_TESTS_INTEGRATION_STEP_MODEL_H_
