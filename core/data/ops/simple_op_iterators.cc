#include "core/data/ops/simple_op_iterators.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/element_draws.h"
#include "core/tensor/composite_rows.h"
#include "core/tensor/row_pieces.h"

namespace sluice {
namespace {

class RepeatIterator : public OpIterator {
 public:
  RepeatIterator(std::string label, IteratorFactory input, int64_t count)
      : OpIterator(std::move(label)), factory_(std::move(input)), count_(count) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    return NextOfEpochs(end_of_sequence, [&](bool* end) { return input_->GetNext(out, end); });
  }

  // Passed on to the epochs' iterators, epoch after epoch.
  absl::Status SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence) override {
    *skipped = 0;
    if (count <= 0) return absl::OkStatus();
    return NextOfEpochs(end_of_sequence, [&](bool* end) {
      int64_t k = 0;
      absl::Status s = input_->Skip(count - *skipped, &k, end);
      *skipped += k;
      if (k > 0) yielded_this_epoch_ = true;
      return s;
    });
  }

  // Blocks when the epochs' iterators give them; asking makes the first epoch's iterator (the
  // one the first GetNext would make), unless there are no epochs at all.
  bool SupportsBlocks() const override {
    if (!supports_blocks_.has_value()) {
      if (input_ == nullptr && epoch_ == 0 && count_ != 0) {
        input_ = MakeEpochInput();
        yielded_this_epoch_ = false;
      }
      supports_blocks_ = input_ != nullptr && input_->SupportsBlocks();
    }
    return *supports_blocks_;
  }

  // A block never spans two epochs.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    return NextOfEpochs(end_of_sequence, [&](bool* end) {
      return input_->SupportsBlocks() ? input_->GetNextBlock(max_elements, out, n, end)
                                      : NextAsBlock(out, n, end);
    });
  }

 private:
  // The input's iterator for epoch_, built under the epoch's scope so that the random ops in it
  // draw anew every epoch (core/data/element_draws.h).
  std::unique_ptr<Iterator> MakeEpochInput() const {
    ScopedRepeatEpoch scope(epoch_);
    return factory_();
  }

  // The epoch loop of both paths: `pull(&end)` reads the current epoch's iterator (an element
  // or a block); at its end the next epoch starts, until count_ epochs or an empty epoch.
  template <typename Pull>
  absl::Status NextOfEpochs(bool* end_of_sequence, Pull pull) {
    while (true) {
      if (input_ == nullptr) {
        if (count_ >= 0 && epoch_ >= count_) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        input_ = MakeEpochInput();
        yielded_this_epoch_ = false;
      }
      bool end = false;
      absl::Status s = pull(&end);
      if (!s.ok()) return s;
      if (!end) {
        yielded_this_epoch_ = true;
        return absl::OkStatus();
      }
      ++epoch_;
      if (!yielded_this_epoch_) {
        // An empty epoch: every later one would be empty too; end instead of spinning.
        input_.reset();
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      // The next epoch from the same iterator when it can restart exactly (Iterator::Rewind:
      // from_tensors(x).repeat() then builds nothing per element), else from a fresh one.
      if ((count_ < 0 || epoch_ < count_) && input_->Rewind()) {
        yielded_this_epoch_ = false;
        continue;
      }
      input_.reset();
    }
  }

  // One element of an epoch whose iterator has no bulk path, as a block of one.
  absl::Status NextAsBlock(Element* out, int64_t* n, bool* end) {
    Element e;
    absl::Status s = input_->GetNext(&e, end);
    if (!s.ok() || *end) return s;
    if (e.HasComposite()) {  // SparseTensor / RaggedTensor rows stack as batch() stacks them
      absl::StatusOr<Element> block = StackRows(std::span<const Element>(&e, 1), label());
      if (!block.ok()) return block.status();
      *out = *std::move(block);
      *n = 1;
      return absl::OkStatus();
    }
    std::vector<Tensor> leaves = e.Flatten();
    for (Tensor& t : leaves) {
      absl::StatusOr<Tensor> r = t.Reshape(t.shape().Prepend(1));
      if (!r.ok()) return r.status();
      t = *std::move(r);
    }
    absl::StatusOr<Element> block = Element::Pack(e, std::move(leaves));
    if (!block.ok()) return block.status();
    *out = *std::move(block);
    *n = 1;
    return absl::OkStatus();
  }

  const IteratorFactory factory_;
  const int64_t count_;
  // Made by SupportsBlocks() (const) when asked before the first GetNext.
  mutable std::unique_ptr<Iterator> input_;
  int64_t epoch_ = 0;
  mutable bool yielded_this_epoch_ = false;
  mutable std::optional<bool> supports_blocks_;  // the first answer, kept
};

