// RETURN_IF_ERROR and ASSIGN_OR_RETURN, defined once for the project: the Abseil shipped with
// Debian 12 (20220623) predates its own status macros.
#ifndef SLUICE_CORE_STATUS_MACROS_H_
#define SLUICE_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SLUICE_STATUS_CONCAT_INNER_(a, b) a##b
#define SLUICE_STATUS_CONCAT_(a, b) SLUICE_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    ::absl::Status sluice_status_ = (expr);                     \
    if (!sluice_status_.ok()) return sluice_status_;            \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK, else moves the value
// into `lhs` (a declaration such as `auto x` or an existing variable).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL_(SLUICE_STATUS_CONCAT_(sluice_statusor_, __LINE__), lhs, rexpr)

#define SLUICE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // SLUICE_CORE_STATUS_MACROS_H_
