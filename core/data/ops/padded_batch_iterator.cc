#include "core/data/ops/padded_batch_iterator.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/data/shape_limits.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// "(None, 5)" for a padded shape.
std::string PaddedString(const proto::PaddedShape& p) {
  return Shape(std::vector<int64_t>(p.dims().begin(), p.dims().end())).ToString();
}

// The padding scalar for each leaf (flatten order); defaults where none is given.
absl::StatusOr<std::vector<Tensor>> PaddingValues(const proto::PaddedBatchOp& op,
                                                  const std::vector<TensorSpec>& leaves) {
  const int n = op.padding_values_size();
  if (n != 0 && n != 1 && n != static_cast<int>(leaves.size())) {
    return Invalid(absl::StrCat("padding_values has ", n, " values but the element has ",
                                leaves.size(), " components"));
  }
  std::vector<Tensor> out;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (n == 0) {
      out.push_back(Tensor::Allocate(leaves[i].dtype, Shape()));  // 0 or "": a scalar
      continue;
    }
    ASSIGN_OR_RETURN(Tensor v, TensorFromProto(op.padding_values(n == 1 ? 0 : i)));
    if (v.shape().rank() != 0) {
      return Invalid(absl::StrCat("padding_values must be scalars; the value for component ", i,
                                  " has shape ", v.shape().ToString()));
    }
    if (v.dtype() != leaves[i].dtype) {
      // TF's TypeError.
      return Invalid(absl::StrCat("Invalid `padding_values`. `padding_values` values type ",
                                  DTypeName(v.dtype()), " does not match type ",
                                  DTypeName(leaves[i].dtype), " of the corresponding input "
                                  "component (component ", i, ")."));
    }
    out.push_back(std::move(v));
  }
  return out;
}

