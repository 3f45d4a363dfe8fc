// The image functions for map() (decode_image, resize, random_crop, random_flip_left_right,
// central_crop, random_resized_crop, decode_and_crop_jpeg, extract_jpeg_shape,
// sample_distorted_bounding_box): the registration (core/data/op_registry.h) of image_ops.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/distorted_box_sampling.h"
#include "core/data/ops/image_ops.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// bounding_boxes as TF takes them, [batch, boxes, 4] (or any nesting of lists of numbers, read
// in order): every number appended to `out`; errors at the value that is not a number.
absl::Status BoxCoordinates(const ParseCall& c, const PyValue& v,
                            google::protobuf::RepeatedField<float>* out) {
  if (v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple) {
    for (const PyValue& item : v.items) RETURN_IF_ERROR(BoxCoordinates(c, item, out));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(double x, c.Number("bounding_boxes", v));
  out->Add(static_cast<float>(x));
  return absl::OkStatus();
}

// Clears the arguments given with TF's default values: written or not, the same proto (and the
// fn's expression, which leaves defaults out, reads back to it).
void DropDefaults(proto::ImageFn::SampleDistortedBoundingBox* f) {
  const DistortedBoxOptions d;
  if (f->has_min_object_covered() && f->min_object_covered() == d.min_object_covered) {
    f->clear_min_object_covered();
  }
  if (f->aspect_ratio_range_size() == 2 && f->aspect_ratio_range(0) == d.aspect_ratio_range[0] &&
      f->aspect_ratio_range(1) == d.aspect_ratio_range[1]) {
    f->clear_aspect_ratio_range();
  }
  if (f->area_range_size() == 2 && f->area_range(0) == d.area_range[0] &&
      f->area_range(1) == d.area_range[1]) {
    f->clear_area_range();
  }
  if (f->has_max_attempts() && f->max_attempts() == d.max_attempts) f->clear_max_attempts();
  if (f->has_use_image_if_no_bounding_boxes() && f->use_image_if_no_bounding_boxes()) {
    f->clear_use_image_if_no_bounding_boxes();
  }
}

}  // namespace

