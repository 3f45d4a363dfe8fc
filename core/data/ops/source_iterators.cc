#include "core/data/ops/source_iterators.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/io/input_stream.h"
#include "core/tensor/composite_rows.h"
#include "core/tensor/row_pieces.h"
#include "core/tensor/host_memory.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class RangeIterator : public OpIterator {
 public:
  RangeIterator(std::string label, int64_t start, int64_t stop, int64_t step)
      : OpIterator(std::move(label)), next_(start), stop_(stop), step_(step) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (exhausted_ || (step_ > 0 ? next_ >= stop_ : next_ <= stop_)) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    *out = Element(Tensor::Scalar<int64_t>(next_));
    // The value after the last one may not fit in an int64: stop instead of overflowing.
    if (__builtin_add_overflow(next_, step_, &next_)) exhausted_ = true;
    return absl::OkStatus();
  }

  bool SupportsBlocks() const override { return true; }

  // The values are written straight into one int64 vector: no per-element object.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    if (exhausted_ || (step_ > 0 ? next_ >= stop_ : next_ <= stop_)) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    // Values left: ceil((stop - next) / step), computed without overflow in unsigned space.
    const uint64_t span = step_ > 0 ? static_cast<uint64_t>(stop_) - static_cast<uint64_t>(next_)
                                    : static_cast<uint64_t>(next_) - static_cast<uint64_t>(stop_);
    const uint64_t stride = step_ > 0 ? static_cast<uint64_t>(step_)
                                      : static_cast<uint64_t>(0) - static_cast<uint64_t>(step_);
    const uint64_t left = span / stride + (span % stride != 0 ? 1 : 0);
    const int64_t count =
        static_cast<int64_t>(std::min<uint64_t>(left, static_cast<uint64_t>(max_elements)));
    absl::StatusOr<Tensor> block = Tensor::TryAllocate(DType::kInt64, Shape({count}), label());
    if (!block.ok()) return block.status();
    Tensor t = *std::move(block);
    int64_t* values = t.mutable_data<int64_t>();
    // Every value written lies in [start, stop) (or (stop, start]), so none overflows; wrapping
    // arithmetic keeps the compiler from assuming otherwise.
    uint64_t v = static_cast<uint64_t>(next_);
    const uint64_t step = static_cast<uint64_t>(step_);
    for (int64_t i = 0; i < count; ++i, v += step) values[i] = static_cast<int64_t>(v);
    const int64_t last = values[count - 1];
    if (__builtin_add_overflow(last, step_, &next_)) exhausted_ = true;
    *out = Element(std::move(t));
    *n = count;
    return absl::OkStatus();
  }

 private:
  int64_t next_;
  const int64_t stop_;
  const int64_t step_;
  bool exhausted_ = false;
};

class FromTensorsIterator : public OpIterator {
 public:
  FromTensorsIterator(std::string label, Element element)
      : OpIterator(std::move(label)), element_(std::move(element)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (done_) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    done_ = true;
    *out = element_;
    return absl::OkStatus();
  }

  // The same element again: it is fixed at construction.
  bool RewindInternal() override {
    done_ = false;
    return true;
  }

 private:
  const Element element_;
  bool done_ = false;
};

// The rows of an element holding SparseTensor / RaggedTensor components: blocks are row pieces
// of the whole element (row_pieces.h: what stacking those rows gives, the flat_values shared,
// row_splits rebased); the per-element path splits the element into rows (composite_rows.h)
// when it is first used, so that a repeated source read in blocks never does.
class RowsIterator : public OpIterator {
 public:
  RowsIterator(std::string label, Element element, int64_t rows)
      : OpIterator(std::move(label)),
        element_(std::move(element)),
        num_rows_(rows),
        nodes_(RowNodes(element_)) {}

