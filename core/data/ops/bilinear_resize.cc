#include "core/data/ops/bilinear_resize.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace sluice {
namespace {

// One source row interpolated horizontally: row[x * C + k].
template <int kChannels>
void HorizontalPass(const uint8_t* src, const BilinearTap* taps_x, int64_t out_w, float* row) {
  for (int64_t x = 0; x < out_w; ++x) {
    const uint8_t* l = src + taps_x[x].lower * kChannels;
    const uint8_t* u = src + taps_x[x].upper * kChannels;
    const float lerp = taps_x[x].lerp;
    for (int k = 0; k < kChannels; ++k) {
      const float a = static_cast<float>(l[k]);
      const float b = static_cast<float>(u[k]);
      row[x * kChannels + k] = a + (b - a) * lerp;
    }
  }
}

void HorizontalPassAny(const uint8_t* src, int64_t channels, const BilinearTap* taps_x,
                       int64_t out_w, float* row) {
  switch (channels) {
    case 1: return HorizontalPass<1>(src, taps_x, out_w, row);
    case 3: return HorizontalPass<3>(src, taps_x, out_w, row);
    case 4: return HorizontalPass<4>(src, taps_x, out_w, row);
    default: break;
  }
  for (int64_t x = 0; x < out_w; ++x) {
    const uint8_t* l = src + taps_x[x].lower * channels;
    const uint8_t* u = src + taps_x[x].upper * channels;
    for (int64_t k = 0; k < channels; ++k) {
      const float a = static_cast<float>(l[k]);
      const float b = static_cast<float>(u[k]);
      row[x * channels + k] = a + (b - a) * taps_x[x].lerp;
    }
  }
}

std::atomic<bool> force_scalar{false};

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// The horizontal pass of one call, planned per block of 8 output values: value j = x * C + k
// reads the source bytes lower[j] and upper[j] and weighs them with lerp[j]. A block whose
// bytes lie within 32 consecutive readable bytes (a downscale by up to ~4x, or any upscale) is
// read as two 16-byte loads from window[b] and picked apart with byte shuffles (kShuffle);
// else, when every index has 3 readable bytes after it, by 32-bit gathers (4 bytes from each
// index, the low byte kept: kGather); else value by value (kScalar). Gathers are a last resort:
// with the Gather Data Sampling microcode mitigation they cost several times the shuffles.
struct GatherPlan {
  enum Mode : uint8_t { kScalar, kGather, kShuffle };
  std::vector<int32_t> lower;
  std::vector<int32_t> upper;
  std::vector<float> lerp;
  std::vector<uint8_t> mode;      // per block of 8 values
  std::vector<int32_t> window;    // kShuffle: the first byte of the block's 32
  std::vector<uint8_t> shuffles;  // kShuffle: 64 bytes a block: lower from the first and
                                  // second 16 bytes, upper from the first and second
};

// Fills `plan` for `taps_x`; false when an index does not fit in 32 bits (the caller then
// takes the scalar pass).
bool PlanGathers(int64_t channels, const BilinearTap* taps_x, int64_t out_w, GatherPlan* plan) {
  const int64_t n = out_w * channels;
  plan->lower.resize(static_cast<size_t>(n));
  plan->upper.resize(static_cast<size_t>(n));
  plan->lerp.resize(static_cast<size_t>(n));
  int64_t last = 0;  // the largest byte index the row is read at: the row has it
  for (int64_t x = 0; x < out_w; ++x) {
    last = std::max({last, taps_x[x].lower * channels + channels - 1,
                     taps_x[x].upper * channels + channels - 1});
  }
  if (last > std::numeric_limits<int32_t>::max() - 4) return false;
  for (int64_t x = 0; x < out_w; ++x) {
    for (int64_t k = 0; k < channels; ++k) {
      const size_t j = static_cast<size_t>(x * channels + k);
      plan->lower[j] = static_cast<int32_t>(taps_x[x].lower * channels + k);
      plan->upper[j] = static_cast<int32_t>(taps_x[x].upper * channels + k);
      plan->lerp[j] = taps_x[x].lerp;
    }
  }
  const int64_t blocks = n / 8;
  plan->mode.assign(static_cast<size_t>(blocks), GatherPlan::kScalar);
  plan->window.assign(static_cast<size_t>(blocks), 0);
  plan->shuffles.assign(static_cast<size_t>(blocks * 64), 0x80);  // 0x80: a zero byte
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t least = std::numeric_limits<int64_t>::max(), most = 0;
    for (int64_t j = b * 8; j < b * 8 + 8; ++j) {
      for (const int32_t i : {plan->lower[static_cast<size_t>(j)], plan->upper[static_cast<size_t>(j)]}) {
        least = std::min<int64_t>(least, i);
        most = std::max<int64_t>(most, i);
      }
    }
    const size_t bs = static_cast<size_t>(b);
    if (most - least < 32 && least + 31 <= last) {
      plan->mode[bs] = GatherPlan::kShuffle;
      plan->window[bs] = static_cast<int32_t>(least);
      uint8_t* shuffle = plan->shuffles.data() + b * 64;
      for (int64_t v = 0; v < 8; ++v) {
        const size_t j = static_cast<size_t>(b * 8 + v);
        const int64_t l = plan->lower[j] - least, u = plan->upper[j] - least;
        shuffle[(l < 16 ? 0 : 16) + v] = static_cast<uint8_t>(l % 16);
        shuffle[(u < 16 ? 32 : 48) + v] = static_cast<uint8_t>(u % 16);
      }
    } else if (most + 3 <= last) {
      plan->mode[bs] = GatherPlan::kGather;
    }
  }
  return true;
}

