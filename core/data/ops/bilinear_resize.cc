#include "core/data/ops/bilinear_resize.h"

#include <algorithm>
#include <cmath>

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

}  // namespace

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
  auto row_of = [&](int64_t r, int64_t keep) -> const float* {
    for (int i = 0; i < 2; ++i) {
      if (cached[i] == r) return rows[i];
    }
    const int slot = cached[0] == keep ? 1 : 0;  // never evict the other row in use
    HorizontalPassAny(src + r * row_stride, channels, taps_x, out_w, rows[slot]);
    cached[slot] = r;
    return rows[slot];
  };
  for (int64_t y = 0; y < out_h; ++y) {
    const BilinearTap& t = taps_y[y];
    const float* top = row_of(t.lower, -1);
    const float* bottom = row_of(t.upper, t.lower);
    const float lerp = t.lerp;
    float* o = out + y * n;
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
