// Batching and unbatching composite values (include/sluice/composite_tensor.h) along a new or
// existing dimension 0, as tf.data's batch() and unbatch() do with SparseTensor and
// RaggedTensor components, and the element specs those ops give.
//
//   batch:   SparseTensors of rank R -> one of rank R + 1: indices gain the row as their first
//            column, dense_shape is [n, max of each dimension over the rows].
//            RaggedTensors of ragged rank r (r = 0: dense rows, possibly of different lengths)
//            -> one of ragged rank r + 1: a new outermost row_splits of each row's row count.
//   unbatch: the inverse, row by row; a SparseTensor's entries need not be ordered.
//
// Errors are INVALID_ARGUMENT naming `what` ("op 2 (batch): ..."): rows of different ranks,
// dtypes or inner shapes, a scalar to unbatch; RESOURCE_EXHAUSTED when a copy is refused by
// the allocator (sluice/tensor.h).
//
// Thread safety: plain functions on values.
#ifndef SLUICE_CORE_TENSOR_COMPOSITE_ROWS_H_
#define SLUICE_CORE_TENSOR_COMPOSITE_ROWS_H_

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/composite_tensor.h"

namespace sluice {

// Stacks the same node of each element: composite nodes as above, leaves with Tensor::Stack,
// structures child by child. Requires a non-empty `rows`; their structures must agree.
absl::StatusOr<Element> StackRows(std::span<const Element> rows, absl::string_view what);
// The rows of `e` (every component split along dimension 0; all must agree on the count).
absl::StatusOr<std::vector<Element>> UnstackRows(const Element& e, absl::string_view what);

// The spec of batch(n): `batch_dim` (n, or kUnknownDim) prepended to every leaf and composite.
ElementSpec BatchedSpec(const ElementSpec& spec, int64_t batch_dim);
// The spec of unbatch(): dimension 0 dropped; INVALID_ARGUMENT on a scalar leaf or composite
// or a ragged node of ragged rank 0.
absl::StatusOr<ElementSpec> UnbatchedSpec(const ElementSpec& spec);

// Dimension 0 of each leaf and composite node of `spec` in flatten order (kUnknownDim when
// unknown, or for a scalar): how many rows unbatch() would give from each.
std::vector<int64_t> RowCounts(const ElementSpec& spec);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_COMPOSITE_ROWS_H_
