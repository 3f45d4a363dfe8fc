#include "sluice/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

class AlignedHostBuffer : public TensorBuffer {
 public:
  explicit AlignedHostBuffer(size_t bytes) : size_(bytes) {
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) rounded = kAlignment;
    data_ = std::aligned_alloc(kAlignment, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
  }
  ~AlignedHostBuffer() override { std::free(data_); }
  AlignedHostBuffer(const AlignedHostBuffer&) = delete;
  AlignedHostBuffer& operator=(const AlignedHostBuffer&) = delete;

  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

// Row size (elements) of a tensor of `shape` along dimension 0.
int64_t RowElements(const Shape& shape) { return shape.DropFirst().num_elements(); }

}  // namespace

std::shared_ptr<TensorBuffer> TensorBuffer::AllocateHost(size_t bytes) {
  return std::make_shared<AlignedHostBuffer>(bytes);
}

Tensor Tensor::Allocate(DType dtype, const Shape& shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  if (dtype == DType::kString) {
    t.strings_ = std::make_shared<std::vector<std::string>>(shape.num_elements());
  } else {
    t.buffer_ = TensorBuffer::AllocateHost(shape.num_elements() * DTypeSize(dtype));
  }
  return t;
}

Tensor Tensor::StringScalar(std::string value) {
  return FromStrings({std::move(value)}, Shape());
}

Tensor Tensor::FromStrings(std::vector<std::string> values, const Shape& shape) {
  Tensor t;
  t.dtype_ = DType::kString;
  t.shape_ = shape;
  t.strings_ = std::make_shared<std::vector<std::string>>(std::move(values));
  return t;
}

absl::StatusOr<Tensor> Tensor::Wrap(DType dtype, const Shape& shape,
                                    std::shared_ptr<TensorBuffer> buffer, size_t offset) {
  if (dtype == DType::kString || dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::Wrap: cannot wrap a buffer as dtype ", DTypeName(dtype)));
  }
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::Wrap: shape ", shape.ToString(), " is not fully defined"));
  }
  size_t need = static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype);
  if (buffer == nullptr || offset + need > buffer->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Tensor::Wrap: a ", DTypeName(dtype), " tensor of shape ", shape.ToString(), " needs ",
        need, " bytes at offset ", offset, " but the buffer has ",
        buffer == nullptr ? 0 : buffer->size()));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.buffer_ = std::move(buffer);
  t.offset_ = offset;
  return t;
}

size_t Tensor::payload_bytes() const {
  if (dtype_ != DType::kString) return byte_size();
  size_t n = 0;
  for (int64_t i = 0; i < num_elements(); ++i) n += string_at(i).size();
  return n;
}

const void* Tensor::raw_data() const {
  return static_cast<const char*>(buffer_->data()) + offset_;
}

void* Tensor::mutable_raw_data() { return static_cast<char*>(buffer_->data()) + offset_; }

const std::string& Tensor::string_at(int64_t i) const { return (*strings_)[offset_ + i]; }

std::string* Tensor::mutable_string(int64_t i) { return &(*strings_)[offset_ + i]; }

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  Tensor t = *this;
  int64_t row = RowElements(shape_);
  t.shape_ = shape_.WithFirst(end - begin);
  if (dtype_ == DType::kString) {
    t.offset_ = offset_ + static_cast<size_t>(begin * row);
  } else {
    t.offset_ = offset_ + static_cast<size_t>(begin * row) * DTypeSize(dtype_);
  }
  return t;
}

Tensor Tensor::Index(int64_t i) const {
  Tensor t = Slice(i, i + 1);
  t.shape_ = shape_.DropFirst();
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshape(const Shape& shape) const {
  if (!shape.IsFullyDefined() || shape.num_elements() != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape a tensor of shape ",
                                                   shape_.ToString(), " (", num_elements(),
                                                   " elements) to ", shape.ToString()));
  }
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

