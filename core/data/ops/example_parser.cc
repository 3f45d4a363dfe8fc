#include "core/data/ops/example_parser.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/batch_destinations.h"
#include "core/data/shape_limits.h"
#include "core/tensor/proto_convert.h"
#include "core/format/python_literal.h"
#include "core/data/spec_inference.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"
#include "sluice/composite_tensor.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view m) { return absl::InvalidArgumentError(std::string(m)); }

// TF's DataTypeString for the three Example dtypes.
absl::string_view TfTypeName(DType d) {
  switch (d) {
    case DType::kString: return "string";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float";
    default: return DTypeName(d);
  }
}

// --- A bounds-checked protobuf wire reader. ---

struct Cursor {
  const char* p;
  const char* end;
  bool done() const { return p >= end; }
};

bool ReadVarint(Cursor* c, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64 && c->p < c->end; shift += 7) {
    uint8_t b = static_cast<uint8_t>(*c->p++);
    result |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

bool ReadTag(Cursor* c, uint64_t* field, int* wire_type) {
  uint64_t tag;
  if (!ReadVarint(c, &tag)) return false;
  *field = tag >> 3;
  *wire_type = static_cast<int>(tag & 7);
  return *field != 0;
}

bool ReadBytes(Cursor* c, absl::string_view* out) {
  uint64_t len;
  if (!ReadVarint(c, &len)) return false;
  if (len > static_cast<uint64_t>(c->end - c->p)) return false;
  *out = absl::string_view(c->p, static_cast<size_t>(len));
  c->p += len;
  return true;
}

bool Skip(Cursor* c, int wire_type) {
  switch (wire_type) {
    case 0: {
      uint64_t v;
      return ReadVarint(c, &v);
    }
    case 1:
      if (c->end - c->p < 8) return false;
      c->p += 8;
      return true;
    case 2: {
      absl::string_view s;
      return ReadBytes(c, &s);
    }
    case 5:
      if (c->end - c->p < 4) return false;
      c->p += 4;
      return true;
    default:
      return false;  // groups and invalid wire types
  }
}

// The values of one Feature message. Repeated list fields of the same kind merge, a different
// kind replaces (protobuf's oneof semantics).
struct Values {
  DType kind = DType::kInvalid;  // kInvalid: no list set
  std::vector<absl::string_view> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;

  void Reset(DType k) {
    kind = k;
    bytes.clear();
    floats.clear();
    ints.clear();
  }
  size_t size() const {
    switch (kind) {
      case DType::kString: return bytes.size();
      case DType::kFloat32: return floats.size();
      case DType::kInt64: return ints.size();
      default: return 0;
    }
  }
};

bool DecodeList(absl::string_view list, DType kind, Values* out) {
  Cursor c{list.data(), list.data() + list.size()};
  while (!c.done()) {
    uint64_t field;
    int wt;
    if (!ReadTag(&c, &field, &wt)) return false;
    if (field != 1) {
      if (!Skip(&c, wt)) return false;
      continue;
    }
    switch (kind) {
      case DType::kString: {
        absl::string_view v;
        if (wt != 2 || !ReadBytes(&c, &v)) return false;
        out->bytes.push_back(v);
        break;
      }
      case DType::kFloat32: {
        if (wt == 5) {
          if (c.end - c.p < 4) return false;
          float f;
          std::memcpy(&f, c.p, 4);
          c.p += 4;
          out->floats.push_back(f);
        } else if (wt == 2) {
          absl::string_view packed;
          if (!ReadBytes(&c, &packed) || packed.size() % 4 != 0) return false;
          size_t n = packed.size() / 4;
          size_t at = out->floats.size();
          out->floats.resize(at + n);
          std::memcpy(out->floats.data() + at, packed.data(), packed.size());
        } else {
          return false;
        }
        break;
      }
      default: {  // kInt64
        uint64_t v;
        if (wt == 0) {
          if (!ReadVarint(&c, &v)) return false;
          out->ints.push_back(static_cast<int64_t>(v));
        } else if (wt == 2) {
          absl::string_view packed;
          if (!ReadBytes(&c, &packed)) return false;
          Cursor pc{packed.data(), packed.data() + packed.size()};
          while (!pc.done()) {
            if (!ReadVarint(&pc, &v)) return false;
            out->ints.push_back(static_cast<int64_t>(v));
          }
        } else {
          return false;
        }
        break;
      }
    }
  }
  return true;
}

bool DecodeFeature(absl::string_view feature, Values* out) {
  out->Reset(DType::kInvalid);
  Cursor c{feature.data(), feature.data() + feature.size()};
  while (!c.done()) {
    uint64_t field;
    int wt;
    if (!ReadTag(&c, &field, &wt)) return false;
    if (field < 1 || field > 3) {
      if (!Skip(&c, wt)) return false;
      continue;
    }
    absl::string_view list;
    if (wt != 2 || !ReadBytes(&c, &list)) return false;
    DType kind = field == 1 ? DType::kString : field == 2 ? DType::kFloat32 : DType::kInt64;
    if (kind != out->kind) out->Reset(kind);
    if (!DecodeList(list, kind, out)) return false;
  }
  return true;
}

// Finds the Feature bytes of each wanted key in an Example (the last map entry for a key wins,
// as in protobuf). `index` maps keys to positions in `found`.
bool FindFeatures(absl::string_view example,
                  const absl::flat_hash_map<std::string, int>& index,
                  std::vector<std::optional<absl::string_view>>* found) {
  Cursor c{example.data(), example.data() + example.size()};
  while (!c.done()) {
    uint64_t field;
    int wt;
    if (!ReadTag(&c, &field, &wt)) return false;
    if (field != 1) {
      if (!Skip(&c, wt)) return false;
      continue;
    }
    absl::string_view features;
    if (wt != 2 || !ReadBytes(&c, &features)) return false;
    Cursor fc{features.data(), features.data() + features.size()};
    while (!fc.done()) {
      if (!ReadTag(&fc, &field, &wt)) return false;
      if (field != 1) {
        if (!Skip(&fc, wt)) return false;
        continue;
      }
      absl::string_view entry;
      if (wt != 2 || !ReadBytes(&fc, &entry)) return false;
      Cursor ec{entry.data(), entry.data() + entry.size()};
      absl::string_view key, value;
      bool has_value = false;
      while (!ec.done()) {
        if (!ReadTag(&ec, &field, &wt)) return false;
        if (field == 1 && wt == 2) {
          if (!ReadBytes(&ec, &key)) return false;
        } else if (field == 2 && wt == 2) {
          if (!ReadBytes(&ec, &value)) return false;
          has_value = true;
        } else if (!Skip(&ec, wt)) {
          return false;
        }
      }
      auto it = index.find(key);
      if (it == index.end()) continue;
      (*found)[static_cast<size_t>(it->second)] = has_value ? value : absl::string_view();
    }
  }
  return true;
}

template <typename T>
void CopyNumbers(const std::vector<T>& from, T* to) {
  if (!from.empty()) std::memcpy(to, from.data(), from.size() * sizeof(T));
}

}  // namespace

