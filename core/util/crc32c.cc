#include "core/util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sluice {
namespace crc32c {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

// kTables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
  }
};
constexpr Tables kTables;

inline uint32_t LoadLE32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // x86 and every target we build for are little-endian
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one
// dependent chain runs at a third of the instruction's speed. Long inputs are cut into blocks
// of three lanes of kLane bytes whose CRCs run as three independent chains, then combined:
// the CRC register is linear, so register(s, A B) = Shift(register(s, A), |B|) ^
// register(0, B), where Shift(r, L) is r followed by L zero bytes (a linear map, tabled).
constexpr size_t kLane = 256;

// Shift(r, kLane) by bytes of r: kShift.t[k][b] = Shift(b << 8k, kLane).
struct ShiftTable {
  uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) uint32_t ShiftByZeros(uint32_t r, size_t n) {
  uint64_t c = r;
  for (size_t i = 0; i < n; i += 8) c = _mm_crc32_u64(c, 0);
  return static_cast<uint32_t>(c);
}

const ShiftTable& LaneShift() {
  static const ShiftTable* table = [] {
    auto* t = new ShiftTable();
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) t->t[k][b] = ShiftByZeros(b << (8 * k), kLane);
    }
    return t;
  }();
  return *table;
}

inline uint32_t Shift(const ShiftTable& s, uint32_t r) {
  return s.t[0][r & 0xff] ^ s.t[1][(r >> 8) & 0xff] ^ s.t[2][(r >> 16) & 0xff] ^
         s.t[3][r >> 24];
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const char* data,
                                                        size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(data) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), static_cast<uint8_t>(*data++));
    --n;
  }
  if (n >= 3 * kLane) {
    const ShiftTable& shift = LaneShift();
    while (n >= 3 * kLane) {
      uint64_t c1 = 0;
      uint64_t c2 = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t v0, v1, v2;
        std::memcpy(&v0, data + i, 8);
        std::memcpy(&v1, data + kLane + i, 8);
        std::memcpy(&v2, data + 2 * kLane + i, 8);
        c = _mm_crc32_u64(c, v0);
        c1 = _mm_crc32_u64(c1, v1);
        c2 = _mm_crc32_u64(c2, v2);
      }
      c = Shift(shift, static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
      c = Shift(shift, static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c2);
      data += 3 * kLane;
      n -= 3 * kLane;
    }
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, data, 8);
    c = _mm_crc32_u64(c, v);
    data += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), static_cast<uint8_t>(*data++));
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n) {
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo = LoadLE32(data) ^ c;
    uint32_t hi = LoadLE32(data + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    data += 8;
    n -= 8;
  }
  while (n > 0) {
    c = t[0][(c ^ static_cast<uint8_t>(*data++)) & 0xff] ^ (c >> 8);
    --n;
  }
  return ~c;
}

bool UsesHardware() {
#if defined(__x86_64__)
  static const bool has = DetectSse42();
  return has;
#else
  return false;
#endif
}

uint32_t Extend(uint32_t crc, const char* data, size_t n) {
#if defined(__x86_64__)
  if (UsesHardware()) return ExtendSse42(crc, data, n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace crc32c
}  // namespace sluice
