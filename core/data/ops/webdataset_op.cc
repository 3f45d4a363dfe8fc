// webdataset_dataset(files, keys): the registration of the source (core/data/op_registry.h); the
// reader is in webdataset_reader.h.
#include <string>
#include <utility>

#include "core/data/op_registry.h"
#include "core/data/ops/webdataset_reader.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(webdataset_op) {
  SourceRegistration r;
  r.name = "webdataset_dataset";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    RETURN_IF_ERROR(ValidateWebDatasetSource(s.webdataset()));
    return WebDatasetSpec(s.webdataset());
  };
  // Cardinality: unknown without reading the files.
  r.expression = [](const proto::SourceDef& s) {
    return WebDatasetSourceExpression(s.webdataset());
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::WebDatasetSource source = args.source.webdataset();
    return IteratorFactory([label, source] { return NewWebDatasetIterator(label, source); });
  };
  registry.AddSource(proto::SourceDef::kWebdataset, std::move(r));
}

}  // namespace sluice
