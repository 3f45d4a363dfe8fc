// from_tensor_slices(v): the registration of the source (core/data/op_registry.h); the iterator
// is in source_iterators.h.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/source_iterators.h"
#include "core/data/spec_inference.h"
#include "core/tensor/proto_convert.h"
#include "core/tensor/composite_rows.h"
#include "core/util/status_macros.h"

namespace sluice {

namespace {

bool HasCompositeStructure(const proto::StructureProto& s) {
  if (s.kind() == proto::StructureProto::SPARSE || s.kind() == proto::StructureProto::RAGGED) {
    return true;
  }
  for (const auto& c : s.children()) {
    if (HasCompositeStructure(c)) return true;
  }
  return false;
}

// The spec of the slices of an element holding a SparseTensor or RaggedTensor.
absl::StatusOr<ElementSpec> CompositeSlicesSpec(const Element& e) {
  const ElementSpec spec = SpecOf(e);
  const std::vector<int64_t> rows = RowCounts(spec);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] == kUnknownDim || rows[i] != rows[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "every component needs the same size in dimension 0 (and rank >= 1): component 0 has ",
          rows[0], ", component ", i, " has ", rows[i] == kUnknownDim ? "none" : absl::StrCat(rows[i])));
    }
  }
  return UnbatchedSpec(spec);
}

}  // namespace

SLUICE_REGISTER_OPS(from_tensor_slices_op) {
  SourceRegistration r;
  r.name = "from_tensor_slices";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    ASSIGN_OR_RETURN(Element e, DecodeSourceLiteral(s.from_tensor_slices().element()));
    if (e.HasComposite()) return CompositeSlicesSpec(e);
    std::vector<Tensor> leaves = e.Flatten();
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].shape().rank() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("component ", i, " is a scalar; slicing needs tensors of rank >= 1"));
      }
      if (leaves[i].shape().dim(0) != leaves[0].shape().dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "components differ in dimension 0: component 0 has ", leaves[0].shape().dim(0),
            ", component ", i, " has ", leaves[i].shape().dim(0)));
      }
    }
    return e.Map([](const Tensor& t) { return TensorSpec{t.dtype(), t.shape().DropFirst()}; });
  };
  r.cardinality = [](const proto::SourceDef& s) -> int64_t {
    const proto::ElementProto& e = s.from_tensor_slices().element();
    if (!HasCompositeStructure(e.structure())) return e.tensors(0).shape(0);
    absl::StatusOr<Element> element = ElementFromProto(e);
    if (!element.ok()) return kUnknownCardinality;
    return RowCounts(SpecOf(*element))[0];
  };
  r.expression = [](const proto::SourceDef& s) {
    return absl::StrCat("from_tensor_slices(", ElementLiteral(s.from_tensor_slices().element()),
                        ")");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    absl::StatusOr<Element> element = ElementFromProto(args.source.from_tensor_slices().element());
    if (!element.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": bad element: ", element.status().message()));
    }
    Element e = *std::move(element);
    return CheckedFactory(nullptr, [label, e](std::unique_ptr<Iterator>) {
      return NewFromTensorSlicesIterator(label, e);
    });
  };
  {
    SourceParseRule p;
    p.name = "from_tensor_slices";
    p.list_order = 2;
    p.params = {{"tensors", true}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      ASSIGN_OR_RETURN(*source->mutable_from_tensor_slices()->mutable_element(), c.ElementLiteral(0));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef&) { return absl::OkStatus(); };
  registry.AddSource(proto::SourceDef::kFromTensorSlices, std::move(r));
}

}  // namespace sluice
