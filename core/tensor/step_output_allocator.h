// StepOutputAllocator: where the last op of a pipeline builds a tensor that becomes part of a
// step as it is, so that it need not be copied there afterwards. A worker streaming to a
// co-located consumer installs one around each step it produces (worker/step_placement.h: a
// region of the consumer's shared-memory ring); everywhere else (TCP consumers, in-process
// pipelines, threads of prefetch or parallel ops) there is none and producers allocate as usual.
//
//   // The producer, on the thread that produces the step:
//   std::shared_ptr<TensorBuffer> b = AllocateStepOutput(bytes);
//   if (b == nullptr) ... Tensor::TryAllocate / TryAllocateUninitialized, as without it ...
//
// A producer that fills such a buffer by copying uses StreamingCopy (core/util/streaming_copy.h):
// the buffer is read later by another process or a device, not by the producing thread, and a
// shared-memory ring's laps are larger than the cache.
//
// A producer asks only for a tensor whose bytes it writes whole and that it hands on unchanged
// as an element of the pipeline's output (core/data: a source whose elements pass through
// repeat(), take() or skip() to the end). Such buffers are not charged to the memory budget:
// their owner bounds them (a ring never holds more than its segment). If the tensor does not
// end in the step after all, the step's placement copies it as any other (correct, one copy
// more) and the buffer is freed with the last tensor viewing it.
//
// Thread safety: the current allocator is per thread; an allocator's Allocate is called from
// the thread that installed it, and must be thread-safe towards its own owner.
#ifndef SLUICE_CORE_TENSOR_STEP_OUTPUT_ALLOCATOR_H_
#define SLUICE_CORE_TENSOR_STEP_OUTPUT_ALLOCATOR_H_

#include <cstddef>
#include <memory>

#include "sluice/tensor.h"

namespace sluice {

class StepOutputAllocator {
 public:
  virtual ~StepOutputAllocator() = default;
  // A host buffer of `bytes` (> 0) bytes, aligned at TensorBuffer::kAlignment, its bytes
  // unspecified; nullptr when there is no room (the caller then allocates as usual).
  virtual std::shared_ptr<TensorBuffer> AllocateStepOutput(size_t bytes) const = 0;

  // Makes `allocator` (may be null, borrowed for the scope's life) the thread's current one
  // while the scope lives; scopes nest.
  class Scope {
   public:
    explicit Scope(const StepOutputAllocator* allocator);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const StepOutputAllocator* const previous_;
  };

  // The thread's current allocator, nullptr outside a Scope.
  static const StepOutputAllocator* Current();
};

// The thread's current allocator's buffer of `bytes`, or nullptr when there is none, it has no
// room, or bytes is 0.
std::shared_ptr<TensorBuffer> AllocateStepOutput(size_t bytes);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_STEP_OUTPUT_ALLOCATOR_H_