absl::StatusOr<Tensor> Tensor::Stack(std::span<const Tensor> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("Tensor::Stack: no tensors to stack");
  const Tensor& first = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].dtype() != first.dtype() || parts[i].shape() != first.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor::Stack: component ", i, " has dtype ", DTypeName(parts[i].dtype()), " and shape ",
          parts[i].shape().ToString(), " but component 0 has dtype ", DTypeName(first.dtype()),
          " and shape ", first.shape().ToString()));
    }
  }
  // One allocation and one copy per part; the sizes are computed once (batch() stacks many
  // small parts, where per-part bookkeeping would cost more than the copies).
  Tensor out = Allocate(first.dtype(), first.shape().Prepend(static_cast<int64_t>(parts.size())));
  const int64_t per_part = first.num_elements();
  if (first.dtype() == DType::kString) {
    int64_t k = 0;
    for (const Tensor& p : parts) {
      for (int64_t i = 0; i < per_part; ++i) *out.mutable_string(k++) = p.string_at(i);
    }
  } else {
    const size_t bytes = static_cast<size_t>(per_part) * DTypeSize(first.dtype());
    if (bytes > 0) {
      char* dst = static_cast<char*>(out.mutable_raw_data());
      for (const Tensor& p : parts) {
        std::memcpy(dst, p.raw_data(), bytes);
        dst += bytes;
      }
    }
  }
  return out;
}

namespace {

// Concat's checks; the rows of the result.
absl::StatusOr<int64_t> ConcatRows(std::span<const Tensor> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("Tensor::Concat: no tensors to concatenate");
  const Tensor& first = parts[0];
  if (first.shape().rank() == 0) {
    return absl::InvalidArgumentError("Tensor::Concat: cannot concatenate scalars");
  }
  int64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    if (p.dtype() != first.dtype() || p.shape().rank() != first.shape().rank() ||
        p.shape().DropFirst() != first.shape().DropFirst()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor::Concat: component ", i, " has dtype ", DTypeName(p.dtype()), " and shape ",
          p.shape().ToString(), ", incompatible with component 0: dtype ",
          DTypeName(first.dtype()), " and shape ", first.shape().ToString()));
    }
    rows += p.shape().dim(0);
  }
  return rows;
}

}  // namespace

absl::StatusOr<Tensor> Tensor::Concat(std::span<const Tensor> parts) {
  absl::StatusOr<int64_t> rows = ConcatRows(parts);
  if (!rows.ok()) return rows.status();
  const Tensor& first = parts[0];
  Tensor out = Allocate(first.dtype(), first.shape().WithFirst(*rows));
  if (first.dtype() == DType::kString) {
    int64_t k = 0;
    for (const Tensor& p : parts) {
      for (int64_t i = 0; i < p.num_elements(); ++i) *out.mutable_string(k++) = p.string_at(i);
    }
  } else {
    char* dst = static_cast<char*>(out.mutable_raw_data());
    for (const Tensor& p : parts) {
      if (p.byte_size() > 0) std::memcpy(dst, p.raw_data(), p.byte_size());
      dst += p.byte_size();
    }
  }
  return out;
}

absl::StatusOr<Tensor> Tensor::ConcatConsuming(std::vector<Tensor> parts) {
  if (parts.empty() || parts[0].dtype() != DType::kString) return Concat(parts);
  absl::StatusOr<int64_t> rows = ConcatRows(parts);
  if (!rows.ok()) return rows.status();
  const Shape shape = parts[0].shape().WithFirst(*rows);
  std::vector<std::string> strings;
  strings.reserve(static_cast<size_t>(shape.num_elements()));
  for (Tensor& p : parts) {
    const int64_t n = p.num_elements();
    // The only owner (this tensor, consumed here): nobody else can see the strings move.
    const bool sole = p.strings_.use_count() == 1;
    for (int64_t i = 0; i < n; ++i) {
      if (sole) {
        strings.push_back(std::move((*p.strings_)[p.offset_ + static_cast<size_t>(i)]));
      } else {
        strings.push_back(p.string_at(i));
      }
    }
    p = Tensor();
  }
  return FromStrings(std::move(strings), shape);
}

bool Tensor::Equals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (!valid()) return true;
  if (dtype_ == DType::kString) {
    for (int64_t i = 0; i < num_elements(); ++i) {
      if (string_at(i) != other.string_at(i)) return false;
    }
    return true;
  }
  return byte_size() == 0 || std::memcmp(raw_data(), other.raw_data(), byte_size()) == 0;
}

}  // namespace sluice
