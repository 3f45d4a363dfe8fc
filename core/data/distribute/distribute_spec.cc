#include "core/data/distribute/distribute_spec.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/distribute/rebatch.h"
#include "core/data/op_registry.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

// TF's ValueError from input_lib.py (_make_rebatch_fn), which TF raises when it cannot find the
// batch size to split; `detail` says why.
absl::Status NotBatchedError(int64_t num_replicas_in_sync, absl::string_view detail) {
  std::string across = num_replicas_in_sync > 0
                           ? absl::StrCat(" across ", num_replicas_in_sync, " replicas")
                           : std::string(" across replicas");
  return absl::InvalidArgumentError(absl::StrCat(
      "Call the `batch` method on the input Dataset in order to be able to split your input",
      across, ". Please see the tf.distribute.Strategy guide. (", detail, ")"));
}

}  // namespace

absl::StatusOr<int64_t> GlobalBatchSize(const Dataset& dataset, int64_t num_replicas_in_sync) {
  ASSIGN_OR_RETURN(ElementSpec spec, dataset.element_spec());
  std::vector<TensorSpec> leaves = spec.Flatten();
  if (leaves.empty()) return NotBatchedError(num_replicas_in_sync, "the element has no tensors");
  // As distribute.compute_batch_size: the static batch dimension when every component has one
  // (this is how an unbatched from_tensors([1, 2, 3, 4]) gets B = 4, as in TF) ...
  bool all_known = true;
  for (const TensorSpec& leaf : leaves) {
    if (leaf.shape.rank() == 0) {
      return NotBatchedError(num_replicas_in_sync,
                             absl::StrCat("the dataset's elements have a scalar component, ",
                                          leaf.ToString()));
    }
    if (leaf.shape.dim(0) == kUnknownDim) all_known = false;
  }
  if (all_known) {
    for (const TensorSpec& leaf : leaves) {
      if (leaf.shape.dim(0) != leaves[0].shape.dim(0)) return int64_t{-1};
    }
    return leaves[0].shape.dim(0);
  }
  // ... else the batch size of the batch op nearest the end, through ops that keep it (TF
  // 2.15's compute_batch_size walks through repeat, take, skip, shard, shuffle, prefetch, cache
  // and filter, checked against TF: their registrations say keeps_batch_size).
  const proto::DatasetDef& def = dataset.def();
  for (int i = def.ops_size() - 1; i >= 0; --i) {
    const OpRegistration* r = OpRegistry::Global().FindOp(def.ops(i).kind_case());
    if (r == nullptr) return int64_t{-1};
    if (r->batch_params) return r->batch_params(def.ops(i)).batch_size;
    if (!r->keeps_batch_size) return int64_t{-1};
  }
  return NotBatchedError(num_replicas_in_sync,
                         "walked to the source without encountering a batch");
}

absl::StatusOr<ElementSpec> DistributedPerReplicaSpec(const Dataset& dataset, int64_t num_workers,
                                                      int64_t replicas_per_worker) {
  if (num_workers <= 0 || replicas_per_worker <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedPerReplicaSpec: num_workers (", num_workers,
                     ") and replicas_per_worker (", replicas_per_worker, ") must be positive"));
  }
  ASSIGN_OR_RETURN(ElementSpec spec, dataset.element_spec());
  const int64_t n = num_workers * replicas_per_worker;
  if (n == 1) return spec;  // TF does not rebatch for one replica in sync.
  if (spec.HasComposite()) {
    // TF's rebatch splits a RaggedTensor's or SparseTensor's rows; Sluice's cut does not yet.
    // Refused here, where every mode (in-process, the coordinator's job creation) asks for the
    // per-replica spec, so a job is refused before it starts rather than mid-stream.
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot distribute an element with SparseTensor or RaggedTensor components across ", n,
        " replicas in sync: rebatching composites is not supported yet; use one replica per "
        "consumer (one device)"));
  }

  ASSIGN_OR_RETURN(int64_t global_batch, GlobalBatchSize(dataset, n));
  ElementSpec per_replica;
  if (global_batch >= 0) {
    // rebatch_op.py: a static batch dimension only when every worker's sizes are equal and the
    // input cannot form partial batches (its known batch dimensions are multiples of it).
    ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                     BatchSizesForWorker(global_batch, num_workers, replicas_per_worker, 0));
    int64_t size = sizes[0];
    for (int64_t s : sizes) {
      if (s != size) size = kUnknownDim;
    }
    if (size > 0) {
      bool any_known = false;
      for (const TensorSpec& leaf : spec.Flatten()) {
        int64_t d = leaf.shape.dim(0);
        if (d == kUnknownDim) continue;
        any_known = true;
        if (d % size != 0) size = kUnknownDim;
      }
      if (!any_known) size = kUnknownDim;
    } else {
      size = kUnknownDim;
    }
    per_replica =
        spec.Map([size](const TensorSpec& s) { return TensorSpec{s.dtype, s.shape.WithFirst(size)}; });
  } else {
    // _LegacyRebatchDataset: each component on its own.
    per_replica = spec.Map([n](const TensorSpec& s) {
      int64_t d = s.shape.dim(0);
      int64_t out = (d != kUnknownDim && d % n == 0) ? d / n : kUnknownDim;
      return TensorSpec{s.dtype, s.shape.WithFirst(out)};
    });
  }
  // input_lib.py: multi-worker with partial-batch handling (any dataset not known to be
  // infinite) can always produce empty batches, so the batch dimension becomes None.
  if (num_workers > 1 && dataset.Cardinality() != kInfiniteCardinality) {
    per_replica = DynamicBatchDimension(per_replica);
  }
  return per_replica;
}

ElementSpec DynamicBatchDimension(const ElementSpec& spec) {
  return spec.Map([](const TensorSpec& s) {
    if (s.shape.rank() == 0) return s;  // TF's _rebatch_as_dynamic leaves scalars alone
    return TensorSpec{s.dtype, s.shape.WithFirst(kUnknownDim)};
  });
}

}  // namespace sluice
