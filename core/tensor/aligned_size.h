// AlignedSize: a byte count rounded up to TensorBuffer::kAlignment, the alignment every tensor
// buffer, shared-memory region and frame offset keeps (what the readers of frames and
// shared-memory segments check: core/rpc/step_frame.cc, job_shm_reader.cc). One definition, so
// that the writers' layouts cannot drift from what their readers accept.
#ifndef SLUICE_CORE_TENSOR_ALIGNED_SIZE_H_
#define SLUICE_CORE_TENSOR_ALIGNED_SIZE_H_

#include <cstdint>

#include "sluice/tensor.h"

namespace sluice {

// `n` rounded up to a multiple of TensorBuffer::kAlignment (0 stays 0). For sizes of memory
// this process holds or is about to lay out: `n` is at most UINT64_MAX - kAlignment + 1 (a
// peer's unchecked value is bounded before it gets here).
constexpr uint64_t AlignedSize(uint64_t n) {
  constexpr uint64_t kAlign = TensorBuffer::kAlignment;
  static_assert((kAlign & (kAlign - 1)) == 0, "the alignment is a power of two");
  return (n + kAlign - 1) & ~(kAlign - 1);
}

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_ALIGNED_SIZE_H_
