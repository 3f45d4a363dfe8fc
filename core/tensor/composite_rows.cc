#include "core/tensor/composite_rows.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/row_pieces.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Bad(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

absl::StatusOr<Element> StackSparse(std::span<const Element> rows, absl::string_view what) {
  const int64_t rank = rows[0].children()[0].leaf().shape().dim(1);
  const DType dtype = rows[0].children()[1].leaf().dtype();
  std::vector<int64_t> dims(rank, 0);
  int64_t entries = 0;
  std::vector<Tensor> values;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Tensor& idx = rows[r].children()[0].leaf();
    const Tensor& shape = rows[r].children()[2].leaf();
    if (idx.shape().dim(1) != rank || rows[r].children()[1].leaf().dtype() != dtype) {
      return Bad(what, absl::StrCat("Cannot batch SparseTensors of different ranks or dtypes: "
                                    "element 0 has rank ", rank, " and dtype ",
                                    DTypeName(dtype), ", element ", r, " rank ",
                                    idx.shape().dim(1), " and dtype ",
                                    DTypeName(rows[r].children()[1].leaf().dtype())));
    }
    for (int64_t d = 0; d < rank; ++d) dims[d] = std::max(dims[d], shape.data<int64_t>()[d]);
    entries += idx.shape().dim(0);
    values.push_back(rows[r].children()[1].leaf());
  }
  ASSIGN_OR_RETURN(Tensor indices,
                   Tensor::TryAllocate(DType::kInt64, Shape({entries, rank + 1}), what));
  int64_t* out = indices.mutable_data<int64_t>();
  for (size_t r = 0; r < rows.size(); ++r) {
    const Tensor& idx = rows[r].children()[0].leaf();
    const int64_t* in = idx.data<int64_t>();
    for (int64_t i = 0; i < idx.shape().dim(0); ++i) {
      *out++ = static_cast<int64_t>(r);
      for (int64_t d = 0; d < rank; ++d) *out++ = in[i * rank + d];
    }
  }
  ASSIGN_OR_RETURN(Tensor all_values, Tensor::Concat(values, what));
  dims.insert(dims.begin(), static_cast<int64_t>(rows.size()));
  return MakeSparseTensor(std::move(indices), std::move(all_values), Tensor::FromVector(dims),
                          what);
}

int64_t RaggedRows(const Element& node) {
  return node.children().size() == 1 ? node.children()[0].leaf().shape().dim(0)
                                     : node.children()[1].leaf().shape().dim(0) - 1;
}

// In bulk: the row_splits of every level are sized first, then written in one pass straight
// into their tensors, and the flat_values are one copy per row (Tensor::Concat); nothing is
// allocated per row.
absl::StatusOr<Element> StackRagged(std::span<const Element> rows, absl::string_view what) {
  const size_t levels = rows[0].children().size() - 1;
  const Tensor& flat0 = rows[0].children()[0].leaf();
  std::vector<Tensor> flats;
  flats.reserve(rows.size());
  std::vector<int64_t> lengths(levels + 1, 1);  // row_splits lengths, outermost first
  lengths[0] += static_cast<int64_t>(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const Tensor& flat = rows[r].children()[0].leaf();
    if (rows[r].children().size() != levels + 1 || flat.dtype() != flat0.dtype() ||
        flat.shape().rank() != flat0.shape().rank() ||
        flat.shape().DropFirst() != flat0.shape().DropFirst()) {
      return Bad(what, absl::StrCat(
          "Cannot batch RaggedTensors of different ragged ranks, dtypes or inner shapes: element "
          "0 has ragged rank ", levels, " and flat_values ", DTypeName(flat0.dtype()), " ",
          flat0.shape().ToString(), ", element ", r, " ragged rank ",
          rows[r].children().size() - 1, " and ", DTypeName(flat.dtype()), " ",
          flat.shape().ToString()));
    }
    for (size_t level = 0; level < levels; ++level) {
      lengths[level + 1] += rows[r].children()[level + 1].leaf().shape().dim(0) - 1;
    }
    flats.push_back(flat);
  }
  std::vector<Tensor> nested;
  nested.reserve(levels + 1);
  for (size_t level = 0; level <= levels; ++level) {
    ASSIGN_OR_RETURN(Tensor splits,
                     TryAllocateUninitialized(DType::kInt64, Shape({lengths[level]}), what));
    int64_t* out = splits.mutable_data<int64_t>();
    *out++ = 0;
    int64_t base = 0;
    for (const Element& row : rows) {
      if (level == 0) {  // the new outermost level: each element's row count
        base += RaggedRows(row);
        *out++ = base;
        continue;
      }
      const Tensor& s = row.children()[level].leaf();
      const int64_t* in = s.data<int64_t>();
      const int64_t n = s.shape().dim(0);
      for (int64_t i = 1; i < n; ++i) *out++ = base + in[i];
      base += in[n - 1];
    }
    nested.push_back(std::move(splits));
  }
  ASSIGN_OR_RETURN(Tensor flat, Tensor::Concat(flats, what));
  return MakeRaggedTensor(std::move(flat), std::move(nested), what);
}

