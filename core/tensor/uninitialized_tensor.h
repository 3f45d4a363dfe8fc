// Tensors whose bytes are not zero-filled, for producers that write every byte before the
// tensor is shared (a JPEG decoder, a resize): Tensor::TryAllocate zero-fills, and for a decoded
// image that is a second pass over memory the decoder overwrites anyway. The buffer alone, for
// a frame decoder that lays several tensors out in one (core/rpc/step_frame.h).
//
// Charged to the process's memory budget (core/tensor/host_memory.h) exactly as TryAllocate
// charges, and given back when the last tensor sharing the buffer goes; 64-byte aligned.
//
// Thread safety: a plain function; safe from any thread.
#ifndef SLUICE_CORE_TENSOR_UNINITIALIZED_TENSOR_H_
#define SLUICE_CORE_TENSOR_UNINITIALIZED_TENSOR_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/shape.h"
#include "sluice/tensor.h"

namespace sluice {

// A numeric tensor of `shape` whose bytes are unspecified until the caller writes them.
// RESOURCE_EXHAUSTED naming `what` and the shape over the element or process limit (nothing is
// allocated then) or when the system refuses; INVALID_ARGUMENT for the string or invalid dtype
// or a shape that is not fully defined.
absl::StatusOr<Tensor> TryAllocateUninitialized(DType dtype, const Shape& shape,
                                                absl::string_view what);

// `bytes` of host memory whose contents are unspecified, charged as `bytes` rounded up to the
// alignment (one alignment unit for 0 bytes). RESOURCE_EXHAUSTED "<what>: <describe> needs ..."
// over the element or process limit (nothing is allocated then), past 2^63 bytes, or when the
// system refuses.
absl::StatusOr<std::shared_ptr<TensorBuffer>> TryAllocateUninitializedBuffer(
    size_t bytes, absl::string_view what, absl::string_view describe);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_UNINITIALIZED_TENSOR_H_
