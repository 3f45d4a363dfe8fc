#include "core/tensor/proto_convert.h"

#include "core/tensor/element_wire.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "sluice/composite_tensor.h"

namespace sluice {
namespace {

absl::StatusOr<DType> DTypeFromProto(proto::DataType d) {
  int v = static_cast<int>(d);
  if (v <= 0 || v > static_cast<int>(DType::kString)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype enum value ", v));
  }
  return static_cast<DType>(v);
}

absl::StatusOr<Shape> ShapeFromProto(const google::protobuf::RepeatedField<int64_t>& dims,
                                     bool allow_unknown) {
  std::vector<int64_t> out(dims.begin(), dims.end());
  int64_t elements = 1;
  for (int64_t d : out) {
    if (d < 0 && !(allow_unknown && d == kUnknownDim)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid dimension ", d, " in shape"));
    }
    // A shape whose element count overflows would wrap and slip past the content-size checks.
    if (d >= 0 && __builtin_mul_overflow(elements, d, &elements)) {
      return absl::InvalidArgumentError("shape has more elements than fit in int64");
    }
  }
  return Shape(std::move(out));
}

}  // namespace

proto::TensorProto TensorToProto(const Tensor& t) {
  proto::TensorProto p;
  p.set_dtype(static_cast<proto::DataType>(t.dtype()));
  for (int64_t d : t.shape().dims()) p.add_shape(d);
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < t.num_elements(); ++i) p.add_string_val(t.string_at(i));
  } else {
    p.set_content(static_cast<const char*>(t.raw_data()), t.byte_size());
  }
  return p;
}

namespace {

// TensorFromProto; with `consume` (which is &p) the strings are moved out of the proto, not
// copied.
absl::StatusOr<Tensor> TensorFromProtoImpl(const proto::TensorProto& p,
                                           proto::TensorProto* consume) {
  ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(p.dtype()));
  ASSIGN_OR_RETURN(Shape shape, ShapeFromProto(p.shape(), /*allow_unknown=*/false));
  // The element count and byte size, checked for overflow: a proto's shape may claim anything.
  int64_t elements = 1;
  bool overflow = false;
  for (int64_t d : shape.dims()) {
    overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
  }
  if (dtype == DType::kString) {
    if (overflow || p.string_val_size() != elements) {
      return absl::InvalidArgumentError(absl::StrCat("string tensor of shape ", shape.ToString(),
                                                     " has ", p.string_val_size(), " values"));
    }
    std::vector<std::string> values;
    if (consume != nullptr) {
      values.reserve(consume->string_val_size());
      for (std::string& v : *consume->mutable_string_val()) values.push_back(std::move(v));
    } else {
      values.assign(p.string_val().begin(), p.string_val().end());
    }
    return Tensor::TryFromStrings(std::move(values), shape, "a tensor proto");
  }
  int64_t need = 0;
  if (overflow || __builtin_mul_overflow(elements, static_cast<int64_t>(DTypeSize(dtype)), &need) ||
      p.content().size() != static_cast<size_t>(need)) {
    return absl::InvalidArgumentError(absl::StrCat(
        DTypeName(dtype), " tensor of shape ", shape.ToString(), " needs ",
        overflow ? std::string("more than 2^63") : absl::StrCat(need), " bytes of content, has ",
        p.content().size()));
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(dtype, shape, "a tensor proto"));
  if (need > 0) std::memcpy(t.mutable_raw_data(), p.content().data(), need);
  return t;
}

}  // namespace

absl::StatusOr<Tensor> TensorFromProto(const proto::TensorProto& p) {
  return TensorFromProtoImpl(p, nullptr);
}

proto::TensorSpecProto TensorSpecToProto(const TensorSpec& s) {
  proto::TensorSpecProto p;
  p.set_dtype(static_cast<proto::DataType>(s.dtype));
  for (int64_t d : s.shape.dims()) p.add_shape(d);
  return p;
}

absl::StatusOr<TensorSpec> TensorSpecFromProto(const proto::TensorSpecProto& p) {
  ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(p.dtype()));
  ASSIGN_OR_RETURN(Shape shape, ShapeFromProto(p.shape(), /*allow_unknown=*/true));
  return TensorSpec{dtype, std::move(shape)};
}

namespace {

absl::StatusOr<Nest<bool>> CompositeStructureFromProto(const proto::StructureProto& p) {
  const bool sparse = p.kind() == proto::StructureProto::SPARSE;
  const char* name = sparse ? "SparseTensor" : "RaggedTensor";
  if (p.keys_size() != 0) return absl::InvalidArgumentError(absl::StrCat(name, " has keys"));
  if (sparse ? p.children_size() != 3 : p.children_size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " structure has ", p.children_size(), " components"));
  }
  const int ragged_rank = p.children_size() - 1;
  if (!sparse && p.composite_dims_size() < ragged_rank + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " of ragged rank ", ragged_rank, " has rank ", p.composite_dims_size()));
  }
  std::vector<Nest<bool>> children;
  for (const auto& c : p.children()) {
    if (c.kind() != proto::StructureProto::LEAF || c.children_size() != 0 || c.keys_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " component is not a tensor"));
    }
    children.emplace_back(false);
  }
  for (int64_t d : p.composite_dims()) {
    if (d < kUnknownDim) {
      return absl::InvalidArgumentError(absl::StrCat(name, " static shape has dimension ", d));
    }
  }
  return Nest<bool>::Composite(static_cast<NestKind>(p.kind()), std::move(children),
                               std::vector<int64_t>(p.composite_dims().begin(),
                                                    p.composite_dims().end()));
}

