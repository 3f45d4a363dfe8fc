#include "core/tensor/row_pieces.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Bad(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

Element PackFrom(const Element& structure, std::vector<Element>& nodes, size_t* next) {
  if (structure.is_leaf() || structure.is_composite()) return std::move(nodes[(*next)++]);
  std::vector<Element> children(structure.children().size());
  for (size_t i : structure.FlattenOrder()) {
    children[i] = PackFrom(structure.children()[i], nodes, next);
  }
  return Element::FromParts(structure.kind(), std::move(children), structure.keys());
}

// Composite nodes built here from pieces of checked values, and so valid by construction:
// no second pass over their components (MakeSparseTensor's checks cost more than the cut).
Element SparseNode(Tensor indices, Tensor values, std::vector<int64_t> dims) {
  std::vector<Element> children;
  children.emplace_back(std::move(indices));
  children.emplace_back(std::move(values));
  children.emplace_back(Tensor::FromVector(dims));
  return Element::Composite(NestKind::kSparse, std::move(children), std::move(dims));
}
Element RaggedNode(Tensor flat_values, std::vector<Tensor> nested_row_splits) {
  std::vector<int64_t> dims = {nested_row_splits[0].shape().dim(0) - 1};
  for (size_t i = 0; i < nested_row_splits.size(); ++i) dims.push_back(kUnknownDim);
  for (int d = 1; d < flat_values.shape().rank(); ++d) dims.push_back(flat_values.shape().dim(d));
  std::vector<Element> children;
  children.emplace_back(std::move(flat_values));
  for (Tensor& s : nested_row_splits) children.emplace_back(std::move(s));
  return Element::Composite(NestKind::kRagged, std::move(children), std::move(dims));
}

// The entries [lo, hi) of a sparse node whose entries are ordered by row: a zero-copy slice of
// its values, its indices copied with the row rebased by -begin.
absl::StatusOr<Element> SliceSortedSparse(const Element& node, int64_t begin, int64_t end,
                                          absl::string_view what) {
  const Tensor& indices = node.children()[0].leaf();
  const int64_t rank = indices.shape().dim(1);
  const int64_t* idx = indices.data<int64_t>();
  auto first_at_or_after = [&](int64_t row) {  // the first entry whose row is >= row
    int64_t lo = 0, hi = indices.shape().dim(0);
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (idx[mid * rank] < row) lo = mid + 1; else hi = mid;
    }
    return lo;
  };
  const int64_t lo = first_at_or_after(begin);
  const int64_t hi = first_at_or_after(end);
  ASSIGN_OR_RETURN(Tensor out_indices,
                   TryAllocateUninitialized(DType::kInt64, Shape({hi - lo, rank}), what));
  int64_t* out = out_indices.mutable_data<int64_t>();
  if (hi > lo) std::memcpy(out, idx + lo * rank, static_cast<size_t>((hi - lo) * rank) * 8);
  for (int64_t i = 0; i < hi - lo; ++i) out[i * rank] -= begin;
  const Tensor& dense_shape = node.children()[2].leaf();
  std::vector<int64_t> dims(dense_shape.data<int64_t>(), dense_shape.data<int64_t>() + rank);
  dims[0] = end - begin;
  return SparseNode(std::move(out_indices), node.children()[1].leaf().Slice(lo, hi),
                    std::move(dims));
}

absl::StatusOr<Element> SliceSparse(const Element& node, int64_t begin, int64_t end,
                                    absl::string_view what) {
  const Tensor& indices = node.children()[0].leaf();
  const Tensor& dense_shape = node.children()[2].leaf();
  const int64_t rank = indices.shape().dim(1);
  const int64_t* idx = indices.data<int64_t>();
  bool ordered = true;  // by row, as TF's ops give them: then no scan for the rows' entries
  for (int64_t i = 1; ordered && i < indices.shape().dim(0); ++i) {
    ordered = idx[i * rank] >= idx[(i - 1) * rank];
  }
  if (ordered) return SliceSortedSparse(node, begin, end, what);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < indices.shape().dim(0); ++i) {
    if (idx[i * rank] >= begin && idx[i * rank] < end) positions.push_back(i);
  }
  // Row by row, each row's entries in their input order: the order a batch of the rows has
  // (TF's batch of serialized rows; composite_rows.h).
  auto by_row = [idx, rank](int64_t a, int64_t b) { return idx[a * rank] < idx[b * rank]; };
  if (!std::is_sorted(positions.begin(), positions.end(), by_row)) {
    std::stable_sort(positions.begin(), positions.end(), by_row);
  }
  const int64_t n = static_cast<int64_t>(positions.size());
  ASSIGN_OR_RETURN(Tensor out_indices,
                   TryAllocateUninitialized(DType::kInt64, Shape({n, rank}), what));
  int64_t* out = out_indices.mutable_data<int64_t>();
  for (int64_t i : positions) {
    *out++ = idx[i * rank] - begin;
    for (int64_t d = 1; d < rank; ++d) *out++ = idx[i * rank + d];
  }
  ASSIGN_OR_RETURN(Tensor values, GatherRows(node.children()[1].leaf(), positions, what));
  std::vector<int64_t> dims(dense_shape.data<int64_t>(), dense_shape.data<int64_t>() + rank);
  dims[0] = end - begin;
  return SparseNode(std::move(out_indices), std::move(values), std::move(dims));
}

