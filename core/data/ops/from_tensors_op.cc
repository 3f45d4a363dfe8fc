// from_tensors(v): the registration of the source (core/data/op_registry.h); the iterator is in
// source_iterators.h.
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/source_iterators.h"
#include "core/data/spec_inference.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(from_tensors_op) {
  SourceRegistration r;
  r.name = "from_tensors";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    ASSIGN_OR_RETURN(Element e, DecodeSourceLiteral(s.from_tensors().element()));
    return SpecOf(e);
  };
  r.cardinality = [](const proto::SourceDef&) { return int64_t{1}; };
  r.expression = [](const proto::SourceDef& s) {
    return absl::StrCat("from_tensors(", ElementLiteral(s.from_tensors().element()), ")");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    absl::StatusOr<Element> element = ElementFromProto(args.source.from_tensors().element());
    if (!element.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": bad element: ", element.status().message()));
    }
    Element e = *std::move(element);
    return IteratorFactory([label, e] { return NewFromTensorsIterator(label, e); });
  };
  {
    SourceParseRule p;
    p.name = "from_tensors";
    p.list_order = 1;
    p.params = {{"tensors", true}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      ASSIGN_OR_RETURN(*source->mutable_from_tensors()->mutable_element(), c.ElementLiteral(0));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef&) { return absl::OkStatus(); };
  registry.AddSource(proto::SourceDef::kFromTensors, std::move(r));
}

}  // namespace sluice