// HorizontalPass with AVX2 shuffles or gathers (GatherPlan): the same float operations (a subtraction, a multiplication
// and an addition, never fused: this function's target has no FMA), so the same values.
__attribute__((target("avx2"))) void HorizontalPassAvx2(const uint8_t* src,
                                                       const GatherPlan& plan, float* row) {
  const int64_t n = static_cast<int64_t>(plan.lerp.size());
  const __m256i low_byte = _mm256_set1_epi32(0xFF);
  const int* base = reinterpret_cast<const int*>(src);
  for (int64_t b = 0; b < n / 8; ++b) {
    const int64_t j0 = b * 8;
    const GatherPlan::Mode mode = static_cast<GatherPlan::Mode>(plan.mode[static_cast<size_t>(b)]);
    if (mode == GatherPlan::kShuffle) {
      const uint8_t* w = src + plan.window[static_cast<size_t>(b)];
      const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
      const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16));
      const __m128i* shuffle = reinterpret_cast<const __m128i*>(plan.shuffles.data() + b * 64);
      const __m128i lower8 =
          _mm_or_si128(_mm_shuffle_epi8(first, _mm_loadu_si128(shuffle)),
                       _mm_shuffle_epi8(second, _mm_loadu_si128(shuffle + 1)));
      const __m128i upper8 =
          _mm_or_si128(_mm_shuffle_epi8(first, _mm_loadu_si128(shuffle + 2)),
                       _mm_shuffle_epi8(second, _mm_loadu_si128(shuffle + 3)));
      const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lower8));
      const __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(upper8));
      const __m256 wt = _mm256_loadu_ps(plan.lerp.data() + j0);
      _mm256_storeu_ps(row + j0, _mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(c, a), wt)));
      continue;
    }
    if (mode == GatherPlan::kScalar) {
      for (int64_t j = j0; j < j0 + 8; ++j) {
        const float a = static_cast<float>(src[plan.lower[static_cast<size_t>(j)]]);
        const float c = static_cast<float>(src[plan.upper[static_cast<size_t>(j)]]);
        row[j] = a + (c - a) * plan.lerp[static_cast<size_t>(j)];
      }
      continue;
    }
    const __m256i il =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plan.lower.data() + j0));
    const __m256i iu =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plan.upper.data() + j0));
    const __m256 a =
        _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_i32gather_epi32(base, il, 1), low_byte));
    const __m256 c =
        _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_i32gather_epi32(base, iu, 1), low_byte));
    const __m256 w = _mm256_loadu_ps(plan.lerp.data() + j0);
    _mm256_storeu_ps(row + j0, _mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(c, a), w)));
  }
  for (int64_t j = n / 8 * 8; j < n; ++j) {
    const float a = static_cast<float>(src[plan.lower[static_cast<size_t>(j)]]);
    const float c = static_cast<float>(src[plan.upper[static_cast<size_t>(j)]]);
    row[j] = a + (c - a) * plan.lerp[static_cast<size_t>(j)];
  }
}

