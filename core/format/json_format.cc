#include "core/format/json_format.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "sluice/dtype.h"
#include "core/util/json_value.h"

namespace sluice {
namespace {

std::string FloatJson(float v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v < 0 ? "\"-Infinity\"" : "\"Infinity\"";
  return PythonFloatRepr(v);
}

std::string DoubleJson(double v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v < 0 ? "\"-Infinity\"" : "\"Infinity\"";
  return PythonFloatRepr(v);
}

std::string ValueJson(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBool: return t.data<bool>()[i] ? "true" : "false";
    case DType::kInt8: return std::to_string(t.data<int8_t>()[i]);
    case DType::kInt16: return std::to_string(t.data<int16_t>()[i]);
    case DType::kInt32: return std::to_string(t.data<int32_t>()[i]);
    case DType::kInt64: return std::to_string(t.data<int64_t>()[i]);
    case DType::kUInt8: return std::to_string(t.data<uint8_t>()[i]);
    case DType::kUInt16: return std::to_string(t.data<uint16_t>()[i]);
    case DType::kUInt32: return std::to_string(t.data<uint32_t>()[i]);
    case DType::kUInt64: return std::to_string(t.data<uint64_t>()[i]);
    case DType::kFloat16: return FloatJson(HalfToFloat(t.data<uint16_t>()[i]));
    case DType::kBFloat16: return FloatJson(BFloat16ToFloat(t.data<uint16_t>()[i]));
    case DType::kFloat32: return FloatJson(t.data<float>()[i]);
    case DType::kFloat64: return DoubleJson(t.data<double>()[i]);
    case DType::kString: return JsonQuote(t.string_at(i));
    default: return "null";
  }
}

// Appends the values of dimensions [axis, rank) starting at flat element `offset`.
void AppendValues(const Tensor& t, int axis, int64_t offset, std::string* out) {
  const Shape& shape = t.shape();
  if (axis == shape.rank()) {
    out->append(ValueJson(t, offset));
    return;
  }
  int64_t stride = 1;
  for (int d = axis + 1; d < shape.rank(); ++d) stride *= shape.dim(d);
  out->push_back('[');
  for (int64_t i = 0; i < shape.dim(axis); ++i) {
    if (i > 0) out->append(", ");
    AppendValues(t, axis + 1, offset + i * stride, out);
  }
  out->push_back(']');
}

std::string ShapeJson(const Shape& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.rank(); ++i) {
    if (i > 0) out += ", ";
    out += shape.dim(i) == kUnknownDim ? "null" : std::to_string(shape.dim(i));
  }
  return out + "]";
}

template <typename T, typename F>
std::string NestJson(const Nest<T>& n, const F& leaf) {
  switch (n.kind()) {
    case NestKind::kLeaf: return leaf(n.leaf());
    case NestKind::kTuple:
    case NestKind::kList:
    case NestKind::kSparse:  // components in order: [indices, values, dense_shape]
    case NestKind::kRagged: {  // [flat_values, row_splits...]
      std::string out = "[";
      for (size_t i = 0; i < n.children().size(); ++i) {
        if (i > 0) out += ", ";
        out += NestJson(n.children()[i], leaf);
      }
      return out + "]";
    }
    case NestKind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < n.children().size(); ++i) {
        if (i > 0) out += ", ";
        absl::StrAppend(&out, JsonQuote(n.keys()[i]), ": ", NestJson(n.children()[i], leaf));
      }
      return out + "}";
    }
  }
  return "null";
}

}  // namespace

std::string TensorToJson(const Tensor& t) {
  std::string out = absl::StrCat("{\"dtype\": \"", DTypeName(t.dtype()),
                                 "\", \"shape\": ", ShapeJson(t.shape()), ", \"values\": ");
  const bool on_device = t.dtype() != DType::kString && t.num_elements() > 0 &&
                         t.buffer() != nullptr && t.buffer()->space() == MemorySpace::kDevice;
  if (!t.valid() || on_device) {
    out += "null";
  } else {
    AppendValues(t, 0, 0, &out);
  }
  return out + "}";
}

std::string ElementToJson(const Element& e) {
  return NestJson(e, [](const Tensor& t) { return TensorToJson(t); });
}

std::string TensorSpecToJson(const TensorSpec& spec) {
  return absl::StrCat("{\"dtype\": \"", DTypeName(spec.dtype), "\", \"shape\": ",
                      ShapeJson(spec.shape), "}");
}

std::string ElementSpecToJson(const ElementSpec& spec) {
  return NestJson(spec, [](const TensorSpec& s) { return TensorSpecToJson(s); });
}

std::string FormatRunStepJson(int64_t step, const PerReplica<Element>& values,
                              PerReplicaWrapping wrapping) {
  if (wrapping == PerReplicaWrapping::kPlainElement && values.num_replicas() == 1) {
    return absl::StrCat("{\"step\": ", step, ", \"value\": ", ElementToJson(values[0]), "}");
  }
  std::string out = absl::StrCat("{\"step\": ", step, ", \"per_replica\": [");
  for (size_t r = 0; r < values.num_replicas(); ++r) {
    if (r > 0) out += ", ";
    out += ElementToJson(values[r]);
  }
  return out + "]}";
}

std::string FormatElementSpecJson(const DistributedElementSpec& spec,
                                  PerReplicaWrapping wrapping) {
  return NestJson(spec, [wrapping](const PerReplicaSpec& p) {
    if (wrapping == PerReplicaWrapping::kPlainElement && p.specs.size() == 1) {
      return TensorSpecToJson(p.specs[0]);
    }
    std::string out = "{\"per_replica\": [";
    for (size_t r = 0; r < p.specs.size(); ++r) {
      if (r > 0) out += ", ";
      out += TensorSpecToJson(p.specs[r]);
    }
    return out + "]}";
  });
}

}  // namespace sluice
