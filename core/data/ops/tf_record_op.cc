// tf_record_dataset(files, ...): the registration of the source (core/data/op_registry.h); the
// reader is in record_iterators.h.
#include <string>
#include <utility>

#include "core/data/op_registry.h"
#include "core/data/ops/record_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(tf_record_op) {
  SourceRegistration r;
  r.name = "tf_record_dataset";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    RETURN_IF_ERROR(ValidateTFRecordSource(s.tf_record()));
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without reading the files, as TF.
  r.expression = [](const proto::SourceDef& s) { return TFRecordSourceExpression(s.tf_record()); };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::TFRecordSource source = args.source.tf_record();
    return IteratorFactory([label, source] { return NewTFRecordIterator(label, source); });
  };
  registry.AddSource(proto::SourceDef::kTfRecord, std::move(r));
}

}  // namespace sluice
