// BatchBufferPool: the stacked tensors of one batch() op come back to it when the consumer and
// every view of them are done, and the next batch is written into that memory instead of a
// fresh allocation. A batch of 256 float32 224 x 224 x 3 images is 154 MB, far above glibc's
// largest mmap threshold (32 MiB), so without the pool every batch is a fresh mmap whose pages
// are faulted in and zeroed by the kernel as the batch is written (~8-10% of the CPU of an
// image pipeline: bench/RESULTS.md), and unmapped when the consumer drops it.
//
// How memory is accounted: a buffer the pool hands out is an ordinary uninitialized tensor
// (core/tensor/uninitialized_tensor.h), charged to the process's memory budget; while idle in
// the pool it stays charged (it is still held), and it is freed (and its charge given back)
// when the pool is destroyed or already holds `max_idle` buffers. The pool holds no reference
// to a buffer it handed out: a tensor's holders alone decide when it comes back (so
// use_count() stays what the holders make it), and a buffer comes back only after the last
// tensor viewing it is gone, so nothing a consumer still holds is ever written again
// (DESIGN.md invariant 9).
//
//   auto pool = BatchBufferPool::Create(/*max_idle=*/1);
//   ASSIGN_OR_RETURN(Tensor batch, pool->Take(DType::kFloat32, Shape({256, 224, 224, 3}), what));
//
// Thread safety: Take and the return of buffers (from whichever thread drops the last tensor)
// may run concurrently; the pool may be destroyed while its buffers are still held elsewhere
// (they are then freed when dropped).
#ifndef SLUICE_CORE_BATCH_BUFFER_POOL_H_
#define SLUICE_CORE_BATCH_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "sluice/shape.h"
#include "sluice/tensor.h"

namespace sluice {

class BatchBufferPool : public std::enable_shared_from_this<BatchBufferPool> {
 public:
  // Keeps at most `max_idle` released buffers (>= 0; 0 keeps none: a plain allocator).
  static std::shared_ptr<BatchBufferPool> Create(int64_t max_idle);

  // A numeric tensor of `shape` whose bytes are unspecified (the caller writes every one): an
  // idle buffer of exactly that byte size when one is kept, else a fresh one. Errors as
  // TryAllocateUninitialized's (RESOURCE_EXHAUSTED naming `what` over the memory limits,
  // INVALID_ARGUMENT for a string dtype or a shape not fully defined).
  absl::StatusOr<Tensor> Take(DType dtype, const Shape& shape, absl::string_view what);

  // Buffers handed out again (reused) and allocated afresh by this pool so far.
  int64_t reused() const;
  int64_t allocated() const;

 private:
  explicit BatchBufferPool(int64_t max_idle) : max_idle_(max_idle) {}
  class Handle;
  // `memory` came back (its last tensor is gone): kept while fewer than max_idle_ are.
  void GiveBack(std::shared_ptr<TensorBuffer> memory);

  const int64_t max_idle_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<TensorBuffer>> idle_ ABSL_GUARDED_BY(mu_);
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_BATCH_BUFFER_POOL_H_