absl::StatusOr<std::vector<Element>> UnstackSparse(const Element& node, absl::string_view what) {
  const Tensor& idx = node.children()[0].leaf();
  const Tensor& values = node.children()[1].leaf();
  const Tensor& shape = node.children()[2].leaf();
  const int64_t rank = idx.shape().dim(1);
  if (rank == 0) return Bad(what, "cannot unbatch a scalar SparseTensor");
  const int64_t n = shape.data<int64_t>()[0];
  const int64_t* in = idx.data<int64_t>();
  std::vector<std::vector<int64_t>> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < idx.shape().dim(0); ++i) positions[in[i * rank]].push_back(i);
  const std::vector<int64_t> row_dims(shape.data<int64_t>() + 1, shape.data<int64_t>() + rank);
  std::vector<Element> rows;
  rows.reserve(positions.size());
  for (const std::vector<int64_t>& p : positions) {
    const int64_t k = static_cast<int64_t>(p.size());
    ASSIGN_OR_RETURN(Tensor row_idx,
                     Tensor::TryAllocate(DType::kInt64, Shape({k, rank - 1}), what));
    int64_t* out = row_idx.mutable_data<int64_t>();
    for (int64_t i : p) {
      for (int64_t d = 1; d < rank; ++d) *out++ = in[i * rank + d];
    }
    ASSIGN_OR_RETURN(Tensor row_values, GatherRows(values, p, what));
    ASSIGN_OR_RETURN(Element row, MakeSparseTensor(std::move(row_idx), std::move(row_values),
                                                   Tensor::FromVector(row_dims), what));
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<std::vector<Element>> UnstackRagged(const Element& node, absl::string_view what) {
  const size_t levels = node.children().size() - 1;
  if (levels == 0) return Bad(what, "cannot unbatch a RaggedTensor of ragged rank 0");
  const Tensor& flat = node.children()[0].leaf();
  std::vector<Element> rows;
  for (int64_t r = 0; r < RaggedRows(node); ++r) {
    // Row r spans [begin, end) of each level below the outermost, re-based to start at 0.
    const int64_t* outer = node.children()[1].leaf().data<int64_t>();
    int64_t begin = outer[r], end = outer[r + 1];
    std::vector<Tensor> nested;
    for (size_t level = 1; level < levels; ++level) {
      const int64_t* s = node.children()[level + 1].leaf().data<int64_t>();
      std::vector<int64_t> sub;
      for (int64_t i = begin; i <= end; ++i) sub.push_back(s[i] - s[begin]);
      nested.push_back(Tensor::FromVector(sub));
      begin = s[begin];
      end = s[end];
    }
    ASSIGN_OR_RETURN(Element row, MakeRaggedTensor(flat.Slice(begin, end), std::move(nested), what));
    rows.push_back(std::move(row));
  }
  return rows;
}

// The rows of every leaf and composite of `e`, appended per node in flatten order to `columns`.
absl::Status CollectRows(const Element& e, absl::string_view what,
                         std::vector<std::vector<Element>>* columns) {
  if (e.is_leaf() || e.is_composite()) {
    std::vector<Element> rows;
    if (e.is_leaf()) {
      if (e.leaf().shape().rank() == 0) return Bad(what, "cannot unbatch a scalar component");
      for (int64_t i = 0; i < e.leaf().shape().dim(0); ++i) rows.emplace_back(e.leaf().Index(i));
    } else {
      ASSIGN_OR_RETURN(rows, e.kind() == NestKind::kSparse ? UnstackSparse(e, what)
                                                           : UnstackRagged(e, what));
    }
    columns->push_back(std::move(rows));
    return absl::OkStatus();
  }
  for (size_t i : e.FlattenOrder()) RETURN_IF_ERROR(CollectRows(e.children()[i], what, columns));
  return absl::OkStatus();
}

// Rebuilds the structure of `shape` with row `r` of each column, consuming columns in order.
Element PackRow(const Element& shape, std::vector<std::vector<Element>>& columns, size_t r,
                size_t* next) {
  if (shape.is_leaf() || shape.is_composite()) return std::move(columns[(*next)++][r]);
  std::vector<Element> children(shape.children().size());
  for (size_t i : shape.FlattenOrder()) children[i] = PackRow(shape.children()[i], columns, r, next);
  return Element::FromParts(shape.kind(), std::move(children), shape.keys());
}

}  // namespace