namespace {

// A feature's output the allocator refused (RESOURCE_EXHAUSTED "parse_example: ..."), with the
// feature named.
absl::Status OutputRefused(absl::string_view key, const absl::Status& s) {
  return WithContext(absl::StrCat("feature '", key, "'"), s);
}

}  // namespace

absl::StatusOr<Tensor> ConvertDefaultValue(absl::string_view key, const Tensor& value,
                                           DType dtype, const Shape& shape) {
  auto fail = [&](absl::string_view why) {
    return Invalid(absl::StrCat("parse_example: feature '", key, "': default_value ", why));
  };
  const int64_t n = value.num_elements();
  Tensor out = Tensor::Allocate(dtype, Shape({n}));  // as large as `value`, already allocated
  if (dtype == DType::kString) {
    if (value.dtype() != DType::kString) {
      return fail(absl::StrCat("must be a string for tf.string, got ", DTypeName(value.dtype())));
    }
    for (int64_t i = 0; i < n; ++i) *out.mutable_string(i) = value.string_at(i);
  } else {
    if (value.dtype() == DType::kString || value.dtype() == DType::kBool) {
      return fail(absl::StrCat("must be a number for tf.", DTypeName(dtype), ", got ",
                               DTypeName(value.dtype())));
    }
    if (dtype == DType::kInt64 && !IsInteger(value.dtype())) {
      return fail(absl::StrCat("must be an integer for tf.int64, got ",
                               DTypeName(value.dtype())));
    }
    for (int64_t i = 0; i < n; ++i) {
      double d = 0;
      int64_t iv = 0;
      switch (value.dtype()) {
        case DType::kInt32: iv = value.data<int32_t>()[i]; d = static_cast<double>(iv); break;
        case DType::kInt64: iv = value.data<int64_t>()[i]; d = static_cast<double>(iv); break;
        case DType::kFloat32: d = value.data<float>()[i]; break;
        case DType::kFloat64: d = value.data<double>()[i]; break;
        default:
          return fail(absl::StrCat("has unsupported dtype ", DTypeName(value.dtype())));
      }
      if (dtype == DType::kInt64) {
        out.mutable_data<int64_t>()[i] = iv;
      } else {
        out.mutable_data<float>()[i] = static_cast<float>(d);
      }
    }
  }
  if (n != shape.num_elements()) {
    return fail(absl::StrCat("has ", n, " values but shape ", shape.ToString(), " needs ",
                             shape.num_elements()));
  }
  return out.Reshape(shape);
}

proto::FeatureSpec FixedLenFeatureSpec(std::string key, std::vector<int64_t> shape, DType dtype,
                                       std::optional<Tensor> default_value) {
  proto::FeatureSpec f;
  f.set_key(std::move(key));
  f.set_kind(proto::FeatureSpec::FIXED_LEN);
  f.set_dtype(static_cast<proto::DataType>(dtype));
  for (int64_t d : shape) f.add_shape(d);
  if (default_value.has_value()) *f.mutable_default_value() = TensorToProto(*default_value);
  return f;
}

proto::FeatureSpec VarLenFeatureSpec(std::string key, DType dtype) {
  proto::FeatureSpec f;
  f.set_key(std::move(key));
  f.set_kind(proto::FeatureSpec::VAR_LEN);
  f.set_dtype(static_cast<proto::DataType>(dtype));
  return f;
}

proto::FeatureSpec RaggedFeatureSpec(std::string key, DType dtype, std::string value_key,
                                     std::vector<proto::RaggedPartition> partitions) {
  proto::FeatureSpec f;
  f.set_key(std::move(key));
  f.set_kind(proto::FeatureSpec::RAGGED);
  f.set_dtype(static_cast<proto::DataType>(dtype));
  f.set_value_key(std::move(value_key));
  for (proto::RaggedPartition& p : partitions) *f.add_partitions() = std::move(p);
  f.set_row_splits_dtype(static_cast<proto::DataType>(DType::kInt64));
  return f;
}

proto::RaggedPartition KeyedPartition(proto::RaggedPartition::Kind kind, std::string key) {
  proto::RaggedPartition p;
  p.set_kind(kind);
  p.set_key(std::move(key));
  return p;
}

proto::RaggedPartition RowLengthsPartition(std::string key) {
  return KeyedPartition(proto::RaggedPartition::ROW_LENGTHS, std::move(key));
}

proto::RaggedPartition RowSplitsPartition(std::string key) {
  return KeyedPartition(proto::RaggedPartition::ROW_SPLITS, std::move(key));
}

proto::RaggedPartition UniformRowLengthPartition(int64_t length) {
  proto::RaggedPartition p;
  p.set_kind(proto::RaggedPartition::UNIFORM_ROW_LENGTH);
  p.set_length(length);
  return p;
}

