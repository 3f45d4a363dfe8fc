// Tensor: a dtype, a fully defined shape and shared, immutable-by-convention storage.
//
// Storage is shared: copying a Tensor copies a reference, and Slice()/Index() are zero-copy
// views along dimension 0. Numeric data is packed row-major in a 64-byte-aligned buffer;
// string tensors hold one std::string per element.
//
// Memory: every buffer and string tensor created here is charged to the process's memory budget
// (core/tensor/host_memory.h) until the last tensor sharing it goes. The Try* factories are the
// allocation path for any size that comes from data or from a client: over the per-element or
// the per-process limit they return RESOURCE_EXHAUSTED naming the op, the size and the limit,
// before allocating. The infallible ones (Allocate, AllocateHost, FromStrings, Scalar,
// FromVector) count their bytes without checking a limit and throw std::bad_alloc when the
// system has no memory: only for small constant sizes, tests and examples.
//
// Thread safety: a Tensor may be read from many threads at once. Mutation through
// mutable_data()/mutable_string() is only for the code that just allocated the tensor, before
// it is shared.
#ifndef SLUICE_CORE_TENSOR_H_
#define SLUICE_CORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/dtype.h"
#include "sluice/shape.h"

namespace sluice {

// Where a buffer's bytes live.
enum class MemorySpace { kHost, kPinnedHost, kDevice };

// Bytes backing one or more numeric tensors. Subclasses own other kinds of memory (pinned host,
// device, a received gRPC slice); the base allocates aligned host memory.
class TensorBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  virtual ~TensorBuffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
  virtual MemorySpace space() const { return MemorySpace::kHost; }
  // The device ordinal for MemorySpace::kDevice, else -1.
  virtual int device() const { return -1; }

  // Aligned, zero-filled host memory of `bytes` bytes, charged to the process's memory budget
  // while it lives. RESOURCE_EXHAUSTED "<what>: a buffer of N bytes needs ..." naming the limit
  // it would pass (--max_element_bytes, --memory_limit), or when the system refuses the memory;
  // `what` names the op ("op 2 (batch)").
  static absl::StatusOr<std::shared_ptr<TensorBuffer>> TryAllocateHost(size_t bytes,
                                                                      absl::string_view what);
  // As TryAllocateHost without a limit (counted, not checked); throws std::bad_alloc when the
  // system refuses. Small constant sizes, tests and examples only.
  static std::shared_ptr<TensorBuffer> AllocateHost(size_t bytes);
};

class Tensor {
 public:
  Tensor() = default;  // invalid: valid() is false

  // Zero-filled (numeric) or empty strings, charged to the process's memory budget. `what`
  // names the op in errors ("op 2 (batch)"). RESOURCE_EXHAUSTED "<what>: a tensor of shape
  // (N,) and dtype int64 needs B bytes, more than the memory limit of one element, L bytes
  // (--max_element_bytes)" or "..., but U of the process's memory limit of L bytes are in use
  // (--memory_limit)", also when the byte size overflows 64 bits; nothing is allocated then.
  // INVALID_ARGUMENT when the shape is not fully defined (a negative dimension) or the dtype is
  // invalid.
  static absl::StatusOr<Tensor> TryAllocate(DType dtype, const Shape& shape,
                                            absl::string_view what);
  // As TryAllocate, infallibly (see Memory above): small constant sizes, tests and examples.
  // Requires shape.IsFullyDefined().
  static Tensor Allocate(DType dtype, const Shape& shape);

  template <typename T>
  static Tensor Scalar(T value) {
    Tensor t = Allocate(DTypeOf<T>(), Shape());
    *t.mutable_data<T>() = value;
    return t;
  }
  static Tensor StringScalar(std::string value);

  // Empty strings of `shape`, charged as if they held `chars` characters in all (the caller
  // fills them through mutable_string() with about that many before sharing the tensor):
  // RESOURCE_EXHAUSTED as TryAllocate, before anything is allocated.
  static absl::StatusOr<Tensor> TryAllocateStrings(const Shape& shape, int64_t chars,
                                                   absl::string_view what);

