#include "core/data/ops/rebatch_iterator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/tensor/row_pieces.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// The memory of a piece: its tensors with their payloads (`footprint`) and the tensor objects
// alone (`overhead`: the payloads are the allocator's).
void AddFootprint(const Element& node, int64_t* footprint, int64_t* overhead) {
  for (const Tensor& t : node.Flatten()) {
    *footprint += TensorFootprint(t);
    *overhead += AllocationFootprint(t.dtype(), 0);
  }
}

// The row nodes of `e` (leaves and composites, row_pieces.h), copied.
std::vector<Element> RowNodeValues(const Element& e) {
  std::vector<Element> nodes;
  for (const Element* n : RowNodes(e)) nodes.push_back(*n);
  return nodes;
}

// What a node is called in errors: "SparseTensor component 1", "component 0".
std::string ComponentName(const Element& node, size_t i) {
  if (node.kind() == NestKind::kSparse) return absl::StrCat("SparseTensor component ", i);
  if (node.kind() == NestKind::kRagged) return absl::StrCat("RaggedTensor component ", i);
  return absl::StrCat("component ", i);
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

    // pieces[j] holds the row nodes of the j-th non-empty slice of this piece. The piece is one
    // element: checked against the element limit as it grows (its slices keep their input
    // batches alive), and the structure around them charged to the process's.
    std::vector<std::vector<Element>> pieces;
    MemoryReservation held(label());
    int64_t gathered = 0;
    while (gathered < desired) {
      if (offset_ < 0) {
        bool end = false;
        absl::Status s = ReadInput(&end);
        if (!s.ok()) return s;
        if (end) break;
      }
      const int64_t rows = RowCount(nodes_[0]);
      const int64_t end_row = std::min(offset_ + desired - gathered, rows);
      if (end_row > offset_) {
        std::vector<Element> slices;
        slices.reserve(nodes_.size());
        int64_t footprint = 0;
        int64_t overhead = 0;
        for (const Element& node : nodes_) {
          absl::StatusOr<Element> slice = SliceRows(node, offset_, end_row, label());
          if (!slice.ok()) return slice.status();
          AddFootprint(*slice, &footprint, &overhead);
          slices.push_back(*std::move(slice));
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
    std::vector<Element> result;
    if (pieces.size() == 1) {
      result = std::move(pieces[0]);
    } else {
      result.reserve(nodes_.size());
      for (size_t i = 0; i < nodes_.size(); ++i) {
        std::vector<Element> parts;
        parts.reserve(pieces.size());
        for (const auto& p : pieces) parts.push_back(p[i]);
        absl::StatusOr<Element> joined = ConcatRows(parts, label());
        if (absl::IsResourceExhausted(joined.status())) return joined.status();
        if (!joined.ok()) {
          return InvalidArgument(absl::StrCat("cannot join a piece across input batches in ",
                                              ComponentName(nodes_[i], i), ": ",
                                              joined.status().message()));
        }
        result.push_back(*std::move(joined));
      }
    }
    return Pack(std::move(result), out);
  }

 private:
  // Reads the next input batch into structure_/nodes_ and sets offset_ = 0, or sets *end.
  absl::Status ReadInput(bool* end) {
    Element e;
    absl::Status s = input_->GetNext(&e, end);
    if (!s.ok()) return s;
    if (*end) {
      input_ended_ = true;
      return absl::OkStatus();
    }
    std::vector<Element> nodes = RowNodeValues(e);
    if (nodes.empty()) return InvalidArgument("cannot rebatch an element with no tensors");
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (RowNodeRank(nodes[i]) == 0) {
        return InvalidArgument(absl::StrCat(
            "Input element must have a non-scalar value in each component. Component ", i,
            " is a scalar; is the input batched?"));
      }
      if (RowCount(nodes[i]) != RowCount(nodes[0])) {
        return InvalidArgument(absl::StrCat(
            "Input element must have the same batch size in each component. Component 0 had "
            "size ",
            RowCount(nodes[0]), " but component ", i, " had size ", RowCount(nodes[i]), "."));
      }
    }
    structure_ = std::move(e);
    nodes_ = std::move(nodes);
    offset_ = 0;
    return absl::OkStatus();
  }

  // The current batch is used up: keep its shapes (for empty pieces), not its bytes, so that
  // the pieces handed out are the only references to them (a consumer may then change them in
  // place without a copy: python/src/py_element.h, UnsharedStep).
  void ForgetBytes() {
    std::vector<Element> shapes;
    shapes.reserve(nodes_.size());
    for (const Element& node : nodes_) shapes.push_back(EmptyRows(SpecOf(node), true));
    auto packed = PackRowNodes(structure_, shapes);
    if (!packed.ok()) return;  // the same structure: never happens; keep the batch then
    structure_ = *std::move(packed);
    nodes_ = std::move(shapes);
  }

  absl::Status EmptyPiece(Element* out, bool* end_of_sequence) {
    if (output_spec_.has_value()) {
      *out = EmptyRows(*output_spec_, /*zero_rows=*/true);
      return absl::OkStatus();
    }
    if (nodes_.empty()) {
      // Nothing seen yet: read ahead one batch for the shapes; it stays the current batch.
      bool end = false;
      absl::Status s = ReadInput(&end);
      if (!s.ok()) return s;
      if (end) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
    }
    std::vector<Element> empty;
    empty.reserve(nodes_.size());
    for (const Element& node : nodes_) {
      absl::StatusOr<Element> none = SliceRows(node, 0, 0, label());
      if (!none.ok()) return none.status();
      empty.push_back(*std::move(none));
    }
    return Pack(std::move(empty), out);
  }

  absl::Status Pack(std::vector<Element> nodes, Element* out) const {
    auto packed = PackRowNodes(structure_, std::move(nodes));
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
  std::vector<Element> nodes_;  // its row nodes (row_pieces.h); empty before the first one
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
      std::vector<Element> nodes = RowNodeValues(e);
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (RowNodeRank(nodes[i]) == 0) {
          return InvalidArgument(absl::StrCat(
              "Cannot rebatch dataset: All components must have at least one dimension. "
              "Perhaps your input dataset is not batched? Component ", i, " is scalar."));
        }
      }
      structure_ = std::move(e);
      nodes_ = std::move(nodes);
    }
    std::vector<Element> piece;
    piece.reserve(nodes_.size());
    for (const Element& node : nodes_) {
      const int64_t rows = RowCount(node);
      const int64_t interval = (rows + num_replicas_ - 1) / num_replicas_;
      const int64_t end = std::min(interval * (slice_ + 1), rows);
      const int64_t start = std::min(interval * slice_, end);
      absl::StatusOr<Element> slice = SliceRows(node, start, end, label());
      if (!slice.ok()) return slice.status();
      piece.push_back(*std::move(slice));
    }
    slice_ = (slice_ + 1) % num_replicas_;
    auto packed = PackRowNodes(structure_, std::move(piece));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    if (slice_ == 0) {  // the batch is used up: its pieces are the only references to it
      structure_ = Element();
      nodes_.clear();
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  const int64_t num_replicas_;
  int64_t slice_ = 0;  // the piece of the current batch to yield next
  Element structure_;
  std::vector<Element> nodes_;
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
