#include "core/data/ops/rebatch_iterator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// A zero-row tensor of `spec`'s dtype: dim 0 = 0, unknown dims 0.
Tensor EmptyPieceFromSpec(const TensorSpec& spec) {
  std::vector<int64_t> dims = spec.shape.dims();
  if (!dims.empty()) dims[0] = 0;
  for (int64_t& d : dims) {
    if (d == kUnknownDim) d = 0;
  }
  return Tensor::Allocate(spec.dtype, Shape(std::move(dims)));  // no rows: no bytes
}

class RebatchIterator : public OpIterator {
 public:
  RebatchIterator(std::string label, std::unique_ptr<Iterator> input,
                  std::vector<int64_t> batch_sizes, bool drop_remainder,
                  std::optional<ElementSpec> output_spec)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        batch_sizes_(std::move(batch_sizes)),
        drop_remainder_(drop_remainder),
        output_spec_(std::move(output_spec)) {
    for (int64_t size : batch_sizes_) {
      describe_.push_back(absl::StrCat("a piece of ", size, " rows"));
    }
  }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (input_ended_) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    const int64_t desired = batch_sizes_[next_size_];
    const std::string& describe = describe_[next_size_];
    next_size_ = (next_size_ + 1) % batch_sizes_.size();
    if (desired == 0) return EmptyPiece(out, end_of_sequence);

    // pieces[j] holds the leaves of the j-th non-empty slice of this piece. The piece is one
    // element: checked against the element limit as it grows (its slices keep their input
    // batches alive), and the structure around them charged to the process's.
    std::vector<std::vector<Tensor>> pieces;
    MemoryReservation held(label());
    int64_t gathered = 0;
    while (gathered < desired) {
      if (offset_ < 0) {
        bool end = false;
        absl::Status s = ReadInput(&end);
        if (!s.ok()) return s;
        if (end) break;
      }
      const int64_t rows = leaves_[0].shape().dim(0);
      const int64_t end_row = std::min(offset_ + desired - gathered, rows);
      if (end_row > offset_) {
        std::vector<Tensor> slices;
        slices.reserve(leaves_.size());
        int64_t footprint = 0;  // the slices with their payloads
        int64_t overhead = 0;   // the tensor objects alone: the payloads are the allocator's
        for (const Tensor& t : leaves_) {
          slices.push_back(t.Slice(offset_, end_row));
          footprint += TensorFootprint(slices.back());
          overhead += AllocationFootprint(t.dtype(), 0);
        }
        RETURN_IF_ERROR(held.GrowElement(footprint, overhead, describe));
        pieces.push_back(std::move(slices));
        gathered += end_row - offset_;
      }
      offset_ = end_row;
      if (offset_ == rows) {
        offset_ = -1;
        ForgetBytes();
      }
    }
    if (gathered == 0 || (drop_remainder_ && gathered < desired)) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    std::vector<Tensor> result;
    if (pieces.size() == 1) {
      result = std::move(pieces[0]);
    } else {
      result.reserve(leaves_.size());
      for (size_t i = 0; i < leaves_.size(); ++i) {
        std::vector<Tensor> parts;
        parts.reserve(pieces.size());
        for (const auto& p : pieces) parts.push_back(p[i]);
        auto t = Tensor::Concat(parts, label());
        if (absl::IsResourceExhausted(t.status())) return t.status();
        if (!t.ok()) {
          return InvalidArgument(absl::StrCat("cannot join a piece across input batches in "
                                              "component ", i, ": ", t.status().message()));
        }
        result.push_back(*std::move(t));
      }
    }
    return Pack(std::move(result), out);
  }

 private:
  // Reads the next input batch into structure_/leaves_ and sets offset_ = 0, or sets *end.
  absl::Status ReadInput(bool* end) {
    Element e;
    absl::Status s = input_->GetNext(&e, end);
    if (!s.ok()) return s;
    if (*end) {
      input_ended_ = true;
      return absl::OkStatus();
    }
    std::vector<Tensor> leaves = e.Flatten();
    if (leaves.empty()) return InvalidArgument("cannot rebatch an element with no tensors");
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].shape().rank() == 0) {
        return InvalidArgument(absl::StrCat(
            "Input element must have a non-scalar value in each component. Component ", i,
            " is a scalar; is the input batched?"));
      }
      if (leaves[i].shape().dim(0) != leaves[0].shape().dim(0)) {
        return InvalidArgument(absl::StrCat(
            "Input element must have the same batch size in each component. Component 0 had "
            "size ",
            leaves[0].shape().dim(0), " but component ", i, " had size ",
            leaves[i].shape().dim(0), "."));
      }
    }
    structure_ = std::move(e);
    leaves_ = std::move(leaves);
    offset_ = 0;
    return absl::OkStatus();
  }

  // The current batch is used up: keep its shapes (for empty pieces), not its bytes, so that
  // the pieces handed out are the only references to them (a consumer may then change them in
  // place without a copy: python/src/py_element.h, UnsharedStep).
  void ForgetBytes() {
    std::vector<Tensor> shapes;
    shapes.reserve(leaves_.size());
    for (const Tensor& t : leaves_) shapes.push_back(EmptyPieceFromSpec({t.dtype(), t.shape()}));
    auto packed = Element::Pack(structure_, shapes);
    if (!packed.ok()) return;  // the same structure: never happens; keep the batch then
    structure_ = *std::move(packed);
    leaves_ = std::move(shapes);
  }

  absl::Status EmptyPiece(Element* out, bool* end_of_sequence) {
    if (output_spec_.has_value()) {
      *out = output_spec_->Map(EmptyPieceFromSpec);
      return absl::OkStatus();
    }
    if (leaves_.empty()) {
      // Nothing seen yet: read ahead one batch for the shapes; it stays the current batch.
      bool end = false;
      absl::Status s = ReadInput(&end);
      if (!s.ok()) return s;
      if (end) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
    }
    std::vector<Tensor> empty;
    empty.reserve(leaves_.size());
    for (const Tensor& t : leaves_) empty.push_back(t.Slice(0, 0));
    return Pack(std::move(empty), out);
  }

  absl::Status Pack(std::vector<Tensor> leaves, Element* out) const {
    auto packed = Element::Pack(structure_, std::move(leaves));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

  std::unique_ptr<Iterator> input_;
  const std::vector<int64_t> batch_sizes_;
  const bool drop_remainder_;
  const std::optional<ElementSpec> output_spec_;
  std::vector<std::string> describe_;  // per batch size: "a piece of N rows", for errors
  size_t next_size_ = 0;
  Element structure_;           // the current (or last) input batch
  std::vector<Tensor> leaves_;  // its leaves; empty before the first one
  int64_t offset_ = -1;         // next row of the current batch; -1: read another
  bool input_ended_ = false;
};