namespace {

// RaggedFeature's partitions that read a feature: TF's class name, the proto kind, the layout's.
struct KeyedPartitionKind {
  absl::string_view name;
  proto::RaggedPartition::Kind proto_kind;
  RaggedLayout::PartitionKind layout_kind;
};
constexpr KeyedPartitionKind kKeyedPartitions[] = {
    {"RowLengths", proto::RaggedPartition::ROW_LENGTHS, RaggedLayout::PartitionKind::kRowLengths},
    {"RowSplits", proto::RaggedPartition::ROW_SPLITS, RaggedLayout::PartitionKind::kRowSplits},
    {"RowStarts", proto::RaggedPartition::ROW_STARTS, RaggedLayout::PartitionKind::kRowStarts},
    {"RowLimits", proto::RaggedPartition::ROW_LIMITS, RaggedLayout::PartitionKind::kRowLimits},
    {"ValueRowIds", proto::RaggedPartition::VALUE_ROWIDS,
     RaggedLayout::PartitionKind::kValueRowIds},
};
const KeyedPartitionKind* FindKeyedPartition(proto::RaggedPartition::Kind kind) {
  for (const KeyedPartitionKind& k : kKeyedPartitions) {
    if (k.proto_kind == kind) return &k;
  }
  return nullptr;
}
const KeyedPartitionKind* FindKeyedPartition(absl::string_view name) {
  for (const KeyedPartitionKind& k : kKeyedPartitions) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

// The rows of a RaggedFeature from its spec: the keyed partitions, then UniformRowLengths.
absl::StatusOr<RaggedLayout> RaggedLayoutOf(const proto::FeatureSpec& f) {
  auto fail = [&](absl::string_view why) {
    return Invalid(absl::StrCat("parse_example: feature '", f.key(), "': RaggedFeature ", why));
  };
  RaggedLayout layout;
  layout.key = f.key();
  layout.value_key = f.value_key().empty() ? f.key() : f.value_key();
  if (f.shape_size() > 0 || f.has_default_value()) return fail("has no shape or default_value");
  if (static_cast<DType>(f.row_splits_dtype()) != DType::kInt64) {
    return fail(absl::StrCat(
        "row_splits_dtype must be tf.int64 (Sluice's row splits are int64; TF's default is "
        "tf.int32, so give row_splits_dtype=tf.int64), got ",
        f.row_splits_dtype() == 0 ? "none" : DTypeName(static_cast<DType>(f.row_splits_dtype()))));
  }
  int64_t uniform_size = 1;
  for (int i = 0; i < f.partitions_size(); ++i) {
    const proto::RaggedPartition& p = f.partitions(i);
    if (p.kind() == proto::RaggedPartition::UNIFORM_ROW_LENGTH) {
      if (p.length() <= 0 || p.length() > (int64_t{1} << 40) / uniform_size) {
        return fail(absl::StrCat("UniformRowLength(", p.length(),
                                 ") must be positive (and all of them multiply to at most 2**40)"));
      }
      uniform_size *= p.length();
      layout.uniform.push_back(p.length());
      continue;
    }
    const KeyedPartitionKind* keyed = FindKeyedPartition(p.kind());
    if (keyed == nullptr) {
      return fail(absl::StrCat("partition ", i, " has unknown kind ", static_cast<int>(p.kind())));
    }
    if (!layout.uniform.empty()) {
      return fail(absl::StrCat(
          "partition ", i, ": a ", keyed->name, " partition may not follow a "
          "UniformRowLength (Sluice's RaggedTensors have no uniform dimension between ragged ones)"));
    }
    if (p.key().empty()) return fail(absl::StrCat("partition ", i, " has no feature key"));
    layout.ragged.push_back({keyed->layout_kind, p.key()});
  }
  return layout;
}

}  // namespace

void ExampleParser::OrderRaggedFeaturesAsTf(std::vector<Feature>* features) {
  // TF's parse_example returns its raw outputs keyed by the keys RaggedFeatures read (in
  // the order the features, sorted by key, first read them), then replaces them by the
  // features (dict.update, so a feature whose key is such a key keeps that place, and the
  // others follow sorted) and drops the rest (parsing_config.py,
  // _construct_tensors_for_composite_features).
  std::vector<std::string> read;
  auto add = [&](const std::string& k) {
    if (std::find(read.begin(), read.end(), k) == read.end()) read.push_back(k);
  };
  auto ragged = std::find_if(features->begin(), features->end(),
                             [](const Feature& f) { return f.kind == Kind::kRagged; });
  for (auto it = ragged; it != features->end(); ++it) {
    add(it->ragged.value_key);
    for (const RaggedLayout::Partition& p : it->ragged.ragged) add(p.key);
  }
  auto place = [&](const Feature& f) {
    return static_cast<size_t>(std::find(read.begin(), read.end(), f.key) - read.begin());
  };
  std::stable_sort(ragged, features->end(),
                   [&](const Feature& a, const Feature& b) { return place(a) < place(b); });
}

int ExampleParser::Slot(const std::string& key) {
  auto [it, inserted] = index_.emplace(key, static_cast<int>(keys_read_.size()));
  if (inserted) keys_read_.push_back(key);
  return it->second;
}

absl::StatusOr<ExampleParser> ExampleParser::Create(const proto::ParseExampleFn& fn) {
  ExampleParser parser;
  parser.var_len_as_dense_ = fn.var_len_as_dense();
  if (fn.features_size() == 0) return Invalid("parse_example: the feature spec is empty");
  for (const proto::FeatureSpec& f : fn.features()) {
    Feature out;
    out.key = f.key();
    auto fail = [&](absl::string_view why) {
      return Invalid(absl::StrCat("parse_example: feature '", f.key(), "': ", why));
    };
    if (f.key().empty()) return Invalid("parse_example: a feature has an empty key");
    for (const Feature& seen : parser.features_) {
      if (seen.key == f.key()) return fail("given twice");
    }
    out.dtype = static_cast<DType>(f.dtype());
    if (out.dtype != DType::kString && out.dtype != DType::kInt64 &&
        out.dtype != DType::kFloat32) {
      return fail(absl::StrCat("dtype must be tf.string, tf.int64 or tf.float32, got ",
                               DTypeName(out.dtype)));
    }
    if (f.kind() != proto::FeatureSpec::RAGGED &&
        (!f.value_key().empty() || f.partitions_size() > 0)) {
      return fail("only a RaggedFeature has a value_key or partitions");
    }
    if (f.kind() == proto::FeatureSpec::VAR_LEN) {
      out.kind = Kind::kVarLen;
      if (f.shape_size() > 0 || f.has_default_value()) {
        return fail("a VarLenFeature has no shape or default_value");
      }
    } else if (f.kind() == proto::FeatureSpec::RAGGED) {
      out.kind = Kind::kRagged;
      ASSIGN_OR_RETURN(out.ragged, RaggedLayoutOf(f));
    } else if (f.kind() == proto::FeatureSpec::FIXED_LEN) {
      int64_t n = 1;
      for (int64_t d : f.shape()) {
        if (d < 0) {
          return fail(absl::StrCat("FixedLenFeature needs a fully defined shape, got dimension ",
                                   d));
        }
        if (d != 0 && n > (int64_t{1} << 40) / d) return fail("shape is too large");
        n *= d;
      }
      out.shape = Shape(std::vector<int64_t>(f.shape().begin(), f.shape().end()));
      if (f.has_default_value()) {
        absl::StatusOr<Tensor> t = TensorFromProto(f.default_value());
        if (!t.ok()) return fail(absl::StrCat("bad default_value: ", t.status().message()));
        ASSIGN_OR_RETURN(Tensor d, ConvertDefaultValue(f.key(), *t, out.dtype, out.shape));
        out.default_value = std::move(d);
      }
    } else {
      return fail(absl::StrCat("unknown feature kind ", static_cast<int>(f.kind())));
    }
    parser.features_.push_back(std::move(out));
  }
  // As TF's _ParseOpParams: the keys a RaggedFeature reads are not another feature's key.
  for (const Feature& r : parser.features_) {
    if (r.kind != Kind::kRagged) continue;
    std::vector<std::string> keys = {r.ragged.value_key};
    for (const RaggedLayout::Partition& p : r.ragged.ragged) keys.push_back(p.key);
    for (const Feature& other : parser.features_) {
      if (other.kind == Kind::kRagged) continue;
      for (const std::string& k : keys) {
        if (k != other.key) continue;
        return Invalid(absl::StrCat(
            "parse_example: feature '", r.key, "': the RaggedFeature reads '", k, "', which is a ",
            other.kind == Kind::kVarLen ? "VarLenFeature" : "FixedLenFeature",
            " too (TF: ragged keys must not intersect sparse or dense keys)"));
      }
    }
  }
  // TF's output order: sparse (VarLen) keys sorted, then dense (FixedLen), then ragged (see
  // OrderRaggedFeaturesAsTf).
  std::stable_sort(parser.features_.begin(), parser.features_.end(),
                   [](const Feature& a, const Feature& b) {
                     if (a.kind != b.kind) return a.kind < b.kind;
                     return a.key < b.key;
                   });
  OrderRaggedFeaturesAsTf(&parser.features_);
  for (Feature& f : parser.features_) {
    if (f.kind != Kind::kRagged) {
      f.slot = parser.Slot(f.key);
      continue;
    }
    f.slot = parser.Slot(f.ragged.value_key);
    for (const RaggedLayout::Partition& p : f.ragged.ragged) {
      f.partition_slots.push_back(parser.Slot(p.key));
    }
  }
  return parser;
}

absl::StatusOr<ElementSpec> ExampleParser::OutputSpec(const ElementSpec& input) const {
  if (!input.is_leaf()) {
    return Invalid(absl::StrCat(
        "parse_example needs a string scalar (one serialized Example) or a 1-D string tensor "
        "(a batch), got ",
        ElementSpecToString(input)));
  }
  return OutputSpec(input.leaf());
}

absl::StatusOr<ElementSpec> ExampleParser::OutputSpec(const TensorSpec& input) const {
  if (input.dtype != DType::kString || input.shape.rank() > 1) {
    return Invalid(absl::StrCat(
        "parse_example needs a string scalar (one serialized Example) or a 1-D string tensor "
        "(a batch), got ",
        input.ToString()));
  }
  const bool batched = input.shape.rank() == 1;
  const int64_t b = batched ? input.shape.dim(0) : 0;
  std::vector<std::pair<std::string, ElementSpec>> items;
  for (const Feature& f : features_) {
    if (f.kind == Kind::kRagged) {
      items.emplace_back(f.key, f.ragged.Spec(f.dtype, batched, b));
      continue;
    }
    if (f.kind == Kind::kVarLen) {
      // TF's spec of a batch's VarLenFeature has no static batch size, also in the dense form
      // (tf.sparse.to_dense of a SparseTensorSpec([None, None])).
      std::vector<int64_t> dims = {kUnknownDim};
      if (batched) dims.push_back(kUnknownDim);
      items.emplace_back(f.key, var_len_as_dense_
                                    ? ElementSpec(TensorSpec{f.dtype, Shape(dims)})
                                    : SparseTensorSpecOf(f.dtype, std::move(dims)));
      continue;
    }
    Shape s = f.shape;
    if (batched) s = s.Prepend(b);
    items.emplace_back(f.key, ElementSpec(TensorSpec{f.dtype, s}));
  }
  return ElementSpec::Dict(std::move(items));
}

absl::StatusOr<Element> ExampleParser::Parse(const Tensor& serialized) const {
  if (serialized.dtype() != DType::kString || serialized.shape().rank() > 1) {
    return Invalid(absl::StrCat(
        "parse_example needs a string scalar or a 1-D string tensor, got a ",
        DTypeName(serialized.dtype()), " tensor of shape ", serialized.shape().ToString()));
  }
  if (serialized.shape().rank() == 0) return ParseSingle(serialized.string_at(0));
  std::vector<absl::string_view> views;
  views.reserve(static_cast<size_t>(serialized.num_elements()));
  for (int64_t i = 0; i < serialized.num_elements(); ++i) views.push_back(serialized.string_at(i));
  return ParseBatch(views);
}

absl::StatusOr<Element> ExampleParser::ParseSingle(absl::string_view serialized) const {
  return ParseRows({serialized}, /*single=*/true);
}

absl::StatusOr<Element> ExampleParser::ParseBatch(
    const std::vector<absl::string_view>& serialized,
    const std::function<absl::Status(size_t)>& check) const {
  return ParseRows(serialized, /*single=*/false, check);
}

namespace {

// The values of `rows` (each of `dtype` or empty) one after another, as a 1-D tensor allocated
// through the memory budget.
absl::StatusOr<Tensor> ConcatValues(absl::string_view key, DType dtype,
                                    const std::vector<Values>& rows) {
  int64_t n = 0;
  int64_t chars = 0;
  for (const Values& v : rows) {
    n += static_cast<int64_t>(v.size());
    for (absl::string_view b : v.bytes) chars += static_cast<int64_t>(b.size());
  }
  absl::StatusOr<Tensor> allocated =
      dtype == DType::kString ? Tensor::TryAllocateStrings(Shape({n}), chars, "parse_example")
                              : Tensor::TryAllocate(dtype, Shape({n}), "parse_example");
  if (!allocated.ok()) return OutputRefused(key, allocated.status());
  Tensor out = *std::move(allocated);
  int64_t at = 0;
  for (const Values& v : rows) {
    switch (dtype) {
      case DType::kString:
        for (absl::string_view b : v.bytes) out.mutable_string(at++)->assign(b.data(), b.size());
        break;
      case DType::kFloat32:
        CopyNumbers(v.floats, out.mutable_data<float>() + at);
        at += static_cast<int64_t>(v.floats.size());
        break;
      default:
        CopyNumbers(v.ints, out.mutable_data<int64_t>() + at);
        at += static_cast<int64_t>(v.ints.size());
        break;
    }
  }
  return out;
}

// A VarLenFeature as TF's SparseTensor: indices [N, 2] (row, position) and dense_shape
// [rows, max n]; for one Example (`single`) indices [n, 1] and dense_shape [n].
absl::StatusOr<Element> SparseVarLen(absl::string_view key, DType dtype,
                                     const std::vector<Values>& rows, bool single) {
  ASSIGN_OR_RETURN(Tensor values, ConcatValues(key, dtype, rows));
  const int64_t n = values.num_elements();
  const int64_t rank = single ? 1 : 2;
  absl::StatusOr<Tensor> indices = Tensor::TryAllocate(DType::kInt64, Shape({n, rank}),
                                                       "parse_example");
  if (!indices.ok()) return OutputRefused(key, indices.status());
  int64_t* idx = indices->mutable_data<int64_t>();
  int64_t width = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t m = static_cast<int64_t>(rows[r].size());
    width = std::max(width, m);
    for (int64_t j = 0; j < m; ++j) {
      if (!single) *idx++ = static_cast<int64_t>(r);
      *idx++ = j;
    }
  }
  Tensor dense_shape = Tensor::Allocate(DType::kInt64, Shape({rank}));
  int64_t* dims = dense_shape.mutable_data<int64_t>();
  if (!single) *dims++ = static_cast<int64_t>(rows.size());
  *dims = width;
  return MakeSparseTensor(*std::move(indices), std::move(values), std::move(dense_shape),
                          absl::StrCat("parse_example: feature '", key, "'"));
}

// A VarLenFeature as tf.sparse.to_dense gives it: [rows, max n], padded with 0 / "".
absl::StatusOr<Tensor> DenseVarLen(absl::string_view key, DType dtype,
                                   const std::vector<Values>& rows) {
  const int64_t batch = static_cast<int64_t>(rows.size());
  size_t width = 0;
  for (const Values& v : rows) width = std::max(width, v.size());
  absl::StatusOr<Tensor> allocated = Tensor::TryAllocate(
      dtype, Shape({batch, static_cast<int64_t>(width)}), "parse_example");
  if (!allocated.ok()) return OutputRefused(key, allocated.status());
  Tensor out = *std::move(allocated);
  for (int64_t i = 0; i < batch; ++i) {
    const Values& v = rows[static_cast<size_t>(i)];
    const int64_t row = i * static_cast<int64_t>(width);
    switch (dtype) {
      case DType::kString:
        for (size_t j = 0; j < v.bytes.size(); ++j) {
          *out.mutable_string(row + static_cast<int64_t>(j)) = std::string(v.bytes[j]);
        }
        break;
      case DType::kFloat32:
        CopyNumbers(v.floats, out.mutable_data<float>() + row);
        break;
      default:
        CopyNumbers(v.ints, out.mutable_data<int64_t>() + row);
        break;
    }
  }
  return out;
}

// TF's ParseExampleV2 message for a RaggedFeature's values or partitions of the wrong type.
absl::Status RaggedTypeMismatch(absl::string_view key, int64_t index, DType found,
                                DType expected) {
  return Invalid(absl::StrCat("Name: <unknown>, Key: ", key, ", Index: ", index,
                              ".  Data types don't match. Expected type: ",
                              TfTypeName(expected), ", Actual type: ", TfTypeName(found)));
}

}  // namespace

