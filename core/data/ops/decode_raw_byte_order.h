// decode_raw's byte order: a record's bytes, copied into a tensor of `out_type`, are values of
// the byte order decode_raw(out_type, little_endian=...) names; on a host of the other order
// each value's bytes are reversed in place. Shared by the map fn (decode_raw_fn.cc) and the
// fixed-length source that reads records straight into decoded tensors (record_iterators.cc),
// so that the two cannot disagree on a value.
#ifndef SLUICE_CORE_DATA_OPS_DECODE_RAW_BYTE_ORDER_H_
#define SLUICE_CORE_DATA_OPS_DECODE_RAW_BYTE_ORDER_H_

#include <bit>
#include <cstddef>
#include <utility>

namespace sluice {

// Whether values `width` bytes wide in the byte order decode_raw's `big_endian` names must be
// reversed on this host (never for single bytes).
inline bool DecodeRawSwaps(size_t width, bool big_endian) {
  return width > 1 && big_endian == (std::endian::native == std::endian::little);
}

// Reverses the bytes of each of the `bytes / width` values of `width` bytes at `data`.
inline void ReverseEachValue(char* data, size_t bytes, size_t width) {
  for (size_t off = 0; off + width <= bytes; off += width) {
    for (size_t a = 0, b = width - 1; a < b; ++a, --b) std::swap(data[off + a], data[off + b]);
  }
}

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_DECODE_RAW_BYTE_ORDER_H_