class LegacyRebatchIterator : public OpIterator {
 public:
  LegacyRebatchIterator(std::string label, std::unique_ptr<Iterator> input, int64_t num_replicas)
      : OpIterator(std::move(label)), input_(std::move(input)), num_replicas_(num_replicas) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (slice_ == 0) {
      Element e;
      absl::Status s = input_->GetNext(&e, end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      std::vector<Tensor> leaves = e.Flatten();
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (leaves[i].shape().rank() == 0) {
          return InvalidArgument(absl::StrCat(
              "Cannot rebatch dataset: All components must have at least one dimension. "
              "Perhaps your input dataset is not batched? Component ", i, " is scalar."));
        }
      }
      structure_ = std::move(e);
      leaves_ = std::move(leaves);
    }
    std::vector<Tensor> piece;
    piece.reserve(leaves_.size());
    for (const Tensor& t : leaves_) {
      const int64_t rows = t.shape().dim(0);
      const int64_t interval = (rows + num_replicas_ - 1) / num_replicas_;
      const int64_t end = std::min(interval * (slice_ + 1), rows);
      const int64_t start = std::min(interval * slice_, end);
      piece.push_back(t.Slice(start, end));
    }
    slice_ = (slice_ + 1) % num_replicas_;
    auto packed = Element::Pack(structure_, std::move(piece));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    if (slice_ == 0) {  // the batch is used up: its pieces are the only references to it
      structure_ = Element();
      leaves_.clear();
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  const int64_t num_replicas_;
  int64_t slice_ = 0;  // the piece of the current batch to yield next
  Element structure_;
  std::vector<Tensor> leaves_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> NewRebatchIterator(
    std::string label, std::unique_ptr<Iterator> input, std::vector<int64_t> batch_sizes,
    bool drop_remainder, std::optional<ElementSpec> output_spec) {
  if (batch_sizes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": batch_sizes must not be empty"));
  }
  bool any_positive = false;
  for (size_t i = 0; i < batch_sizes.size(); ++i) {
    if (batch_sizes[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": batch_sizes must be non-negative, got ", batch_sizes[i], " at position ", i));
    }
    any_positive |= batch_sizes[i] > 0;
  }
  if (!any_positive) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": batch_sizes must contain a positive entry"));
  }
  return std::unique_ptr<Iterator>(new RebatchIterator(std::move(label), std::move(input),
                                                       std::move(batch_sizes), drop_remainder,
                                                       std::move(output_spec)));
}

absl::StatusOr<std::unique_ptr<Iterator>> NewLegacyRebatchIterator(std::string label,
                                                                   std::unique_ptr<Iterator> input,
                                                                   int64_t num_replicas) {
  if (num_replicas <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": num_replicas must be positive, got ", num_replicas));
  }
  return std::unique_ptr<Iterator>(
      new LegacyRebatchIterator(std::move(label), std::move(input), num_replicas));
}

}  // namespace sluice
