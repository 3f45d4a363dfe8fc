// TF's rebatching arithmetic (python/data/experimental/ops/distribute.py) and how a global
// batch is cut into per-replica pieces. Pure functions; thread-safe.
#ifndef SLUICE_CORE_REBATCH_H_
#define SLUICE_CORE_REBATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice {

// TF's batch_sizes_for_worker(global_batch_size, num_workers, num_replicas_per_worker,
// worker_index): N = num_workers * replicas_per_worker sizes summing to global_batch_size,
// floor+1 first, rotated left by worker_index * replicas_per_worker.
// B=7, W=2, R=2: worker 0 [2,2,2,1], worker 1 [2,1,2,2]. B=4, N=5: [1,1,1,1,0].
// INVALID_ARGUMENT for a negative batch size, non-positive counts or an index out of range.
absl::StatusOr<std::vector<int64_t>> BatchSizesForWorker(int64_t global_batch_size,
                                                         int64_t num_workers,
                                                         int64_t replicas_per_worker,
                                                         int64_t worker_index);

// Piece sizes for the service's coordinated mode, where every step is one global batch cut into
// N = num_consumers * replicas_per_consumer contiguous pieces, piece k = c * R + r going to
// replica r of consumer c. Piece k of step s gets BatchSizesForWorker(B, C, R, 0)[(k + s*R) % N],
// which gives every consumer, step by step, exactly the sizes TF's multi-worker rebatching
// gives worker c. The result is one full period of the sequence, step-major: cycling through it
// (as RebatchOp does) yields the sizes of every step. INVALID_ARGUMENT as above.
absl::StatusOr<std::vector<int64_t>> CoordinatedPieceSizes(int64_t global_batch_size,
                                                           int64_t num_consumers,
                                                           int64_t replicas_per_consumer);

}  // namespace sluice

#endif  // SLUICE_CORE_REBATCH_H_
