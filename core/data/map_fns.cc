#include "core/data/map_fns.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/image_ops.h"
#include "core/data/ops/parse_example.h"
#include "core/data/plugin_loader.h"
#include "core/format/python_literal.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

std::string TfDType(DType d) { return absl::StrCat("tf.", DTypeName(d)); }

// dtype and shape as errors print them: "float32 [28,28]".
std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", TfShapeString(t.shape()));
}
std::string Describe(const TensorSpec& s) {
  return absl::StrCat(DTypeName(s.dtype), " ", TfShapeString(s.shape));
}

bool IsNumeric(DType d) { return d != DType::kString && d != DType::kInvalid; }

// ---------------------------------------------------------------------------------------------
// decode_raw

class DecodeRawFn : public ComponentFn {
 public:
  DecodeRawFn(DType out_type, bool big_endian) : out_type_(out_type), big_endian_(big_endian) {}

  std::string Describe() const override {
    return absl::StrCat("decode_raw(", TfDType(out_type_),
                        big_endian_ ? ", little_endian=False" : "", ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.dtype != DType::kString) {
      return Invalid(absl::StrCat("input must be a string tensor, got ", DTypeName(input.dtype)));
    }
    std::vector<int64_t> dims = input.shape.dims();
    dims.push_back(kUnknownDim);
    return ElementSpec(TensorSpec{out_type_, Shape(std::move(dims))});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    if (input.dtype() != DType::kString) {
      return Invalid(absl::StrCat("input must be a string tensor, got ", DTypeName(input.dtype())));
    }
    const size_t width = DTypeSize(out_type_);
    const int64_t n = input.num_elements();
    size_t length = n > 0 ? input.string_at(0).size() : 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t size = input.string_at(i).size();
      if (size != length) {
        // TF's message.
        return Invalid(absl::StrCat("DecodeRaw requires input strings to all be the same size, "
                                    "but element ", i, " has size ", size, " != ", length));
      }
    }
    if (length % width != 0) {
      return Invalid(absl::StrCat("Input to DecodeRaw has length ", length,
                                  " that is not a multiple of ", width, ", the size of ",
                                  DTypeName(out_type_)));
    }
    std::vector<int64_t> dims = input.shape().dims();
    dims.push_back(static_cast<int64_t>(length / width));
    Tensor out = Tensor::Allocate(out_type_, Shape(std::move(dims)));
    char* dst = static_cast<char*>(out.mutable_raw_data());
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * length, input.string_at(i).data(), length);
    }
    const bool swap = big_endian_ == (std::endian::native == std::endian::little);
    if (swap && width > 1) {
      const size_t total = static_cast<size_t>(n) * length;
      for (size_t off = 0; off < total; off += width) {
        for (size_t a = 0, b = width - 1; a < b; ++a, --b) std::swap(dst[off + a], dst[off + b]);
      }
    }
    return Element(std::move(out));
  }

 private:
  const DType out_type_;
  const bool big_endian_;
};

// ---------------------------------------------------------------------------------------------
// cast

class CastFn : public ComponentFn {
 public:
  explicit CastFn(DType dtype) : dtype_(dtype) {}

  std::string Describe() const override { return absl::StrCat("cast(", TfDType(dtype_), ")"); }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(Check(input.dtype));
    return ElementSpec(TensorSpec{dtype_, input.shape});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(Check(input.dtype()));
    if (input.dtype() == dtype_) return Element(input);
    Tensor out = Tensor::Allocate(dtype_, input.shape());
    const int64_t n = input.num_elements();
    VisitNumericDType(input.dtype(), [&](auto src_tag) {
      using Src = typename decltype(src_tag)::type;
      const Src* src = input.data<Src>();
      VisitNumericDType(dtype_, [&](auto dst_tag) {
        using Dst = typename decltype(dst_tag)::type;
        Dst* dst = out.mutable_data<Dst>();
        for (int64_t i = 0; i < n; ++i) dst[i] = ConvertNumber<Dst>(src[i]);
      });
    });
    return Element(std::move(out));
  }

  // Each value converts on its own, and Check looks only at the dtype.
  bool ElementWise() const override { return true; }

 private:
  absl::Status Check(DType from) const {
    if (from == dtype_) return absl::OkStatus();
    if (!IsNumeric(from) || !IsNumeric(dtype_)) {
      return absl::UnimplementedError(absl::StrCat("Cast ", DTypeName(from), " to ",
                                                   DTypeName(dtype_), " is not supported"));
    }
    return absl::OkStatus();
  }

  const DType dtype_;
};

