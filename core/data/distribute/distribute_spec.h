// What a distributed dataset's replicas receive, statically: the global batch size and the
// per-replica element spec, by TF's rules (TF_SEMANTICS.md, "element_spec"). Pure functions.
#ifndef SLUICE_CORE_DISTRIBUTE_SPEC_H_
#define SLUICE_CORE_DISTRIBUTE_SPEC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"

namespace sluice {

// B, the global batch size, found as TF's distribute.compute_batch_size finds it: the static
// dimension 0 shared by every component of the element spec if there is one (so an unbatched
// from_tensors([1, 2, 3, 4]) has B = 4, as in TF), else the batch size of the batch op nearest
// the end of the chain (batch or padded_batch), looking through ops that keep the batch size
// (repeat, take, skip, shard, shuffle, prefetch, cache, filter). -1 when it cannot be known
// (components with different static sizes, or a map, interleave, ignore_errors, unbatch or
// rebatch after the last batch): TF then falls back to the legacy rebatch.
// INVALID_ARGUMENT with TF's message when the dataset is not batched (a scalar component, no
// batch op): "Call the `batch` method on the input Dataset in order to be able to split your
// input across N replicas. ..." (N is num_replicas_in_sync when given, > 0).
absl::StatusOr<int64_t> GlobalBatchSize(const Dataset& dataset, int64_t num_replicas_in_sync = 0);

// The spec of one replica's value under experimental_distribute_dataset with
// num_workers x replicas_per_worker replicas: the batch dimension is B/N only when it is
// static, divisible and partial batches cannot form; else None. Exactly TF's rules:
//  - one replica in sync: the dataset's own spec (TF does not rebatch);
//  - B known: rebatch_op.py's spec for worker 0's sizes: static B/N only if B % N == 0 and the
//    input's known batch dimensions are multiples of B/N (drop_remainder=True);
//  - B unknown (-1): the legacy rebatch's spec, per component: d/N when d is static and d % N == 0;
//  - num_workers > 1 and a dataset not known to be infinite: every batch dimension is None
//    (multi-worker partial-batch handling can always produce empty batches).
// A SparseTensor or RaggedTensor is one component whose batch dimension is that of its static
// shape, as in TF (its rows are cut, core/tensor/row_pieces.h).
// Errors: those of GlobalBatchSize, and INVALID_ARGUMENT for non-positive counts.
absl::StatusOr<ElementSpec> DistributedPerReplicaSpec(const Dataset& dataset, int64_t num_workers,
                                                      int64_t replicas_per_worker);

// `spec` with dimension 0 of every non-scalar component (composites too) made unknown (TF's
// _rebatch_as_dynamic).
ElementSpec DynamicBatchDimension(const ElementSpec& spec);

}  // namespace sluice

#endif  // SLUICE_CORE_DISTRIBUTE_SPEC_H_
