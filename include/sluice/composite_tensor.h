// SparseTensor and RaggedTensor values and specs: composite nodes of an Element / ElementSpec
// (sluice/nest.h), built and checked here.
//
//   ASSIGN_OR_RETURN(Element sparse, MakeSparseTensor(indices, values, dense_shape));
//   ASSIGN_OR_RETURN(Element ragged, MakeRaggedTensor(flat_values, {row_splits}));
//   SpecOf(ragged).ToString() -> via ElementSpecToString: "RaggedTensorSpec(TensorShape([2,
//   None]), tf.int32, 1, tf.int64)"
//
// Components, as TF's _to_components:
//   SparseTensor: indices int64 [N, rank], values [N] (any dtype), dense_shape int64 [rank];
//                 every index within dense_shape (0 <= i < dense_shape[d]); order is not checked
//                 (TF does not check it at construction either).
//   RaggedTensor: flat_values [M, ...] (rank >= 1), then row_splits int64 [nrows_k + 1] per ragged
//                 dimension, outermost first: each starts at 0, never decreases, and ends at the
//                 row count of the next level (the next row_splits' nrows, or M).
//                 Sluice's row_splits are int64 (TF's default for tf.ragged.constant).
//                 ragged_rank 0 (no row_splits) is a dense value with a RaggedTensorSpec, as TF
//                 gives when it unbatches a ragged_rank-1 value.
// The node's static dense shape (composite_dims): a sparse value's dense_shape; a ragged value's
// [nrows, None x ragged_rank, flat_values.shape[1:]].
//
// Every check fails with INVALID_ARGUMENT naming `what` and the component ("op 2 (batch):
// RaggedTensor row_splits 0 decreases at position 3 (5 after 7)"); nothing here crashes on
// hostile components.
//
// Thread safety: plain functions on values.
#ifndef SLUICE_CORE_COMPOSITE_TENSOR_H_
#define SLUICE_CORE_COMPOSITE_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"

namespace sluice {

// A checked SparseTensor node (see above).
absl::StatusOr<Element> MakeSparseTensor(Tensor indices, Tensor values, Tensor dense_shape,
                                         absl::string_view what = "SparseTensor");
// A checked RaggedTensor node (see above); `nested_row_splits` outermost first.
absl::StatusOr<Element> MakeRaggedTensor(Tensor flat_values, std::vector<Tensor> nested_row_splits,
                                         absl::string_view what = "RaggedTensor");
// Checks every composite node of `e` (components and static shape agree, as Make* checks):
// for values read from a peer, a file or a client.
absl::Status CheckComposites(const Element& e, absl::string_view what);

// Spec nodes with TF's component specs: SparseTensorSpec(shape, dtype) and
// RaggedTensorSpec(shape, dtype, ragged_rank, tf.int64). Requires ragged_rank < dims.size()
// (ragged_rank 0 needs rank >= 1).
ElementSpec SparseTensorSpecOf(DType dtype, std::vector<int64_t> dims);
ElementSpec RaggedTensorSpecOf(DType dtype, std::vector<int64_t> dims, int ragged_rank);

// For a composite node (value or spec): the dtype of its values, and a ragged node's ragged rank.
template <typename T>
const Nest<T>& CompositeValues(const Nest<T>& node) {
  return node.children()[node.kind() == NestKind::kSparse ? 1 : 0];
}
inline int RaggedRank(const ElementSpec& node) {
  return static_cast<int>(node.children().size()) - 1;
}

// TF's repr of a composite spec node: "SparseTensorSpec(TensorShape([None, 3]), tf.int64)".
std::string CompositeSpecToString(const ElementSpec& node);

}  // namespace sluice

#endif  // SLUICE_CORE_COMPOSITE_TENSOR_H_
