#include "core/data/shape_limits.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/util/status_macros.h"

namespace sluice {

std::string DimsString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims, absl::string_view what) {
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", DimsString(dims), " has a negative dimension"));
    }
  }
  // The non-zero dimensions must multiply without overflow even when another is 0: code that
  // multiplies them in order (Shape::num_elements) would overflow before it reached the 0.
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : dims) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", DimsString(dims), " has more elements than fit in int64"));
    }
    n *= d;
  }
  return empty ? 0 : n;
}

absl::Status CheckAllocation(absl::string_view what, DType dtype, absl::Span<const int64_t> dims,
                             const MemoryBudget& budget) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(dims, what));
  const int64_t bytes = AllocationFootprint(dtype, n);
  if (bytes == std::numeric_limits<int64_t>::max()) {  // AllocationFootprint saturated
    return absl::InvalidArgumentError(absl::StrCat(what, ": a ", DTypeName(dtype),
                                                   " tensor of shape ", DimsString(dims),
                                                   " has more bytes than fit in int64"));
  }
  return budget.CheckElement(bytes, what,
                             absl::StrCat("a ", DTypeName(dtype), " tensor of shape ",
                                          DimsString(dims), " (", bytes, " bytes)"));
}

}  // namespace sluice