// ---------------------------------------------------------------------------------------------
// reshape

class ReshapeFn : public ComponentFn {
 public:
  explicit ReshapeFn(std::vector<int64_t> shape) : shape_(std::move(shape)) {}

  std::string Describe() const override {
    return absl::StrCat("reshape([", absl::StrJoin(shape_, ", "), "])");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.shape.IsFullyDefined()) {
      ASSIGN_OR_RETURN(Shape s, Resolve(input.shape.num_elements()));
      return ElementSpec(TensorSpec{input.dtype, std::move(s)});
    }
    return ElementSpec(TensorSpec{input.dtype, Shape(shape_)});  // -1 is unknown there
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    ASSIGN_OR_RETURN(Shape s, Resolve(input.num_elements()));
    ASSIGN_OR_RETURN(Tensor out, input.Reshape(s));
    return Element(std::move(out));
  }

  // Checks the requested shape itself.
  static absl::Status Validate(const std::vector<int64_t>& shape) {
    int unknown = 0;
    for (int64_t d : shape) {
      if (d == -1) {
        ++unknown;
      } else if (d < 0) {
        return Invalid(absl::StrCat("reshape: dimensions must be >= 0 or -1, got ", d));
      }
    }
    if (unknown > 1) return Invalid("reshape: only one dimension can be -1");
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Shape> Resolve(int64_t n) const {
    int64_t known = 1;
    int unknown_at = -1;
    for (size_t i = 0; i < shape_.size(); ++i) {
      if (shape_[i] == -1) {
        unknown_at = static_cast<int>(i);
      } else {
        known *= shape_[i];
      }
    }
    std::vector<int64_t> dims = shape_;
    if (unknown_at >= 0) {
      if (known == 0 || n % known != 0) {
        return Invalid(absl::StrCat("Input to reshape is a tensor with ", n,
                                    " values, but the requested shape requires a multiple of ",
                                    known));
      }
      dims[unknown_at] = n / known;
    } else if (known != n) {
      return Invalid(absl::StrCat("Input to reshape is a tensor with ", n,
                                  " values, but the requested shape has ", known));
    }
    return Shape(std::move(dims));
  }

  const std::vector<int64_t> shape_;
};

// ---------------------------------------------------------------------------------------------
// normalize

class NormalizeFn : public ComponentFn {
 public:
  NormalizeFn(std::vector<float> mean, std::vector<float> std)
      : mean_(std::move(mean)), std_(std::move(std)) {}

  std::string Describe() const override {
    return absl::StrCat("normalize(mean=[", absl::StrJoin(mean_, ", "), "], std=[",
                        absl::StrJoin(std_, ", "), "])");
  }

  static absl::Status Validate(const std::vector<float>& mean, const std::vector<float>& std) {
    if (mean.empty() || std.empty()) return Invalid("normalize: mean and std must not be empty");
    if (mean.size() != std.size() && mean.size() != 1 && std.size() != 1) {
      return Invalid(absl::StrCat("normalize: mean has ", mean.size(), " values and std ",
                                  std.size(), "; give one value or one per channel each"));
    }
    for (float s : std) {
      if (s == 0) return Invalid("normalize: std must not contain 0");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (!IsNumeric(input.dtype)) {
      return Invalid(absl::StrCat("input must be numeric, got ", DTypeName(input.dtype)));
    }
    const int64_t c = Channels();
    if (c > 1) {
      if (input.shape.rank() == 0) {
        return Invalid(absl::StrCat("per-channel mean/std (", c,
                                    " channels) need an input of rank >= 1, got a scalar"));
      }
      int64_t last = input.shape.dim(input.shape.rank() - 1);
      if (last != kUnknownDim && last != c) {
        return Invalid(absl::StrCat("per-channel mean/std have ", c,
                                    " values but the last dimension is ", last));
      }
    }
    return ElementSpec(TensorSpec{DType::kFloat32, input.shape});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    const int64_t c = Channels();
    const int64_t n = input.num_elements();
    Tensor out = Tensor::Allocate(DType::kFloat32, input.shape());
    float* dst = out.mutable_data<float>();
    VisitNumericDType(input.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = input.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        const size_t ch = static_cast<size_t>(c > 1 ? i % c : 0);
        const float m = mean_.size() == 1 ? mean_[0] : mean_[ch];
        const float s = std_.size() == 1 ? std_[0] : std_[ch];
        dst[i] = (ConvertNumber<float>(src[i]) - m) / s;
      }
    });
    return Element(std::move(out));
  }

 private:
  int64_t Channels() const {
    return static_cast<int64_t>(std::max(mean_.size(), std_.size()));
  }

  const std::vector<float> mean_;
  const std::vector<float> std_;
};

