// The functions of map(...): built-in tensor transforms (decode_raw, cast, reshape, normalize,
// one_hot), plugin ops (core/data/plugin_loader.h) and parse_example, applied to one component of an
// element or to every leaf.
//
//   map(cast(tf.float32), key='image')     the dict entry 'image' (key=0: tuple component 0)
//   map(decode_raw(tf.uint8))               every leaf of the element (tf.nest.map_structure)
//
// Semantics (each as its TF namesake):
//   decode_raw(out_type, little_endian=True)  string tensor of shape S, every string the same
//       length L: out_type tensor of shape S + (L / sizeof(out_type),). Spec: S + (None,).
//   cast(dtype)          numeric and bool dtypes; float to integer truncates toward zero, NaN and
//                        out-of-range values give what TF on x86 gives (INT_MIN for int32/int64,
//                        the low bits of the int64 conversion for narrower types).
//   reshape(shape)       at most one -1; the element count must match.
//   normalize(mean, std) float32 (cast(x, float32) - mean) / std, with one value each or one per
//                        channel (the last dimension, which must then have that size).
//   one_hot(depth, on_value=1, off_value=0, dtype=tf.float32)  integer indices of shape S:
//                        S + (depth,); indices outside [0, depth) give a row of off_value.
//   plugin(op, **args)   a loaded plugin op (include/sluice/plugin_api.h).
//
// Each fn is a ComponentFn in core/data/ops/<name>_fn.cc, registered there under its MapOp
// oneof case (core/data/op_registry.h); this file applies one to an element.
//
// A fn may take a tuple of tensors whole (ComponentFn::TupleArity):
//   map(sample_distorted_bounding_box(seed=1), key='jpg')   'jpg': bytes -> (bytes, crop_window)
//   map(decode_and_crop_jpeg(channels=3), key='jpg')         (bytes, crop_window) -> image
//
// Errors while applying are INVALID_ARGUMENT naming the fn, the component and its dtype and
// shape: "cast(tf.string -> tf.float32) on component 'image' (string [2]): ...". They are
// element errors (core/data/op_iterator.h): the map can go on with the next element, and
// ignore_errors() skips them.
//
// Thread safety: a MapFunction and a ComponentFn are immutable and may be applied from many
// threads at once.
#ifndef SLUICE_CORE_MAP_FNS_H_
#define SLUICE_CORE_MAP_FNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/deferred_check_blocks.h"
#include "sluice/element.h"
#include "proto/dataset.pb.h"