  // Copies `values` into a tensor of `shape`; requires shape.num_elements() == values.size().
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const Shape& shape) {
    Tensor t = Allocate(DTypeOf<T>(), shape);
    T* out = t.mutable_data<T>();
    for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
    return t;
  }
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values) {
    return FromVector(values, Shape({static_cast<int64_t>(values.size())}));
  }
  static Tensor FromStrings(std::vector<std::string> values, const Shape& shape);
  // As FromStrings, charged with the strings' objects and characters: RESOURCE_EXHAUSTED as
  // TryAllocate (the strings are already allocated: they are freed, not kept, on an error).
  // Requires shape.num_elements() == values.size().
  static absl::StatusOr<Tensor> TryFromStrings(std::vector<std::string> values,
                                               const Shape& shape, absl::string_view what);

  // Views `buffer` at byte `offset` as a tensor; no copy. INVALID_ARGUMENT if the buffer is
  // too small or dtype is kString.
  static absl::StatusOr<Tensor> Wrap(DType dtype, const Shape& shape,
                                     std::shared_ptr<TensorBuffer> buffer, size_t offset = 0);

  bool valid() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  // Bytes of numeric data; 0 for strings.
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  // Bytes of numeric data, or the total length of the strings.
  size_t payload_bytes() const;

  // Numeric data; requires a numeric dtype in host memory.
  const void* raw_data() const;
  void* mutable_raw_data();
  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_raw_data()); }
  // The buffer behind a numeric tensor and this tensor's byte offset in it.
  const std::shared_ptr<TensorBuffer>& buffer() const { return buffer_; }
  size_t buffer_offset() const { return offset_; }

  // String elements in row-major order; requires dtype() == kString.
  const std::string& string_at(int64_t i) const;
  std::string* mutable_string(int64_t i);

  // Rows [begin, end) along dimension 0, sharing storage. Requires rank >= 1 and
  // 0 <= begin <= end <= dim(0).
  Tensor Slice(int64_t begin, int64_t end) const;
  // Row i with dimension 0 removed, sharing storage.
  Tensor Index(int64_t i) const;
  // Same storage, another shape with the same number of elements; INVALID_ARGUMENT otherwise.
  absl::StatusOr<Tensor> Reshape(const Shape& shape) const;

  // Stacks equal-shaped tensors along a new dimension 0 (what batch() does). INVALID_ARGUMENT
  // naming the first mismatching position when dtypes or shapes differ, or when empty. The
  // result is allocated as by TryAllocate for `what`: RESOURCE_EXHAUSTED over a limit.
  static absl::StatusOr<Tensor> Stack(std::span<const Tensor> parts,
                                      absl::string_view what = "Tensor::Stack");
  // Concatenates along dimension 0; the other dimensions must agree. An empty `parts` is
  // INVALID_ARGUMENT (there is no dtype to give the result). RESOURCE_EXHAUSTED as Stack.
  static absl::StatusOr<Tensor> Concat(std::span<const Tensor> parts,
                                       absl::string_view what = "Tensor::Concat");
  // As Concat, consuming `parts`: the strings of a part whose storage no other tensor shares
  // are moved into the result instead of copied (batching blocks of parsed records then copies
  // no string bytes). Numeric parts are copied as by Concat.
  static absl::StatusOr<Tensor> ConcatConsuming(std::vector<Tensor> parts,
                                                absl::string_view what = "Tensor::Concat");

  // Value equality: dtype, shape and every element (bitwise for floats).
  bool Equals(const Tensor& other) const;

  // Whether this tensor is rows [row, row + dim(0)) of `whole` itself (the same storage at that
  // row's offset, not equal values): what a fused map wrote in place (ops/batch_destinations.h).
  // Requires nothing; false for invalid or scalar tensors and differing dtypes or row shapes.
  bool IsRowsOf(const Tensor& whole, int64_t row) const;

  // A string tensor of `shape` over `strings` (exactly shape.num_elements() of them), no copy:
  // the shared_ptr's owner decides what happens when the last tensor viewing them goes (a pool
  // keeps them for reuse: ops/string_batch_pool.h) and has charged them to the memory budget.
  // INVALID_ARGUMENT when the counts differ or the shape is not fully defined.
  static absl::StatusOr<Tensor> WrapStrings(std::shared_ptr<std::vector<std::string>> strings,
                                            const Shape& shape);

 private:
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  std::shared_ptr<TensorBuffer> buffer_;                // numeric
  std::shared_ptr<std::vector<std::string>> strings_;  // string
  size_t offset_ = 0;  // bytes into buffer_, or elements into strings_
};

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_H_
