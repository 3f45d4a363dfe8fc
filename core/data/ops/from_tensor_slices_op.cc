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
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(from_tensor_slices_op) {
  SourceRegistration r;
  r.name = "from_tensor_slices";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    ASSIGN_OR_RETURN(Element e, DecodeSourceLiteral(s.from_tensor_slices().element()));
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
  r.cardinality = [](const proto::SourceDef& s) {
    return s.from_tensor_slices().element().tensors(0).shape(0);
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