class TakeIterator : public OpIterator {
 public:
  TakeIterator(std::string label, std::unique_ptr<Iterator> input, int64_t count)
      : OpIterator(std::move(label)), input_(std::move(input)), remaining_(count) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (remaining_ == 0) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    absl::Status s = input_->GetNext(out, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    if (remaining_ > 0) --remaining_;
    return absl::OkStatus();
  }

  // Passed on, up to the elements left to take.
  absl::Status SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence) override {
    *skipped = 0;
    const int64_t want = remaining_ >= 0 ? std::min(count, remaining_) : count;
    absl::Status s = want > 0 ? input_->Skip(want, skipped, end_of_sequence) : absl::OkStatus();
    if (remaining_ > 0) remaining_ -= *skipped;
    if (s.ok() && *skipped < count && remaining_ == 0) *end_of_sequence = true;
    return s;
  }

  bool SupportsBlocks() const override { return input_ != nullptr && input_->SupportsBlocks(); }

  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    if (remaining_ == 0) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    const int64_t want = remaining_ > 0 ? std::min(max_elements, remaining_) : max_elements;
    absl::Status s = input_->GetNextBlock(want, out, n, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    if (remaining_ > 0) remaining_ -= *n;
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  int64_t remaining_;  // negative: unlimited
};

class SkipIterator : public OpIterator {
 public:
  SkipIterator(std::string label, std::unique_ptr<Iterator> input, int64_t count)
      : OpIterator(std::move(label)), input_(std::move(input)), to_skip_(count) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    absl::Status s = DropLeading(end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    return input_->GetNext(out, end_of_sequence);
  }

