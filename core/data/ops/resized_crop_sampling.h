// Where random_resized_crop cuts: torchvision's RandomResizedCrop.get_params, with Sluice's
// random stream (core/data/element_draws.h) in place of torch's.
//
// Up to 10 attempts: an area share drawn uniformly from `scale`, an aspect ratio (width /
// height) drawn log-uniformly from `ratio`, w = round(sqrt(area * share * aspect)),
// h = round(sqrt(area * share / aspect)); the first box that fits the image is placed at a
// uniform offset. When none fits, the central crop of the whole image with its aspect ratio
// clamped into `ratio`. round() is Python's (half to even).
//
// Thread safety: a plain function.
#ifndef SLUICE_CORE_RESIZED_CROP_SAMPLING_H_
#define SLUICE_CORE_RESIZED_CROP_SAMPLING_H_

#include <cstdint>
#include <random>

namespace sluice {

// A box of an image: rows [y, y + height), columns [x, x + width).
struct CropBox {
  int64_t y, x, height, width;
};

// Requires height, width >= 1, 0 < scale[0] <= scale[1], 0 < ratio[0] <= ratio[1]. The box lies
// inside the image and is at least 1 x 1.
CropBox SampleResizedCrop(int64_t height, int64_t width, const double scale[2],
                          const double ratio[2], std::mt19937_64& gen);

}  // namespace sluice

#endif  // SLUICE_CORE_RESIZED_CROP_SAMPLING_H_
