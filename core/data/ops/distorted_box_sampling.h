// Where sample_distorted_bounding_box cuts: TF's SampleDistortedBoundingBoxV2 kernel
// (tensorflow/core/kernels/image/sample_distorted_bounding_box_op.cc), step for step, with
// Sluice's random stream (core/data/element_draws.h) in place of TF's Philox.
//
// Up to `max_attempts` attempts: an aspect ratio (width / height) drawn uniformly from
// `aspect_ratio_range`; a height drawn uniformly between round(sqrt(min_area / aspect)) and the
// largest height whose box fits the image and `area_range` (areas are shares of the image's);
// width = round(height * aspect); a box whose area misses `area_range` after TF's two rounding
// fixes is rejected; else it is placed at a uniform offset in [0, image - box) (TF never
// places a smaller box at the last offset) and kept if it covers at least `min_object_covered`
// of some bounding box of at least one pixel. When no attempt succeeds: the whole image.
// Bounding boxes are [ymin, xmin, ymax, xmax] shares of the image, truncated to pixels as TF
// does; none at all means the whole image when `use_image_if_no_bounding_boxes`.
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_DISTORTED_BOX_SAMPLING_H_
#define SLUICE_CORE_DISTORTED_BOX_SAMPLING_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/ops/resized_crop_sampling.h"

namespace sluice {

struct DistortedBoxOptions {
  float min_object_covered = 0.1f;
  float aspect_ratio_range[2] = {0.75f, 1.33f};
  float area_range[2] = {0.05f, 1.0f};
  int64_t max_attempts = 100;
  bool use_image_if_no_bounding_boxes = true;
  // Four floats a box: [ymin, xmin, ymax, xmax], each in [0, 1], ymin <= ymax, xmin <= xmax.
  std::vector<float> bounding_boxes;
};

// INVALID_ARGUMENT (no op prefix) for options TF refuses or that cannot sample: ranges not
// 0 < low <= high (area high <= 1), min_object_covered < 0, max_attempts < 1, boxes not a
// multiple of 4 floats or outside [0, 1] or inverted, no boxes without
// use_image_if_no_bounding_boxes.
absl::Status CheckDistortedBoxOptions(const DistortedBoxOptions& options);

// The box for an image of `height` x `width` (both >= 1, at most 2^31 - 1: TF's int32 sizes);
// requires options that CheckDistortedBoxOptions accepts. The box lies inside the image.
CropBox SampleDistortedBox(int64_t height, int64_t width, const DistortedBoxOptions& options,
                           std::mt19937_64& gen);

}  // namespace sluice

#endif  // SLUICE_CORE_DISTORTED_BOX_SAMPLING_H_
