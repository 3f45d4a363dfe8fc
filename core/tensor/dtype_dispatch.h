// Typed access to numeric tensors: a visitor over the C++ storage type of a DType and the value
// conversions of tf.cast. Used by the map fns, filter predicates and padded_batch.
//
//   VisitNumericDType(t.dtype(), [&](auto tag) {
//     using T = typename decltype(tag)::type;   // int32_t, float, Float16Bits, ...
//     const T* p = t.data<T>();
//   });
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_DTYPE_DISPATCH_H_
#define SLUICE_CORE_DTYPE_DISPATCH_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "sluice/dtype.h"

namespace sluice {

// Storage of the 16-bit float types, distinct from uint16_t.
struct Float16Bits {
  uint16_t bits;
};
struct BFloat16Bits {
  uint16_t bits;
};

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the storage type of `dtype` (bool, intN_t, uintN_t, float,
// double, Float16Bits, BFloat16Bits) and returns true; false for kString and kInvalid.
template <typename F>
bool VisitNumericDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBool: f(TypeTag<bool>{}); return true;
    case DType::kInt8: f(TypeTag<int8_t>{}); return true;
    case DType::kInt16: f(TypeTag<int16_t>{}); return true;
    case DType::kInt32: f(TypeTag<int32_t>{}); return true;
    case DType::kInt64: f(TypeTag<int64_t>{}); return true;
    case DType::kUInt8: f(TypeTag<uint8_t>{}); return true;
    case DType::kUInt16: f(TypeTag<uint16_t>{}); return true;
    case DType::kUInt32: f(TypeTag<uint32_t>{}); return true;
    case DType::kUInt64: f(TypeTag<uint64_t>{}); return true;
    case DType::kFloat16: f(TypeTag<Float16Bits>{}); return true;
    case DType::kBFloat16: f(TypeTag<BFloat16Bits>{}); return true;
    case DType::kFloat32: f(TypeTag<float>{}); return true;
    case DType::kFloat64: f(TypeTag<double>{}); return true;
    case DType::kString:
    case DType::kInvalid: break;
  }
  return false;
}

namespace dtype_internal {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16Bits> || std::is_same_v<T, BFloat16Bits>;

// A floating value to an integer as TF's CPU kernels do on x86: truncation toward zero; NaN and
// out-of-range values give the "integer indefinite" value (INT_MIN) of the 32- or 64-bit
// conversion, and narrower types take the low bits of the 64-bit conversion.
template <typename Dst>
Dst FloatToInteger(double v) {
  if constexpr (std::is_same_v<Dst, int32_t>) {
    if (!(v > -2147483649.0 && v < 2147483648.0)) return std::numeric_limits<int32_t>::min();
    return static_cast<int32_t>(v);
  } else if constexpr (std::is_same_v<Dst, uint64_t>) {
    if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) {
      return static_cast<uint64_t>(v);
    }
    return static_cast<uint64_t>(FloatToInteger<int64_t>(v));
  } else if constexpr (std::is_same_v<Dst, int64_t>) {
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
      return std::numeric_limits<int64_t>::min();
    }
    return static_cast<int64_t>(v);
  } else {
    return static_cast<Dst>(FloatToInteger<int64_t>(v));  // modular, as C++20 defines it
  }
}

}  // namespace dtype_internal

// A value as float or double: halves widen to float, others are returned as they are.
template <typename T>
auto Widen(T v) {
  if constexpr (std::is_same_v<T, Float16Bits>) {
    return HalfToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
    return BFloat16ToFloat(v.bits);
  } else {
    return v;
  }
}

// tf.cast of one value.
template <typename Dst, typename Src>
Dst ConvertNumber(Src v) {
  if constexpr (dtype_internal::kIsHalf<Src>) {
    return ConvertNumber<Dst>(Widen(v));
  } else if constexpr (std::is_same_v<Dst, Float16Bits>) {
    return Float16Bits{FloatToHalf(ConvertNumber<float>(v))};
  } else if constexpr (std::is_same_v<Dst, BFloat16Bits>) {
    return BFloat16Bits{FloatToBFloat16(ConvertNumber<float>(v))};
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return v != Src(0);
  } else if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<Src>) {
    return dtype_internal::FloatToInteger<Dst>(static_cast<double>(v));
  } else {
    return static_cast<Dst>(v);
  }
}

}  // namespace sluice

#endif  // SLUICE_CORE_DTYPE_DISPATCH_H_
