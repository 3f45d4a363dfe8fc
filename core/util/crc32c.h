// CRC32C (Castagnoli), as TFRecord and LevelDB use it, and the masking TFRecord applies to the
// checksums it stores (a CRC of data that holds CRCs is weak; the mask rotates and offsets it).
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time), else a
// table-driven slicing-by-8 loop; both give the same values.
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_CRC32C_H_
#define SLUICE_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace sluice {
namespace crc32c {

// The CRC32C of `data` continuing from `crc` (the CRC of the bytes before it; 0 to start).
uint32_t Extend(uint32_t crc, const char* data, size_t n);
inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(absl::string_view data) { return Extend(0, data.data(), data.size()); }

inline constexpr uint32_t kMaskDelta = 0xa282ead8u;

// TFRecord's masked form of a CRC, and its inverse.
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

// Whether Extend uses the SSE4.2 instruction on this machine (for benchmarks and tests).
bool UsesHardware();
// The table-driven implementation, always available (tests compare the two).
uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n);

}  // namespace crc32c
}  // namespace sluice

#endif  // SLUICE_CORE_CRC32C_H_
