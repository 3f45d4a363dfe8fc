// text_line_dataset(files): the registration of the source (core/data/op_registry.h); the
// iterator is in source_iterators.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/source_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(text_line_op) {
  SourceRegistration r;
  r.name = "text_line_dataset";
  r.infer_spec = [](const proto::SourceDef&) -> absl::StatusOr<ElementSpec> {
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without reading the files, as TF.
  r.expression = [](const proto::SourceDef& s) {
    return absl::StrCat("text_line_dataset(", StringList(s.text_line().filenames()), ")");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    std::vector<std::string> files(args.source.text_line().filenames().begin(),
                                   args.source.text_line().filenames().end());
    return IteratorFactory([label, files] { return NewTextLineIterator(label, files); });
  };
  {
    SourceParseRule p;
    p.name = "text_line_dataset";
    p.list_order = 3;
    p.aliases = {"TextLineDataset"};
    p.listed_aliases = {"TextLineDataset"};
    p.params = {{"filenames", true}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      return c.Filenames(*c.arg(0), source->mutable_text_line()->mutable_filenames());
    };
    r.parse.push_back(std::move(p));
  }
  r.no_random_access =
      "where a line starts is known only by reading the lines before it; convert the files to "
      "tf_record_dataset files";
  registry.AddSource(proto::SourceDef::kTextLine, std::move(r));
}

}  // namespace sluice
