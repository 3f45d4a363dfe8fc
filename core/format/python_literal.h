// Python literals as tf.data reads them: the text of `from_tensors(([1.], [1.]))`'s argument,
// parsed into a PyValue and converted to an Element with TensorFlow's rules.
//
// Syntax (a subset of Python expressions):
//   ints      1, -7, 0x1f, 0o17, 0b101, 1_000 (any size; range is checked on conversion)
//   floats    1.  .5  1e-3  -2.5  1_0.5  float('inf')  float('-inf')  float('nan')
//   strings   'a' "b" with Python escapes, r'raw', b'bytes', rb'..'
//   True False None, tuples (a, b) (a,) (), lists [a, b], dicts {'k': v} (string keys)
//   names     dotted identifiers such as AUTOTUNE or tf.data.experimental.SHARD_HINT, kept as
//             PyValue::kName for the caller to resolve (a name is never a tensor)
//   tf.constant(value, dtype=None, shape=None): value converted to `dtype`
//             (tf.int64, 'int64', ...) and reshaped or filled to `shape`, as tf.constant does.
//   tf.ragged.constant(pylist, dtype=None, ragged_rank=None) (row_splits_dtype int64 only),
//   tf.RaggedTensor.from_row_splits(values, row_splits),
//   tf.RaggedTensor.from_nested_row_splits(flat_values, nested_row_splits),
//   tf.sparse.SparseTensor(indices, values, dense_shape) (also tf.SparseTensor): composite
//             values (sluice/composite_tensor.h), elements only (PyValueToElement).
//   Whitespace is free and a trailing comma is allowed wherever Python allows it.
//
// Conversion to tensors (PyValueToTensor) follows tf.constant without a dtype:
//   int -> int32, or int64 when some value does not fit in int32 (beyond int64: error);
//   float -> float32 (a finite value beyond float32's range is an error, as in TF);
//   a list mixing ints and floats -> float32; bool -> bool; str and bytes -> string
//   (str as UTF-8); an empty list -> float32 of shape (0,); nested lists and tuples inside a
//   list are dimensions and must be rectangular; any other mix of kinds is an error.
// Conversion to elements (PyValueToElement) follows tf.data: tuples and dicts are structure,
// everything else (a list included) is one tensor.
//
// Columns in error messages are 1-based byte offsets into the parsed text.
//
// Thread safety: plain functions on values.
#ifndef SLUICE_CORE_PYTHON_LITERAL_H_
#define SLUICE_CORE_PYTHON_LITERAL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"

namespace sluice {

// A literal as written, before any conversion.
struct PyValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kName,
                    kConstant, kRagged, kSparse };
  Kind kind = Kind::kNone;
  // Byte offsets [begin, end) of the literal in the parsed text; column() is begin + 1.
  size_t begin = 0;
  size_t end = 0;

  bool bool_value = false;                // kBool
  // kInt: the value is (negative ? -magnitude : magnitude); int_too_big when |value| >= 2^64.
  bool negative = false;
  uint64_t magnitude = 0;
  bool int_too_big = false;
  double float_value = 0;                 // kFloat, and kInt as a double
  std::string text;                       // kStr (UTF-8), kBytes, kName (dotted, no spaces)
  std::vector<PyValue> items;             // kTuple, kList, kDict values; kConstant: {value}
  std::vector<std::string> keys;          // kDict, parallel to items
  std::optional<DType> constant_dtype;    // kConstant
  std::optional<std::vector<int64_t>> constant_shape;  // kConstant
  // kRagged: tf.ragged.constant(items[0], dtype=constant_dtype, ragged_rank=ragged_rank), or,
  // when ragged_from_splits, items = {flat_values, row_splits...}. kSparse: items = {indices,
  // values, dense_shape}.
  std::optional<int64_t> ragged_rank;
  bool ragged_from_splits = false;

  int column() const { return static_cast<int>(begin) + 1; }
  // The value as int64, if it is a kInt within int64's range.
  std::optional<int64_t> AsInt64() const;
  // "int", "float", "str", "tuple", ... (Python's type names; "name" for kName).
  absl::string_view KindName() const;
};

// Parses one literal starting at text[*pos] (leading whitespace skipped) and sets *pos just past
// it. Errors are INVALID_ARGUMENT "<context>, column N: expected ..., found ...".
absl::StatusOr<PyValue> ParsePyValue(absl::string_view text, size_t* pos,
                                     absl::string_view context = "python literal");
// True for the calls a literal may make (tf.constant, float, tf.ragged.constant, ...): a
// pipeline parser hands a call of these names to ParsePyValue.
bool IsLiteralCall(absl::string_view name);
// Parses `text`, which must hold exactly one literal (surrounding whitespace allowed).
absl::StatusOr<PyValue> ParsePythonLiteral(absl::string_view text);

// tf.constant(v). INVALID_ARGUMENT naming the column on a ragged nested list
// ("ragged nested list: the item at column 9 has shape (1,) but the item at column 3 has shape
// (2,)"), mixed kinds, out-of-range values, or a value that is not a tensor (dict, None, name).
absl::StatusOr<Tensor> PyValueToTensor(const PyValue& v);
// tf.data's structure rules: a tuple or dict is a structure of elements, anything else a tensor.
absl::StatusOr<Element> PyValueToElement(const PyValue& v);

// A SparseTensor node as tf.sparse.SparseTensor(indices=..., values=..., dense_shape=...), a
// RaggedTensor node as tf.RaggedTensor.from_nested_row_splits(flat_values=..., nested_row_splits=
// (...)); PyValueToElement reads both back to an equal node.
std::string CompositeToPythonLiteral(const Element& node);
// A Python literal that ParsePythonLiteral + PyValueToTensor read back to an equal tensor
// (bitwise, except that every NaN reads back as the canonical NaN). Plain Python literals where
// tf.constant's inference gives this dtype and shape back (int32, float32, bool, string);
// otherwise `tf.constant(<values>, dtype=tf.int64)` and, for zero-size tensors that nested
// lists cannot express, `tf.constant([], dtype=tf.float32, shape=(0, 3))`.
std::string TensorToPythonLiteral(const Tensor& t);
// Tuples as (a, b) / (a,), dicts as {'k': v} in insertion order, leaves by TensorToPythonLiteral.
// A NestKind::kList structure has no tf.data spelling; it is printed as a tuple.
std::string ElementToPythonLiteral(const Element& e);
// A Python str literal for `s` when it is valid UTF-8 (non-ASCII as \u escapes), else a bytes
// literal b'...'; reads back to exactly the bytes of `s`.
std::string PythonStringLiteral(absl::string_view s);
// The shortest decimal that reads back to `f` (as a double narrowed to float), with a '.':
// "1.0", "0.1", "1.0e-05"; non-finite values as float('inf'), float('-inf'), float('nan').
std::string PythonFloat32Literal(float f);
std::string PythonFloat64Literal(double d);

}  // namespace sluice

#endif  // SLUICE_CORE_PYTHON_LITERAL_H_
