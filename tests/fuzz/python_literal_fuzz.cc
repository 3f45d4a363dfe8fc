// Fuzz target: the Python-literal parser (core/format/python_literal.h), which reads the tensor
// literals inside pipeline expressions (from_tensor_slices([...]), padding values, feature
// defaults) that clients send. On any bytes: no crash, no hang; a failure is INVALID_ARGUMENT;
// a literal that converts to a tensor prints (TensorToPythonLiteral) as a literal that parses
// and converts back to a tensor of the same shape and number of values.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "core/format/python_literal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sluice::PyValue> value = sluice::ParsePythonLiteral(text);
  if (!value.ok()) {
    if (!absl::IsInvalidArgument(value.status())) std::abort();
    return 0;
  }
  absl::StatusOr<sluice::Element> element = sluice::PyValueToElement(*value);
  if (!element.ok()) {
    if (!absl::IsInvalidArgument(element.status())) std::abort();
    return 0;
  }
  absl::StatusOr<sluice::Tensor> tensor = sluice::PyValueToTensor(*value);
  if (!tensor.ok()) return 0;  // a structure (tuple, dict) rather than one tensor
  const std::string printed = sluice::TensorToPythonLiteral(*tensor);
  absl::StatusOr<sluice::PyValue> again = sluice::ParsePythonLiteral(printed);
  if (!again.ok()) std::abort();
  absl::StatusOr<sluice::Tensor> back = sluice::PyValueToTensor(*again);
  if (!back.ok() || back->shape() != tensor->shape() ||
      back->num_elements() != tensor->num_elements()) {
    std::abort();
  }
  return 0;
}
