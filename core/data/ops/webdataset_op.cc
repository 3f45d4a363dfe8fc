// webdataset_dataset(files, keys): the registration of the source (core/data/op_registry.h); the
// reader is in webdataset_reader.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
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
  {
    SourceParseRule p;
    p.name = "webdataset_dataset";
    p.list_order = 8;
    p.params = {{"urls", true}, {"keys", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::WebDatasetSource* w = source->mutable_webdataset();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), w->mutable_filenames()));
      std::vector<std::string> keys;
      if (c.given(1)) {
        const PyValue& k = *c.arg(1);
        if (k.kind != PyValue::Kind::kList && k.kind != PyValue::Kind::kTuple) {
          return c.Error(k.begin, "webdataset_dataset: keys must be a list such as ['jpg', 'cls']");
        }
        for (const PyValue& x : k.items) {
          ASSIGN_OR_RETURN(std::string key, c.Str("keys", x));
          keys.push_back(std::move(key));
        }
      }
      if (keys.empty() && w->filenames_size() == 0) {
        return c.Error(c.at(),
                       "webdataset_dataset: in a lambda, give keys= (such as ['jpg', 'cls'])");
      }
      absl::StatusOr<proto::WebDatasetSource> made = MakeWebDatasetSource(
          std::vector<std::string>(w->filenames().begin(), w->filenames().end()), keys);
      if (!made.ok()) return PipelineError(c.at(), made.status());
      *w = *std::move(made);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.no_random_access =
      "where a sample starts in a tar shard is known only by reading the shard; shard by file "
      "(FILE, DYNAMIC) instead";
  registry.AddSource(proto::SourceDef::kWebdataset, std::move(r));
}

}  // namespace sluice