// One output row from two horizontal passes: top + (bottom - top) * lerp, then (v - mean) / std
// with `normalize`; 8 values at a time, in the scalar loop's float operations (no FMA).
__attribute__((target("avx2"))) void VerticalPassAvx2(const float* top, const float* bottom,
                                                     float lerp, int64_t n,
                                                     const RowNormalize* normalize, float* o) {
  const __m256 w = _mm256_set1_ps(lerp);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 t = _mm256_loadu_ps(top + j);
    __m256 v = _mm256_add_ps(t, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(bottom + j), t), w));
    if (normalize != nullptr) {
      v = _mm256_div_ps(_mm256_sub_ps(v, _mm256_loadu_ps(normalize->mean + j)),
                        _mm256_loadu_ps(normalize->std + j));
    }
    _mm256_storeu_ps(o + j, v);
  }
  for (; j < n; ++j) {
    const float v = top[j] + (bottom[j] - top[j]) * lerp;
    o[j] = normalize == nullptr ? v : (v - normalize->mean[j]) / normalize->std[j];
  }
}

}  // namespace

bool BilinearResizeUsesAvx2() {
  return CpuHasAvx2() && !force_scalar.load(std::memory_order_relaxed);
}

void TEST_ForceScalarBilinearResize(bool scalar) {
  force_scalar.store(scalar, std::memory_order_relaxed);
}

void ComputeBilinearTaps(int64_t out_size, int64_t base, int64_t extent, float offset,
                         float extent_scaled, BilinearTap* taps) {
  const float scale = extent_scaled / static_cast<float>(out_size);
  for (int64_t i = 0; i < out_size; ++i) {
    const float in = offset + ((static_cast<float>(i) + 0.5f) * scale - 0.5f);
    const float in_f = std::floor(in);
    taps[i].lower = base + std::max(static_cast<int64_t>(in_f), int64_t{0});
    taps[i].upper = base + std::min(static_cast<int64_t>(std::ceil(in)), extent - 1);
    taps[i].lerp = in - in_f;
  }
}

void ResizeBilinearU8(const uint8_t* src, int64_t row_stride, int64_t channels,
                      const BilinearTap* taps_y, int64_t out_h, const BilinearTap* taps_x,
                      int64_t out_w, float* out, float* scratch,
                      const RowNormalize* normalize) {
  const int64_t n = out_w * channels;
  // Two cached horizontal passes: rows[i] holds source row cached[i].
  float* rows[2] = {scratch, scratch + n};
  int64_t cached[2] = {-1, -1};
  // The gather plan is the thread's, reused from call to call (no allocation once grown).
  thread_local GatherPlan plan;
  // With AVX2: the horizontal pass by gathers and the vertical pass 8 values at a time.
  const bool gather =
      BilinearResizeUsesAvx2() && PlanGathers(channels, taps_x, out_w, &plan);
  auto row_of = [&](int64_t r, int64_t keep) -> const float* {
    for (int i = 0; i < 2; ++i) {
      if (cached[i] == r) return rows[i];
    }
    const int slot = cached[0] == keep ? 1 : 0;  // never evict the other row in use
    if (gather) {
      HorizontalPassAvx2(src + r * row_stride, plan, rows[slot]);
    } else {
      HorizontalPassAny(src + r * row_stride, channels, taps_x, out_w, rows[slot]);
    }
    cached[slot] = r;
    return rows[slot];
  };
  for (int64_t y = 0; y < out_h; ++y) {
    const BilinearTap& t = taps_y[y];
    const float* top = row_of(t.lower, -1);
    const float* bottom = row_of(t.upper, t.lower);
    const float lerp = t.lerp;
    float* o = out + y * n;
    if (gather) {
      VerticalPassAvx2(top, bottom, lerp, n, normalize, o);
      continue;
    }
    if (normalize == nullptr) {
      for (int64_t j = 0; j < n; ++j) o[j] = top[j] + (bottom[j] - top[j]) * lerp;
      continue;
    }
    const float* mean = normalize->mean;
    const float* std = normalize->std;
    for (int64_t j = 0; j < n; ++j) {
      const float v = top[j] + (bottom[j] - top[j]) * lerp;
      o[j] = (v - mean[j]) / std[j];
    }
  }
}

}  // namespace sluice
