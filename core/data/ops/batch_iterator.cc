#include "core/data/ops/batch_iterator.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/batch_destinations.h"
#include "core/data/ops/output_slot.h"
#include "core/tensor/composite_rows.h"
#include "core/tensor/row_pieces.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class BatchIterator : public OpIterator {
 public:
  BatchIterator(std::string label, std::unique_ptr<Iterator> input, int64_t batch_size,
                bool drop_remainder)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder),
        bulk_(input_ != nullptr && input_->SupportsBlocks() && BulkPathsEnabled()),
        slots_(input_.get(), batch_size, this->label()),
        destinations_(bulk_ ? std::make_shared<BatchDestinations>(batch_size, this->label())
                            : nullptr) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (bulk_) return GetNextFromBlocks(out, end_of_sequence);
    // The elements gathered and the batch stacked from them are both held at the end: the
    // batch is checked against the element limit as it grows, and both against the process's
    // (the payloads by the allocator, the structure around the gathered ones here).
    MemoryReservation held(label());
    const std::string describe = absl::StrCat("a batch of ", batch_size_, " elements");
    // The vector's own slots are charged as it grows (a batch of 10^9 elements would otherwise
    // double it outside the budget until the element limit stops the batch).
    std::vector<Element> elements;
    const int64_t initial = std::min<int64_t>(batch_size_, 1 << 10);
    RETURN_IF_ERROR(held.Grow(initial * static_cast<int64_t>(sizeof(Element))));
    elements.reserve(static_cast<size_t>(initial));
    slots_.BeginBatch();
    while (static_cast<int64_t>(elements.size()) < batch_size_) {
      Element e;
      bool end = false;
      absl::Status s;
      {
        // The map below may write the element's largest leaf in place (output_slot.h).
        const ScopedSlotOffer offer = slots_.Offer(static_cast<int64_t>(elements.size()));
        s = input_->GetNext(&e, &end);
      }
      if (!s.ok()) return s;
      if (end) break;
      RETURN_IF_ERROR(held.GrowElement(ElementFootprint(e), ElementOverhead(e), describe));
      if (elements.empty()) slots_.Learn(e);
      // Its row copied now, while the map below goes on (output_slot.h).
      slots_.Place(static_cast<int64_t>(elements.size()), &e);
      if (elements.size() == elements.capacity()) {
        const int64_t more = std::min<int64_t>(static_cast<int64_t>(elements.capacity()),
                                               batch_size_ - static_cast<int64_t>(elements.size()));
        RETURN_IF_ERROR(held.Grow(more * static_cast<int64_t>(sizeof(Element))));
        elements.reserve(elements.capacity() + static_cast<size_t>(more));
      }
      elements.push_back(std::move(e));
    }
    if (elements.empty() ||
        (drop_remainder_ && static_cast<int64_t>(elements.size()) < batch_size_)) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    if (elements[0].HasComposite()) {  // SparseTensor / RaggedTensor rows: composite_rows.h
      absl::StatusOr<Element> stacked = StackRows(elements, label());
      if (!stacked.ok()) return CopyError(stacked.status());
      *out = *std::move(stacked);
      return absl::OkStatus();
    }
    return Stack(elements, out);  // the stacked copy is the allocator's to refuse
  }

 private:
  // The bulk path (core/data/iterator.h): whole blocks of consecutive elements, each already
  // stacked, so a batch is at most one copy per component (none when one block fills it).
  // Gives what the per-element path gives, errors included: an error drops the elements
  // gathered for the batch, as there.
  // A parallel map right below writes its rows straight into the batch when it can
  // (batch_destinations.h): a full batch of such rows is handed out with no copy.
  absl::Status GetNextFromBlocks(Element* out, bool* end_of_sequence) {
    MemoryReservation held(label());
    const std::string describe = absl::StrCat("a batch of ", batch_size_, " elements");
    std::vector<Element> blocks;
    int64_t gathered = 0;
    int64_t start = -1;  // the map's position of the batch's first row, when it reports one
    while (gathered < batch_size_) {
      Element block;
      int64_t n = 0;
      bool end = false;
      absl::Status s;
      {
        const ScopedSlotOffer offer(input_.get(), OutputSlot{Tensor(), Tensor(), 0, destinations_});
        s = input_->GetNextBlock(batch_size_ - gathered, &block, &n, &end);
      }
      // The block's size is this op's request: a block refused as too large says so.
      if (absl::IsResourceExhausted(s) && !IsElementError(s)) {
        return OpError(describe, s);
      }
      if (!s.ok()) return s;
      if (end) break;
      if (blocks.empty()) {
        destinations_->Learn(block);
        start = destinations_->StartBatch();
      }
      RETURN_IF_ERROR(
          held.GrowElement(ElementFootprint(block), ElementOverhead(block), describe));
      blocks.push_back(std::move(block));
      gathered += n;
    }
    if (gathered == 0 || (drop_remainder_ && gathered < batch_size_)) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    if (gathered == batch_size_ && start >= 0) {
      if (std::optional<Element> in_place = destinations_->Assemble(start, blocks)) {
        *out = *std::move(in_place);
        return absl::OkStatus();
      }
    }
    // A partial batch is copied when rows may have been written in place: blocks dropped by
    // an error could still be writing other rows of the memory its rows are in.
    if (blocks.size() == 1 && (gathered == batch_size_ || !destinations_->fusing())) {
      *out = std::move(blocks[0]);
      return absl::OkStatus();
    }
    return ConcatBlocks(std::move(blocks), out);  // the copy is the allocator's to refuse
  }

  // Blocks of one input share their structure and dtypes; their element shapes may differ
  // from block to block, which is the per-element path's shape error, worded as there.
  // Consumes the blocks, so that strings no other tensor holds are moved, not copied.
  absl::Status ConcatBlocks(std::vector<Element> blocks, Element* out) const {
    if (blocks[0].HasComposite()) return ConcatCompositeBlocks(std::move(blocks), out);
    const Nest<int> structure = blocks[0].Map([](const Tensor&) { return 0; });
    std::vector<std::vector<Tensor>> columns;  // columns[leaf][block]
    int64_t first_row = 0;                      // of the current block, in the batch
    for (size_t b = 0; b < blocks.size(); ++b) {
      std::vector<Tensor> leaves = blocks[b].Flatten();
      if (b == 0) {
        columns.resize(leaves.size());
        for (auto& c : columns) c.reserve(blocks.size());
      } else if (leaves.size() != columns.size() || !blocks[b].SameStructure(blocks[0])) {
        return InvalidArgument(absl::StrCat(
            "Cannot batch elements with different structures: element 0 has ", columns.size(),
            " components and element ", first_row, " has ", leaves.size()));
      }
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (b > 0) {
          const Tensor& first = columns[i][0];
          if (leaves[i].shape().DropFirst() != first.shape().DropFirst()) {
            return InvalidArgument(absl::StrCat(
                "Cannot batch tensors with different shapes in component ", i,
                ". First element had shape ", TfShapeString(first.shape().DropFirst()),
                " and element ", first_row, " had shape ",
                TfShapeString(leaves[i].shape().DropFirst()), "."));
          }
          if (leaves[i].dtype() != first.dtype()) {
            return InvalidArgument(absl::StrCat(
                "Cannot batch tensors with different dtypes in component ", i,
                ". First element had dtype ", DTypeName(first.dtype()), " and element ",
                first_row, " had dtype ", DTypeName(leaves[i].dtype()), "."));
          }
        }
        columns[i].push_back(std::move(leaves[i]));
      }
      first_row += columns.empty() ? 0 : columns[0].back().shape().dim(0);
    }
    blocks.clear();
    std::vector<Tensor> batched;
    batched.reserve(columns.size());
    for (std::vector<Tensor>& col : columns) {
      auto t = Tensor::ConcatConsuming(std::move(col), label());
      if (!t.ok()) return CopyError(t.status());
      batched.push_back(*std::move(t));
    }
    auto packed = Element::Pack(structure, std::move(batched));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

  // Blocks holding SparseTensor / RaggedTensor components: each component's rows joined as
  // row pieces (core/tensor/row_pieces.h), dense ones by Tensor::Concat, as stacking the
  // blocks' elements would give.
  absl::Status ConcatCompositeBlocks(std::vector<Element> blocks, Element* out) const {
    for (size_t b = 1; b < blocks.size(); ++b) {
      if (!blocks[b].SameStructure(blocks[0])) {
        return InvalidArgument("Cannot batch elements with different structures");
      }
    }
    // A block that is one composite (a ragged_batch of rows, a batch of sparse rows) joins as
    // it is; the nodes of a structure are moved out of the blocks, never copied.
    if (blocks[0].is_composite()) return JoinedOrCopyError(ConcatRows(blocks, label()), out);
    std::vector<std::vector<Element>> columns;  // columns[node][block]
    for (Element& block : blocks) {
      std::vector<Element> nodes = TakeRowNodes(&block);
      columns.resize(nodes.size());
      for (size_t i = 0; i < nodes.size(); ++i) columns[i].push_back(std::move(nodes[i]));
    }
    std::vector<Element> joined;
    joined.reserve(columns.size());
    for (const std::vector<Element>& column : columns) {
      absl::StatusOr<Element> j = ConcatRows(column, label());
      if (!j.ok()) return CopyError(j.status());
      joined.push_back(*std::move(j));
    }
    auto packed = PackRowNodes(blocks[0], std::move(joined));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

  absl::Status JoinedOrCopyError(absl::StatusOr<Element> joined, Element* out) const {
    if (!joined.ok()) return CopyError(joined.status());
    *out = *std::move(joined);
    return absl::OkStatus();
  }

  absl::Status Stack(const std::vector<Element>& elements, Element* out) {
    const size_t n = elements.size();
    std::vector<std::vector<Tensor>> columns;  // columns[leaf][element]
    for (size_t e = 0; e < n; ++e) {
      std::vector<Tensor> leaves = elements[e].Flatten();
      if (e == 0) {
        columns.resize(leaves.size());
        for (auto& c : columns) c.reserve(n);
      } else if (leaves.size() != columns.size() || !elements[e].SameStructure(elements[0])) {
        return InvalidArgument(absl::StrCat(
            "Cannot batch elements with different structures: element 0 has ", columns.size(),
            " components and element ", e, " has ", leaves.size()));
      }
      for (size_t i = 0; i < leaves.size(); ++i) columns[i].push_back(std::move(leaves[i]));
    }
    std::vector<Tensor> stacked(columns.size());
    // The slot leaf last: the other leaves may view the rows it overwrites.
    std::vector<size_t> order;
    for (size_t i = 0; i < columns.size(); ++i) {
      if (static_cast<int>(i) != slots_.leaf()) order.push_back(i);
    }
    if (slots_.leaf() >= 0 && slots_.leaf() < static_cast<int>(columns.size())) {
      order.push_back(static_cast<size_t>(slots_.leaf()));
    }
    for (size_t i : order) {
      const std::vector<Tensor>& col = columns[i];
      for (size_t e = 1; e < n; ++e) {
        if (col[e].shape() != col[0].shape()) {
          return InvalidArgument(absl::StrCat(
              "Cannot batch tensors with different shapes in component ", i,
              ". First element had shape ", TfShapeString(col[0].shape()), " and element ", e,
              " had shape ", TfShapeString(col[e].shape()), "."));
        }
        if (col[e].dtype() != col[0].dtype()) {
          return InvalidArgument(absl::StrCat(
              "Cannot batch tensors with different dtypes in component ", i,
              ". First element had dtype ", DTypeName(col[0].dtype()), " and element ", e,
              " had dtype ", DTypeName(col[e].dtype()), "."));
        }
      }
      if (std::optional<Tensor> in_place = slots_.Stacked(static_cast<int>(i), col)) {
        stacked[i] = *std::move(in_place);
        continue;
      }
      auto t = Tensor::Stack(col, label());
      if (!t.ok()) return CopyError(t.status());
      stacked[i] = *std::move(t);
    }
    auto packed = Element::Pack(elements[0], std::move(stacked));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

  // A failed stack or concatenation: a refused allocation (RESOURCE_EXHAUSTED, already naming
  // this op) as it is, anything else as this op's INVALID_ARGUMENT.
  absl::Status CopyError(const absl::Status& s) const {
    if (absl::IsResourceExhausted(s)) return s;
    return InvalidArgument(s.message());
  }

  std::unique_ptr<Iterator> input_;
  const int64_t batch_size_;
  const bool drop_remainder_;
  const bool bulk_;  // pulls blocks (core/data/iterator.h) instead of elements
  BatchSlots slots_;  // the per-element path's output slots
  // The bulk path's map-and-batch fusion (null without the bulk path).
  const std::shared_ptr<BatchDestinations> destinations_;
};

class UnbatchIterator : public OpIterator {
 public:
  UnbatchIterator(std::string label, std::unique_ptr<Iterator> input)
      : OpIterator(std::move(label)), input_(std::move(input)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (next_row_ >= rows_) {
      Element e;
      bool end = false;
      absl::Status s = input_->GetNext(&e, &end);
      if (!s.ok()) return s;
      if (end) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      if (e.HasComposite()) {  // SparseTensor / RaggedTensor components: composite_rows.h
        absl::StatusOr<std::vector<Element>> rows = UnstackRows(e, label());
        if (!rows.ok()) return InvalidArgument(rows.status().message());
        composite_rows_ = *std::move(rows);
        rows_ = static_cast<int64_t>(composite_rows_.size());
        next_row_ = 0;
        continue;
      }
      composite_rows_.clear();
      std::vector<Tensor> leaves = e.Flatten();
      if (leaves.empty()) return InvalidArgument("cannot unbatch an element with no tensors");
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (leaves[i].shape().rank() == 0) {
          return InvalidArgument(absl::StrCat(
              "Input element must have a non-scalar value in each component. Component ", i,
              " is a scalar."));
        }
        if (leaves[i].shape().dim(0) != leaves[0].shape().dim(0)) {
          return InvalidArgument(absl::StrCat(
              "Input element must have the same batch size in each component. Component 0 "
              "had size ",
              leaves[0].shape().dim(0), " but component ", i, " had size ",
              leaves[i].shape().dim(0), "."));
        }
      }
      structure_ = std::move(e);
      leaves_ = std::move(leaves);
      rows_ = leaves_[0].shape().dim(0);
      next_row_ = 0;
    }
    if (!composite_rows_.empty()) {
      *out = std::move(composite_rows_[next_row_++]);
      return absl::OkStatus();
    }
    std::vector<Tensor> row;
    row.reserve(leaves_.size());
    for (const Tensor& t : leaves_) row.push_back(t.Index(next_row_));
    ++next_row_;
    auto packed = Element::Pack(structure_, std::move(row));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  Element structure_;           // the current input element
  std::vector<Tensor> leaves_;  // its leaves
  std::vector<Element> composite_rows_;  // its rows, when it holds a composite
  int64_t rows_ = 0;
  int64_t next_row_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> NewBatchIterator(std::string label,
                                                           std::unique_ptr<Iterator> input,
                                                           int64_t batch_size,
                                                           bool drop_remainder) {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": batch_size must be positive, got ", batch_size));
  }
  return std::unique_ptr<Iterator>(
      new BatchIterator(std::move(label), std::move(input), batch_size, drop_remainder));
}

std::unique_ptr<Iterator> NewUnbatchIterator(std::string label, std::unique_ptr<Iterator> input) {
  return std::make_unique<UnbatchIterator>(std::move(label), std::move(input));
}

}  // namespace sluice
