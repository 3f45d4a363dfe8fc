// Checks for the tensors whose shape a client (a pipeline expression, a graph) or a file (an
// image header, an .npy header) chooses, made before anything is allocated: resize([h, w]),
// one_hot(depth), padded_batch's padded shapes, reshape, parse_example's FixedLenFeature
// shapes, decode_image's header dimensions. Sizes are computed with overflow checks; the bytes
// are checked against the process's element limit (core/data/memory_budget.h), since whatever
// one op allocates for one element is part of one element.
//
//   ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(dims, "reshape([...])"));
//   RETURN_IF_ERROR(CheckAllocation("resize([200000, 200000])", DType::kFloat32,
//                                   {200000, 200000, 3}));
//
// Errors:
//  - INVALID_ARGUMENT "<what>: shape [d0, d1, ...] ..." for a negative dimension or an element
//    count (or byte count) that does not fit in int64: a shape that cannot exist.
//  - RESOURCE_EXHAUSTED "<what>: a <dtype> tensor of shape [...] (N bytes) needs more than the
//    memory limit of one element, L bytes (--max_element_bytes)" for one that could exist but
//    is over the limit.
//
// Thread safety: pure functions of their arguments and the budget's limits (atomics).
#ifndef SLUICE_CORE_SHAPE_LIMITS_H_
#define SLUICE_CORE_SHAPE_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/data/memory_budget.h"
#include "sluice/dtype.h"

namespace sluice {

// "[60000, 60000, 3]".
std::string DimsString(absl::Span<const int64_t> dims);

// The product of `dims` (1 for none). INVALID_ARGUMENT naming `what` and the shape when a
// dimension is negative or the product of the non-zero ones overflows int64 (so that code
// multiplying the dimensions in any order stays defined).
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims, absl::string_view what);

// Before allocating a tensor of `dtype` and `dims` (or any buffer of that many values) for one
// element: OK, INVALID_ARGUMENT as CheckedNumElements, or RESOURCE_EXHAUSTED when its footprint
// (AllocationFootprint) is over `budget`'s element limit. The message names `what` (the op),
// the dtype, the shape and the bytes.
absl::Status CheckAllocation(absl::string_view what, DType dtype, absl::Span<const int64_t> dims,
                             const MemoryBudget& budget = ProcessMemoryBudget());

}  // namespace sluice

#endif  // SLUICE_CORE_SHAPE_LIMITS_H_