  bool SupportsBlocks() const override { return true; }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (next_ >= num_rows_) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    if (rows_.empty()) {
      absl::StatusOr<std::vector<Element>> rows = UnstackRows(element_, label());
      if (!rows.ok()) return rows.status();
      rows_ = *std::move(rows);
    }
    *out = rows_[static_cast<size_t>(next_++)];
    return absl::OkStatus();
  }

  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    const int64_t total = num_rows_;
    const int64_t begin = next_;
    if (begin >= total) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    const int64_t count = std::min(max_elements, total - begin);
    std::vector<Element> block;
    block.reserve(nodes_.size());
    for (const Element* node : nodes_) {
      absl::StatusOr<Element> piece = SliceRows(*node, begin, begin + count, label());
      if (!piece.ok()) return piece.status();
      block.push_back(*std::move(piece));
    }
    auto packed = PackRowNodes(element_, std::move(block));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    *n = count;
    next_ += count;
    return absl::OkStatus();
  }

 private:
  const Element element_;
  const int64_t num_rows_;
  const std::vector<const Element*> nodes_;  // its row nodes, in element_
  std::vector<Element> rows_;   // its rows, once the per-element path needs them
  int64_t next_ = 0;
};

class FromTensorSlicesIterator : public OpIterator {
 public:
  FromTensorSlicesIterator(std::string label, Element element, int64_t rows)
      : OpIterator(std::move(label)),
        element_(std::move(element)),
        leaves_(element_.Flatten()),
        rows_(rows) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (next_ >= rows_) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    std::vector<Tensor> row;
    row.reserve(leaves_.size());
    for (const Tensor& t : leaves_) row.push_back(t.Index(next_));
    ++next_;
    auto packed = Element::Pack(element_, std::move(row));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    return absl::OkStatus();
  }

  bool SupportsBlocks() const override { return true; }

  // Rows [next, next + n) of every leaf, sharing the leaves' storage as the rows do.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    if (next_ >= rows_) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    const int64_t count = std::min(max_elements, rows_ - next_);
    std::vector<Tensor> block;
    block.reserve(leaves_.size());
    for (const Tensor& t : leaves_) block.push_back(t.Slice(next_, next_ + count));
    next_ += count;
    auto packed = Element::Pack(element_, std::move(block));
    if (!packed.ok()) return InvalidArgument(packed.status().message());
    *out = *std::move(packed);
    *n = count;
    return absl::OkStatus();
  }

 private:
  const Element element_;
  const std::vector<Tensor> leaves_;
  const int64_t rows_;
  int64_t next_ = 0;
};

// Reads lines with large read(2) calls and memchr, so the cost per line is a scan and one
// string allocation. Mirrors TF's BufferedInputStream::ReadLine, which TextLineDataset uses:
// every '\r' is dropped, not only one before the '\n' (tensorflow-cpu 2.15 reads "a\rb\r\n"
// as "ab").
class TextLineIterator : public OpIterator {
 public:
  static constexpr size_t kBufferBytes = 1 << 20;