namespace sluice {

struct PixelStep;  // core/data/ops/pixel_step.h

// One fn applied to one tensor. The result may be a structure (parse_example gives a dict).
class ComponentFn {
 public:
  virtual ~ComponentFn() = default;
  // How errors name the fn: "cast(tf.float32)".
  virtual std::string Describe() const = 0;
  // The static output spec for an input spec; INVALID_ARGUMENT when the fn cannot apply.
  virtual absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const = 0;
  // INVALID_ARGUMENT (no position prefix) when the input does not fit.
  virtual absl::StatusOr<Element> Apply(const Tensor& input) const = 0;
  // Loads what Apply needs from outside the pipeline (tokenize's model file). MakeMapFunction
  // calls it once when a pipeline is built, before any Apply; spec inference does not (a client
  // need not reach the file). An error fails the pipeline, not an element, so ignore_errors()
  // cannot skip it. The default has nothing to load.
  virtual absl::Status Open() { return absl::OkStatus(); }
  // True if the fn works row by row: Apply on a tensor of shape [n] + S gives, for every n >= 1,
  // exactly the n results of Apply on its rows stacked along dimension 0, and an error only
  // where some row's Apply fails. The bulk path (core/data/iterator.h) maps whole blocks then.
  virtual bool ElementWise() const { return false; }
  // True if the fn's seeded draws depend on the element's (epoch, position) key
  // (core/data/element_draws.h), which the map then sets around each Apply.
  virtual bool DrawsPerElement() const { return false; }
  // True if ApplyToSerializedRows is implemented (an ElementWise fn on string rows).
  virtual bool MapsSerializedRows() const { return false; }
  // What Apply gives on the 1-D string tensor whose strings are `rows`, read from views (no
  // tensor of them is built: core/data/deferred_check_blocks.h). Only where MapsSerializedRows();
  // its errors need not match Apply's (the caller then runs Apply, which places them). `check`
  // as SerializedRowsFn's (may be empty).
  virtual absl::StatusOr<Element> ApplyToSerializedRows(
      const std::vector<absl::string_view>& rows, const RowCheck& check) const;
  // A fn of several tensors (decode_and_crop_jpeg() on (bytes, crop_window)) returns their
  // number, n >= 2: where the map meets a tuple (or list) of n tensors it applies the Tuple
  // forms below to them whole instead of Apply to each. 0: a fn of one tensor.
  virtual int TupleArity() const { return 0; }
  // As OutputSpec / Apply, for a tuple of TupleArity() tensors.
  virtual absl::StatusOr<ElementSpec> TupleOutputSpec(const std::vector<TensorSpec>& inputs) const;
  virtual absl::StatusOr<Element> ApplyTuple(const std::vector<Tensor>& inputs) const;
  // Map fusion (core/data/ops/map_fusion.h): the fn that applies this fn and then `next` to its
  // output in one call, whose Apply gives exactly next.Apply(Apply(x)) (values, draws, errors),
  // or null when this fn cannot take `next` over (the default).
  virtual std::unique_ptr<ComponentFn> FuseWith(const ComponentFn& next) const;
  // What the fn does, for fns that another may take over (FuseWith); null for the others.
  virtual const PixelStep* AsPixelStep() const { return nullptr; }
};

// The fn of a MapOp, ready to run on the elements of one input spec.
class MapFunction {
 public:
  virtual ~MapFunction() = default;
  // The mapped element, or an element error (core/data/op_iterator.h) naming fn and component.
  virtual absl::StatusOr<Element> Apply(Element input) const = 0;
  // True if Apply on a block of elements (each leaf stacked along a new dimension 0) gives the
  // block of the mapped elements, as ComponentFn::ElementWise.
  virtual bool ElementWise() const { return false; }
  // As ComponentFn::DrawsPerElement.
  virtual bool DrawsPerElement() const { return false; }
  // Apply on a block of serialized records from views of their bytes (SerializedRowsFn, the
  // map-and-parse fusion), when the fn maps the whole element with a ComponentFn that
  // MapsSerializedRows(); null otherwise. The fn keeps this object's state alive.
  virtual SerializedRowsFn SerializedRowsApply() const { return nullptr; }
};

// The fn of `map` alone; INVALID_ARGUMENT for an unset fn or bad arguments, FAILED_PRECONDITION
// for a plugin op that no loaded plugin provides.
absl::StatusOr<std::unique_ptr<ComponentFn>> MakeComponentFn(const proto::MapOp& map);

// The spec after map(...) for `input`: INVALID_ARGUMENT when the key/index is not in the
// element or the fn cannot apply (the message names both).
absl::StatusOr<ElementSpec> InferMapSpec(const proto::MapOp& map, const ElementSpec& input);

// Builds the fn for elements of `input`; checks what InferMapSpec checks, then opens the fn
// (ComponentFn::Open), whose error it returns.
absl::StatusOr<std::shared_ptr<const MapFunction>> MakeMapFunction(const proto::MapOp& map,
                                                                   const ElementSpec& input);

// As MakeMapFunction with `fn` in place of the map's own (a fused fn, core/data/ops/map_fusion.h)
// applied to the component `map` selects; INVALID_ARGUMENT when `fn` cannot apply to `input`.
absl::StatusOr<std::shared_ptr<const MapFunction>> MakeMapFunctionOf(
    std::shared_ptr<const ComponentFn> fn, const proto::MapOp& map, const ElementSpec& input);

// The registered name: "cast", "decode_raw", ..., "plugin", the image op's ("resize"); "unset"
// when empty.
std::string MapFnName(const proto::MapOp& map);

// The child of a structure (kind, its dict keys, its number of children) that `key` (a dict
// key) or `index` (a tuple position) selects; -1 when both are null. INVALID_ARGUMENT naming
// the key and the structure when it does not fit ("key 'x' is not in the element; its keys
// are ['a', 'b']").
absl::StatusOr<int> SelectChild(NestKind kind, const std::vector<std::string>& keys,
                                size_t num_children, const std::string* key,
                                const int64_t* index);

// "'image'" or "1" for a MapOp with a component, "" without: how messages name it.
std::string ComponentName(const proto::MapOp& map);

}  // namespace sluice

#endif  // SLUICE_CORE_MAP_FNS_H_