absl::StatusOr<Element> SliceRagged(const Element& node, int64_t begin, int64_t end,
                                    absl::string_view what) {
  const size_t levels = node.children().size() - 1;
  std::vector<Tensor> nested;
  nested.reserve(levels);
  for (size_t level = 0; level < levels; ++level) {
    const int64_t* s = node.children()[level + 1].leaf().data<int64_t>();
    ASSIGN_OR_RETURN(Tensor splits,
                     TryAllocateUninitialized(DType::kInt64, Shape({end - begin + 1}), what));
    int64_t* out = splits.mutable_data<int64_t>();
    for (int64_t i = begin; i <= end; ++i) *out++ = s[i] - s[begin];
    nested.push_back(std::move(splits));
    const int64_t next_begin = s[begin];
    end = s[end];
    begin = next_begin;
  }
  return RaggedNode(node.children()[0].leaf().Slice(begin, end), std::move(nested));
}

absl::StatusOr<Element> ConcatSparse(std::span<const Element> pieces, absl::string_view what) {
  const int64_t rank = pieces[0].children()[0].leaf().shape().dim(1);
  const DType dtype = pieces[0].children()[1].leaf().dtype();
  std::vector<int64_t> dims(static_cast<size_t>(rank), 0);
  int64_t entries = 0;
  std::vector<Tensor> values;
  values.reserve(pieces.size());
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Tensor& idx = pieces[p].children()[0].leaf();
    const Tensor& v = pieces[p].children()[1].leaf();
    if (idx.shape().dim(1) != rank || v.dtype() != dtype) {
      return Bad(what, absl::StrCat("cannot join SparseTensor pieces of different ranks or "
                                    "dtypes: piece 0 has rank ", rank, " and ",
                                    DTypeName(dtype), ", piece ", p, " rank ",
                                    idx.shape().dim(1), " and ", DTypeName(v.dtype())));
    }
    const int64_t* shape = pieces[p].children()[2].leaf().data<int64_t>();
    dims[0] += shape[0];
    for (int64_t d = 1; d < rank; ++d) dims[d] = std::max(dims[d], shape[d]);
    entries += idx.shape().dim(0);
    values.push_back(v);
  }
  ASSIGN_OR_RETURN(Tensor indices,
                   TryAllocateUninitialized(DType::kInt64, Shape({entries, rank}), what));
  int64_t* out = indices.mutable_data<int64_t>();
  int64_t row_base = 0;
  for (const Element& piece : pieces) {  // each piece's indices copied whole, rows shifted
    const Tensor& idx = piece.children()[0].leaf();
    const int64_t n = idx.shape().dim(0);
    if (n > 0) std::memcpy(out, idx.data<int64_t>(), static_cast<size_t>(n * rank) * 8);
    for (int64_t i = 0; i < n; ++i) out[i * rank] += row_base;
    out += n * rank;
    row_base += piece.children()[2].leaf().data<int64_t>()[0];
  }
  ASSIGN_OR_RETURN(Tensor all_values, Tensor::Concat(values, what));
  return SparseNode(std::move(indices), std::move(all_values), std::move(dims));
}

absl::StatusOr<Element> ConcatRagged(std::span<const Element> pieces, absl::string_view what) {
  const size_t levels = pieces[0].children().size() - 1;
  const Tensor& flat0 = pieces[0].children()[0].leaf();
  std::vector<Tensor> flats;
  flats.reserve(pieces.size());
  std::vector<int64_t> lengths(levels, 1);  // each level's joined row_splits length
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Tensor& flat = pieces[p].children()[0].leaf();
    if (pieces[p].children().size() != levels + 1 || flat.dtype() != flat0.dtype() ||
        flat.shape().DropFirst() != flat0.shape().DropFirst()) {
      return Bad(what, absl::StrCat("cannot join RaggedTensor pieces of different ragged ranks, "
                                    "dtypes or inner shapes: piece 0 has ragged rank ", levels,
                                    " and flat_values ", DTypeName(flat0.dtype()), " ",
                                    flat0.shape().ToString(), ", piece ", p, " ragged rank ",
                                    pieces[p].children().size() - 1, " and ",
                                    DTypeName(flat.dtype()), " ", flat.shape().ToString()));
    }
    for (size_t level = 0; level < levels; ++level) {
      lengths[level] += pieces[p].children()[level + 1].leaf().shape().dim(0) - 1;
    }
    flats.push_back(flat);
  }
  std::vector<Tensor> nested;
  for (size_t level = 0; level < levels; ++level) {
    ASSIGN_OR_RETURN(Tensor splits,
                     TryAllocateUninitialized(DType::kInt64, Shape({lengths[level]}), what));
    int64_t* out = splits.mutable_data<int64_t>();
    *out++ = 0;
    int64_t base = 0;
    for (const Element& piece : pieces) {
      const Tensor& s = piece.children()[level + 1].leaf();
      const int64_t* in = s.data<int64_t>();
      for (int64_t i = 1; i < s.shape().dim(0); ++i) *out++ = base + in[i];
      base += in[s.shape().dim(0) - 1];
    }
    nested.push_back(std::move(splits));
  }
  ASSIGN_OR_RETURN(Tensor flat, Tensor::Concat(flats, what));
  return RaggedNode(std::move(flat), std::move(nested));
}