absl::StatusOr<Element> StackRows(std::span<const Element> rows, absl::string_view what) {
  const Element& first = rows[0];
  for (size_t r = 1; r < rows.size(); ++r) {
    if (!rows[r].SameStructure(first)) {
      return Bad(what, absl::StrCat("Cannot batch elements with different structures: element 0 "
                                    "and element ", r, " differ"));
    }
  }
  if (first.is_leaf()) {
    std::vector<Tensor> leaves;
    for (const Element& r : rows) leaves.push_back(r.leaf());
    ASSIGN_OR_RETURN(Tensor t, Tensor::Stack(leaves, what));
    return Element(std::move(t));
  }
  if (first.kind() == NestKind::kSparse) return StackSparse(rows, what);
  if (first.kind() == NestKind::kRagged) return StackRagged(rows, what);
  std::vector<Element> children;
  for (size_t i = 0; i < first.children().size(); ++i) {
    std::vector<Element> column;
    for (const Element& r : rows) column.push_back(r.children()[i]);
    ASSIGN_OR_RETURN(Element c, StackRows(column, what));
    children.push_back(std::move(c));
  }
  return Element::FromParts(first.kind(), std::move(children), first.keys());
}

absl::StatusOr<std::vector<Element>> UnstackRows(const Element& e, absl::string_view what) {
  std::vector<std::vector<Element>> columns;
  RETURN_IF_ERROR(CollectRows(e, what, &columns));
  if (columns.empty()) return Bad(what, "cannot unbatch an element with no tensors");
  for (size_t i = 1; i < columns.size(); ++i) {
    if (columns[i].size() != columns[0].size()) {
      return Bad(what, absl::StrCat("Input element must have the same batch size in each "
                                    "component. Component 0 had size ", columns[0].size(),
                                    " but component ", i, " had size ", columns[i].size(), "."));
    }
  }
  std::vector<Element> rows;
  rows.reserve(columns[0].size());
  for (size_t r = 0; r < columns[0].size(); ++r) {
    size_t next = 0;
    rows.push_back(PackRow(e, columns, r, &next));
  }
  return rows;
}

std::vector<int64_t> RowCounts(const ElementSpec& spec) {
  if (spec.is_leaf()) {
    return {spec.leaf().shape.rank() == 0 ? kUnknownDim : spec.leaf().shape.dim(0)};
  }
  if (spec.is_composite()) {
    return {spec.composite_dims().empty() ? kUnknownDim : spec.composite_dims()[0]};
  }
  std::vector<int64_t> out;
  for (size_t i : spec.FlattenOrder()) {
    for (int64_t n : RowCounts(spec.children()[i])) out.push_back(n);
  }
  return out;
}

ElementSpec BatchedSpec(const ElementSpec& spec, int64_t batch_dim) {
  if (spec.is_leaf()) return TensorSpec{spec.leaf().dtype, spec.leaf().shape.Prepend(batch_dim)};
  if (spec.is_composite()) {
    std::vector<int64_t> dims = spec.composite_dims();
    dims.insert(dims.begin(), batch_dim);
    const DType dtype = CompositeValues(spec).leaf().dtype;
    return spec.kind() == NestKind::kSparse
               ? SparseTensorSpecOf(dtype, std::move(dims))
               : RaggedTensorSpecOf(dtype, std::move(dims), RaggedRank(spec) + 1);
  }
  std::vector<ElementSpec> children;
  for (const ElementSpec& c : spec.children()) children.push_back(BatchedSpec(c, batch_dim));
  return ElementSpec::FromParts(spec.kind(), std::move(children), spec.keys());
}

absl::StatusOr<ElementSpec> UnbatchedSpec(const ElementSpec& spec) {
  if (spec.is_leaf()) {
    if (spec.leaf().shape.rank() == 0) {
      return absl::InvalidArgumentError("cannot unbatch scalar components");
    }
    return ElementSpec(TensorSpec{spec.leaf().dtype, spec.leaf().shape.DropFirst()});
  }
  if (spec.is_composite()) {
    const std::vector<int64_t>& dims = spec.composite_dims();
    const DType dtype = CompositeValues(spec).leaf().dtype;
    if (dims.empty()) return absl::InvalidArgumentError("cannot unbatch a scalar SparseTensor");
    std::vector<int64_t> rest(dims.begin() + 1, dims.end());
    if (spec.kind() == NestKind::kSparse) return SparseTensorSpecOf(dtype, std::move(rest));
    if (RaggedRank(spec) == 0) {
      return absl::InvalidArgumentError("cannot unbatch a RaggedTensor of ragged rank 0");
    }
    return RaggedTensorSpecOf(dtype, std::move(rest), RaggedRank(spec) - 1);
  }
  std::vector<ElementSpec> children;
  for (const ElementSpec& c : spec.children()) {
    ASSIGN_OR_RETURN(ElementSpec u, UnbatchedSpec(c));
    children.push_back(std::move(u));
  }
  return ElementSpec::FromParts(spec.kind(), std::move(children), spec.keys());
}

}  // namespace sluice
