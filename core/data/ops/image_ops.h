// Image functions for map (core/data/map_fns.h), as TF's namesakes, on [height, width, channels]
// tensors (one image; batch after them):
//
//   decode_image(channels=0)       JPEG (libturbojpeg: fast integer DCT, fancy upsampling: TF's
//                                  decode_jpeg defaults, so the same pixels) or PNG (libpng,
//                                  8-bit) bytes in a string scalar -> uint8 [h, w, c]. channels:
//                                  0 = the image's own (JPEG 1 or 3; PNG 1-4), 1 or 3 (JPEG
//                                  converts; PNG drops alpha or repeats gray), 4 (PNG). Spec:
//                                  uint8 [None, None, channels or None].
//   resize(size=[h, w])            tf.image.resize(method='bilinear', antialias=False): half-
//                                  pixel centers, any numeric input -> float32 [h, w, c].
//   random_crop(size, seed=None)   size [h, w] or [h, w, c]: a window at a uniform offset, the
//                                  input's dtype. INVALID_ARGUMENT when the image is smaller.
//   random_flip_left_right(seed=None)  mirrors the width axis with probability 1/2.
//   central_crop(central_fraction) tf.image.central_crop: the centered window of
//                                  int((1 - f) * dim / 2) margins, fraction in (0, 1].
//   random_resized_crop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3), seed=None, exact=False)
//                                  torchvision's RandomResizedCrop (resized_crop_sampling.h) on
//                                  JPEG/PNG bytes (-> float32 [h, w, 3]) or a uint8 image (->
//                                  float32 [h, w, c]), TF's bilinear resize (bilinear_resize.h).
//                                  On JPEG bytes only the box is decoded (jpeg_window_decoder.h),
//                                  at the smallest DCT scale keeping it >= size; exact decodes
//                                  the whole image: decode_image + crop + resize's values.
//                                  Takes over a random_flip_left_right and a normalize mapped
//                                  after it (map fusion, map_fusion.h): one pass, same values.
//   decode_and_crop_jpeg(crop_window=[y, x, h, w], channels=0)  TF's: the window's pixels, as
//                                  decode_image then a crop, decoding the window alone.
//                                  Without crop_window: on a (bytes, crop_window) tuple, the
//                                  window int32 or int64 [4] per element (ComponentFn::TupleArity).
//   extract_jpeg_shape()           TF's: int32 [height, width, components] from the header.
//   sample_distorted_bounding_box(bounding_boxes=[], seed=None, min_object_covered=0.1,
//       aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
//       use_image_if_no_bounding_boxes=True)
//                                  TF's box sampling (distorted_box_sampling.h). On an int32 or
//                                  int64 image_size [3]: TF's (begin [y, x, 0], size [h, w, -1],
//                                  bboxes float32 [1, 1, 4]). On JPEG bytes: (the bytes,
//                                  crop_window int32 [y, x, h, w]) from the header's size, which
//                                  decode_and_crop_jpeg() without a window decodes.
//
// Randomness, per element: a seeded random op draws from (seed, op, epoch, element position)
// (core/data/element_draws.h), never from the pixels: a run repeats exactly, each epoch draws
// anew, and a RANGES job's augmentations do not depend on its workers. Without a seed the draws
// differ from run to run. The random streams are Sluice's, not TF's (TF's stateful random ops
// cannot be reproduced elsewhere).
//
// Errors are INVALID_ARGUMENT naming the fn: bytes that are neither JPEG nor PNG, corrupt
// image data (libjpeg/libpng's message; a JPEG whose data stops early, even one whose scan has
// no data at all), a rank other than 3, a window larger than the image or not [y, x, h, w] with
// y, x >= 0 and h, w >= 1, an image_size that is not 3 ints or whose height or width is not
// in [1, 2^31); bounding boxes outside [0, 1] or inverted and bad ranges when the fn is made.
//
// Limits, checked before anything is decoded or allocated (per image, not per pixel):
//  - decode_image: an image whose header claims more than kMaxImagePixels pixels (width x
//    height) is INVALID_ARGUMENT naming the format and both dimensions ("the PNG header claims
//    60000 x 60000 pixels ..."), whatever the channels. (TF refuses JPEG inputs of 2^29 bytes or
//    more; Sluice limits what the header promises instead, which is what decoding allocates.)
//  - decode_image and resize: a decoded or resized tensor over the element limit, or the DCT
//    coefficients a progressive (multi-scan) JPEG keeps while decoding (2 bytes a pixel and
//    component), over the element limit
//    (core/data/memory_budget.h, --max_element_bytes) is RESOURCE_EXHAUSTED naming the shape
//    and its bytes (core/data/shape_limits.h); a resize size whose product overflows is
//    INVALID_ARGUMENT when the pipeline is built.
//
// Thread safety: the ComponentFns are immutable; Apply may run on many threads.
#ifndef SLUICE_CORE_IMAGE_OPS_H_
#define SLUICE_CORE_IMAGE_OPS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/map_fns.h"
#include "proto/dataset.pb.h"

namespace sluice {

// The most pixels (width x height) decode_image accepts: 2^28, e.g. 16384 x 16384, a 768 MiB
// RGB tensor; the largest photographs and scans are well below it.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// INVALID_ARGUMENT for bad arguments (channels not in {0, 1, 3, 4}, sizes < 1, a fraction
// outside (0, 1]).
absl::StatusOr<std::unique_ptr<ComponentFn>> MakeImageComponentFn(const proto::ImageFn& fn);

// "decode_image", "resize", ...
std::string ImageFnName(const proto::ImageFn& fn);
// The fn in pipeline syntax: "random_crop([224, 224, 3], seed=7)".
std::string ImageFnExpression(const proto::ImageFn& fn);

}  // namespace sluice

#endif  // SLUICE_CORE_IMAGE_OPS_H_