class PaddedBatchIterator : public OpIterator {
 public:
  PaddedBatchIterator(std::string label, std::unique_ptr<Iterator> input,
                      proto::PaddedBatchOp op)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        op_(std::move(op)),
        bulk_(input_ != nullptr && input_->SupportsBlocks() && BulkPathsEnabled()) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (bulk_) return GetNextFromBlocks(out, end_of_sequence);
    // As batch (core/data/ops/batch_iterator.cc): the gathered elements count against the element
    // limit as they come, the padded batch (whose size the padded shapes may make much larger)
    // before it is allocated.
    MemoryReservation held(label());
    const std::string describe = absl::StrCat("a padded batch of ", op_.batch_size(), " elements");
    std::vector<Element> elements;
    while (static_cast<int64_t>(elements.size()) < op_.batch_size()) {
      Element e;
      bool end = false;
      absl::Status s = input_->GetNext(&e, &end);
      if (!s.ok()) return s;
      if (end) break;
      RETURN_IF_ERROR(held.GrowElement(ElementFootprint(e), ElementOverhead(e), describe));
      elements.push_back(std::move(e));
    }
    if (elements.empty() ||
        (op_.drop_remainder() && static_cast<int64_t>(elements.size()) < op_.batch_size())) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    held.Clear();  // from here the padded batch is what must fit in one element
    return Pad(elements, &held, out);
  }

 private:
  // The bulk path (core/data/iterator.h). When every element of the batch has the shape its
  // component is padded to (no padding is needed), the blocks are concatenated, one copy per
  // component; otherwise they are split into their elements (views, no copy) for Pad. Either
  // way the result is the per-element path's, errors included.
  absl::Status GetNextFromBlocks(Element* out, bool* end_of_sequence) {
    MemoryReservation held(label());
    const std::string describe = absl::StrCat("a padded batch of ", op_.batch_size(), " elements");
    std::vector<Element> blocks;
    int64_t gathered = 0;
    while (gathered < op_.batch_size()) {
      Element block;
      int64_t n = 0;
      bool end = false;
      absl::Status s = input_->GetNextBlock(op_.batch_size() - gathered, &block, &n, &end);
      // The block's size is this op's request: a block refused as too large says so.
      if (absl::IsResourceExhausted(s) && !IsElementError(s)) {
        return OpError(s.code(), absl::StrCat(describe, ": ", s.message()));
      }
      if (!s.ok()) return s;
      if (end) break;
      RETURN_IF_ERROR(
          held.GrowElement(ElementFootprint(block), ElementOverhead(block), describe));
      blocks.push_back(std::move(block));
      gathered += n;
    }
    if (gathered == 0 || (op_.drop_remainder() && gathered < op_.batch_size())) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    held.Clear();  // from here the padded batch is what must fit in one element
    if (NeedsNoPadding(blocks)) {
      std::vector<std::vector<Tensor>> columns;
      for (const Element& b : blocks) {
        std::vector<Tensor> leaves = b.Flatten();
        if (columns.empty()) columns.resize(leaves.size());
        for (size_t i = 0; i < leaves.size(); ++i) columns[i].push_back(std::move(leaves[i]));
      }
      std::vector<TensorSpec> specs;
      for (const auto& c : columns) specs.push_back(TensorSpec{c[0].dtype(), c[0].shape().DropFirst()});
      absl::StatusOr<std::vector<Tensor>> pads = PaddingValues(op_, specs);
      if (!pads.ok()) return InvalidArgument(pads.status().message());
      std::vector<Tensor> batched;
      for (size_t i = 0; i < columns.size(); ++i) {
        // Checked, not charged: the allocator charges the copy.
        RETURN_IF_ERROR(held.GrowElement(
            AllocationFootprint(columns[i][0].dtype(), gathered * specs[i].shape.num_elements()),
            /*charge=*/0,
            absl::StrCat("component ", i, " padded to ", TfShapeString(specs[i].shape), " for ",
                         gathered, " elements")));
        absl::StatusOr<Tensor> t = Tensor::Concat(columns[i], label());
        if (absl::IsResourceExhausted(t.status())) return t.status();
        if (!t.ok()) return InvalidArgument(t.status().message());
        batched.push_back(*std::move(t));
      }
      auto packed = Element::Pack(blocks[0], std::move(batched));
      if (!packed.ok()) return InvalidArgument(packed.status().message());
      *out = *std::move(packed);
      return absl::OkStatus();
    }
    std::vector<Element> elements;
    elements.reserve(static_cast<size_t>(gathered));
    for (const Element& b : blocks) {
      const std::vector<Tensor> leaves = b.Flatten();
      const int64_t rows = leaves.empty() ? 0 : leaves[0].shape().dim(0);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<Tensor> row;
        row.reserve(leaves.size());
        for (const Tensor& t : leaves) row.push_back(t.Index(r));
        auto e = Element::Pack(b, std::move(row));
        if (!e.ok()) return InvalidArgument(e.status().message());
        elements.push_back(*std::move(e));
      }
    }
    return Pad(elements, &held, out);
  }

  // True if all blocks have one structure, and per component one dtype and one element shape,
  // which is also the shape the component is padded to.
  bool NeedsNoPadding(const std::vector<Element>& blocks) const {
    std::vector<Tensor> first = blocks[0].Flatten();
    for (size_t b = 1; b < blocks.size(); ++b) {
      if (!blocks[b].SameStructure(blocks[0])) return false;
      std::vector<Tensor> leaves = blocks[b].Flatten();
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (leaves[i].dtype() != first[i].dtype() ||
            leaves[i].shape().DropFirst() != first[i].shape().DropFirst()) {
          return false;
        }
      }
    }
    if (op_.padded_shapes_size() == 0) return true;  // padded to the longest: the shape itself
    for (size_t i = 0; i < first.size(); ++i) {
      const Shape shape = first[i].shape().DropFirst();
      const proto::PaddedShape& p = op_.padded_shapes(static_cast<int>(i));
      if (p.dims_size() != shape.rank()) return false;
      for (int d = 0; d < shape.rank(); ++d) {
        if (p.dims(d) >= 0 && p.dims(d) != shape.dim(d)) return false;
      }
    }
    return true;
  }

  absl::Status Pad(const std::vector<Element>& elements, MemoryReservation* held,
                   Element* out) const {
    const size_t n = elements.size();
    std::vector<std::vector<Tensor>> columns;
    for (size_t e = 0; e < n; ++e) {
      std::vector<Tensor> leaves = elements[e].Flatten();
      if (e == 0) columns.resize(leaves.size());
      if (leaves.size() != columns.size() || !elements[e].SameStructure(elements[0])) {
        return InvalidArgument(absl::StrCat("Cannot batch elements with different structures: ",
                                            "element 0 and element ", e));
      }
      for (size_t i = 0; i < leaves.size(); ++i) columns[i].push_back(std::move(leaves[i]));
    }
    std::vector<TensorSpec> specs;
    for (const auto& c : columns) specs.push_back(TensorSpec{c[0].dtype(), c[0].shape()});
    absl::StatusOr<std::vector<Tensor>> pads = PaddingValues(op_, specs);
    if (!pads.ok()) return InvalidArgument(pads.status().message());
    std::vector<Tensor> batched;
    for (size_t i = 0; i < columns.size(); ++i) {
      absl::StatusOr<Tensor> t = PadColumn(i, columns[i], (*pads)[i], held);
      if (!t.ok()) return t.status();
      batched.push_back(*std::move(t));
    }
    auto packed = Element::Pack(elements[0], std::move(batched));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> PadColumn(size_t index, const std::vector<Tensor>& col,
                                   const Tensor& pad, MemoryReservation* held) const {
    const DType dtype = col[0].dtype();
    const int rank = col[0].shape().rank();
    std::vector<int64_t> target(rank, 0);
    for (size_t e = 0; e < col.size(); ++e) {
      const Tensor& t = col[e];
      if (t.dtype() != dtype || t.shape().rank() != rank) {
        return InvalidArgument(absl::StrCat(
            "Cannot batch tensors with different dtypes or ranks in component ", index,
            ". First element had ", DTypeName(dtype), " ", TfShapeString(col[0].shape()),
            " and element ", e, " had ", DTypeName(t.dtype()), " ", TfShapeString(t.shape())));
      }
      for (int d = 0; d < rank; ++d) target[d] = std::max(target[d], t.shape().dim(d));
    }
    if (op_.padded_shapes_size() > 0) {
      const proto::PaddedShape& p = op_.padded_shapes(static_cast<int>(index));
      for (int d = 0; d < rank; ++d) {
        if (p.dims(d) < 0) continue;
        if (p.dims(d) < target[d]) {
          return OpError(absl::StatusCode::kDataLoss,
                         absl::StrCat("Attempted to pad to a smaller size than the input "
                                      "element. (component ", index, ", dimension ", d,
                                      ": padded size ", p.dims(d), ", element size ", target[d],
                                      ")"));
        }
        target[d] = p.dims(d);
      }
    }
    // The padded shapes are the client's: an impossible size is INVALID_ARGUMENT, one over the
    // element limit RESOURCE_EXHAUSTED, both before anything is allocated.
    const std::string describe = absl::StrCat("component ", index, " padded to ",
                                              TfShapeString(Shape(target)), " for ", col.size(),
                                              " elements");
    std::vector<int64_t> out_dims = target;
    out_dims.insert(out_dims.begin(), static_cast<int64_t>(col.size()));
    absl::StatusOr<int64_t> out_elements = CheckedNumElements(out_dims, describe);
    if (!out_elements.ok()) return InvalidArgument(out_elements.status().message());
    // Checked, not charged: the allocator charges the padded copy.
    RETURN_IF_ERROR(
        held->GrowElement(AllocationFootprint(dtype, *out_elements), /*charge=*/0, describe));
    Shape out_shape = Shape(target).Prepend(static_cast<int64_t>(col.size()));
    ASSIGN_OR_RETURN(Tensor out, Tensor::TryAllocate(dtype, out_shape, label()));
    const int64_t per_element = Shape(target).num_elements();
    const bool strings = dtype == DType::kString;
    const size_t width = DTypeSize(dtype);
    // Fill with the padding value.
    if (strings) {
      if (!pad.string_at(0).empty()) {
        for (int64_t i = 0; i < out.num_elements(); ++i) *out.mutable_string(i) = pad.string_at(0);
      }
    } else {
      bool zero = true;
      const char* pv = static_cast<const char*>(pad.raw_data());
      for (size_t b = 0; b < width; ++b) zero = zero && pv[b] == 0;
      if (!zero) {
        char* dst = static_cast<char*>(out.mutable_raw_data());
        for (int64_t i = 0; i < out.num_elements(); ++i) std::memcpy(dst + i * width, pv, width);
      }
    }
    // Copy each element into its corner, one run of the last dimension at a time.
    std::vector<int64_t> target_strides(rank, 1);
    for (int d = rank - 2; d >= 0; --d) target_strides[d] = target_strides[d + 1] * target[d + 1];
    for (size_t e = 0; e < col.size(); ++e) {
      const Tensor& t = col[e];
      if (t.num_elements() == 0) continue;
      const int64_t base = static_cast<int64_t>(e) * per_element;
      const int64_t run = rank == 0 ? 1 : t.shape().dim(rank - 1);
      const int64_t runs = t.num_elements() / run;
      std::vector<int64_t> idx(std::max(rank - 1, 0), 0);  // over the leading dimensions
      for (int64_t r = 0; r < runs; ++r) {
        int64_t dst = base;
        for (int d = 0; d + 1 < rank; ++d) dst += idx[d] * target_strides[d];
        const int64_t src = r * run;
        if (strings) {
          for (int64_t k = 0; k < run; ++k) *out.mutable_string(dst + k) = t.string_at(src + k);
        } else {
          std::memcpy(static_cast<char*>(out.mutable_raw_data()) + dst * width,
                      static_cast<const char*>(t.raw_data()) + src * width,
                      static_cast<size_t>(run) * width);
        }
        for (int d = rank - 2; d >= 0; --d) {  // odometer
          if (++idx[d] < t.shape().dim(d)) break;
          idx[d] = 0;
        }
      }
    }
    return out;
  }

  std::unique_ptr<Iterator> input_;
  const proto::PaddedBatchOp op_;
  const bool bulk_;  // pulls blocks (core/data/iterator.h) instead of elements
};

}  // namespace

