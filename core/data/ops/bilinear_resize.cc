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

// The horizontal pass of one call as per-value gathers: output value j = x * C + k reads the
// source bytes lower[j] and upper[j] and weighs them with lerp[j]. A block of 8 values is
// gathered as 32-bit loads (4 bytes from each index, the low byte kept), so it is gathered
// only when every index of it has 3 readable bytes after it in the row (safe[b]); the others
// are computed one by one.
struct GatherPlan {
  std::vector<int32_t> lower;
  std::vector<int32_t> upper;
  std::vector<float> lerp;
  std::vector<uint8_t> safe;  // per block of 8 values
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
  plan->safe.assign(static_cast<size_t>(n / 8), 1);
  for (int64_t j = 0; j < n / 8 * 8; ++j) {
    const int64_t most = std::max(plan->lower[static_cast<size_t>(j)],
                                  plan->upper[static_cast<size_t>(j)]);
    if (most + 3 > last) plan->safe[static_cast<size_t>(j / 8)] = 0;
  }
  return true;
}

// HorizontalPass with AVX2 gathers: the same float operations (a subtraction, a multiplication
// and an addition, never fused: this function's target has no FMA), so the same values.
__attribute__((target("avx2"))) void HorizontalPassAvx2(const uint8_t* src,
                                                       const GatherPlan& plan, float* row) {
  const int64_t n = static_cast<int64_t>(plan.lerp.size());
  const __m256i low_byte = _mm256_set1_epi32(0xFF);
  const int* base = reinterpret_cast<const int*>(src);
  for (int64_t b = 0; b < n / 8; ++b) {
    const int64_t j0 = b * 8;
    if (!plan.safe[static_cast<size_t>(b)]) {
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
