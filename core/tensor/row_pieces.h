// Row pieces: cutting elements along dimension 0 into contiguous pieces and joining them again,
// for rebatch() and the per-replica split (core/data/ops/rebatch_iterator.h), with
// SparseTensor and RaggedTensor nodes (sluice/composite_tensor.h) cut by rows as TF's
// RebatchDataset cuts them, never by their components.
//
// A "row node" is a leaf or a composite node: what has rows. Its rows:
//   dense leaf (rank >= 1): dimension 0;
//   SparseTensor:  dense_shape[0]; rows [b, e) are the entries whose first index is in [b, e),
//                  in their input order, that index rebased by -b, dense_shape [e - b, rest...];
//   RaggedTensor:  nrows (the outermost row_splits' length - 1; flat_values' dim 0 for ragged
//                  rank 0); rows [b, e) are row_splits[b..e] rebased to start at 0, each inner
//                  level the span the one above selects, and flat_values a zero-copy slice.
// Joining pieces: dense leaves by Tensor::Concat; sparse indices shifted by the rows before,
// dense_shape [total rows, max of each inner dimension] (as TF's batch of sparse rows);
// ragged row_splits continued from the previous piece's last split.
//
// Errors: INVALID_ARGUMENT naming `what` for pieces that cannot be joined (kinds, ranks,
// dtypes or inner shapes differ), RESOURCE_EXHAUSTED when the allocator refuses a copy.
// Thread safety: plain functions on values.
#ifndef SLUICE_CORE_TENSOR_ROW_PIECES_H_
#define SLUICE_CORE_TENSOR_ROW_PIECES_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/composite_tensor.h"

namespace sluice {

// The leaf and composite nodes of `e`, in flatten order (pointers into `e`, valid while it is).
template <typename T>
void CollectRowNodes(const Nest<T>& e, std::vector<const Nest<T>*>* out) {
  if (e.is_leaf() || e.is_composite()) {
    out->push_back(&e);
    return;
  }
  for (size_t i : e.FlattenOrder()) CollectRowNodes(e.children()[i], out);
}
template <typename T>
std::vector<const Nest<T>*> RowNodes(const Nest<T>& e) {
  std::vector<const Nest<T>*> out;
  CollectRowNodes(e, &out);
  return out;
}

// RowNodes(*e) moved out of `*e` (same order), each replaced by an empty node of its kind, so
// that `*e` still serves as PackRowNodes' `structure`: joins its nodes without copying them.
std::vector<Element> TakeRowNodes(Element* e);

// The structure of `structure` with `nodes` (in RowNodes order) at its leaves and composites.
// INVALID_ARGUMENT if the counts differ.
absl::StatusOr<Element> PackRowNodes(const Element& structure, std::vector<Element> nodes);

// The rank of a row node: a leaf's rank, a composite's static rank (composite_dims().size()).
int64_t RowNodeRank(const Element& node);
int64_t RowNodeRank(const ElementSpec& node);
// Dimension 0 of a row node of rank >= 1 (kUnknownDim in a spec when unknown).
int64_t RowCount(const Element& node);
int64_t RowCount(const ElementSpec& node);

// Rows [begin, end) of a row node (0 <= begin <= end <= RowCount). Dense leaves and a ragged
// node's flat_values are zero-copy slices; a sparse node's values too when its selected entries
// are contiguous (entries ordered by row, as TF's ops make them). All rows of a ragged node are
// the node itself, row_splits included (no copy).
absl::StatusOr<Element> SliceRows(const Element& node, int64_t begin, int64_t end,
                                  absl::string_view what);
// The pieces' rows one after the other (see the file comment). Requires non-empty `pieces` of
// one kind; a single piece is returned as is.
absl::StatusOr<Element> ConcatRows(std::span<const Element> pieces, absl::string_view what);

// A piece of a cut batch has one row count in every component. INVALID_ARGUMENT naming `what`
// and the component otherwise ("received piece: RaggedTensor component 0 has 3 rows but
// component 1 has 2"), and for a scalar component: for pieces from a peer.
absl::Status CheckSameRows(const Element& piece, absl::string_view what);

// Rows `positions` of `t` (rank >= 1) in that order: one slice per run of consecutive rows,
// joined by Tensor::Concat only when there are several.
absl::StatusOr<Tensor> GatherRows(const Tensor& t, const std::vector<int64_t>& positions,
                                  absl::string_view what);

// An element of `spec` holding no data: unknown dimensions 0, and with `zero_rows` dimension 0
// of every row node 0 too (else a known one is kept: ragged row_splits of zeros, zero-filled
// dense leaves). A SparseTensor's dense_shape is its spec's shape with unknown dimensions 0.
Element EmptyRows(const ElementSpec& spec, bool zero_rows);

// `spec` with dimension 0 of every row node of rank >= 1 replaced by f(dimension 0) (scalars
// kept); composites get the component specs of their new static shape (row_splits' length).
ElementSpec MapBatchDim(const ElementSpec& spec, const std::function<int64_t(int64_t)>& f);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_ROW_PIECES_H_
