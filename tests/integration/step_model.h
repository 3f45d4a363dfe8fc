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
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice {

// One step as integers: one vector per piece (replica). String tensors (text lines) are read
// as decimal integers.
using ModelStep = std::vector<std::vector<int64_t>>;

// Parses `sluicectl run --format=json` output: one {"step": s, "per_replica": [...]} a line (or
// {"step": s, "value": V}, one replica's, where TF does not wrap), steps numbered 0, 1, ...;
// each replica's value one rank-1 tensor. INVALID_ARGUMENT naming the
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

// The pipeline's own order, modelled from the documents and not from the service's code: what
// each of `consumers` consumers (`replicas` replicas each) of a coordinated job over
// range(elements).batch(batch) must print, in README's promise "the pipeline's order". Global
// step s holds positions s*B .. s*B+B-1 of the epoch's order of the records: range(N) itself
// for DATA (shuffle_seed unset), or for RANGES with --shuffle=full --seed=S the seeded
// permutation core/util/index_permutation.h specifies (ModelFullShufflePosition), cut into
// N = consumers x replicas contiguous pieces of B / N; consumer c prints pieces c*R .. c*R+R-1.
// Requires batch % (consumers x replicas) == 0 and elements % batch == 0 (every rebatch rule
// agrees then); one epoch.
std::vector<std::vector<ModelStep>> PipelineOrderViews(int64_t elements, int64_t batch,
                                                       int64_t consumers, int64_t replicas,
                                                       std::optional<uint64_t> shuffle_seed);

// The record position SHUFFLE_FULL visits at output `position` of epoch `epoch` of n records,
// re-implemented here from index_permutation.h's specification (splitmix64 finalizer, epoch
// key Mix(seed ^ Mix(epoch ^ golden)), an 8-round balanced Feistel network over the smallest
// 2^(2h) >= n with round keys Mix(k + (r + 1) * golden), round function Mix(right ^ key) masked
// to h bits, new right = left ^ F(right), cycle walking), as the test-side oracle.
int64_t ModelFullShufflePosition(int64_t n, uint64_t seed, int64_t epoch, int64_t position);

// Human-readable steps for failure messages: "[0 1] [2 3] | [4] []".
std::string DescribeSteps(const std::vector<ModelStep>& steps, size_t max_steps = 40);

}  // namespace sluice

#endif  // SLUICE_TESTS_INTEGRATION_STEP_MODEL_H_
