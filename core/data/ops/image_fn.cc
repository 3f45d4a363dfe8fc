// The image functions for map() (decode_image, resize, random_crop, random_flip_left_right,
// central_crop): the registration (core/data/op_registry.h) of image_ops.h.
#include <memory>
#include <string>
#include <utility>

#include "core/data/op_registry.h"
#include "core/data/ops/image_ops.h"

namespace sluice {

SLUICE_REGISTER_OPS(image_fn) {
  MapFnRegistration r;
  r.name = "image";
  r.name_of = [](const proto::MapOp& m) { return ImageFnName(m.image()); };
  r.make = [](const proto::MapOp& m) { return MakeImageComponentFn(m.image()); };
  r.expression = [](const proto::MapOp& m) { return ImageFnExpression(m.image()); };
  registry.AddMapFn(proto::MapOp::kImage, std::move(r));
}

}  // namespace sluice