absl::StatusOr<Element> ExampleParser::ParseRows(
    const std::vector<absl::string_view>& serialized, bool single,
    const std::function<absl::Status(size_t)>& check) const {
  const int64_t batch = static_cast<int64_t>(serialized.size());

  std::vector<Tensor> dense(features_.size());
  // Under a fused map-and-batch, the batch's rows to write this block into (every value of
  // them is written below, or the parse fails).
  if (!single) {
    if (std::optional<std::vector<Tensor>> in_place = FusedBatchRows(batch)) {
      for (size_t f = 0; f < features_.size(); ++f) dense[f] = std::move((*in_place)[f]);
    }
  }
  // VarLen and Ragged features: each row's values (views of `serialized`).
  std::vector<std::vector<Values>> var(features_.size());
  std::vector<std::optional<RaggedRows>> ragged(features_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    if (dense[f].valid()) continue;
    if (features_[f].kind != Kind::kFixedLen) {
      var[f].resize(static_cast<size_t>(batch));
      if (features_[f].kind == Kind::kRagged) ragged[f].emplace(features_[f].ragged, !single);
    } else {
      // The shape is the client's FixedLenFeature: checked (INVALID_ARGUMENT when impossible,
      // naming the feature) before the allocator is asked for it.
      const Shape shape = features_[f].shape.Prepend(batch);
      RETURN_IF_ERROR(CheckAllocation(absl::StrCat("parse_example: feature '", features_[f].key,
                                                   "'"),
                                      features_[f].dtype, shape.dims()));
      absl::StatusOr<Tensor> t = Tensor::TryAllocate(features_[f].dtype, shape, "parse_example");
      if (!t.ok()) return OutputRefused(features_[f].key, t.status());
      dense[f] = *std::move(t);
    }
  }
  std::vector<std::optional<absl::string_view>> found(keys_read_.size());
  Values values;
  std::vector<Values> partitions;
  std::vector<std::span<const int64_t>> partition_ints;
  for (int64_t i = 0; i < batch; ++i) {
    if (check != nullptr) RETURN_IF_ERROR(check(static_cast<size_t>(i)));
    std::fill(found.begin(), found.end(), std::nullopt);
    if (!FindFeatures(serialized[static_cast<size_t>(i)], index_, &found)) {
      return Invalid(absl::StrCat("Could not parse example input at index ", i));
    }
    for (size_t f = 0; f < features_.size(); ++f) {
      const Feature& spec = features_[f];
      const std::optional<absl::string_view>& bytes = found[static_cast<size_t>(spec.slot)];
      Values* v = spec.kind != Kind::kFixedLen ? &var[f][static_cast<size_t>(i)] : &values;
      v->Reset(DType::kInvalid);
      if (bytes.has_value() && !DecodeFeature(*bytes, v)) {
        return Invalid(absl::StrCat("Could not parse example input at index ", i,
                                    " (feature '", keys_read_[static_cast<size_t>(spec.slot)],
                                    "')"));
      }
      if (spec.kind == Kind::kRagged) {
        if (v->kind != DType::kInvalid && v->kind != spec.dtype) {
          return RaggedTypeMismatch(spec.ragged.value_key, i, v->kind, spec.dtype);
        }
        const size_t k = spec.partition_slots.size();
        partitions.resize(k);
        partition_ints.clear();
        for (size_t p = 0; p < k; ++p) {
          const std::optional<absl::string_view>& pb =
              found[static_cast<size_t>(spec.partition_slots[p])];
          partitions[p].Reset(DType::kInvalid);
          if (pb.has_value() && !DecodeFeature(*pb, &partitions[p])) {
            return Invalid(absl::StrCat("Could not parse example input at index ", i,
                                        " (feature '", spec.ragged.ragged[p].key, "')"));
          }
          if (partitions[p].kind != DType::kInvalid && partitions[p].kind != DType::kInt64) {
            return RaggedTypeMismatch(spec.ragged.ragged[p].key, i, partitions[p].kind,
                                      DType::kInt64);
          }
          partition_ints.emplace_back(partitions[p].ints);
        }
        RETURN_IF_ERROR(ragged[f]->AddRecord(i, static_cast<int64_t>(v->size()), partition_ints));
        continue;
      }
      if (v->kind != DType::kInvalid && v->kind != spec.dtype) {
        return Invalid(absl::StrCat("Name: <unknown>, Key: ", spec.key, ", Index: ", i,
                                    ".  Data types don't match. Data type: ",
                                    TfTypeName(v->kind),
                                    " but expected type: ", TfTypeName(spec.dtype)));
      }
      if (spec.kind == Kind::kVarLen) continue;
      const int64_t n = spec.shape.num_elements();
      const Tensor* from_default = nullptr;
      if (!bytes.has_value()) {
        if (!spec.default_value.has_value()) {
          return Invalid(absl::StrCat("Name: <unknown>, Feature: ", spec.key,
                                      " (data type: ", TfTypeName(spec.dtype),
                                      ") is required but could not be found."));
        }
        from_default = &*spec.default_value;
      } else if (static_cast<int64_t>(v->size()) != n) {
        return Invalid(absl::StrCat("Name: <unknown>, Key: ", spec.key, ", Index: ", i,
                                    ".  Number of ", TfTypeName(spec.dtype),
                                    " values != expected.  Values size: ", v->size(),
                                    " but output shape: ", TfShapeString(spec.shape)));
      }
      Tensor& out = dense[f];
      switch (spec.dtype) {
        case DType::kString:
          for (int64_t j = 0; j < n; ++j) {
            // Assigned in place: no temporary string to allocate, move and free per value.
            std::string& dst = *out.mutable_string(i * n + j);
            if (from_default != nullptr) {
              dst = from_default->string_at(j);
            } else {
              const absl::string_view b = v->bytes[static_cast<size_t>(j)];
              dst.assign(b.data(), b.size());
            }
          }
          break;
        case DType::kFloat32:
          if (from_default != nullptr) {
            std::memcpy(out.mutable_data<float>() + i * n, from_default->data<float>(),
                        sizeof(float) * static_cast<size_t>(n));
          } else {
            CopyNumbers(v->floats, out.mutable_data<float>() + i * n);
          }
          break;
        default:
          if (from_default != nullptr) {
            std::memcpy(out.mutable_data<int64_t>() + i * n, from_default->data<int64_t>(),
                        sizeof(int64_t) * static_cast<size_t>(n));
          } else {
            CopyNumbers(v->ints, out.mutable_data<int64_t>() + i * n);
          }
          break;
      }
    }
  }
  std::vector<std::pair<std::string, Element>> items;
  for (size_t f = 0; f < features_.size(); ++f) {
    const Feature& spec = features_[f];
    switch (spec.kind) {
      case Kind::kFixedLen:
        items.emplace_back(spec.key, Element(single ? dense[f].Index(0) : std::move(dense[f])));
        break;
      case Kind::kVarLen:
        if (var_len_as_dense_) {
          ASSIGN_OR_RETURN(Tensor t, DenseVarLen(spec.key, spec.dtype, var[f]));
          items.emplace_back(spec.key, Element(single ? t.Index(0) : std::move(t)));
        } else {
          ASSIGN_OR_RETURN(Element e, SparseVarLen(spec.key, spec.dtype, var[f], single));
          items.emplace_back(spec.key, std::move(e));
        }
        break;
      case Kind::kRagged: {
        ASSIGN_OR_RETURN(Tensor flat, ConcatValues(spec.key, spec.dtype, var[f]));
        ASSIGN_OR_RETURN(Element e, ragged[f]->Finish(flat));
        items.emplace_back(spec.key, std::move(e));
        break;
      }
    }
  }
  return Element::Dict(std::move(items));
}

