// absl::Status to Python exceptions: a non-OK status raises the sluice.errors class of its
// code (sluice.errors.InvalidArgumentError for INVALID_ARGUMENT, ...), carrying the code and
// the message, as TensorFlow's tf.errors do.
//
// Requires the GIL (the exception is built from Python objects).
#ifndef SLUICE_PYTHON_SRC_STATUS_EXCEPTION_H_
#define SLUICE_PYTHON_SRC_STATUS_EXCEPTION_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::python {

// Sets the Python error for `status` (which must not be OK) and throws
// pybind11::error_already_set.
[[noreturn]] void ThrowStatus(const absl::Status& status);

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_SRC_STATUS_EXCEPTION_H_
