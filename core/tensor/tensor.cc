#include "sluice/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/tensor/charged_host_buffer.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// A string tensor's storage and its charge, given back with it. Tensors hold the vector through
// an aliasing shared_ptr, so sharing and use_count() are the storage's.
struct ChargedStrings {
  ChargedStrings(std::vector<std::string> v, int64_t c) : values(std::move(v)), charged(c) {}
  ~ChargedStrings() { ProcessMemoryBudget().Release(charged); }
  std::vector<std::string> values;
  const int64_t charged;
};

std::shared_ptr<std::vector<std::string>> MakeStrings(std::vector<std::string> values,
                                                      int64_t charged) {
  auto holder = std::make_shared<ChargedStrings>(std::move(values), charged);
  return std::shared_ptr<std::vector<std::string>>(holder, &holder->values);
}

// What a string tensor of `n` strings with `chars` characters in all is charged.
int64_t StringBytes(int64_t n, int64_t chars) {
  int64_t objects = 0;
  int64_t total = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(sizeof(std::string)), &objects) ||
      __builtin_add_overflow(objects, chars, &total)) {
    return -1;
  }
  return total;
}

int64_t SumLengths(const std::vector<std::string>& values) {
  int64_t chars = 0;
  for (const std::string& v : values) chars += static_cast<int64_t>(v.size());
  return chars;
}

std::string DescribeTensor(DType dtype, const Shape& shape) {
  return absl::StrCat("a tensor of shape ", shape.ToString(), " and dtype ", DTypeName(dtype));
}

// The element count of `shape`, checked: INVALID_ARGUMENT for a negative (unknown) dimension,
// RESOURCE_EXHAUSTED when the count or its bytes (`unit` each) overflow 64 bits.
absl::StatusOr<int64_t> CheckedBytes(DType dtype, const Shape& shape, int64_t unit,
                                     absl::string_view what) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": cannot allocate a tensor of shape ",
                                                     shape.ToString(),
                                                     ": it is not fully defined"));
    }
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  int64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(n, unit, &bytes)) {
    const int64_t limit = ProcessMemoryBudget().limits().element_bytes;
    return ElementLimitError(
        absl::StrCat(what, ": ", DescribeTensor(dtype, shape),
                     " needs more than 2^63 bytes, more than the memory limit of one element, ",
                     limit, " bytes (--max_element_bytes)"),
        limit);
  }
  return bytes;
}

// The characters of the string tensors `parts` together.
int64_t StringChars(std::span<const Tensor> parts) {
  int64_t chars = 0;
  for (const Tensor& p : parts) {
    for (int64_t i = 0; i < p.num_elements(); ++i) {
      chars += static_cast<int64_t>(p.string_at(i).size());
    }
  }
  return chars;
}

// Row size (elements) of a tensor of `shape` along dimension 0.
int64_t RowElements(const Shape& shape) { return shape.DropFirst().num_elements(); }

}  // namespace

absl::StatusOr<std::shared_ptr<TensorBuffer>> TensorBuffer::TryAllocateHost(
    size_t bytes, absl::string_view what) {
  if (bytes > static_cast<size_t>(std::numeric_limits<int64_t>::max()) - kAlignment) {
    const int64_t limit = ProcessMemoryBudget().limits().element_bytes;
    return ElementLimitError(absl::StrCat(what, ": a host buffer of ", bytes,
                                          " bytes needs more than the memory limit of one "
                                          "element, ",
                                          limit, " bytes (--max_element_bytes)"),
                             limit);
  }
  return TryAllocateChargedHostBuffer(bytes, HostFill::kZeros, what,
                                      [] { return std::string("a host buffer"); });
}

std::shared_ptr<TensorBuffer> TensorBuffer::AllocateHost(size_t bytes) {
  ProcessMemoryBudget().ForceCharge(static_cast<int64_t>(ChargedHostBytes(bytes)));
  absl::StatusOr<std::shared_ptr<TensorBuffer>> buffer =
      AllocateChargedHostBuffer(bytes, HostFill::kZeros, "a host buffer");
  if (!buffer.ok()) throw std::bad_alloc();  // the charge is given back
  return *std::move(buffer);
}

