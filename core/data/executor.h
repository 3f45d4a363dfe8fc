// The local executor: builds an Iterator over a Dataset graph, one iterator per op in the
// chain. prefetch(n) reads its input ahead on the process's thread pool (core/util/thread_pool.h),
// with a queue of at most n elements; no op starts a thread of its own.
#ifndef SLUICE_CORE_EXECUTOR_H_
#define SLUICE_CORE_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "core/data/iterator.h"

namespace sluice {

class CancellationToken;  // core/data/cancellation.h
class OpProfile;          // core/data/op_profile.h

// Counters the iterators of one executor graph update; read them at any time.
struct ExecutorStats {
  // Elements ignore_errors() dropped (core/data/ops/ignore_errors_iterator.h).
  std::atomic<int64_t> ignored_errors{0};
};

struct ExecutorOptions {
  // Elements buffered by prefetch(AUTOTUNE).
  int autotune_prefetch_elements = 8;
  // Threads for num_parallel_calls=AUTOTUNE in map() and interleave(); 0: the number of CPU
  // cores.
  int autotune_parallel_calls = 0;
  // Where the iterators report their counters; null: not reported.
  std::shared_ptr<ExecutorStats> stats;
  // Called on every graph before it is built (the task's, a DYNAMIC split's, and each graph an
  // interleave makes for one file); an error is MakeIterator's. A server's admission check:
  // data roots and graph bounds (core/data/data_roots.h, core/data/dataset_limits.h). Empty: none.
  std::function<absl::Status(const proto::DatasetDef&)> check_graph;
  // Where every op's iterator counts its elements and time (core/data/op_profile.h); null: the
  // process's profile (SetProcessOpProfile) if one is set, else no profiling and no cost.
  std::shared_ptr<OpProfile> profile;
  // Map fusion (core/data/ops/map_fusion.h): consecutive maps whose fns fuse run as one map
  // with one fn (random_resized_crop then random_flip_left_right and normalize: one pass, one
  // tensor). The same values either way; false builds every op on its own (the reference the
  // tests compare with; the profile then lists every map). It also governs source fusion
  // (SourceRegistration::absorbed_op: fixed_length_record_dataset reading its records straight
  // into a map(decode_raw)'s tensors).
  bool fuse_maps = true;
  // Stops the pipeline (core/data/cancellation.h): once cancelled, GetNext returns CANCELLED
  // naming the op that noticed, within one input pull of each op (prefetch and parallel map
  // without waiting for the element in progress). Set on every op's iterator, and nested
  // pipelines (interleave's) share it. Null: the pipeline runs until it ends or is destroyed.
  std::shared_ptr<CancellationToken> cancellation;
};

// INVALID_ARGUMENT if the graph does not Validate(), or names an unresolved
// shard(SHARD_HINT, SHARD_HINT). Each call builds its own iterators: a seeded shuffle restarts at
// iteration 0 (core/data/ops/shuffle_iterator.h), so two iterators of one graph yield the same sequence.
// Errors while iterating name the op ("op 2 (batch): ...", "source (text_line_dataset): ...").
absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const Dataset& dataset,
                                                       const ExecutorOptions& options = {});

}  // namespace sluice

#endif  // SLUICE_CORE_EXECUTOR_H_
