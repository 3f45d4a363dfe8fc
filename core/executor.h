// The local executor: builds an Iterator over a Dataset graph, one iterator per op in the
// chain. prefetch(n) runs its input on a background thread with a queue of at most n elements.
#ifndef SLUICE_CORE_EXECUTOR_H_
#define SLUICE_CORE_EXECUTOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/dataset.h"
#include "core/iterator.h"

namespace sluice {

struct ExecutorOptions {
  // Elements buffered by prefetch(AUTOTUNE).
  int autotune_prefetch_elements = 8;
};

// INVALID_ARGUMENT if the graph does not Validate(), or names an unresolved
// shard(SHARD_HINT, SHARD_HINT). Each call builds its own iterators: a seeded shuffle restarts at
// iteration 0 (core/shuffle_iterator.h), so two iterators of one graph yield the same sequence.
// Errors while iterating name the op ("op 2 (batch): ...", "source (text_line_dataset): ...").
absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const Dataset& dataset,
                                                       const ExecutorOptions& options = {});

}  // namespace sluice

#endif  // SLUICE_CORE_EXECUTOR_H_