absl::StatusOr<Tensor> Tensor::TryAllocate(DType dtype, const Shape& shape,
                                           absl::string_view what) {
  if (dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot allocate a tensor of an invalid dtype"));
  }
  const bool strings = dtype == DType::kString;
  const int64_t unit =
      strings ? static_cast<int64_t>(sizeof(std::string)) : static_cast<int64_t>(DTypeSize(dtype));
  absl::StatusOr<int64_t> bytes = CheckedBytes(dtype, shape, unit, what);
  if (!bytes.ok()) return bytes.status();
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  if (strings) {
    if (!ProcessMemoryBudget().TryCharge(*bytes)) {
      return ProcessMemoryBudget().Refusal(*bytes, what, DescribeTensor(dtype, shape));
    }
    t.strings_ = MakeStrings(std::vector<std::string>(static_cast<size_t>(shape.num_elements())),
                             *bytes);
    return t;
  }
  const size_t charged = ChargedHostBytes(static_cast<size_t>(*bytes));
  if (static_cast<int64_t>(charged) < *bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", DescribeTensor(dtype, shape), " needs more than 2^63 bytes"));
  }
  absl::StatusOr<std::shared_ptr<TensorBuffer>> buffer =
      TryAllocateChargedHostBuffer(static_cast<size_t>(*bytes), HostFill::kZeros, what,
                                   [&] { return DescribeTensor(dtype, shape); });
  if (!buffer.ok()) return buffer.status();
  t.buffer_ = *std::move(buffer);
  return t;
}

