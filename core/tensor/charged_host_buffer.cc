#include "core/tensor/charged_host_buffer.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/tensor/host_memory.h"
#include "core/util/aligned_memory.h"

namespace sluice {
namespace {

class ChargedHostBuffer final : public TensorBuffer {
 public:
  // `data` holds `charged` bytes from AllocateAligned, already charged; owned from here.
  ChargedHostBuffer(void* data, size_t bytes, size_t charged)
      : data_(data), size_(bytes), charged_(charged) {}
  ~ChargedHostBuffer() override {
    FreeAligned(data_);
    ProcessMemoryBudget().Release(static_cast<int64_t>(charged_));
  }
  ChargedHostBuffer(const ChargedHostBuffer&) = delete;
  ChargedHostBuffer& operator=(const ChargedHostBuffer&) = delete;

  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* const data_;
  const size_t size_;
  const size_t charged_;  // given back to ProcessMemoryBudget() on destruction
};

}  // namespace

absl::StatusOr<std::shared_ptr<TensorBuffer>> TryAllocateChargedHostBuffer(
    size_t bytes, HostFill fill, absl::string_view what,
    absl::FunctionRef<std::string()> describe) {
  const int64_t charged = static_cast<int64_t>(ChargedHostBytes(bytes));
  if (!ProcessMemoryBudget().TryCharge(charged)) {
    return ProcessMemoryBudget().Refusal(charged, what, describe());
  }
  return AllocateChargedHostBuffer(bytes, fill, what);
}

absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocateChargedHostBuffer(size_t bytes,
                                                                        HostFill fill,
                                                                        absl::string_view what) {
  const size_t charged = ChargedHostBytes(bytes);
  void* data = AllocateAligned(TensorBuffer::kAlignment, charged);
  if (data == nullptr) {
    ProcessMemoryBudget().Release(static_cast<int64_t>(charged));
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": the system refused ", charged, " bytes of memory"));
  }
  if (fill == HostFill::kZeros) std::memset(data, 0, charged);
  return std::shared_ptr<TensorBuffer>(std::make_shared<ChargedHostBuffer>(data, bytes, charged));
}

}  // namespace sluice
