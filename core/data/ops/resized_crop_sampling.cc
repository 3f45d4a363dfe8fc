#include "core/data/ops/resized_crop_sampling.h"

#include <algorithm>
#include <cmath>

#include "core/data/element_draws.h"

namespace sluice {

CropBox SampleResizedCrop(int64_t height, int64_t width, const double scale[2],
                          const double ratio[2], std::mt19937_64& gen) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * DrawUniform(gen, scale[0], scale[1]);
    const double aspect = std::exp(DrawUniform(gen, log_lo, log_hi));
    const double w = std::nearbyint(std::sqrt(target * aspect));
    const double h = std::nearbyint(std::sqrt(target / aspect));
    if (0 < w && w <= static_cast<double>(width) && 0 < h && h <= static_cast<double>(height)) {
      const auto hi = static_cast<int64_t>(h), wi = static_cast<int64_t>(w);
      const int64_t y = DrawUpTo(gen, height - hi);
      const int64_t x = DrawUpTo(gen, width - wi);
      return {y, x, hi, wi};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / ratio[0]));
  } else if (in_ratio > ratio[1]) {
    w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * ratio[1]));
  }
  h = std::clamp<int64_t>(h, 1, height);
  w = std::clamp<int64_t>(w, 1, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

}  // namespace sluice
