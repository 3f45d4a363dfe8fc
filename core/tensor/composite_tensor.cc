#include "sluice/composite_tensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Bad(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

// Requires an int64 tensor of `rank` in host memory.
absl::Status CheckInt64(const Tensor& t, int rank, absl::string_view what,
                        absl::string_view component) {
  if (!t.valid() || t.dtype() != DType::kInt64 || t.shape().rank() != rank) {
    return Bad(what, absl::StrCat(component, " must be an int64 tensor of rank ", rank, ", got ",
                                  t.valid() ? DTypeName(t.dtype()) : "an invalid tensor",
                                  t.valid() ? absl::StrCat(" of shape ", t.shape().ToString())
                                            : ""));
  }
  return absl::OkStatus();
}

std::string DimsText(const std::vector<int64_t>& dims) {
  return Shape(dims).ToString();
}

// The static dims of a composite node agree with the ones its components give.
absl::Status CheckDims(const std::vector<int64_t>& claimed, const std::vector<int64_t>& actual,
                       absl::string_view what, absl::string_view kind) {
  bool ok = claimed.size() == actual.size();
  for (size_t i = 0; ok && i < claimed.size(); ++i) {
    ok = claimed[i] == kUnknownDim || actual[i] == kUnknownDim || claimed[i] == actual[i];
  }
  if (!ok) {
    return Bad(what, absl::StrCat(kind, " static shape ", DimsText(claimed),
                                  " disagrees with its components' shape ", DimsText(actual)));
  }
  return absl::OkStatus();
}

absl::Status CheckSparse(const Tensor& indices, const Tensor& values, const Tensor& dense_shape,
                         absl::string_view what) {
  RETURN_IF_ERROR(CheckInt64(indices, 2, what, "SparseTensor indices"));
  RETURN_IF_ERROR(CheckInt64(dense_shape, 1, what, "SparseTensor dense_shape"));
  const int64_t n = indices.shape().dim(0);
  const int64_t rank = indices.shape().dim(1);
  if (!values.valid() || values.shape().rank() != 1 || values.shape().dim(0) != n) {
    return Bad(what, absl::StrCat("SparseTensor values must have shape (", n,
                                  ",) to match indices of shape ", indices.shape().ToString(),
                                  ", got ", values.valid() ? values.shape().ToString() : "none"));
  }
  if (dense_shape.shape().dim(0) != rank) {
    return Bad(what, absl::StrCat("SparseTensor dense_shape has ", dense_shape.shape().dim(0),
                                  " entries but indices have rank ", rank));
  }
  const int64_t* dims = dense_shape.data<int64_t>();
  for (int64_t d = 0; d < rank; ++d) {
    if (dims[d] < 0) {
      return Bad(what, absl::StrCat("SparseTensor dense_shape[", d, "] is negative (", dims[d],
                                    ")"));
    }
  }
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t v = idx[i * rank + d];
      if (v < 0 || v >= dims[d]) {
        return Bad(what, absl::StrCat("SparseTensor indices[", i, ", ", d, "] = ", v,
                                      " is outside dense_shape[", d, "] = ", dims[d]));
      }
    }
  }
  return absl::OkStatus();
}

// Checks one level's row_splits against the row count of the level below.
absl::Status CheckRowSplits(const Tensor& splits, int level, int64_t inner_rows,
                            absl::string_view what) {
  // The name is built only for an error: this runs on every ragged component a consumer
  // receives.
  auto name = [level] { return absl::StrCat("RaggedTensor row_splits ", level); };
  if (!splits.valid() || splits.dtype() != DType::kInt64 || splits.shape().rank() != 1) {
    return CheckInt64(splits, 1, what, name());
  }
  const int64_t n = splits.shape().dim(0);
  if (n < 1) return Bad(what, absl::StrCat(name(), " is empty (it needs at least [0])"));
  const int64_t* s = splits.data<int64_t>();
  if (s[0] != 0) return Bad(what, absl::StrCat(name(), " starts at ", s[0], ", not 0"));
  for (int64_t i = 1; i < n; ++i) {
    if (s[i] < s[i - 1]) {
      return Bad(what, absl::StrCat(name(), " decreases at position ", i, " (", s[i], " after ",
                                    s[i - 1], ")"));
    }
  }
  if (s[n - 1] != inner_rows) {
    return Bad(what, absl::StrCat(name(), " ends at ", s[n - 1], " but the level below has ",
                                  inner_rows, " rows"));
  }
  return absl::OkStatus();
}

absl::Status CheckRagged(const Tensor& flat_values, const std::vector<Tensor>& splits,
                         absl::string_view what) {
  if (!flat_values.valid() || flat_values.shape().rank() < 1) {
    return Bad(what, "RaggedTensor flat_values must have rank >= 1");
  }
  int64_t inner = flat_values.shape().dim(0);
  for (int level = static_cast<int>(splits.size()) - 1; level >= 0; --level) {
    RETURN_IF_ERROR(CheckRowSplits(splits[level], level, inner, what));
    inner = splits[level].shape().dim(0) - 1;
  }
  return absl::OkStatus();
}

std::vector<int64_t> RaggedDims(const Tensor& flat_values, const std::vector<Tensor>& splits) {
  std::vector<int64_t> dims;
  dims.push_back(splits.empty() ? flat_values.shape().dim(0) : splits[0].shape().dim(0) - 1);
  for (size_t i = 0; i < splits.size(); ++i) dims.push_back(kUnknownDim);
  for (int d = 1; d < flat_values.shape().rank(); ++d) dims.push_back(flat_values.shape().dim(d));
  return dims;
}

