// StreamingCopy (core/util/streaming_copy.h): what memcpy gives, byte for byte, at every size
// around the non-temporal threshold and every alignment of source and destination, and nothing
// written outside the destination: a step copied into a shared-memory segment sits next to
// regions a consumer still reads.
#include "core/util/streaming_copy.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

constexpr uint8_t kGuard = 0xA5;

// A byte pattern that no shift of itself matches (a copy from the wrong offset shows).
std::vector<uint8_t> Pattern(size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>((i * 131 + i / 251) % 251);
  return v;
}

// Copies `bytes` from the pattern at `src_shift` to a guarded buffer at `dst_shift`; expects
// the copy exact and every guard byte around it untouched.
void ExpectExactCopy(size_t bytes, size_t src_shift, size_t dst_shift) {
  constexpr size_t kSlack = 256;
  const std::vector<uint8_t> src = Pattern(bytes + src_shift);
  std::vector<uint8_t> dst(bytes + dst_shift + 2 * kSlack, kGuard);
  uint8_t* to = dst.data() + kSlack + dst_shift;
  StreamingCopy(to, src.data() + src_shift, bytes);
  ASSERT_EQ(std::memcmp(to, src.data() + src_shift, bytes), 0)
      << bytes << " bytes, source +" << src_shift << ", destination +" << dst_shift;
  for (size_t i = 0; i < kSlack + dst_shift; ++i) {
    ASSERT_EQ(dst[i], kGuard) << "wrote " << (kSlack + dst_shift - i) << " bytes before, "
                              << bytes << " bytes, destination +" << dst_shift;
  }
  for (size_t i = kSlack + dst_shift + bytes; i < dst.size(); ++i) {
    ASSERT_EQ(dst[i], kGuard) << "wrote past the end, " << bytes << " bytes, destination +"
                              << dst_shift;
  }
}

TEST(StreamingCopyTest, LargeCopiesBypassTheCacheOnX86) {
#if defined(__x86_64__)
  // The segment paths rely on it for steps of 1 MiB and more (bench/RESULTS.md, shmbig).
  EXPECT_TRUE(StreamingCopyBypassesCache(kStreamingCopyMinBytes));
  EXPECT_TRUE(StreamingCopyBypassesCache(size_t{1} << 20));
#endif
  EXPECT_FALSE(StreamingCopyBypassesCache(kStreamingCopyMinBytes - 1));
  EXPECT_FALSE(StreamingCopyBypassesCache(0));
}

TEST(StreamingCopyTest, EverySizeAroundTheThresholdAndEveryAlignmentCopiesExactly) {
  const size_t t = kStreamingCopyMinBytes;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, t - 1, t, t + 1, t + 63,
                       t + 64, t + 127, t + 128, t + 129, 2 * t + 77}) {
    for (size_t dst_shift : {0, 1, 8, 31, 32, 63}) {
      for (size_t src_shift : {0, 1, 16, 33}) {
        ExpectExactCopy(bytes, src_shift, dst_shift);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(StreamingCopyTest, LargeStepSizedCopyIsExact) {
  ExpectExactCopy((size_t{16} << 20) + 5, 3, 17);
}

}  // namespace
}  // namespace sluice
