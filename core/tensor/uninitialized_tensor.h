// Tensors whose bytes are not zero-filled, for producers that write every byte before the
// tensor is shared (a JPEG decoder, a resize): Tensor::TryAllocate zero-fills, and for a decoded
// image that is a second pass over memory the decoder overwrites anyway.
//
// Charged to the process's memory budget (core/tensor/host_memory.h) exactly as TryAllocate
// charges, and given back when the last tensor sharing the buffer goes; 64-byte aligned.
//
// Thread safety: a plain function; safe from any thread.
#ifndef SLUICE_CORE_TENSOR_UNINITIALIZED_TENSOR_H_
#define SLUICE_CORE_TENSOR_UNINITIALIZED_TENSOR_H_

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

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_UNINITIALIZED_TENSOR_H_
