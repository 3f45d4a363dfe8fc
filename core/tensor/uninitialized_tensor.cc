#include "core/tensor/uninitialized_tensor.h"

#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/tensor/host_memory.h"
#include "core/util/aligned_memory.h"

namespace sluice {
namespace {

// Aligned host memory, not zero-filled, charged to the process's budget until destroyed.
class UninitializedHostBuffer : public TensorBuffer {
 public:
  // `data` holds `charged` bytes from AllocateAligned, already charged; owned from here.
  UninitializedHostBuffer(void* data, size_t bytes, size_t charged)
      : data_(data), size_(bytes), charged_(charged) {}
  ~UninitializedHostBuffer() override {
    FreeAligned(data_);
    ProcessMemoryBudget().Release(static_cast<int64_t>(charged_));
  }
  UninitializedHostBuffer(const UninitializedHostBuffer&) = delete;
  UninitializedHostBuffer& operator=(const UninitializedHostBuffer&) = delete;

  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* const data_;
  const size_t size_;
  const size_t charged_;
};

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
  constexpr size_t kAlign = TensorBuffer::kAlignment;
  const unsigned __int128 rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", describe(), " needs more than 2^63 bytes"));
  }
  const size_t charged = rounded == 0 ? kAlign : static_cast<size_t>(rounded);
  if (!ProcessMemoryBudget().TryCharge(static_cast<int64_t>(charged))) {
    return ProcessMemoryBudget().Refusal(static_cast<int64_t>(charged), what, describe());
  }
  void* data = AllocateAligned(kAlign, charged);
  if (data == nullptr) {
    ProcessMemoryBudget().Release(static_cast<int64_t>(charged));
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": the system refused ", charged, " bytes of memory"));
  }
  auto buffer = std::make_shared<UninitializedHostBuffer>(data, static_cast<size_t>(bytes),
                                                          charged);
  return Tensor::Wrap(dtype, shape, std::move(buffer));
}

}  // namespace sluice