// ---------------------------------------------------------------------------------------------
// one_hot

class OneHotFn : public ComponentFn {
 public:
  OneHotFn(int64_t depth, double on, double off, DType dtype)
      : depth_(depth), on_(on), off_(off), dtype_(dtype) {}

  std::string Describe() const override { return absl::StrCat("one_hot(", depth_, ")"); }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(Check(input.dtype));
    std::vector<int64_t> dims = input.shape.dims();
    dims.push_back(depth_);
    return ElementSpec(TensorSpec{dtype_, Shape(std::move(dims))});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(Check(input.dtype()));
    const int64_t n = input.num_elements();
    const int64_t values =
        n > 0 && depth_ > std::numeric_limits<int64_t>::max() / n ? std::numeric_limits<int64_t>::max()
                                                                  : n * depth_;
    RETURN_IF_ERROR(ProcessMemoryBudget().CheckElement(
        AllocationFootprint(dtype_, values), Describe(),
        absl::StrCat("an output of ", n, " x ", depth_, " values")));
    std::vector<int64_t> dims = input.shape().dims();
    dims.push_back(depth_);
    Tensor out = Tensor::Allocate(dtype_, Shape(std::move(dims)));
    VisitNumericDType(input.dtype(), [&](auto in_tag) {
      using I = typename decltype(in_tag)::type;
      if constexpr (std::is_integral_v<I>) {
        const I* idx = input.data<I>();
        VisitNumericDType(dtype_, [&](auto out_tag) {
          using O = typename decltype(out_tag)::type;
          const O on = ConvertNumber<O>(on_);
          const O off = ConvertNumber<O>(off_);
          O* dst = out.mutable_data<O>();
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = static_cast<int64_t>(idx[i]);
            for (int64_t j = 0; j < depth_; ++j) dst[i * depth_ + j] = off;
            if constexpr (std::is_unsigned_v<I>) {
              if (static_cast<uint64_t>(idx[i]) < static_cast<uint64_t>(depth_)) {
                dst[i * depth_ + k] = on;
              }
            } else {
              if (k >= 0 && k < depth_) dst[i * depth_ + k] = on;
            }
          }
        });
      }
    });
    return Element(std::move(out));
  }

 private:
  static absl::Status Check(DType d) {
    if (d != DType::kUInt8 && d != DType::kInt8 && d != DType::kInt32 && d != DType::kInt64) {
      return Invalid(absl::StrCat("indices must be uint8, int8, int32 or int64, got ",
                                  DTypeName(d)));
    }
    return absl::OkStatus();
  }

  const int64_t depth_;
  const double on_;
  const double off_;
  const DType dtype_;
};

// ---------------------------------------------------------------------------------------------
// Applying a component fn to an element.

// Applies `fn` to every leaf of `e`; `*leaf` counts leaves for messages.
absl::StatusOr<Element> MapLeaves(const ComponentFn& fn, const Element& e,
                                  const std::string& where, int* leaf) {
  if (e.is_leaf()) {
    const int index = (*leaf)++;
    absl::StatusOr<Element> out = fn.Apply(e.leaf());
    if (!out.ok()) {
      std::string at = where.empty() ? (index == 0 ? "" : absl::StrCat(" on leaf ", index))
                                     : absl::StrCat(" on component ", where);
      return MarkElementError(absl::Status(
          out.status().code(), absl::StrCat(fn.Describe(), at, " (", Describe(e.leaf()),
                                            "): ", out.status().message())));
    }
    return out;
  }
  std::vector<Element> children(e.children().size());
  for (size_t i : e.FlattenOrder()) {
    ASSIGN_OR_RETURN(children[i], MapLeaves(fn, e.children()[i], where, leaf));
  }
  return Element::FromParts(e.kind(), std::move(children), e.keys());
}

