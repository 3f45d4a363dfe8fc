// A numeric tensor that views bytes another buffer holds (a mapped file: core/io/mapped_file.h)
// and is charged to the process's memory budget (core/tensor/host_memory.h) for those bytes, as
// an allocation of its size would be: a pipeline that holds views of a mapping counts them
// against --memory_limit and --max_element_bytes like the copies it would otherwise hold, and
// the charge goes back when the last tensor sharing the view goes. (Tensor::Wrap borrows and
// charges nothing.) The view keeps `backing` alive, so the tensor outlives the reader that made
// it.
//
//   ASSIGN_OR_RETURN(Tensor t, TryWrapCharged(DType::kUInt8, Shape({224, 224, 3}), mapping,
//                                             offset, "op 0 (load)"));
//
// Thread safety: a plain function; safe from any thread.
#ifndef SLUICE_CORE_TENSOR_CHARGED_VIEW_H_
#define SLUICE_CORE_TENSOR_CHARGED_VIEW_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/shape.h"
#include "sluice/tensor.h"

namespace sluice {

// The tensor of `dtype` and `shape` at byte `offset` of `backing`, no copy. INVALID_ARGUMENT as
// Tensor::Wrap (a string dtype, a shape not fully defined, bytes past the end of `backing`);
// RESOURCE_EXHAUSTED naming `what` and the shape when the budget refuses the bytes.
absl::StatusOr<Tensor> TryWrapCharged(DType dtype, const Shape& shape,
                                      std::shared_ptr<TensorBuffer> backing, size_t offset,
                                      absl::string_view what);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_CHARGED_VIEW_H_
