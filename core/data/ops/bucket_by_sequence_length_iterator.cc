#include "core/data/ops/bucket_by_sequence_length_iterator.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/batch_iterator.h"
#include "core/data/ops/padded_batch_iterator.h"
#include "core/tensor/composite_rows.h"
#include "core/tensor/row_pieces.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// The child of `nest` whose dimension 0 is the length (the element itself for length()), or
// null with *error set.
template <typename T>
const Nest<T>* LengthChild(const proto::BucketBySequenceLengthOp& op, const Nest<T>& nest,
                           std::string* error) {
  switch (op.length_of_case()) {
    case proto::BucketBySequenceLengthOp::kKey: {
      const auto& keys = nest.keys();
      const auto it = std::find(keys.begin(), keys.end(), op.key());
      if (nest.kind() != NestKind::kDict || it == keys.end()) {
        *error = absl::StrCat("element_length_func: the element has no key '", op.key(), "'");
        return nullptr;
      }
      return &nest.children()[static_cast<size_t>(it - keys.begin())];
    }
    case proto::BucketBySequenceLengthOp::kIndex:
      if ((nest.kind() != NestKind::kTuple && nest.kind() != NestKind::kList) || op.index() < 0 ||
          op.index() >= static_cast<int64_t>(nest.children().size())) {
        *error = absl::StrCat("element_length_func: the element has no component ", op.index());
        return nullptr;
      }
      return &nest.children()[static_cast<size_t>(op.index())];
    case proto::BucketBySequenceLengthOp::LENGTH_OF_NOT_SET:
      break;
  }
  return &nest;
}

// A length component has rows: a tensor or composite of rank >= 1.
template <typename T>
bool HasRows(const Nest<T>& node) {
  return (node.is_leaf() || node.is_composite()) && RowNodeRank(node) >= 1;
}

// An in-memory run of elements (one bucket's window), given to padded_batch / batch.
class WindowIterator : public Iterator {
 public:
  explicit WindowIterator(std::vector<Element> elements) : elements_(std::move(elements)) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    *end_of_sequence = next_ >= elements_.size();
    if (!*end_of_sequence) *out = std::move(elements_[next_++]);
    return absl::OkStatus();
  }

 private:
  std::vector<Element> elements_;
  size_t next_ = 0;
};

// padded_batch's op for bucket `b`: TF's make_padded_shapes (the given shapes, else the input's,
// with unknown dimensions set to boundaries[b] - 1 under pad_to_bucket_boundary).
proto::PaddedBatchOp BucketPaddedBatch(const proto::BucketBySequenceLengthOp& op,
                                       const std::vector<TensorSpec>& leaves, size_t b) {
  proto::PaddedBatchOp p;
  p.set_batch_size(op.bucket_batch_sizes(static_cast<int>(b)));
  p.set_drop_remainder(op.drop_remainder());
  *p.mutable_padding_values() = op.padding_values();
  const bool fill = op.pad_to_bucket_boundary() && b < static_cast<size_t>(op.bucket_boundaries_size());
  if (op.padded_shapes_size() == 0 && !fill) return p;
  for (size_t i = 0; i < leaves.size(); ++i) {
    proto::PaddedShape* s = p.add_padded_shapes();
    if (op.padded_shapes_size() > 0) {
      *s = op.padded_shapes(static_cast<int>(i));
    } else {
      for (int64_t d : leaves[i].shape.dims()) s->add_dims(d);
    }
    if (!fill) continue;
    for (int d = 0; d < s->dims_size(); ++d) {
      if (s->dims(d) < 0) s->set_dims(d, op.bucket_boundaries(static_cast<int>(b)) - 1);
    }
  }
  return p;
}

