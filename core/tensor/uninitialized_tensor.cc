#include "core/tensor/uninitialized_tensor.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "core/tensor/charged_host_buffer.h"

namespace sluice {
namespace {

// TryAllocateUninitializedBuffer with the description made only for a refusal: a tensor's
// ("a tensor of shape [...] and dtype ...") costs more than allocating a small one.
absl::StatusOr<std::shared_ptr<TensorBuffer>> TryAllocateUninitializedHostBuffer(
    size_t bytes, absl::string_view what, absl::FunctionRef<std::string()> describe) {
  constexpr size_t kAlign = TensorBuffer::kAlignment;
  constexpr uint64_t kMaxBytes = uint64_t{std::numeric_limits<int64_t>::max()} / kAlign * kAlign;
  if (bytes > kMaxBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", describe(), " needs more than 2^63 bytes"));
  }
  return TryAllocateChargedHostBuffer(bytes, HostFill::kUnspecified, what, describe);
}

}  // namespace

absl::StatusOr<Tensor> TryAllocateUninitialized(DType dtype, const Shape& shape,
                                                absl::string_view what) {
  if (dtype == DType::kString || dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": an uninitialized tensor needs a numeric dtype"));
  }
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot allocate a tensor of shape ", shape.ToString()));
  }
  const auto describe = [&] {
    return absl::StrCat("a tensor of shape ", shape.ToString(), " and dtype ", DTypeName(dtype));
  };
  // Sizes in 128 bits: a hostile shape must not wrap around to a small buffer.
  unsigned __int128 bytes = DTypeSize(dtype);
  for (int i = 0; i < shape.rank(); ++i) bytes *= static_cast<uint64_t>(shape.dim(i));
  if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", describe(), " needs more than 2^63 bytes"));
  }
  absl::StatusOr<std::shared_ptr<TensorBuffer>> buffer =
      TryAllocateUninitializedHostBuffer(static_cast<size_t>(bytes), what, describe);
  if (!buffer.ok()) return buffer.status();
  return Tensor::Wrap(dtype, shape, *std::move(buffer));
}

absl::StatusOr<std::shared_ptr<TensorBuffer>> TryAllocateUninitializedBuffer(
    size_t bytes, absl::string_view what, absl::string_view describe) {
  return TryAllocateUninitializedHostBuffer(bytes, what,
                                            [describe] { return std::string(describe); });
}

}  // namespace sluice
