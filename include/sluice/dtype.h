// Element types of tensors, with TensorFlow's names ("float32", "int64", "string", ...).
#ifndef SLUICE_CORE_DTYPE_H_
#define SLUICE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace sluice {

// Values match proto::DataType; never renumber.
enum class DType : int {
  kInvalid = 0,
  kBool = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  kUInt16 = 7,
  kUInt32 = 8,
  kUInt64 = 9,
  kFloat16 = 10,
  kBFloat16 = 11,
  kFloat32 = 12,
  kFloat64 = 13,
  kString = 14,
};

// Bytes per element; 0 for kString and kInvalid (strings are not stored packed).
size_t DTypeSize(DType dtype);

// TensorFlow's name: "float32", "int32", "bool", "string", "bfloat16", ...
absl::string_view DTypeName(DType dtype);

// Inverse of DTypeName; also accepts "tf.float32" and "float"/"double"/"half".
// INVALID_ARGUMENT naming the text when it is not a dtype.
absl::StatusOr<DType> ParseDType(absl::string_view name);

bool IsFloating(DType dtype);  // float16, bfloat16, float32, float64
bool IsInteger(DType dtype);   // signed and unsigned integers (not bool)
bool IsSigned(DType dtype);

// Half-precision conversions (IEEE binary16 and bfloat16), round to nearest even.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// Maps a C++ type to its DType: DTypeOf<float>() == DType::kFloat32.
template <typename T>
constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<bool>() { return DType::kBool; }
template <> constexpr DType DTypeOf<int8_t>() { return DType::kInt8; }
template <> constexpr DType DTypeOf<int16_t>() { return DType::kInt16; }
template <> constexpr DType DTypeOf<int32_t>() { return DType::kInt32; }
template <> constexpr DType DTypeOf<int64_t>() { return DType::kInt64; }
template <> constexpr DType DTypeOf<uint8_t>() { return DType::kUInt8; }
template <> constexpr DType DTypeOf<uint16_t>() { return DType::kUInt16; }
template <> constexpr DType DTypeOf<uint32_t>() { return DType::kUInt32; }
template <> constexpr DType DTypeOf<uint64_t>() { return DType::kUInt64; }
template <> constexpr DType DTypeOf<float>() { return DType::kFloat32; }
template <> constexpr DType DTypeOf<double>() { return DType::kFloat64; }
template <> constexpr DType DTypeOf<std::string>() { return DType::kString; }

}  // namespace sluice

#endif  // SLUICE_CORE_DTYPE_H_