absl::StatusOr<ElementSpec> MapLeafSpecs(const ComponentFn& fn, const ElementSpec& s,
                                         const std::string& where, int* leaf) {
  if (s.is_leaf()) {
    const int index = (*leaf)++;
    absl::StatusOr<ElementSpec> out = fn.OutputSpec(s.leaf());
    if (!out.ok()) {
      std::string at = where.empty() ? (index == 0 ? "" : absl::StrCat(" on leaf ", index))
                                     : absl::StrCat(" on component ", where);
      return Invalid(absl::StrCat(fn.Describe(), at, " (", Describe(s.leaf()),
                                  "): ", out.status().message()));
    }
    return out;
  }
  std::vector<ElementSpec> children(s.children().size());
  for (size_t i : s.FlattenOrder()) {
    ASSIGN_OR_RETURN(children[i], MapLeafSpecs(fn, s.children()[i], where, leaf));
  }
  return ElementSpec::FromParts(s.kind(), std::move(children), s.keys());
}

// The child position the MapOp's key/index selects in `structure`; -1 without a component.
template <typename T>
absl::StatusOr<int> SelectComponent(const proto::MapOp& map, const Nest<T>& structure) {
  const std::string* key = map.component_case() == proto::MapOp::kKey ? &map.key() : nullptr;
  const int64_t index = map.index();
  return SelectChild(structure.kind(), structure.keys(), structure.children().size(), key,
                     map.component_case() == proto::MapOp::kIndex ? &index : nullptr);
}

class ComponentMapFunction : public MapFunction {
 public:
  ComponentMapFunction(std::shared_ptr<const ComponentFn> fn, proto::MapOp map)
      : fn_(std::move(fn)), map_(std::move(map)), where_(ComponentName(map_)) {}

  absl::StatusOr<Element> Apply(Element input) const override {
    absl::StatusOr<int> at = SelectComponent(map_, input);
    if (!at.ok()) return MarkElementError(at.status());
    int leaf = 0;
    if (*at < 0) return MapLeaves(*fn_, input, where_, &leaf);
    ASSIGN_OR_RETURN(Element mapped, MapLeaves(*fn_, input.children()[*at], where_, &leaf));
    input.mutable_children()[*at] = std::move(mapped);
    return input;
  }

  // Selecting a component depends on the structure alone, the same for a block.
  bool ElementWise() const override { return fn_->ElementWise(); }

 private:
  const std::shared_ptr<const ComponentFn> fn_;
  const proto::MapOp map_;
  const std::string where_;
};

std::vector<float> Floats(const google::protobuf::RepeatedField<float>& f) {
  return std::vector<float>(f.begin(), f.end());
}

}  // namespace

absl::StatusOr<int> SelectChild(NestKind kind, const std::vector<std::string>& keys,
                                size_t num_children, const std::string* key,
                                const int64_t* index) {
  auto what = [kind] {
    switch (kind) {
      case NestKind::kLeaf: return "a single tensor";
      case NestKind::kDict: return "a dict";
      default: return "a tuple";
    }
  };
  if (key != nullptr) {
    if (kind != NestKind::kDict) {
      return Invalid(absl::StrCat("key='", *key, "' needs a dict element; the element is ",
                                  what()));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == *key) return static_cast<int>(i);
    }
    std::vector<std::string> quoted;
    for (const std::string& k : keys) quoted.push_back(PythonStringLiteral(k));
    return Invalid(absl::StrCat("key '", *key, "' is not in the element; its keys are [",
                                absl::StrJoin(quoted, ", "), "]"));
  }
  if (index != nullptr) {
    if (kind != NestKind::kTuple && kind != NestKind::kList) {
      return Invalid(absl::StrCat("key=", *index, " needs a tuple element; the element is ",
                                  what()));
    }
    const int64_t n = static_cast<int64_t>(num_children);
    if (*index < 0 || *index >= n) {
      return Invalid(absl::StrCat("key=", *index, " is out of range for a tuple of ", n,
                                  " components"));
    }
    return static_cast<int>(*index);
  }
  return -1;
}

std::string MapFnName(const proto::MapOp& map) {
  switch (map.fn_case()) {
    case proto::MapOp::kParseExample: return "parse_example";
    case proto::MapOp::kDecodeRaw: return "decode_raw";
    case proto::MapOp::kCast: return "cast";
    case proto::MapOp::kReshape: return "reshape";
    case proto::MapOp::kNormalize: return "normalize";
    case proto::MapOp::kOneHot: return "one_hot";
    case proto::MapOp::kPlugin: return "plugin";
    case proto::MapOp::kImage: return ImageFnName(map.image());  // core/data/ops/image_ops.h
    case proto::MapOp::FN_NOT_SET: break;
  }
  return "unset";
}

