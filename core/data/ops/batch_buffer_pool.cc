#include "core/data/ops/batch_buffer_pool.h"

#include <utility>

#include "core/tensor/uninitialized_tensor.h"

namespace sluice {

// What a pooled tensor holds: the memory (an uninitialized tensor's buffer, which owns the
// bytes and their charge), given back to the pool when the last tensor holding this goes.
class BatchBufferPool::Handle : public TensorBuffer {
 public:
  Handle(std::shared_ptr<TensorBuffer> memory, std::weak_ptr<BatchBufferPool> pool)
      : memory_(std::move(memory)), pool_(std::move(pool)) {}
  ~Handle() override {
    if (std::shared_ptr<BatchBufferPool> pool = pool_.lock()) pool->GiveBack(std::move(memory_));
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  void* data() override { return memory_->data(); }
  size_t size() const override { return memory_->size(); }

 private:
  std::shared_ptr<TensorBuffer> memory_;
  const std::weak_ptr<BatchBufferPool> pool_;
};

std::shared_ptr<BatchBufferPool> BatchBufferPool::Create(int64_t max_idle) {
  return std::shared_ptr<BatchBufferPool>(new BatchBufferPool(max_idle < 0 ? 0 : max_idle));
}

absl::StatusOr<Tensor> BatchBufferPool::Take(DType dtype, const Shape& shape,
                                             absl::string_view what) {
  std::shared_ptr<TensorBuffer> memory;
  if (dtype != DType::kString && dtype != DType::kInvalid && shape.IsFullyDefined()) {
    // In 128 bits: a hostile shape must not wrap around to an idle buffer's size.
    unsigned __int128 bytes = DTypeSize(dtype);
    for (int i = 0; i < shape.rank(); ++i) bytes *= static_cast<uint64_t>(shape.dim(i));
    absl::MutexLock lock(&mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (static_cast<unsigned __int128>((*it)->size()) == bytes) {
        memory = std::move(*it);
        idle_.erase(it);
        ++reused_;
        break;
      }
    }
  }
  if (memory == nullptr) {
    absl::StatusOr<Tensor> fresh = TryAllocateUninitialized(dtype, shape, what);
    if (!fresh.ok()) return fresh.status();
    memory = fresh->buffer();
    absl::MutexLock lock(&mu_);
    ++allocated_;
  }
  return Tensor::Wrap(dtype, shape, std::make_shared<Handle>(std::move(memory), weak_from_this()));
}

void BatchBufferPool::GiveBack(std::shared_ptr<TensorBuffer> memory) {
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(idle_.size()) < max_idle_) {
      idle_.push_back(std::move(memory));
      return;
    }
  }
  memory.reset();  // freed outside the lock
}

int64_t BatchBufferPool::reused() const {
  absl::MutexLock lock(&mu_);
  return reused_;
}

int64_t BatchBufferPool::allocated() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

}  // namespace sluice