  TextLineIterator(std::string label, std::vector<std::string> filenames)
      : OpIterator(std::move(label)), filenames_(std::move(filenames)) {}
  ~TextLineIterator() override { CloseFile(); }
  TextLineIterator(const TextLineIterator&) = delete;
  TextLineIterator& operator=(const TextLineIterator&) = delete;

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (stream_ == nullptr) {
        if (next_file_ >= filenames_.size()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        absl::Status s = OpenFile(filenames_[next_file_++]);
        if (!s.ok()) return s;
      }
      if (pos_ < limit_) {
        const char* begin = buffer_.get() + pos_;
        const char* newline = static_cast<const char*>(std::memchr(begin, '\n', limit_ - pos_));
        if (newline != nullptr) {
          std::string line;
          if (partial_.empty()) {
            line.assign(begin, newline);
          } else {
            line = std::move(partial_);
            partial_.clear();
            line.append(begin, newline);
          }
          pos_ += static_cast<size_t>(newline - begin) + 1;
          DropCarriageReturns(&line);
          return Emit(std::move(line), out);
        }
        partial_.append(begin, limit_ - pos_);
        pos_ = limit_;
        // A line is one element: it may not outgrow the element limit however long the file's.
        const int64_t limit = ProcessMemoryBudget().limits().element_bytes;
        if (static_cast<int64_t>(partial_.size()) > limit) {
          const std::string file = stream_->name();
          CloseFile();
          return ElementLimitError(
              absl::StrCat(label(), ": a line of ", file, " is longer than the memory limit of "
                           "one element, ", limit, " bytes (--max_element_bytes)"),
              limit);
        }
      }
      absl::StatusOr<size_t> n = stream_->Read(buffer_.get(), kBufferBytes);
      if (!n.ok()) {
        CloseFile();
        return OpError(n.status().code(), n.status().message());
      }
      pos_ = 0;
      limit_ = *n;
      if (*n == 0) {
        CloseFile();
        // A last line without '\n' counts unless nothing is left of it once its '\r's are gone.
        DropCarriageReturns(&partial_);
        if (!partial_.empty()) {
          std::string line = std::move(partial_);
          partial_.clear();
          return Emit(std::move(line), out);
        }
      }
    }
  }

 private:
  static void DropCarriageReturns(std::string* line) {
    if (std::memchr(line->data(), '\r', line->size()) == nullptr) return;
    line->erase(std::remove(line->begin(), line->end(), '\r'), line->end());
  }

  absl::Status Emit(std::string line, Element* out) const {
    std::vector<std::string> values;
    values.push_back(std::move(line));
    absl::StatusOr<Tensor> t = Tensor::TryFromStrings(std::move(values), Shape(), label());
    if (!t.ok()) return t.status();
    *out = Element(*std::move(t));
    return absl::OkStatus();
  }

  absl::Status OpenFile(const std::string& name) {
    absl::StatusOr<std::unique_ptr<InputStream>> stream = OpenFileStream(name);
    if (!stream.ok()) return OpError(stream.status().code(), stream.status().message());
    stream_ = *std::move(stream);
    if (buffer_ == nullptr) buffer_ = std::make_unique<char[]>(kBufferBytes);
    pos_ = limit_ = 0;
    partial_.clear();
    return absl::OkStatus();
  }

  void CloseFile() {
    stream_.reset();
    pos_ = limit_ = 0;
  }

  const std::vector<std::string> filenames_;
  size_t next_file_ = 0;
  std::unique_ptr<InputStream> stream_;
  std::unique_ptr<char[]> buffer_;
  size_t pos_ = 0;
  size_t limit_ = 0;
  std::string partial_;  // the start of a line that crosses a buffer boundary
};

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> NewRangeIterator(std::string label, int64_t start,
                                                           int64_t stop, int64_t step) {
  if (step == 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": step must be a non-zero integer"));
  }
  const __int128 length =
      step > 0 ? (stop > start ? (static_cast<__int128>(stop) - start - 1) / step + 1 : 0)
               : (start > stop ? (static_cast<__int128>(start) - stop - 1) / -static_cast<__int128>(step) + 1 : 0);
  if (length > std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": range(", start, ", ", stop, ", ", step,
                     ") has a length that does not fit in int64 (at most 2^63 - 1 elements)"));
  }
  return std::unique_ptr<Iterator>(new RangeIterator(std::move(label), start, stop, step));
}

std::unique_ptr<Iterator> NewFromTensorsIterator(std::string label, Element element) {
  return std::make_unique<FromTensorsIterator>(std::move(label), std::move(element));
}

absl::StatusOr<std::unique_ptr<Iterator>> NewFromTensorSlicesIterator(std::string label,
                                                                      Element element) {
  if (element.HasComposite()) {  // SparseTensor / RaggedTensor slices: composite_rows.h
    // Every component has rows, as many as the first (what unbatching them requires).
    RETURN_IF_ERROR(CheckSameRows(element, label));
    const int64_t rows = RowCount(*RowNodes(element)[0]);
    return std::unique_ptr<Iterator>(new RowsIterator(std::move(label), std::move(element), rows));
  }
  std::vector<Tensor> leaves = element.Flatten();
  if (leaves.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": from_tensor_slices needs at least one tensor"));
  }
  int64_t rows = -1;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].shape().rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": cannot slice a scalar: component ", i, " has shape []; every component "
          "needs at least one dimension"));
    }
    if (rows < 0) {
      rows = leaves[i].shape().dim(0);
    } else if (leaves[i].shape().dim(0) != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": all components must have the same size in dimension 0: component 0 has ",
          rows, " rows but component ", i, " has ", leaves[i].shape().dim(0)));
    }
  }
  return std::unique_ptr<Iterator>(
      new FromTensorSlicesIterator(std::move(label), std::move(element), rows));
}

std::unique_ptr<Iterator> NewTextLineIterator(std::string label,
                                              std::vector<std::string> filenames) {
  return std::make_unique<TextLineIterator>(std::move(label), std::move(filenames));
}

}  // namespace sluice