std::vector<Tensor> RowSplitsOf(const Element& node) {
  std::vector<Tensor> splits;
  for (size_t i = 1; i < node.children().size(); ++i) splits.push_back(node.children()[i].leaf());
  return splits;
}

absl::Status CheckNode(const Element& node, absl::string_view what) {
  for (const Element& c : node.children()) {
    if (!c.is_leaf()) return Bad(what, "a composite's components must be tensors");
  }
  if (node.kind() == NestKind::kSparse) {
    if (node.children().size() != 3) {
      return Bad(what, absl::StrCat("SparseTensor has ", node.children().size(),
                                    " components, not 3"));
    }
    const Tensor& shape = node.children()[2].leaf();
    RETURN_IF_ERROR(CheckSparse(node.children()[0].leaf(), node.children()[1].leaf(), shape, what));
    std::vector<int64_t> actual(shape.data<int64_t>(),
                                shape.data<int64_t>() + shape.shape().dim(0));
    return CheckDims(node.composite_dims(), actual, what, "SparseTensor");
  }
  if (node.children().empty()) return Bad(what, "RaggedTensor has no flat_values");
  const Tensor& flat = node.children()[0].leaf();
  std::vector<Tensor> splits = RowSplitsOf(node);
  RETURN_IF_ERROR(CheckRagged(flat, splits, what));
  return CheckDims(node.composite_dims(), RaggedDims(flat, splits), what, "RaggedTensor");
}

std::string TensorShapeText(const std::vector<int64_t>& dims) {
  std::vector<std::string> parts;
  for (int64_t d : dims) parts.push_back(d == kUnknownDim ? "None" : absl::StrCat(d));
  return absl::StrCat("TensorShape([", absl::StrJoin(parts, ", "), "])");
}

}  // namespace

absl::StatusOr<Element> MakeSparseTensor(Tensor indices, Tensor values, Tensor dense_shape,
                                         absl::string_view what) {
  RETURN_IF_ERROR(CheckSparse(indices, values, dense_shape, what));
  std::vector<int64_t> dims(dense_shape.data<int64_t>(),
                            dense_shape.data<int64_t>() + dense_shape.shape().dim(0));
  std::vector<Element> children;
  children.emplace_back(std::move(indices));
  children.emplace_back(std::move(values));
  children.emplace_back(std::move(dense_shape));
  return Element::Composite(NestKind::kSparse, std::move(children), std::move(dims));
}

absl::StatusOr<Element> MakeRaggedTensor(Tensor flat_values, std::vector<Tensor> nested_row_splits,
                                         absl::string_view what) {
  RETURN_IF_ERROR(CheckRagged(flat_values, nested_row_splits, what));
  std::vector<int64_t> dims = RaggedDims(flat_values, nested_row_splits);
  std::vector<Element> children;
  children.emplace_back(std::move(flat_values));
  for (Tensor& s : nested_row_splits) children.emplace_back(std::move(s));
  return Element::Composite(NestKind::kRagged, std::move(children), std::move(dims));
}

absl::Status CheckComposites(const Element& e, absl::string_view what) {
  if (e.is_composite()) return CheckNode(e, what);
  for (const Element& c : e.children()) RETURN_IF_ERROR(CheckComposites(c, what));
  return absl::OkStatus();
}

ElementSpec SparseTensorSpecOf(DType dtype, std::vector<int64_t> dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<ElementSpec> children;
  children.emplace_back(TensorSpec{DType::kInt64, Shape({kUnknownDim, rank})});
  children.emplace_back(TensorSpec{dtype, Shape({kUnknownDim})});
  children.emplace_back(TensorSpec{DType::kInt64, Shape({rank})});
  return ElementSpec::Composite(NestKind::kSparse, std::move(children), std::move(dims));
}

ElementSpec RaggedTensorSpecOf(DType dtype, std::vector<int64_t> dims, int ragged_rank) {
  // TF's RaggedTensorSpec._component_specs: flat_values [None, inner dims...], the outermost
  // row_splits [nrows + 1] (None when nrows is unknown), the others [None].
  std::vector<int64_t> flat_dims = {ragged_rank == 0 ? dims[0] : kUnknownDim};
  for (size_t d = static_cast<size_t>(ragged_rank) + 1; d < dims.size(); ++d) {
    flat_dims.push_back(dims[d]);
  }
  std::vector<ElementSpec> children;
  children.emplace_back(TensorSpec{dtype, Shape(std::move(flat_dims))});
  for (int level = 0; level < ragged_rank; ++level) {
    const int64_t n = level == 0 && dims[0] != kUnknownDim ? dims[0] + 1 : kUnknownDim;
    children.emplace_back(TensorSpec{DType::kInt64, Shape({n})});
  }
  return ElementSpec::Composite(NestKind::kRagged, std::move(children), std::move(dims));
}

ElementSpec CompositeSpecOf(const Element& node) {
  const DType dtype = CompositeValues(node).leaf().dtype();
  if (node.kind() == NestKind::kSparse) return SparseTensorSpecOf(dtype, node.composite_dims());
  return RaggedTensorSpecOf(dtype, node.composite_dims(),
                            static_cast<int>(node.children().size()) - 1);
}

std::string CompositeSpecToString(const ElementSpec& node) {
  const std::string dtype = absl::StrCat("tf.", DTypeName(CompositeValues(node).leaf().dtype));
  if (node.kind() == NestKind::kSparse) {
    return absl::StrCat("SparseTensorSpec(", TensorShapeText(node.composite_dims()), ", ", dtype,
                        ")");
  }
  return absl::StrCat("RaggedTensorSpec(", TensorShapeText(node.composite_dims()), ", ", dtype,
                      ", ", RaggedRank(node), ", tf.int64)");
}

}  // namespace sluice
