// StepIterator: groups a stream of per-replica pieces into steps, as TF's distributed iterator
// does: consecutive pieces go to replicas 0, 1, ..., n-1 of a step.
//
// At the end of data, a step that has at least one piece is completed with dummy pieces of
// batch size 0 (every unknown dimension of `piece_spec` becomes 0), TF's partial-batch
// handling; the sequence ends at the first step that would have no piece at all.
#ifndef SLUICE_CORE_STEP_ITERATOR_H_
#define SLUICE_CORE_STEP_ITERATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"

namespace sluice {

// DATA sharding of a job's global steps over K = num_tasks tasks, resumed at skip_steps
// (TaskDef.skip_steps, 0 for a fresh job): task `task_index` keeps global step s when
// s >= skip_steps and (s - skip_steps) % num_tasks == task_index. Requires num_tasks >= 1.
bool KeepShardedStep(int64_t global_step, int64_t skip_steps, int64_t num_tasks,
                     int64_t task_index);

// A zero-sized element of `spec`: unknown dimensions become 0 (known ones are kept).
Element DummyElement(const ElementSpec& spec);

// Not thread-safe.
class StepIterator {
 public:
  // `pieces` yields per-replica pieces; `pieces_per_step` > 0.
  StepIterator(std::unique_ptr<Iterator> pieces, int64_t pieces_per_step, ElementSpec piece_spec);

  // Sets *end_of_sequence, or fills *step with pieces_per_step pieces and *num_real with how
  // many of them came from the data (the rest are dummies). Errors come from `pieces`.
  absl::Status GetNextStep(std::vector<Element>* step, int64_t* num_real, bool* end_of_sequence);

 private:
  std::unique_ptr<Iterator> pieces_;
  int64_t pieces_per_step_;
  ElementSpec piece_spec_;
  bool done_ = false;
  absl::Status status_;  // the first error, repeated on later calls
};

}  // namespace sluice

#endif  // SLUICE_CORE_STEP_ITERATOR_H_
