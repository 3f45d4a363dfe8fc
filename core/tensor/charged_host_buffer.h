// Host memory aligned to TensorBuffer::kAlignment and charged to the process's memory budget
// (core/tensor/host_memory.h) until the last tensor sharing it goes: the one buffer type behind
// TensorBuffer::TryAllocateHost and AllocateHost (zero-filled) and
// TryAllocateUninitializedBuffer (left as it is, for producers that write every byte).
//
// The memory comes from the allocator that can refuse (core/util/aligned_memory.h); the caller
// checks its own limits on the size first (the element limit, 2^63 bytes).
//
// Thread safety: plain functions; safe from any thread.
#ifndef SLUICE_CORE_TENSOR_CHARGED_HOST_BUFFER_H_
#define SLUICE_CORE_TENSOR_CHARGED_HOST_BUFFER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor/aligned_size.h"
#include "sluice/tensor.h"

namespace sluice {

// What a host buffer of `bytes` is charged, and holds: `bytes` rounded up to the alignment, one
// alignment unit for 0 bytes (so that a scalar costs what it holds). Requires
// bytes <= SIZE_MAX - TensorBuffer::kAlignment (callers bound sizes far below). Inline: once
// per tensor allocated.
inline size_t ChargedHostBytes(size_t bytes) {
  const size_t rounded = AlignedSize(bytes);
  return rounded == 0 ? TensorBuffer::kAlignment : rounded;
}

// Whether a new buffer's bytes (its padding included) are zeros or unspecified.
enum class HostFill { kZeros, kUnspecified };

// A buffer of `bytes`, its ChargedHostBytes(bytes) charged to ProcessMemoryBudget() until it
// goes. RESOURCE_EXHAUSTED naming `what` and describe() ("a tensor of shape ...") when the
// charge would pass the process's limit (ProcessMemoryBudget().Refusal; nothing allocated), or
// "<what>: the system refused N bytes of memory" when the system refuses the memory (the charge
// given back). `describe` is called only for the refusal: a tensor's description costs more
// than the allocation of a small one.
absl::StatusOr<std::shared_ptr<TensorBuffer>> TryAllocateChargedHostBuffer(
    size_t bytes, HostFill fill, absl::string_view what,
    absl::FunctionRef<std::string()> describe);

// As TryAllocateChargedHostBuffer for memory the caller has charged already (ForceCharge of
// ChargedHostBytes(bytes)): only the system's refusal, with the charge given back.
absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocateChargedHostBuffer(size_t bytes,
                                                                        HostFill fill,
                                                                        absl::string_view what);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_CHARGED_HOST_BUFFER_H_