int64_t KnownOrZero(int64_t d) { return d == kUnknownDim ? 0 : d; }

Element EmptyComposite(const ElementSpec& node, bool zero_rows) {
  std::vector<int64_t> dims = node.composite_dims();
  if (zero_rows && !dims.empty()) dims[0] = 0;
  for (int64_t& d : dims) d = KnownOrZero(d);
  const DType dtype = CompositeValues(node).leaf().dtype;
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (node.kind() == NestKind::kSparse) {
    std::vector<Element> children;
    children.emplace_back(Tensor::Allocate(DType::kInt64, Shape({0, rank})));
    children.emplace_back(Tensor::Allocate(dtype, Shape({0})));
    children.emplace_back(Tensor::FromVector(dims));
    return Element::Composite(NestKind::kSparse, std::move(children), std::move(dims));
  }
  const int ragged_rank = RaggedRank(node);
  // Known rows with empty contents: the outermost level has them, every level below none.
  std::vector<int64_t> flat_dims = {ragged_rank == 0 ? dims[0] : 0};
  for (int64_t d = ragged_rank + 1; d < rank; ++d) flat_dims.push_back(dims[d]);
  std::vector<Element> children;
  children.emplace_back(Tensor::Allocate(dtype, Shape(std::move(flat_dims))));
  for (int level = 0; level < ragged_rank; ++level) {
    const int64_t rows = level == 0 ? dims[0] : 0;
    children.emplace_back(Tensor::FromVector(std::vector<int64_t>(rows + 1, 0)));
  }
  for (int level = 1; level <= ragged_rank; ++level) dims[level] = kUnknownDim;
  return Element::Composite(NestKind::kRagged, std::move(children), std::move(dims));
}

}  // namespace

absl::StatusOr<Element> PackRowNodes(const Element& structure, std::vector<Element> nodes) {
  const size_t expected = RowNodes(structure).size();
  if (nodes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("cannot pack ", nodes.size(),
                                                   " components into a structure with ",
                                                   expected));
  }
  size_t next = 0;
  return PackFrom(structure, nodes, &next);
}

std::vector<Element> TakeRowNodes(Element* e) {
  std::vector<Element> nodes;
  std::vector<Element*> pending = {e};  // depth first, in flatten order
  while (!pending.empty()) {
    Element* n = pending.back();
    pending.pop_back();
    if (n->is_leaf()) {
      nodes.push_back(std::exchange(*n, Element(Tensor())));
    } else if (n->is_composite()) {
      nodes.push_back(std::exchange(*n, Element::Composite(n->kind(), {}, {})));
    } else {
      const std::vector<size_t> order = n->FlattenOrder();
      for (auto i = order.rbegin(); i != order.rend(); ++i) {
        pending.push_back(&n->mutable_children()[*i]);
      }
    }
  }
  return nodes;
}

int64_t RowNodeRank(const Element& node) {
  return node.is_leaf() ? node.leaf().shape().rank()
                        : static_cast<int64_t>(node.composite_dims().size());
}
int64_t RowNodeRank(const ElementSpec& node) {
  return node.is_leaf() ? node.leaf().shape.rank()
                        : static_cast<int64_t>(node.composite_dims().size());
}

int64_t RowCount(const Element& node) {
  if (node.is_leaf()) return node.leaf().shape().dim(0);
  if (node.kind() == NestKind::kSparse) return node.children()[2].leaf().data<int64_t>()[0];
  return node.children().size() == 1 ? node.children()[0].leaf().shape().dim(0)
                                     : node.children()[1].leaf().shape().dim(0) - 1;
}
int64_t RowCount(const ElementSpec& node) {
  return node.is_leaf() ? node.leaf().shape.dim(0) : node.composite_dims()[0];
}