  absl::Status SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence) override {
    *skipped = 0;
    absl::Status s = DropLeading(end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    return input_->Skip(count, skipped, end_of_sequence);
  }

  bool SupportsBlocks() const override { return input_ != nullptr && input_->SupportsBlocks(); }

  // Skips whole blocks (the last one cut), then passes blocks through.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    constexpr int64_t kSkipBlock = 1 << 16;
    while (to_skip_ != 0) {
      Element ignored;
      int64_t skipped = 0;
      const int64_t want = to_skip_ > 0 ? std::min(to_skip_, kSkipBlock) : kSkipBlock;
      absl::Status s = input_->GetNextBlock(want, &ignored, &skipped, end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      if (to_skip_ > 0) to_skip_ -= skipped;
    }
    return input_->GetNextBlock(max_elements, out, n, end_of_sequence);
  }

 private:
  // The first to_skip_ elements, dropped through Skip (Iterator::Skip): the input may drop
  // them for less than making them. OK with to_skip_ 0, or at the end, or the error.
  absl::Status DropLeading(bool* end_of_sequence) {
    while (to_skip_ != 0) {
      int64_t skipped = 0;
      const int64_t want = to_skip_ > 0 ? to_skip_ : std::numeric_limits<int64_t>::max();
      absl::Status s = input_->Skip(want, &skipped, end_of_sequence);
      if (to_skip_ > 0) to_skip_ -= skipped;
      if (!s.ok() || *end_of_sequence) return s;
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Iterator> input_;
  int64_t to_skip_;  // negative: skip everything
};

class ShardIterator : public OpIterator {
 public:
  ShardIterator(std::string label, std::unique_ptr<Iterator> input, int64_t num_shards,
                int64_t index)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        num_shards_(num_shards),
        to_skip_(index) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    absl::Status s = DropOthers(end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    s = input_->GetNext(out, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    to_skip_ = num_shards_ - 1;
    return absl::OkStatus();
  }

  // Each element this shard would keep dropped with the others before it, all through Skip.
  absl::Status SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence) override {
    for (*skipped = 0; *skipped < count; ++*skipped) {
      absl::Status s = DropOthers(end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      int64_t kept = 0;
      s = input_->Skip(1, &kept, end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      to_skip_ = num_shards_ - 1;
    }
    return absl::OkStatus();
  }

  bool SupportsBlocks() const override { return input_ != nullptr && input_->SupportsBlocks(); }

  // Pulls up to num_shards * max_elements input elements at a time and copies out every
  // num_shards-th row, counting to_skip_ across blocks exactly as GetNext does.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    constexpr int64_t kMaxPull = int64_t{1} << 20;
    while (true) {
      Element block;
      int64_t m = 0;
      const int64_t want =
          max_elements > kMaxPull / num_shards_ ? kMaxPull : max_elements * num_shards_;
      absl::Status s = input_->GetNextBlock(std::max<int64_t>(want, 1), &block, &m,
                                            end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      if (to_skip_ >= m) {
        to_skip_ -= m;
        continue;
      }
      const int64_t first = to_skip_;
      const int64_t count = std::min((m - 1 - first) / num_shards_ + 1, max_elements);
      const int64_t last = first + (count - 1) * num_shards_;
      // The rows after `last` in this block count towards the next kept one.
      to_skip_ = num_shards_ - 1 - (m - 1 - last);
      if (to_skip_ < 0) {
        // max_elements cut the block short of its last kept row: the rest of the block would
        // be lost. want = max_elements * num_shards rows keeps this from happening.
        return OpError(absl::StatusCode::kInternal, "shard block bookkeeping");
      }
      if (block.HasComposite()) return EveryNthRowOfNodes(block, first, count, out, n);
      std::vector<Tensor> leaves = block.Flatten();
      for (Tensor& t : leaves) t = EveryNthRow(t, first, count);
      absl::StatusOr<Element> packed = Element::Pack(block, std::move(leaves));
      if (!packed.ok()) return InvalidArgument(packed.status().message());
      *out = *std::move(packed);
      *n = count;
      return absl::OkStatus();
    }
  }

 private:
  // As EveryNthRow for a block holding SparseTensor / RaggedTensor components: each component's
  // rows cut and joined as row pieces (core/tensor/row_pieces.h).
  absl::Status EveryNthRowOfNodes(const Element& block, int64_t first, int64_t count,
                                  Element* out, int64_t* n) const {
    std::vector<Element> nodes;
    for (const Element* node : RowNodes(block)) {
      std::vector<Element> rows;
      rows.reserve(static_cast<size_t>(count));
      for (int64_t r = 0; r < count; ++r) {
        const int64_t row = first + r * num_shards_;
        absl::StatusOr<Element> piece = SliceRows(*node, row, row + 1, label());
        if (!piece.ok()) return piece.status();
        rows.push_back(*std::move(piece));
      }
      absl::StatusOr<Element> joined = ConcatRows(rows, label());
      if (!joined.ok()) return joined.status();
      nodes.push_back(*std::move(joined));
    }
    absl::StatusOr<Element> packed = PackRowNodes(block, std::move(nodes));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    *n = count;
    return absl::OkStatus();
  }

  // Rows first, first + num_shards, ... (`count` of them) of `t` (rank >= 1), copied.
  Tensor EveryNthRow(const Tensor& t, int64_t first, int64_t count) const {
    if (num_shards_ == 1) return t.Slice(first, first + count);
    // Infallible: a subset of the rows of `t`, which the allocator already admitted.
    Tensor out = Tensor::Allocate(t.dtype(), t.shape().WithFirst(count));
    const int64_t row = t.shape().dim(0) == 0 ? 0 : t.num_elements() / t.shape().dim(0);
    if (t.dtype() == DType::kString) {
      for (int64_t r = 0; r < count; ++r) {
        const int64_t src = (first + r * num_shards_) * row;
        for (int64_t i = 0; i < row; ++i) *out.mutable_string(r * row + i) = t.string_at(src + i);
      }
      return out;
    }
    const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(t.dtype());
    if (row_bytes == 0) return out;
    const char* src = static_cast<const char*>(t.raw_data());
    char* dst = static_cast<char*>(out.mutable_raw_data());
    for (int64_t r = 0; r < count; ++r) {
      std::memcpy(dst + r * row_bytes, src + (first + r * num_shards_) * row_bytes, row_bytes);
    }
    return out;
  }

  // The input elements before the next one this shard keeps, dropped through Skip
  // (Iterator::Skip): the input may drop them for less than making them. OK with to_skip_ 0,
  // or at the end, or the error.
  absl::Status DropOthers(bool* end_of_sequence) {
    if (to_skip_ == 0) return absl::OkStatus();
    int64_t skipped = 0;
    absl::Status s = input_->Skip(to_skip_, &skipped, end_of_sequence);
    to_skip_ -= skipped;
    return s;
  }

  std::unique_ptr<Iterator> input_;
  const int64_t num_shards_;
  int64_t to_skip_;  // input elements to drop before the next one this shard keeps
};

}  // namespace

std::unique_ptr<Iterator> NewRepeatIterator(std::string label, IteratorFactory input,
                                            int64_t count) {
  return std::make_unique<RepeatIterator>(std::move(label), std::move(input), count);
}

std::unique_ptr<Iterator> NewTakeIterator(std::string label, std::unique_ptr<Iterator> input,
                                          int64_t count) {
  return std::make_unique<TakeIterator>(std::move(label), std::move(input), count);
}

std::unique_ptr<Iterator> NewSkipIterator(std::string label, std::unique_ptr<Iterator> input,
                                          int64_t count) {
  return std::make_unique<SkipIterator>(std::move(label), std::move(input), count);
}

absl::StatusOr<std::unique_ptr<Iterator>> NewShardIterator(std::string label,
                                                           std::unique_ptr<Iterator> input,
                                                           int64_t num_shards, int64_t index) {
  if (num_shards <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": num_shards must be positive, got ", num_shards));
  }
  if (index < 0 || index >= num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": index must be in [0, num_shards) = [0, ", num_shards, "), got ", index));
  }
  return std::unique_ptr<Iterator>(
      new ShardIterator(std::move(label), std::move(input), num_shards, index));
}

}  // namespace sluice