std::string ComponentName(const proto::MapOp& map) {
  switch (map.component_case()) {
    case proto::MapOp::kKey: return PythonStringLiteral(map.key());
    case proto::MapOp::kIndex: return absl::StrCat(map.index());
    case proto::MapOp::COMPONENT_NOT_SET: break;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<ComponentFn>> MakeComponentFn(const proto::MapOp& map) {
  switch (map.fn_case()) {
    case proto::MapOp::kDecodeRaw: {
      const DType t = static_cast<DType>(map.decode_raw().out_type());
      if (!IsNumeric(t) || DTypeSize(t) == 0) {
        return Invalid(absl::StrCat("decode_raw: out_type must be a numeric dtype, got ",
                                    DTypeName(t)));
      }
      return std::unique_ptr<ComponentFn>(new DecodeRawFn(t, map.decode_raw().big_endian()));
    }
    case proto::MapOp::kCast: {
      const DType t = static_cast<DType>(map.cast().dtype());
      if (t == DType::kInvalid || DTypeName(t).empty()) {
        return Invalid("cast: dtype is not set");
      }
      return std::unique_ptr<ComponentFn>(new CastFn(t));
    }
    case proto::MapOp::kReshape: {
      std::vector<int64_t> shape(map.reshape().shape().begin(), map.reshape().shape().end());
      RETURN_IF_ERROR(ReshapeFn::Validate(shape));
      return std::unique_ptr<ComponentFn>(new ReshapeFn(std::move(shape)));
    }
    case proto::MapOp::kNormalize: {
      std::vector<float> mean = Floats(map.normalize().mean());
      std::vector<float> std = Floats(map.normalize().std());
      RETURN_IF_ERROR(NormalizeFn::Validate(mean, std));
      return std::unique_ptr<ComponentFn>(new NormalizeFn(std::move(mean), std::move(std)));
    }
    case proto::MapOp::kOneHot: {
      const proto::OneHotFn& o = map.one_hot();
      if (o.depth() < 0) {
        return Invalid(absl::StrCat("one_hot: depth must be non-negative, got ", o.depth()));
      }
      DType t = static_cast<DType>(o.dtype());
      if (t == DType::kInvalid) t = DType::kFloat32;
      if (!IsNumeric(t)) {
        return Invalid(absl::StrCat("one_hot: dtype must be numeric, got ", DTypeName(t)));
      }
      return std::unique_ptr<ComponentFn>(
          new OneHotFn(o.depth(), o.has_on_value() ? o.on_value() : 1.0,
                       o.has_off_value() ? o.off_value() : 0.0, t));
    }
    case proto::MapOp::kPlugin:
      return MakePluginComponentFn(map.plugin());
    case proto::MapOp::kImage:
      return MakeImageComponentFn(map.image());  // core/data/ops/image_ops.h
    case proto::MapOp::kParseExample:
      return MakeParseExampleComponentFn(map.parse_example());  // core/data/ops/parse_example.h
    case proto::MapOp::FN_NOT_SET:
      break;
  }
  return Invalid("map: no function set (written by a newer build?)");
}

absl::StatusOr<ElementSpec> InferMapSpec(const proto::MapOp& map, const ElementSpec& input) {
  if (map.num_parallel_calls() < -1) {
    return Invalid(absl::StrCat("num_parallel_calls must be positive, 0 or -1 (AUTOTUNE), got ",
                                map.num_parallel_calls()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ComponentFn> fn, MakeComponentFn(map));
  ASSIGN_OR_RETURN(int at, SelectComponent(map, input));
  const std::string where = ComponentName(map);
  int leaf = 0;
  if (at < 0) return MapLeafSpecs(*fn, input, where, &leaf);
  ElementSpec out = input;
  ASSIGN_OR_RETURN(out.mutable_children()[at],
                   MapLeafSpecs(*fn, input.children()[at], where, &leaf));
  return out;
}

absl::StatusOr<std::shared_ptr<const MapFunction>> MakeMapFunction(const proto::MapOp& map,
                                                                   const ElementSpec& input) {
  RETURN_IF_ERROR(InferMapSpec(map, input).status());
  ASSIGN_OR_RETURN(std::unique_ptr<ComponentFn> fn, MakeComponentFn(map));
  return std::shared_ptr<const MapFunction>(
      new ComponentMapFunction(std::shared_ptr<const ComponentFn>(std::move(fn)), map));
}

}  // namespace sluice