// Each composite spec node's components are the canonical ones for its dtype and shape.
absl::Status CheckCompositeSpecs(const ElementSpec& s) {
  if (s.is_composite()) {
    const DType dtype = CompositeValues(s).leaf().dtype;
    ElementSpec want = s.kind() == NestKind::kSparse
                           ? SparseTensorSpecOf(dtype, s.composite_dims())
                           : RaggedTensorSpecOf(dtype, s.composite_dims(), RaggedRank(s));
    if (want.Flatten() != s.Flatten()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the component specs of ", CompositeSpecToString(s), " are not TF's"));
    }
    return absl::OkStatus();
  }
  for (const ElementSpec& c : s.children()) RETURN_IF_ERROR(CheckCompositeSpecs(c));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Nest<bool>> StructureFromProto(const proto::StructureProto& p) {
  switch (p.kind()) {
    case proto::StructureProto::LEAF:
      if (p.children_size() != 0 || p.keys_size() != 0) {
        return absl::InvalidArgumentError("structure leaf has children or keys");
      }
      return Nest<bool>(false);
    case proto::StructureProto::TUPLE:
    case proto::StructureProto::LIST:
    case proto::StructureProto::DICT: {
      bool is_dict = p.kind() == proto::StructureProto::DICT;
      if (is_dict ? p.keys_size() != p.children_size() : p.keys_size() != 0) {
        return absl::InvalidArgumentError("structure keys do not match its children");
      }
      if (is_dict) {
        std::set<std::string> unique(p.keys().begin(), p.keys().end());
        if (unique.size() != static_cast<size_t>(p.keys_size())) {
          return absl::InvalidArgumentError("structure dict has duplicate keys");
        }
      }
      std::vector<Nest<bool>> children;
      for (const auto& c : p.children()) {
        ASSIGN_OR_RETURN(Nest<bool> child, StructureFromProto(c));
        children.push_back(std::move(child));
      }
      return Nest<bool>::FromParts(static_cast<NestKind>(p.kind()), std::move(children),
                                   std::vector<std::string>(p.keys().begin(), p.keys().end()));
    }
    case proto::StructureProto::SPARSE:
    case proto::StructureProto::RAGGED:
      return CompositeStructureFromProto(p);
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown structure kind ", p.kind()));
  }
}

proto::ElementProto ElementToProto(const Element& e) {
  proto::ElementProto p;
  *p.mutable_structure() = StructureToProto(e);
  for (const Tensor& t : e.Flatten()) *p.add_tensors() = TensorToProto(t);
  return p;
}

namespace {

absl::StatusOr<Element> ElementFromProtoImpl(const proto::ElementProto& p,
                                             proto::ElementProto* consume) {
  ASSIGN_OR_RETURN(Nest<bool> structure, StructureFromProto(p.structure()));
  std::vector<Tensor> flat;
  flat.reserve(p.tensors_size());
  for (int i = 0; i < p.tensors_size(); ++i) {
    ASSIGN_OR_RETURN(Tensor tensor,
                     TensorFromProtoImpl(p.tensors(i), consume == nullptr
                                                           ? nullptr
                                                           : consume->mutable_tensors(i)));
    flat.push_back(std::move(tensor));
  }
  ASSIGN_OR_RETURN(Element e, Element::Pack(structure, std::move(flat)));
  RETURN_IF_ERROR(CheckComposites(e, "element"));
  return e;
}

}  // namespace

absl::StatusOr<Element> ElementFromProto(const proto::ElementProto& p) {
  return ElementFromProtoImpl(p, nullptr);
}

absl::StatusOr<Element> ConsumeElementProto(proto::ElementProto* p) {
  return ElementFromProtoImpl(*p, p);
}

proto::ElementSpecProto ElementSpecToProto(const ElementSpec& s) {
  proto::ElementSpecProto p;
  *p.mutable_structure() = StructureToProto(s);
  for (const TensorSpec& t : s.Flatten()) *p.add_specs() = TensorSpecToProto(t);
  return p;
}

absl::StatusOr<ElementSpec> ElementSpecFromProto(const proto::ElementSpecProto& p) {
  ASSIGN_OR_RETURN(Nest<bool> structure, StructureFromProto(p.structure()));
  std::vector<TensorSpec> flat;
  for (const auto& s : p.specs()) {
    ASSIGN_OR_RETURN(TensorSpec spec, TensorSpecFromProto(s));
    flat.push_back(std::move(spec));
  }
  ASSIGN_OR_RETURN(ElementSpec spec, ElementSpec::Pack(structure, std::move(flat)));
  RETURN_IF_ERROR(CheckCompositeSpecs(spec));
  return spec;
}

}  // namespace sluice
