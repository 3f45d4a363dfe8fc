// What a distributed dataset's replicas receive, statically: the global batch size and the
// per-replica element spec, by TF's rules (TF_SEMANTICS.md, "element_spec"). Pure functions.
#ifndef SLUICE_CORE_DISTRIBUTE_SPEC_H_
#define SLUICE_CORE_DISTRIBUTE_SPEC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/dataset.h"

namespace sluice {

// B, the batch size of the dataset's first batch op. INVALID_ARGUMENT with TF's message when
// the dataset is not batched: "Call the `batch` method on the input Dataset ...".
absl::StatusOr<int64_t> GlobalBatchSize(const Dataset& dataset);

// The spec of one replica's value under experimental_distribute_dataset with
// num_workers x replicas_per_worker replicas: the batch dimension is B/N only when it is
// static, divisible and partial batches cannot form; else None.
absl::StatusOr<ElementSpec> DistributedPerReplicaSpec(const Dataset& dataset, int64_t num_workers,
                                                      int64_t replicas_per_worker);

}  // namespace sluice

#endif  // SLUICE_CORE_DISTRIBUTE_SPEC_H_
