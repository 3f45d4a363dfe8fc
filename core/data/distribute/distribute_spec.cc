#include "core/data/distribute/distribute_spec.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/distribute/rebatch.h"
#include "core/data/op_registry.h"
#include "core/tensor/row_pieces.h"
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
  // A SparseTensor or RaggedTensor counts as one component, its rows dimension 0 of its static
  // shape (TF's nest.flatten without expand_composites).
  std::vector<const ElementSpec*> nodes = RowNodes(spec);
  if (nodes.empty()) return NotBatchedError(num_replicas_in_sync, "the element has no tensors");
  // As distribute.compute_batch_size: the static batch dimension when every component has one
  // (this is how an unbatched from_tensors([1, 2, 3, 4]) gets B = 4, as in TF) ...
  bool all_known = true;
  for (const ElementSpec* node : nodes) {
    if (RowNodeRank(*node) == 0) {
      return NotBatchedError(num_replicas_in_sync,
                             absl::StrCat("the dataset's elements have a scalar component, ",
                                          node->is_leaf() ? node->leaf().ToString()
                                                          : CompositeSpecToString(*node)));
    }
    if (RowCount(*node) == kUnknownDim) all_known = false;
  }
  if (all_known) {
    for (const ElementSpec* node : nodes) {
      if (RowCount(*node) != RowCount(*nodes[0])) return int64_t{-1};
    }
    return RowCount(*nodes[0]);
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
      for (const ElementSpec* node : RowNodes(spec)) {
        int64_t d = RowCount(*node);
        if (d == kUnknownDim) continue;
        any_known = true;
        if (d % size != 0) size = kUnknownDim;
      }
      if (!any_known) size = kUnknownDim;
    } else {
      size = kUnknownDim;
    }
    per_replica = MapBatchDim(spec, [size](int64_t) { return size; });
  } else {
    // _LegacyRebatchDataset: each component on its own.
    per_replica = MapBatchDim(spec, [n](int64_t d) {
      return (d != kUnknownDim && d % n == 0) ? d / n : kUnknownDim;
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
  // TF's _rebatch_as_dynamic leaves scalars alone (MapBatchDim does).
  return MapBatchDim(spec, [](int64_t) { return kUnknownDim; });
}

}  // namespace sluice