Tensor Tensor::Allocate(DType dtype, const Shape& shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  if (dtype == DType::kString) {
    const int64_t n = shape.num_elements();
    const int64_t charged = StringBytes(n, 0);
    ProcessMemoryBudget().ForceCharge(charged);
    t.strings_ = MakeStrings(std::vector<std::string>(static_cast<size_t>(n)), charged);
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
  const int64_t charged =
      std::max<int64_t>(StringBytes(static_cast<int64_t>(values.size()), SumLengths(values)), 0);
  ProcessMemoryBudget().ForceCharge(charged);
  t.strings_ = MakeStrings(std::move(values), charged);
  return t;
}

absl::StatusOr<Tensor> Tensor::TryFromStrings(std::vector<std::string> values, const Shape& shape,
                                              absl::string_view what) {
  int64_t bytes = StringBytes(static_cast<int64_t>(values.size()), SumLengths(values));
  if (bytes < 0) bytes = std::numeric_limits<int64_t>::max();
  if (!ProcessMemoryBudget().TryCharge(bytes)) {
    return ProcessMemoryBudget().Refusal(bytes, what, DescribeTensor(DType::kString, shape));
  }
  Tensor t;
  t.dtype_ = DType::kString;
  t.shape_ = shape;
  t.strings_ = MakeStrings(std::move(values), bytes);
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

absl::StatusOr<Tensor> Tensor::TryAllocateStrings(const Shape& shape, int64_t chars,
                                                  absl::string_view what) {
  absl::StatusOr<int64_t> objects =
      CheckedBytes(DType::kString, shape, static_cast<int64_t>(sizeof(std::string)), what);
  if (!objects.ok()) return objects.status();
  int64_t bytes = 0;
  if (__builtin_add_overflow(*objects, chars, &bytes)) bytes = std::numeric_limits<int64_t>::max();
  if (!ProcessMemoryBudget().TryCharge(bytes)) {
    return ProcessMemoryBudget().Refusal(bytes, what, DescribeTensor(DType::kString, shape));
  }
  Tensor t;
  t.dtype_ = DType::kString;
  t.shape_ = shape;
  t.strings_ = MakeStrings(std::vector<std::string>(static_cast<size_t>(shape.num_elements())),
                           bytes);
  return t;
}

absl::StatusOr<Tensor> Tensor::Stack(std::span<const Tensor> parts, absl::string_view what) {
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
  const Shape shape = first.shape().Prepend(static_cast<int64_t>(parts.size()));
  const int64_t per_part = first.num_elements();
  // Not zero-filled: the copies below write every byte (a batch of 256 float32 224 x 224 x 3
  // images is 154 MB, whose zero-fill cost as much as the copy).
  absl::StatusOr<Tensor> allocated =
      first.dtype() == DType::kString
          ? TryAllocateStrings(shape, StringChars(parts), what)
          : TryAllocateUninitialized(first.dtype(), shape, what);
  if (!allocated.ok()) return allocated.status();
  Tensor out = *std::move(allocated);
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

absl::StatusOr<Tensor> Tensor::Concat(std::span<const Tensor> parts, absl::string_view what) {
  absl::StatusOr<int64_t> rows = ConcatRows(parts);
  if (!rows.ok()) return rows.status();
  const Tensor& first = parts[0];
  const Shape shape = first.shape().WithFirst(*rows);
  // Not zero-filled: the copies below write every byte.
  absl::StatusOr<Tensor> allocated =
      first.dtype() == DType::kString ? TryAllocateStrings(shape, StringChars(parts), what)
                                      : TryAllocateUninitialized(first.dtype(), shape, what);
  if (!allocated.ok()) return allocated.status();
  Tensor out = *std::move(allocated);
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

absl::StatusOr<Tensor> Tensor::ConcatConsuming(std::vector<Tensor> parts,
                                               absl::string_view what) {
  if (parts.empty() || parts[0].dtype() != DType::kString) return Concat(parts, what);
  absl::StatusOr<int64_t> rows = ConcatRows(parts);
  if (!rows.ok()) return rows.status();
  const Shape shape = parts[0].shape().WithFirst(*rows);
  // Charged up front for what the result will hold; a moved string's characters stay charged
  // to its part too until the part is dropped below (one part's worth at a time).
  int64_t bytes = StringBytes(shape.num_elements(), StringChars(parts));
  if (bytes < 0) bytes = std::numeric_limits<int64_t>::max();
  if (!ProcessMemoryBudget().TryCharge(bytes)) {
    return ProcessMemoryBudget().Refusal(bytes, what, DescribeTensor(DType::kString, shape));
  }
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
  Tensor out;
  out.dtype_ = DType::kString;
  out.shape_ = shape;
  out.strings_ = MakeStrings(std::move(strings), bytes);
  return out;
}

bool Tensor::IsRowsOf(const Tensor& whole, int64_t row) const {
  if (!valid() || dtype_ != whole.dtype_ || shape_.rank() == 0 || whole.shape_.rank() == 0 ||
      shape_.DropFirst() != whole.shape_.DropFirst() || row < 0 ||
      row + shape_.dim(0) > whole.shape_.dim(0)) {
    return false;
  }
  const size_t row_elements = static_cast<size_t>(RowElements(whole.shape_));
  if (dtype_ == DType::kString) {
    return strings_ != nullptr && strings_ == whole.strings_ &&
           offset_ == whole.offset_ + static_cast<size_t>(row) * row_elements;
  }
  return buffer_ != nullptr && buffer_ == whole.buffer_ &&
         offset_ == whole.offset_ + static_cast<size_t>(row) * row_elements * DTypeSize(dtype_);
}

absl::StatusOr<Tensor> Tensor::WrapStrings(std::shared_ptr<std::vector<std::string>> strings,
                                           const Shape& shape) {
  if (!shape.IsFullyDefined() || strings == nullptr ||
      static_cast<int64_t>(strings->size()) != shape.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Tensor::WrapStrings: ", strings == nullptr ? 0 : strings->size(),
        " strings cannot be a tensor of shape ", shape.ToString()));
  }
  Tensor t;
  t.dtype_ = DType::kString;
  t.shape_ = shape;
  t.strings_ = std::move(strings);
  return t;
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
