// What random_flip_left_right and normalize do to an image, described for map fusion
// (core/data/ops/map_fusion.h): a fn that produces float32 images (random_resized_crop) takes
// these steps over from the maps after it and applies them while it writes each pixel, instead
// of a pass of its own per step over a tensor of its own per step.
//
// Thread safety: a plain value.
#ifndef SLUICE_CORE_PIXEL_STEP_H_
#define SLUICE_CORE_PIXEL_STEP_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace sluice {

struct PixelStep {
  enum class Kind {
    kFlipLeftRight,  // random_flip_left_right(seed): mirrors the width axis with probability 1/2
    kNormalize,      // normalize(mean, std): (x - mean) / std per channel, float32
  };
  Kind kind = Kind::kFlipLeftRight;
  std::optional<int64_t> seed;  // kFlipLeftRight: its seed (core/data/element_draws.h)
  std::vector<float> mean;      // kNormalize: one value, or one per channel
  std::vector<float> std;       // kNormalize: as mean
};

}  // namespace sluice

#endif  // SLUICE_CORE_PIXEL_STEP_H_