absl::StatusOr<Element> SliceRows(const Element& node, int64_t begin, int64_t end,
                                  absl::string_view what) {
  if (node.is_leaf()) return Element(node.leaf().Slice(begin, end));
  if (node.kind() == NestKind::kSparse) return SliceSparse(node, begin, end, what);
  // All rows of a valid RaggedTensor (splits from 0 to its values' rows) are the node itself:
  // a source repeated in blocks of all its rows rebuilds nothing.
  if (begin == 0 && end == RowCount(node)) return node;
  if (node.children().size() == 1) {
    return MakeRaggedTensor(node.children()[0].leaf().Slice(begin, end), {}, what);
  }
  return SliceRagged(node, begin, end, what);
}

absl::StatusOr<Element> ConcatRows(std::span<const Element> pieces, absl::string_view what) {
  if (pieces.size() == 1) return pieces[0];
  for (size_t p = 1; p < pieces.size(); ++p) {
    if (pieces[p].kind() != pieces[0].kind()) {
      return Bad(what, absl::StrCat("cannot join pieces of different kinds (piece 0 and piece ",
                                    p, ")"));
    }
  }
  if (pieces[0].kind() == NestKind::kSparse) return ConcatSparse(pieces, what);
  if (pieces[0].kind() == NestKind::kRagged) return ConcatRagged(pieces, what);
  std::vector<Tensor> parts;
  parts.reserve(pieces.size());
  for (const Element& p : pieces) parts.push_back(p.leaf());
  ASSIGN_OR_RETURN(Tensor t, Tensor::Concat(parts, what));
  return Element(std::move(t));
}

absl::Status CheckSameRows(const Element& piece, absl::string_view what) {
  std::vector<const Element*> nodes = RowNodes(piece);
  auto name = [&](size_t i) {
    const NestKind kind = nodes[i]->kind();
    return absl::StrCat(kind == NestKind::kSparse   ? "SparseTensor "
                        : kind == NestKind::kRagged ? "RaggedTensor "
                                                    : "",
                        "component ", i);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (RowNodeRank(*nodes[i]) == 0) return Bad(what, absl::StrCat(name(i), " is a scalar"));
    if (RowCount(*nodes[i]) != RowCount(*nodes[0])) {
      return Bad(what, absl::StrCat(name(0), " has ", RowCount(*nodes[0]), " rows but ",
                                    name(i), " has ", RowCount(*nodes[i])));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GatherRows(const Tensor& t, const std::vector<int64_t>& positions,
                                  absl::string_view what) {
  std::vector<Tensor> runs;
  size_t i = 0;
  while (i < positions.size()) {
    size_t j = i + 1;
    while (j < positions.size() && positions[j] == positions[j - 1] + 1) ++j;
    runs.push_back(t.Slice(positions[i], positions[j - 1] + 1));
    i = j;
  }
  if (runs.empty()) return t.Slice(0, 0);
  if (runs.size() == 1) return runs[0];
  return Tensor::Concat(runs, what);
}

Element EmptyRows(const ElementSpec& spec, bool zero_rows) {
  if (spec.is_composite()) return EmptyComposite(spec, zero_rows);
  if (spec.is_leaf()) {
    std::vector<int64_t> dims = spec.leaf().shape.dims();
    if (zero_rows && !dims.empty()) dims[0] = 0;
    for (int64_t& d : dims) d = KnownOrZero(d);
    return Element(Tensor::Allocate(spec.leaf().dtype, Shape(std::move(dims))));
  }
  std::vector<Element> children;
  children.reserve(spec.children().size());
  for (const ElementSpec& c : spec.children()) children.push_back(EmptyRows(c, zero_rows));
  return Element::FromParts(spec.kind(), std::move(children), spec.keys());
}

ElementSpec MapBatchDim(const ElementSpec& spec, const std::function<int64_t(int64_t)>& f) {
  if (spec.is_leaf()) {
    const TensorSpec& s = spec.leaf();
    if (s.shape.rank() == 0) return spec;
    return TensorSpec{s.dtype, s.shape.WithFirst(f(s.shape.dim(0)))};
  }
  if (spec.is_composite()) {
    std::vector<int64_t> dims = spec.composite_dims();
    if (dims.empty()) return spec;
    dims[0] = f(dims[0]);
    const DType dtype = CompositeValues(spec).leaf().dtype;
    return spec.kind() == NestKind::kSparse
               ? SparseTensorSpecOf(dtype, std::move(dims))
               : RaggedTensorSpecOf(dtype, std::move(dims), RaggedRank(spec));
  }
  std::vector<ElementSpec> children;
  children.reserve(spec.children().size());
  for (const ElementSpec& c : spec.children()) children.push_back(MapBatchDim(c, f));
  return ElementSpec::FromParts(spec.kind(), std::move(children), spec.keys());
}

}  // namespace sluice