std::optional<std::vector<Tensor>> ExampleParser::FusedBatchRows(int64_t batch) const {
  // The output dict's leaves, in the order Flatten() visits them (sorted keys); dense ones only.
  std::vector<size_t> order(features_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    if (features_[f].kind != Kind::kFixedLen) return std::nullopt;
    order[f] = f;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return features_[a].key < features_[b].key; });
  std::vector<LeafPlan> plan;
  plan.reserve(order.size());
  for (size_t f : order) {
    plan.push_back(LeafPlan{features_[f].dtype, features_[f].shape.Prepend(batch)});
  }
  std::optional<std::vector<Tensor>> taken = TakeFnBlockSlot(plan);
  if (!taken.has_value()) return std::nullopt;
  std::vector<Tensor> by_feature(features_.size());
  for (size_t i = 0; i < order.size(); ++i) by_feature[order[i]] = std::move((*taken)[i]);
  return by_feature;
}

std::string ExampleParser::ToExpression(const proto::ParseExampleFn& fn) {
  std::vector<std::string> parts;
  for (const proto::FeatureSpec& f : fn.features()) {
    DType dtype = static_cast<DType>(f.dtype());
    std::string dt = absl::StrCat("tf.", DTypeName(dtype));
    if (f.kind() == proto::FeatureSpec::VAR_LEN) {
      parts.push_back(absl::StrCat(PythonStringLiteral(f.key()), ": VarLenFeature(", dt, ")"));
      continue;
    }
    if (f.kind() == proto::FeatureSpec::RAGGED) {
      std::string s = absl::StrCat(PythonStringLiteral(f.key()), ": RaggedFeature(", dt);
      if (!f.value_key().empty()) {
        absl::StrAppend(&s, ", value_key=", PythonStringLiteral(f.value_key()));
      }
      std::vector<std::string> partitions;
      for (const proto::RaggedPartition& p : f.partitions()) {
        const KeyedPartitionKind* keyed = FindKeyedPartition(p.kind());
        partitions.push_back(
            keyed != nullptr
                ? absl::StrCat("RaggedFeature.", keyed->name, "(", PythonStringLiteral(p.key()),
                               ")")
                : absl::StrCat("RaggedFeature.UniformRowLength(", p.length(), ")"));
      }
      if (!partitions.empty()) {
        absl::StrAppend(&s, ", partitions=[", absl::StrJoin(partitions, ", "), "]");
      }
      absl::StrAppend(&s, ", row_splits_dtype=tf.",
                      DTypeName(static_cast<DType>(f.row_splits_dtype())),
                      f.validate() ? ", validate=True)" : ")");
      parts.push_back(std::move(s));
      continue;
    }
    std::string s = absl::StrCat(PythonStringLiteral(f.key()), ": FixedLenFeature([",
                                 absl::StrJoin(f.shape(), ", "), "], ", dt);
    if (f.has_default_value()) {
      absl::StatusOr<Tensor> t = TensorFromProto(f.default_value());
      absl::StrAppend(&s, ", default_value=",
                      t.ok() ? TensorToPythonLiteral(*t) : "<invalid default>");
    }
    s.push_back(')');
    parts.push_back(std::move(s));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

}  // namespace sluice

namespace sluice {
namespace {

class FeatureSpecParser {
 public:
  FeatureSpecParser(absl::string_view text, size_t* pos, absl::string_view context)
      : text_(text), pos_(*pos), out_pos_(pos), context_(context) {}

  absl::StatusOr<proto::ParseExampleFn> Parse() {
    proto::ParseExampleFn fn;
    SkipWs();
    size_t start = pos_;
    if (Peek() != '{') return Expected("a feature spec dict such as {'x': FixedLenFeature([], tf.int64)}");
    ++pos_;
    for (;;) {
      SkipWs();
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      size_t key_at = pos_;
      ASSIGN_OR_RETURN(PyValue key, ParsePyValue(text_, &pos_, context_));
      if (key.kind != PyValue::Kind::kStr && key.kind != PyValue::Kind::kBytes) {
        return Error(key_at, "parse_example: feature keys must be strings");
      }
      SkipWs();
      if (Peek() != ':') return Expected("':' after the feature key");
      ++pos_;
      SkipWs();
      ASSIGN_OR_RETURN(proto::FeatureSpec f, Feature(key.text));
      *fn.add_features() = std::move(f);
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      return Expected("',' or '}' in the feature spec");
    }
    absl::StatusOr<ExampleParser> checked = ExampleParser::Create(fn);
    if (!checked.ok()) return Error(start, checked.status().message());
    *out_pos_ = pos_;
    return fn;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipWs() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  absl::Status Error(size_t at, absl::string_view m) const {
    return absl::InvalidArgumentError(absl::StrCat(context_, ", column ", at + 1, ": ", m));
  }
  absl::Status Expected(absl::string_view what) const {
    std::string found = pos_ < text_.size() ? absl::StrCat("'", text_.substr(pos_, 1), "'")
                                            : "end of expression";
    return Error(pos_, absl::StrCat("expected ", what, ", found ", found));
  }

  absl::StatusOr<DType> Dtype(const std::string& key, const PyValue& v) const {
    if (v.kind == PyValue::Kind::kName || v.kind == PyValue::Kind::kStr) {
      absl::StatusOr<DType> d = ParseDType(v.text);
      if (d.ok()) return *d;
    }
    return Error(v.begin, absl::StrCat("parse_example: feature '", key,
                                       "': dtype must be tf.string, tf.int64 or tf.float32"));
  }

  absl::StatusOr<proto::FeatureSpec> Feature(const std::string& key) {
    size_t at = pos_;
    std::string name;
    while (pos_ < text_.size() &&
           (absl::ascii_isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
            text_[pos_] == '.')) {
      name.push_back(text_[pos_++]);
    }
    for (absl::string_view prefix : {"tf.io.", "tf.", "io."}) {
      if (absl::StartsWith(name, prefix)) {
        name = name.substr(prefix.size());
        break;
      }
    }
    const bool fixed = name == "FixedLenFeature";
    const bool ragged = name == "RaggedFeature";
    if (!fixed && !ragged && name != "VarLenFeature") {
      return Error(at, absl::StrCat("parse_example: feature '", key,
                                    "' must be FixedLenFeature(shape, dtype, default_value=None), "
                                    "VarLenFeature(dtype) or RaggedFeature(dtype, value_key=None, "
                                    "partitions=(), row_splits_dtype=tf.int64)"));
    }
    static const char* const kFixed[] = {"shape", "dtype", "default_value"};
    static const char* const kVar[] = {"dtype"};
    static const char* const kRagged[] = {"dtype", "value_key", "partitions", "row_splits_dtype",
                                          "validate"};
    const char* const* params = fixed ? kFixed : ragged ? kRagged : kVar;
    const size_t nparams = fixed ? 3 : ragged ? 5 : 1;
    constexpr size_t kPartitionsSlot = 2;
    std::vector<proto::RaggedPartition> partitions;
    std::optional<PyValue> args[5];
    SkipWs();
    if (Peek() != '(') return Expected(absl::StrCat("'(' after ", name));
    ++pos_;
    size_t positional = 0;
    for (;;) {
      SkipWs();
      if (Peek() == ')') {
        ++pos_;
        break;
      }
      size_t arg_at = pos_;
      size_t slot = nparams;
      if (absl::ascii_isalpha(static_cast<unsigned char>(Peek())) || Peek() == '_') {
        size_t save = pos_;
        std::string kw;
        while (pos_ < text_.size() &&
               (absl::ascii_isalnum(static_cast<unsigned char>(text_[pos_])) ||
                text_[pos_] == '_')) {
          kw.push_back(text_[pos_++]);
        }
        SkipWs();
        if (Peek() == '=' && (pos_ + 1 >= text_.size() || text_[pos_ + 1] != '=')) {
          ++pos_;
          for (size_t i = 0; i < nparams; ++i) {
            if (kw == params[i]) slot = i;
          }
          if (slot == nparams) {
            return Error(arg_at, absl::StrCat(name, ": unexpected keyword argument '", kw, "'"));
          }
        } else {
          pos_ = save;
        }
      }
      if (slot == nparams) {
        if (positional >= nparams) {
          return Error(arg_at, absl::StrCat(name, ": too many arguments"));
        }
        slot = positional++;
      }
      if (args[slot].has_value()) {
        return Error(arg_at, absl::StrCat(name, ": argument ", params[slot], " given twice"));
      }
      if (ragged && slot == kPartitionsSlot) {
        ASSIGN_OR_RETURN(partitions, Partitions(key));
        args[slot] = PyValue();
      } else {
        ASSIGN_OR_RETURN(PyValue v, ParsePyValue(text_, &pos_, context_));
        args[slot] = std::move(v);
      }
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ')') {
        ++pos_;
        break;
      }
      return Expected(absl::StrCat("',' or ')' in ", name, "(...)"));
    }
    if (ragged) return Ragged(key, at, args, std::move(partitions));
    if (!fixed) {
      if (!args[0].has_value()) return Error(at, "VarLenFeature: missing argument dtype");
      ASSIGN_OR_RETURN(DType d, Dtype(key, *args[0]));
      return VarLenFeatureSpec(key, d);
    }
    if (!args[0].has_value() || !args[1].has_value()) {
      return Error(at, "FixedLenFeature: needs shape and dtype");
    }
    const PyValue& shape = *args[0];
    std::vector<int64_t> dims;
    if (shape.kind == PyValue::Kind::kList || shape.kind == PyValue::Kind::kTuple) {
      for (const PyValue& d : shape.items) {
        std::optional<int64_t> n = d.AsInt64();
        if (d.kind != PyValue::Kind::kInt || !n.has_value() || *n < 0) {
          return Error(d.begin, absl::StrCat("parse_example: feature '", key,
                                             "': shape sizes must be non-negative integers"));
        }
        dims.push_back(*n);
      }
    } else if (shape.kind == PyValue::Kind::kInt && shape.AsInt64().has_value() &&
               *shape.AsInt64() >= 0) {
      dims.push_back(*shape.AsInt64());  // FixedLenFeature(3, ...) as TF accepts it
    } else {
      return Error(shape.begin, absl::StrCat("parse_example: feature '", key,
                                             "': shape must be a list such as [] or [3]"));
    }
    ASSIGN_OR_RETURN(DType dtype, Dtype(key, *args[1]));
    std::optional<Tensor> def;
    if (args[2].has_value() && args[2]->kind != PyValue::Kind::kNone) {
      absl::StatusOr<Tensor> t = PyValueToTensor(*args[2]);
      if (!t.ok()) {
        return Error(args[2]->begin, absl::StrCat("parse_example: feature '", key,
                                                  "': default_value: ", t.status().message()));
      }
      absl::StatusOr<Tensor> c =
          ConvertDefaultValue(key, *t, dtype, Shape(std::vector<int64_t>(dims)));
      if (!c.ok()) return Error(args[2]->begin, c.status().message());
      def = *std::move(c);
    }
    return FixedLenFeatureSpec(key, std::move(dims), dtype, std::move(def));
  }

  // The rest of RaggedFeature(...): dtype, value_key, row_splits_dtype and validate in `args`
  // (kPartitionsSlot already read into `partitions`).
  absl::StatusOr<proto::FeatureSpec> Ragged(const std::string& key, size_t at,
                                            const std::optional<PyValue> (&args)[5],
                                            std::vector<proto::RaggedPartition> partitions) {
    if (!args[0].has_value()) return Error(at, "RaggedFeature: missing argument dtype");
    ASSIGN_OR_RETURN(DType dtype, Dtype(key, *args[0]));
    std::string value_key;
    if (args[1].has_value() && args[1]->kind != PyValue::Kind::kNone) {
      if (args[1]->kind != PyValue::Kind::kStr && args[1]->kind != PyValue::Kind::kBytes) {
        return Error(args[1]->begin, absl::StrCat("parse_example: feature '", key,
                                                  "': RaggedFeature value_key must be a string"));
      }
      value_key = args[1]->text;
    }
    proto::FeatureSpec f = RaggedFeatureSpec(key, dtype, std::move(value_key),
                                             std::move(partitions));
    // TF's default row_splits_dtype is tf.int32; Sluice's splits are int64 (Create says so).
    f.set_row_splits_dtype(static_cast<proto::DataType>(DType::kInvalid));
    if (args[3].has_value()) {
      absl::StatusOr<DType> d = ParseDType(args[3]->text);
      if ((args[3]->kind != PyValue::Kind::kName && args[3]->kind != PyValue::Kind::kStr) ||
          !d.ok()) {
        return Error(args[3]->begin, absl::StrCat("parse_example: feature '", key,
                                                  "': row_splits_dtype must be tf.int64"));
      }
      f.set_row_splits_dtype(static_cast<proto::DataType>(*d));
    }
    if (args[4].has_value()) {
      if (args[4]->kind != PyValue::Kind::kBool) {
        return Error(args[4]->begin, absl::StrCat("parse_example: feature '", key,
                                                  "': validate must be True or False"));
      }
      f.set_validate(args[4]->bool_value);
    }
    return f;
  }

  // A partitions list or tuple: [RaggedFeature.RowLengths('lens'), ...], each call with or
  // without the tf.io. prefix, its argument positional or by keyword (key= / length=).
  absl::StatusOr<std::vector<proto::RaggedPartition>> Partitions(const std::string& key) {
    std::vector<proto::RaggedPartition> out;
    const char open = Peek();
    if (open != '[' && open != '(') {
      return Expected("a list of partitions such as [tf.io.RaggedFeature.RowLengths('lens')]");
    }
    const char close = open == '[' ? ']' : ')';
    ++pos_;
    for (;;) {
      SkipWs();
      if (Peek() == close) {
        ++pos_;
        return out;
      }
      const size_t at = pos_;
      std::string name;
      while (pos_ < text_.size() &&
             (absl::ascii_isalnum(static_cast<unsigned char>(text_[pos_])) ||
              text_[pos_] == '_' || text_[pos_] == '.')) {
        name.push_back(text_[pos_++]);
      }
      for (absl::string_view prefix : {"tf.io.", "tf.", "io."}) {
        if (absl::StartsWith(name, prefix)) {
          name = name.substr(prefix.size());
          break;
        }
      }
      if (absl::StartsWith(name, "RaggedFeature.")) name = name.substr(14);
      const bool uniform = name == "UniformRowLength";
      const KeyedPartitionKind* keyed = FindKeyedPartition(name);
      if (!uniform && keyed == nullptr) {
        return Error(at, absl::StrCat("parse_example: feature '", key,
                                      "': partitions may be RaggedFeature.RowLengths(key), "
                                      ".RowSplits(key), .RowStarts(key), .RowLimits(key), "
                                      ".ValueRowIds(key) or .UniformRowLength(length), got '",
                                      name, "'"));
      }
      SkipWs();
      if (Peek() != '(') return Expected(absl::StrCat("'(' after ", name));
      ++pos_;
      SkipWs();
      const absl::string_view keyword = uniform ? "length" : "key";
      if (text_.substr(pos_, keyword.size()) == keyword) {
        size_t after = pos_ + keyword.size();
        while (after < text_.size() &&
               absl::ascii_isspace(static_cast<unsigned char>(text_[after]))) {
          ++after;
        }
        if (after < text_.size() && text_[after] == '=') pos_ = after + 1;
      }
      SkipWs();
      ASSIGN_OR_RETURN(PyValue v, ParsePyValue(text_, &pos_, context_));
      if (uniform) {
        std::optional<int64_t> n = v.AsInt64();
        if (v.kind != PyValue::Kind::kInt || !n.has_value()) {
          return Error(v.begin, absl::StrCat("parse_example: feature '", key,
                                             "': UniformRowLength needs an integer length"));
        }
        out.push_back(UniformRowLengthPartition(*n));
      } else {
        if (v.kind != PyValue::Kind::kStr && v.kind != PyValue::Kind::kBytes) {
          return Error(v.begin, absl::StrCat("parse_example: feature '", key, "': ", name,
                                             " needs a feature key string"));
        }
        out.push_back(KeyedPartition(keyed->proto_kind, v.text));
      }
      SkipWs();
      if (Peek() != ')') return Expected(absl::StrCat("')' to close ", name, "(...)"));
      ++pos_;
      SkipWs();
      if (Peek() == ',') ++pos_;
      else if (Peek() != close) return Expected(absl::StrCat("',' or '", std::string(1, close),
                                                             "' in the partitions"));
    }
  }

  absl::string_view text_;
  size_t pos_;
  size_t* out_pos_;
  absl::string_view context_;
};

}  // namespace

absl::StatusOr<proto::ParseExampleFn> ExampleParser::ParseFeatureSpec(absl::string_view text,
                                                                      size_t* pos,
                                                                      absl::string_view context) {
  return FeatureSpecParser(text, pos, context).Parse();
}

}  // namespace sluice
