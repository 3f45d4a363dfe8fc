#include "core/util/streaming_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sluice {
namespace {

#if defined(__x86_64__)

// The bytes up to dst's next 64-byte boundary, copied by memcpy, so that every non-temporal
// store below fills whole cache lines (a partial line written so costs a read of it).
size_t CopyHead(uint8_t** dst, const uint8_t** src, size_t bytes) {
  size_t head = (64 - reinterpret_cast<uintptr_t>(*dst) % 64) % 64;
  if (head > bytes) head = bytes;
  std::memcpy(*dst, *src, head);
  *dst += head;
  *src += head;
  return bytes - head;
}

// 128 bytes a round: four 32-byte loads, then four stores that bypass the cache.
__attribute__((target("avx2"))) void StreamAvx2(uint8_t* dst, const uint8_t* src,
                                                 size_t bytes) {
  bytes = CopyHead(&dst, &src, bytes);
  for (; bytes >= 128; bytes -= 128, dst += 128, src += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 96), d);
  }
  _mm_sfence();
  std::memcpy(dst, src, bytes);
}

// The same with the 16-byte stores every x86-64 CPU has.
void StreamSse2(uint8_t* dst, const uint8_t* src, size_t bytes) {
  bytes = CopyHead(&dst, &src, bytes);
  for (; bytes >= 64; bytes -= 64, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  _mm_sfence();
  std::memcpy(dst, src, bytes);
}

// Whether this CPU has AVX2 (asked once; __builtin_cpu_init because this may run before the
// runtime's own initialization, from another static initializer).
bool HasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

#endif  // __x86_64__

}  // namespace

bool StreamingCopyBypassesCache(size_t bytes) {
#if defined(__x86_64__)
  return bytes >= kStreamingCopyMinBytes;
#else
  (void)bytes;
  return false;
#endif
}

void StreamingCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (StreamingCopyBypassesCache(bytes)) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    if (HasAvx2()) {
      StreamAvx2(d, s, bytes);
    } else {
      StreamSse2(d, s, bytes);
    }
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace sluice
