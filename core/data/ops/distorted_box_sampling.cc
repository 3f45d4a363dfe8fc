#include "core/data/ops/distorted_box_sampling.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/data/element_draws.h"

namespace sluice {
namespace {

// TF's Rectangle: [min, max) in pixels.
struct Rect {
  int64_t min_x, min_y, max_x, max_y;
  int64_t Area() const { return std::max<int64_t>(0, max_x - min_x) * std::max<int64_t>(0, max_y - min_y); }
  Rect Intersect(const Rect& r) const {
    return {std::max(min_x, r.min_x), std::max(min_y, r.min_y), std::min(max_x, r.max_x),
            std::min(max_y, r.max_y)};
  }
};

// TF's SimplePhilox::RandFloat: a float in [0, 1) (24 random bits, exactly representable).
float DrawUnitFloat(std::mt19937_64& gen) {
  return static_cast<float>(gen() >> 40) * 0x1.0p-24f;
}

// TF's lrintf: round half to even of a float.
int64_t RoundF(float v) { return static_cast<int64_t>(std::lrint(v)); }

// TF's GenerateRandomCrop.
bool GenerateRandomCrop(int64_t width, int64_t height, float min_share, float max_share,
                        float aspect, std::mt19937_64& gen, Rect* crop) {
  if (max_share <= 0.0f || aspect <= 0.0f || min_share > max_share) return false;
  const float min_area =
      min_share * static_cast<float>(width) * static_cast<float>(height);
  const float max_area =
      max_share * static_cast<float>(width) * static_cast<float>(height);
  int64_t h = RoundF(std::sqrt(min_area / aspect));
  int64_t max_h = RoundF(std::sqrt(max_area / aspect));
  if (RoundF(static_cast<float>(max_h) * aspect) > width) {
    // The smallest max_h with round(max_h * aspect) <= width.
    constexpr float kEps = 0.0000001f;
    max_h = static_cast<int64_t>((static_cast<double>(width) + 0.5 - kEps) / aspect);
    if (RoundF(static_cast<float>(max_h) * aspect) > width) max_h -= 1;
  }
  max_h = std::min(max_h, height);
  h = std::min(h, max_h);
  if (h < max_h) h += DrawUpTo(gen, max_h - h);  // [h, max_h]
  int64_t w = RoundF(static_cast<float>(h) * aspect);
  float area = static_cast<float>(w * h);
  // TF's two tries at a slightly bigger box when rounding left the area too small.
  for (int retry = 0; retry < 2 && area < min_area; ++retry) {
    h += 1;
    w = RoundF(static_cast<float>(h) * aspect);
    area = static_cast<float>(w * h);
  }
  if (area < min_area || area > max_area || w > width || h > height || w <= 0 || h <= 0) {
    return false;
  }
  const int64_t y = h < height ? DrawUpTo(gen, height - h - 1) : 0;  // TF: Uniform(height - h)
  const int64_t x = w < width ? DrawUpTo(gen, width - w - 1) : 0;
  *crop = {x, y, x + w, y + h};
  return true;
}

// TF's SatisfiesOverlapConstraints.
bool CoversAnObject(const Rect& crop, float min_object_covered, const std::vector<Rect>& boxes) {
  if (crop.Area() < 1) return false;
  for (const Rect& box : boxes) {
    const float object_area = static_cast<float>(box.Area());
    if (object_area < 1.0f) continue;
    const float covered = static_cast<float>(crop.Intersect(box).Area()) / object_area;
    if (covered >= min_object_covered) return true;
  }
  return false;
}

}  // namespace

absl::Status CheckDistortedBoxOptions(const DistortedBoxOptions& o) {
  auto range_ok = [](const float r[2]) {
    return r[0] > 0.0f && r[0] <= r[1] && std::isfinite(r[1]);
  };
  if (!range_ok(o.aspect_ratio_range)) {
    return absl::InvalidArgumentError(
        absl::StrCat("aspect_ratio_range must be (low, high) with 0 < low <= high, got (",
                     o.aspect_ratio_range[0], ", ", o.aspect_ratio_range[1], ")"));
  }
  if (!range_ok(o.area_range) || o.area_range[1] > 1.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("area_range must be (low, high) with 0 < low <= high <= 1, got (",
                     o.area_range[0], ", ", o.area_range[1], ")"));
  }
  if (!(o.min_object_covered >= 0.0f) || !std::isfinite(o.min_object_covered)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_object_covered must be >= 0, got ", o.min_object_covered));
  }
  if (o.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts must be positive, got ", o.max_attempts));
  }
  if (o.bounding_boxes.size() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bounding_boxes must be [ymin, xmin, ymax, xmax] boxes (a multiple of 4 "
                     "values), got ", o.bounding_boxes.size(), " values"));
  }
  for (size_t i = 0; i < o.bounding_boxes.size(); i += 4) {
    const float* b = &o.bounding_boxes[i];
    for (int k = 0; k < 4; ++k) {
      if (!(b[k] >= 0.0f && b[k] <= 1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bounding box ", i / 4, " [", b[0], ", ", b[1], ", ", b[2], ", ", b[3],
            "]: coordinates must be in [0, 1]"));
      }
    }
    if (b[0] > b[2] || b[1] > b[3]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bounding box ", i / 4, " [", b[0], ", ", b[1], ", ", b[2], ", ", b[3],
          "]: needs ymin <= ymax and xmin <= xmax"));
    }
  }
  if (o.bounding_boxes.empty() && !o.use_image_if_no_bounding_boxes) {
    return absl::InvalidArgumentError(
        "no bounding boxes given and use_image_if_no_bounding_boxes=False");
  }
  return absl::OkStatus();
}

CropBox SampleDistortedBox(int64_t height, int64_t width, const DistortedBoxOptions& o,
                           std::mt19937_64& gen) {
  const Rect image{0, 0, width, height};
  std::vector<Rect> boxes;
  for (size_t i = 0; i + 4 <= o.bounding_boxes.size(); i += 4) {
    const float* b = &o.bounding_boxes[i];
    boxes.push_back({static_cast<int64_t>(b[1] * static_cast<float>(width)),
                     static_cast<int64_t>(b[0] * static_cast<float>(height)),
                     static_cast<int64_t>(b[3] * static_cast<float>(width)),
                     static_cast<int64_t>(b[2] * static_cast<float>(height))});
  }
  if (boxes.empty()) boxes.push_back(image);
  Rect crop = image;
  bool found = false;
  for (int64_t attempt = 0; attempt < o.max_attempts && !found; ++attempt) {
    const float aspect =
        DrawUnitFloat(gen) * (o.aspect_ratio_range[1] - o.aspect_ratio_range[0]) +
        o.aspect_ratio_range[0];
    Rect candidate{};
    found = GenerateRandomCrop(width, height, o.area_range[0], o.area_range[1], aspect, gen,
                               &candidate) &&
            CoversAnObject(candidate, o.min_object_covered, boxes);
    if (found) crop = candidate;
  }
  return {crop.min_y, crop.min_x, crop.max_y - crop.min_y, crop.max_x - crop.min_x};
}

}  // namespace sluice
