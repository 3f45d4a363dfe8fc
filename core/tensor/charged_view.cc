#include "core/tensor/charged_view.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/host_memory.h"

namespace sluice {
namespace {

// `size` bytes at `offset` of `backing`, charged to the process's budget until destroyed.
class ChargedView : public TensorBuffer {
 public:
  // The bytes are already charged; released here.
  ChargedView(std::shared_ptr<TensorBuffer> backing, size_t offset, size_t size)
      : backing_(std::move(backing)), offset_(offset), size_(size) {}
  ~ChargedView() override { ProcessMemoryBudget().Release(static_cast<int64_t>(size_)); }
  ChargedView(const ChargedView&) = delete;
  ChargedView& operator=(const ChargedView&) = delete;

  void* data() override { return static_cast<char*>(backing_->data()) + offset_; }
  size_t size() const override { return size_; }
  MemorySpace space() const override { return backing_->space(); }
  int device() const override { return backing_->device(); }

 private:
  const std::shared_ptr<TensorBuffer> backing_;
  const size_t offset_;
  const size_t size_;
};

}  // namespace

absl::StatusOr<Tensor> TryWrapCharged(DType dtype, const Shape& shape,
                                      std::shared_ptr<TensorBuffer> backing, size_t offset,
                                      absl::string_view what) {
  // Tensor::Wrap checks the dtype, the shape and the bytes against the backing first.
  absl::StatusOr<Tensor> checked = Tensor::Wrap(dtype, shape, backing, offset);
  if (!checked.ok()) return checked.status();
  const size_t bytes = checked->byte_size();
  MemoryBudget& budget = ProcessMemoryBudget();
  if (!budget.TryCharge(static_cast<int64_t>(bytes))) {
    return budget.Refusal(static_cast<int64_t>(bytes), what,
                          absl::StrCat("a view of ", bytes, " bytes (", DTypeName(dtype),
                                       " of shape ", shape.ToString(), ")"));
  }
  auto view = std::make_shared<ChargedView>(std::move(backing), offset, bytes);
  return Tensor::Wrap(dtype, shape, std::move(view));
}

}  // namespace sluice
