// The bilinear resize kernel (core/data/ops/bilinear_resize.h): its AVX2 horizontal pass gives
// the scalar pass's values bit for bit (random windows, sizes, channel counts, mirrored taps,
// with and without a fused normalize), both give the kernel's formula, and the gathers never
// read past the last byte the taps name (the image ends right before an inaccessible page).
// Seeds are fixed and printed in failure messages.
#include "core/data/ops/bilinear_resize.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

// `bytes` bytes that end right before a page that cannot be read: a read past them faults.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = (bytes + page - 1) / page * page + page;
    base_ = static_cast<uint8_t*>(
        mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + mapped_ - page, page, PROT_NONE), 0);
    data_ = base_ + mapped_ - page - bytes;
  }
  ~GuardedBytes() { munmap(base_, mapped_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  uint8_t* data() { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t mapped_ = 0;
};

struct Case {
  int64_t channels, src_w, src_h, win_x, win_y, win_w, win_h, out_w, out_h;
  bool mirrored, normalized;
  std::string ToString() const {
    return absl::StrCat(channels, " channels, ", src_w, "x", src_h, " source, window ", win_w,
                        "x", win_h, " at (", win_x, ", ", win_y, ") -> ", out_w, "x", out_h,
                        mirrored ? ", mirrored" : "", normalized ? ", normalized" : "");
  }
};

Case RandomCase(SeededRng& rng) {
  Case c;
  c.channels = rng.Pick(std::vector<int64_t>{1, 2, 3, 3, 3, 4});
  c.src_w = rng.In(1, 700);
  c.src_h = rng.In(1, 60);
  c.win_w = rng.In(1, c.src_w);
  c.win_h = rng.In(1, c.src_h);
  // Windows at the image's right and bottom edges often: where a gather could run past.
  c.win_x = rng.Chance(50) ? c.src_w - c.win_w : rng.In(0, c.src_w - c.win_w);
  c.win_y = rng.Chance(50) ? c.src_h - c.win_h : rng.In(0, c.src_h - c.win_h);
  c.out_w = rng.In(1, 300);
  c.out_h = rng.In(1, 40);
  c.mirrored = rng.Chance(50);
  c.normalized = rng.Chance(50);
  return c;
}

// The resize of `c` over `src` with the current horizontal pass.
std::vector<float> Resize(const Case& c, const uint8_t* src) {
  std::vector<BilinearTap> ty(static_cast<size_t>(c.out_h)), tx(static_cast<size_t>(c.out_w));
  ComputeBilinearTaps(c.out_h, 0, c.win_h, 0, static_cast<float>(c.win_h), ty.data());
  ComputeBilinearTaps(c.out_w, 0, c.win_w, 0, static_cast<float>(c.win_w), tx.data());
  if (c.mirrored) std::reverse(tx.begin(), tx.end());
  const int64_t n = c.out_w * c.channels;
  std::vector<float> mean(static_cast<size_t>(n)), std(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    mean[static_cast<size_t>(j)] = 100.0f + static_cast<float>(j % c.channels) * 7.3f;
    std[static_cast<size_t>(j)] = 50.0f + static_cast<float>(j % c.channels) * 3.1f;
  }
  const RowNormalize normalize{mean.data(), std.data()};
  std::vector<float> out(static_cast<size_t>(c.out_h * n)), scratch(static_cast<size_t>(2 * n));
  const uint8_t* window = src + (c.win_y * c.src_w + c.win_x) * c.channels;
  ResizeBilinearU8(window, c.src_w * c.channels, c.channels, ty.data(), c.out_h, tx.data(),
                   c.out_w, out.data(), scratch.data(), c.normalized ? &normalize : nullptr);
  // The kernel's formula, value by value, in the same float operations.
  for (int64_t y = 0; y < c.out_h; ++y) {
    for (int64_t j = 0; j < n; ++j) {
      const BilinearTap& h = tx[static_cast<size_t>(j / c.channels)];
      const int64_t k = j % c.channels;
      auto at = [&](int64_t row, int64_t col) {
        return static_cast<float>(window[row * c.src_w * c.channels + col * c.channels + k]);
      };
      auto across = [&](int64_t row) {
        const float a = at(row, h.lower), b = at(row, h.upper);
        return a + (b - a) * h.lerp;
      };
      const BilinearTap& v = ty[static_cast<size_t>(y)];
      const float top = across(v.lower), bottom = across(v.upper);
      float want = top + (bottom - top) * v.lerp;
      if (c.normalized) want = (want - mean[static_cast<size_t>(j)]) / std[static_cast<size_t>(j)];
      const float got = out[static_cast<size_t>(y * n + j)];
      if (std::memcmp(&got, &want, sizeof(float)) != 0) {
        ADD_FAILURE() << c.ToString() << ": value (" << y << ", " << j << ") is " << got
                      << ", the formula gives " << want;
        return out;
      }
    }
  }
  return out;
}

TEST(BilinearResizeTest, Avx2PassGivesTheScalarValuesBitForBit) {
  if (!BilinearResizeUsesAvx2()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar pass";
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SeededRng rng(seed);
    const Case c = RandomCase(rng);
    GuardedBytes src(static_cast<size_t>(c.src_w * c.src_h * c.channels));
    for (int64_t i = 0; i < c.src_w * c.src_h * c.channels; ++i) {
      src.data()[i] = static_cast<uint8_t>(rng.Next());
    }
    const std::vector<float> gathered = Resize(c, src.data());
    TEST_ForceScalarBilinearResize(true);
    const std::vector<float> scalar = Resize(c, src.data());
    TEST_ForceScalarBilinearResize(false);
    ASSERT_EQ(gathered.size(), scalar.size());
    ASSERT_EQ(std::memcmp(gathered.data(), scalar.data(), gathered.size() * sizeof(float)), 0)
        << "seed " << seed << ": " << c.ToString();
  }
}

}  // namespace
}  // namespace sluice
