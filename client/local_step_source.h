// LocalStepSource: the StepSource behind a DistributedDataset made from local pipelines (by
// MirroredStrategy), reproducing TF's distributed iterator in one process.
//
// Each pipeline yields per-replica pieces and feeds `pieces_per_step` replicas per step (a
// PER_WORKER pipeline feeds all of a worker's replicas, a PER_REPLICA one a single replica).
// Pipelines are either local (their pieces are this process's replicas, in pipeline order) or
// remote (another input worker's; run only to learn whether it still has data).
//
// End of data, as TF decides it: a step is produced while ANY pipeline anywhere still has data
// (TF sums has-data across workers with an all-reduce every step); a local pipeline whose data
// ran out contributes size-0 dummy pieces (dimension 0 and every unknown dimension 0). On one
// machine we learn whether the other workers have data by running their pipelines here in
// lockstep: this costs (num_workers - 1) extra copies of the input pipeline's work and memory,
// and is skipped when some pipeline is known to be infinite (then some pipeline always has
// data, and the remote ones are not run at all).
//
// With partial-batch handling off (TF turns it off for a single worker whose dataset has fully
// static shapes), a partial step ends the iteration instead, as TF's get_next() does; the
// padded variant (GetNextAsOptional) still pads it, as TF does.
//
// Not thread-safe (one caller at a time, as the DistributedIterator that owns it).
#ifndef SLUICE_CLIENT_LOCAL_STEP_SOURCE_H_
#define SLUICE_CLIENT_LOCAL_STEP_SOURCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "sluice/element.h"
#include "core/data/executor.h"
#include "core/data/step_iterator.h"
#include "sluice/distributed_dataset.h"

namespace sluice {

struct LocalPipeline {
  Dataset dataset;              // yields per-replica pieces
  int64_t pieces_per_step = 1;  // > 0
  ElementSpec piece_spec;       // the spec of a piece, for dummies
  bool local = true;            // false: another worker's pipeline, run only for end-of-data
};

struct LocalStepSourceOptions {
  // TF's partial-batch handling (get_next_as_optional inside get_next): pad partial steps.
  bool partial_batch_handling = true;
  // Run the remote pipelines in lockstep. When false, they are taken to always have data (right
  // when one of them is infinite).
  bool run_remote_pipelines = true;
  ExecutorOptions executor;
};

class LocalStepSource : public StepSource {
 public:
  // Builds an iterator for each pipeline that will run. INVALID_ARGUMENT if no pipeline is
  // local or pieces_per_step <= 0; the executor's errors otherwise.
  static absl::StatusOr<std::unique_ptr<LocalStepSource>> Create(
      std::vector<LocalPipeline> pipelines, LocalStepSourceOptions options = {});

  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override;
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override;

 private:
  struct Running {
    LocalPipeline pipeline;
    std::unique_ptr<StepIterator> steps;  // null for a remote pipeline that does not run
    bool ended = false;
  };

  LocalStepSource(std::vector<Running> running, LocalStepSourceOptions options)
      : running_(std::move(running)), options_(std::move(options)) {}
  absl::Status Next(bool padded, std::vector<Element>* replicas, bool* end_of_data);

  std::vector<Running> running_;
  LocalStepSourceOptions options_;
  bool finished_ = false;
  absl::Status status_;  // the first error, repeated on later calls
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_LOCAL_STEP_SOURCE_H_