SLUICE_REGISTER_OPS(image_fn) {
  MapFnRegistration r;
  r.name = "image";
  r.name_of = [](const proto::MapOp& m) { return ImageFnName(m.image()); };
  r.make = [](const proto::MapOp& m) { return MakeImageComponentFn(m.image()); };
  r.expression = [](const proto::MapOp& m) { return ImageFnExpression(m.image()); };
  {
    MapFnParseRule p;
    p.name = "decode_image";
    p.list_order = 7;
    p.aliases = {"decode_jpeg", "decode_png"};
    p.params = {{"channels", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      int64_t channels = 0;
      if (c.given(0)) {
        ASSIGN_OR_RETURN(channels, c.Int("channels", *c.arg(0)));
      }
      m->mutable_image()->mutable_decode()->set_channels(channels);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "resize";
    p.list_order = 8;
    p.params = {{"size", true}, {"method", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<int64_t> size, c.Ints("size", *c.arg(0), false));
      if (size.size() != 2) return c.Error(c.arg(0)->begin, "resize: size must be [height, width]");
      if (c.given(1)) {
        ASSIGN_OR_RETURN(std::string method, c.Str("method", *c.arg(1)));
        if (method != "bilinear") {
          return c.Error(c.arg(1)->begin, "resize: only method='bilinear' is supported");
        }
      }
      m->mutable_image()->mutable_resize()->set_height(size[0]);
      m->mutable_image()->mutable_resize()->set_width(size[1]);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "random_crop";
    p.list_order = 9;
    p.params = {{"size", true}, {"seed", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<int64_t> size, c.Ints("size", *c.arg(0), false));
      for (int64_t d : size) m->mutable_image()->mutable_random_crop()->add_size(d);
      if (c.given(1)) {
        ASSIGN_OR_RETURN(int64_t seed, c.Int("seed", *c.arg(1)));
        m->mutable_image()->mutable_random_crop()->set_seed(seed);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "random_flip_left_right";
    p.list_order = 10;
    p.params = {{"seed", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      proto::ImageFn::RandomFlipLeftRight* f = m->mutable_image()->mutable_random_flip_left_right();
      if (c.given(0)) {
        ASSIGN_OR_RETURN(int64_t seed, c.Int("seed", *c.arg(0)));
        f->set_seed(seed);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "central_crop";
    p.list_order = 11;
    p.params = {{"central_fraction", true}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(double f, c.Number("central_fraction", *c.arg(0)));
      m->mutable_image()->mutable_central_crop()->set_central_fraction(f);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "random_resized_crop";
    p.list_order = 12;
    p.params = {{"size", true}, {"scale", false}, {"ratio", false}, {"seed", false},
                {"exact", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      proto::ImageFn::RandomResizedCrop* f = m->mutable_image()->mutable_random_resized_crop();
      ASSIGN_OR_RETURN(std::vector<int64_t> size, c.Ints("size", *c.arg(0), false));
      if (size.size() != 2) {
        return c.Error(c.arg(0)->begin, "random_resized_crop: size must be [height, width]");
      }
      f->set_height(size[0]);
      f->set_width(size[1]);
      for (int i : {1, 2}) {
        if (!c.given(i)) continue;
        const char* name = i == 1 ? "scale" : "ratio";
        ASSIGN_OR_RETURN(std::vector<float> range, c.Floats(name, *c.arg(i)));
        if (range.size() != 2) {
          return c.Error(c.arg(i)->begin,
                         absl::StrCat("random_resized_crop: ", name, " must be (low, high)"));
        }
        for (float v : range) (i == 1 ? f->add_scale(v) : f->add_ratio(v));
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(int64_t seed, c.Int("seed", *c.arg(3)));
        f->set_seed(seed);
      }
      if (c.given(4)) {
        ASSIGN_OR_RETURN(bool exact, c.Bool("exact", *c.arg(4)));
        f->set_exact(exact);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "decode_and_crop_jpeg";
    p.list_order = 13;
    // Without a crop_window: on a (bytes, crop_window) tuple (sample_distorted_bounding_box's).
    p.params = {{"crop_window", false}, {"channels", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      proto::ImageFn::DecodeAndCropJpeg* f = m->mutable_image()->mutable_decode_and_crop_jpeg();
      if (c.given(0)) {
        ASSIGN_OR_RETURN(std::vector<int64_t> window, c.Ints("crop_window", *c.arg(0), false));
        if (window.size() != 4) {
          return c.Error(c.arg(0)->begin,
                         "decode_and_crop_jpeg: crop_window must be [y, x, height, width]");
        }
        for (int64_t v : window) f->add_crop_window(v);
      }
      if (c.given(1)) {
        ASSIGN_OR_RETURN(int64_t channels, c.Int("channels", *c.arg(1)));
        f->set_channels(channels);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "extract_jpeg_shape";
    p.list_order = 14;
    p.parse = [](const ParseCall&, proto::MapOp* m) -> absl::Status {
      m->mutable_image()->mutable_extract_jpeg_shape();
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    MapFnParseRule p;
    p.name = "sample_distorted_bounding_box";
    p.list_order = 15;
    p.params = {{"bounding_boxes", false},     {"seed", false},
                {"min_object_covered", false}, {"aspect_ratio_range", false},
                {"area_range", false},         {"max_attempts", false},
                {"use_image_if_no_bounding_boxes", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      proto::ImageFn::SampleDistortedBoundingBox* f =
          m->mutable_image()->mutable_sample_distorted_bounding_box();
      if (c.given(0)) RETURN_IF_ERROR(BoxCoordinates(c, *c.arg(0), f->mutable_bounding_boxes()));
      if (c.given(1)) {
        ASSIGN_OR_RETURN(int64_t seed, c.Int("seed", *c.arg(1)));
        f->set_seed(seed);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(double v, c.Number("min_object_covered", *c.arg(2)));
        f->set_min_object_covered(static_cast<float>(v));
      }
      for (size_t i : {3, 4}) {
        if (!c.given(i)) continue;
        const char* name = i == 3 ? "aspect_ratio_range" : "area_range";
        ASSIGN_OR_RETURN(std::vector<float> range, c.Floats(name, *c.arg(i)));
        if (range.size() != 2) {
          return c.Error(c.arg(i)->begin, absl::StrCat("sample_distorted_bounding_box: ", name,
                                                       " must be (low, high)"));
        }
        for (float v : range) (i == 3 ? f->add_aspect_ratio_range(v) : f->add_area_range(v));
      }
      if (c.given(5)) {
        ASSIGN_OR_RETURN(int64_t attempts, c.Int("max_attempts", *c.arg(5)));
        f->set_max_attempts(attempts);
      }
      if (c.given(6)) {
        ASSIGN_OR_RETURN(bool use, c.Bool("use_image_if_no_bounding_boxes", *c.arg(6)));
        f->set_use_image_if_no_bounding_boxes(use);
      }
      DropDefaults(f);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kImage, std::move(r));
}

}  // namespace sluice