absl::StatusOr<ElementSpec> InferPaddedBatchSpec(const proto::PaddedBatchOp& op,
                                                 const ElementSpec& input) {
  if (op.batch_size() <= 0) {
    return Invalid(absl::StrCat("batch_size must be positive, got ", op.batch_size()));
  }
  std::vector<TensorSpec> leaves = input.Flatten();
  if (op.padded_shapes_size() != 0 &&
      op.padded_shapes_size() != static_cast<int>(leaves.size())) {
    return Invalid(absl::StrCat("padded_shapes has ", op.padded_shapes_size(),
                                " shapes but the element has ", leaves.size(), " components"));
  }
  RETURN_IF_ERROR(PaddingValues(op, leaves).status());
  std::vector<TensorSpec> out;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Shape& in = leaves[i].shape;
    Shape shape = in;
    if (op.padded_shapes_size() > 0) {
      const proto::PaddedShape& p = op.padded_shapes(static_cast<int>(i));
      bool ok = p.dims_size() == in.rank();
      for (int d = 0; ok && d < in.rank(); ++d) {
        if (p.dims(d) < -1) ok = false;
        if (p.dims(d) >= 0 && in.dim(d) != kUnknownDim && p.dims(d) < in.dim(d)) ok = false;
      }
      if (!ok) {
        return Invalid(absl::StrCat("The padded shape ", PaddedString(p),
                                    " is not compatible with the shape ", in.ToString(),
                                    " of the corresponding input component."));
      }
      shape = Shape(std::vector<int64_t>(p.dims().begin(), p.dims().end()));
    }
    out.push_back(TensorSpec{leaves[i].dtype,
                             shape.Prepend(op.drop_remainder() ? op.batch_size() : kUnknownDim)});
  }
  return ElementSpec::Pack(input, std::move(out));
}

std::unique_ptr<Iterator> NewPaddedBatchIterator(std::string label,
                                                 std::unique_ptr<Iterator> input,
                                                 proto::PaddedBatchOp op) {
  return std::make_unique<PaddedBatchIterator>(std::move(label), std::move(input),
                                               std::move(op));
}

}  // namespace sluice