class BucketBySequenceLengthIterator : public OpIterator {
 public:
  BucketBySequenceLengthIterator(std::string label, std::unique_ptr<Iterator> input,
                                 const ElementSpec& input_spec,
                                 proto::BucketBySequenceLengthOp op)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        leaves_(input_spec.Flatten()),
        op_(std::move(op)),
        windows_(static_cast<size_t>(op_.bucket_batch_sizes_size())),
        held_(this->label()) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (input_done_) {
        while (flush_next_ < windows_.size() && windows_[flush_next_].empty()) ++flush_next_;
        if (flush_next_ == windows_.size()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        bool produced = false;
        RETURN_IF_ERROR(Emit(flush_next_, out, &produced));
        if (produced) return absl::OkStatus();
        continue;
      }
      Element e;
      bool end = false;
      RETURN_IF_ERROR(input_->GetNext(&e, &end));
      if (end) {
        input_done_ = true;
        continue;
      }
      ASSIGN_OR_RETURN(size_t b, Bucket(e));
      RETURN_IF_ERROR(held_.Grow(ElementOverhead(e)));  // the payloads are the allocator's
      windows_[b].push_back(std::move(e));
      if (static_cast<int64_t>(windows_[b].size()) ==
          op_.bucket_batch_sizes(static_cast<int>(b))) {
        bool produced = false;
        RETURN_IF_ERROR(Emit(b, out, &produced));
        if (produced) return absl::OkStatus();
      }
    }
  }

 private:
  // The bucket of `e`: the first i with lower(i) <= length < upper(i), as TF's
  // element_to_bucket_id.
  absl::StatusOr<size_t> Bucket(const Element& e) const {
    std::string error;
    const Element* child = LengthChild(op_, e, &error);
    if (child == nullptr || !HasRows(*child)) {
      return MarkElementError(InvalidArgument(
          error.empty() ? "element_length_func: the length component is not a tensor of rank >= 1"
                        : error));
    }
    const int64_t length = RowCount(*child);
    const int n = op_.bucket_boundaries_size();
    for (int i = 0; i <= n; ++i) {
      const int64_t lower = i == 0 ? std::numeric_limits<int32_t>::min() : op_.bucket_boundaries(i - 1);
      const int64_t upper = i == n ? std::numeric_limits<int32_t>::max() : op_.bucket_boundaries(i);
      if (lower <= length && length < upper) return static_cast<size_t>(i);
    }
    return MarkElementError(InvalidArgument(
        absl::StrCat("element_length_func: the length ", length, " falls in no bucket")));
  }

  // Batches bucket `b`'s window and empties it; *produced is false when drop_remainder dropped
  // a partial window.
  absl::Status Emit(size_t b, Element* out, bool* produced) {
    std::vector<Element> window = std::move(windows_[b]);
    windows_[b].clear();
    int64_t overhead = 0;
    for (const Element& e : window) overhead += ElementOverhead(e);
    held_.Shrink(overhead);
    if (op_.pad_to_bucket_boundary() && b == static_cast<size_t>(op_.bucket_boundaries_size())) {
      return MarkElementError(InvalidArgument(
          "assertion failed: [When pad_to_bucket_boundary=True, elements must have length < "
          "max(bucket_boundaries).]"));
    }
    auto source = std::make_unique<WindowIterator>(std::move(window));
    std::unique_ptr<Iterator> batcher;
    if (op_.no_padding()) {
      ASSIGN_OR_RETURN(batcher, NewBatchIterator(label(), std::move(source),
                                                 op_.bucket_batch_sizes(static_cast<int>(b)),
                                                 op_.drop_remainder()));
    } else {
      batcher =
          NewPaddedBatchIterator(label(), std::move(source), BucketPaddedBatch(op_, leaves_, b));
    }
    bool end = false;
    RETURN_IF_ERROR(batcher->GetNext(out, &end));
    *produced = !end;
    return absl::OkStatus();
  }

  std::unique_ptr<Iterator> input_;
  const std::vector<TensorSpec> leaves_;
  const proto::BucketBySequenceLengthOp op_;
  std::vector<std::vector<Element>> windows_;  // per bucket, fewer than its batch size
  MemoryReservation held_;
  bool input_done_ = false;
  size_t flush_next_ = 0;  // at the end: the next bucket to flush
};

}  // namespace

absl::StatusOr<ElementSpec> InferBucketBySequenceLengthSpec(
    const proto::BucketBySequenceLengthOp& op, const ElementSpec& input) {
  if (op.bucket_batch_sizes_size() != op.bucket_boundaries_size() + 1) {
    return Invalid(absl::StrCat(
        "`len(bucket_batch_sizes)` must equal `len(bucket_boundaries) + 1` but "
        "`len(bucket_batch_sizes)=", op.bucket_batch_sizes_size(), "` and `len(bucket_boundaries)=",
        op.bucket_boundaries_size(), "`."));
  }
  for (int64_t b : op.bucket_batch_sizes()) {
    if (b <= 0) return Invalid(absl::StrCat("bucket_batch_sizes must be positive, got ", b));
  }
  std::string error;
  const ElementSpec* child = LengthChild(op, input, &error);
  if (child == nullptr) return Invalid(error);
  if (!HasRows(*child)) {
    return Invalid("element_length_func: the length component must be a tensor of rank >= 1 "
                   "(its dimension 0 is the length)");
  }
  if (op.no_padding()) {
    if (op.padded_shapes_size() > 0 || op.padding_values_size() > 0) {
      return Invalid("no_padding=True takes no padded_shapes or padding_values");
    }
    return BatchedSpec(input, kUnknownDim);
  }
  if (input.HasComposite()) {
    return Invalid("bucket_by_sequence_length pads with padded_batch, which does not support "
                   "SparseTensor or RaggedTensor components (as in TF); give no_padding=True "
                   "to batch them");
  }
  // padded_batch's checks and spec, with the batch dimension unknown (each bucket has its own
  // batch size, as in TF).
  proto::PaddedBatchOp p;
  p.set_batch_size(1);
  *p.mutable_padded_shapes() = op.padded_shapes();
  *p.mutable_padding_values() = op.padding_values();
  return InferPaddedBatchSpec(p, input);
}

std::unique_ptr<Iterator> NewBucketBySequenceLengthIterator(
    std::string label, std::unique_ptr<Iterator> input, const ElementSpec& input_spec,
    proto::BucketBySequenceLengthOp op) {
  return std::make_unique<BucketBySequenceLengthIterator>(std::move(label), std::move(input),
                                                          input_spec, std::move(op));
}

}  // namespace sluice
