// csv_dataset(files, record_defaults, ...): the registration of the source
// (core/data/op_registry.h); the reader is in csv_reader.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/csv_reader.h"

namespace sluice {
namespace {

std::string CsvExpression(const proto::CsvSource& c) {
  std::vector<std::string> defaults;
  for (const proto::TensorProto& d : c.record_defaults()) {
    bool empty = false;
    for (int64_t x : d.shape()) empty = empty || x == 0;
    defaults.push_back(empty ? TfDType(d.dtype()) : TensorLiteral(d));
  }
  std::string out = absl::StrCat("csv_dataset(", StringList(c.filenames()),
                                 ", record_defaults=[", absl::StrJoin(defaults, ", "), "]");
  if (c.header()) out += ", header=True";
  if (!c.field_delim().empty() && c.field_delim() != ",") {
    absl::StrAppend(&out, ", field_delim=", PythonStringLiteral(c.field_delim()));
  }
  if (c.has_use_quote_delim()) {
    absl::StrAppend(&out, ", use_quote_delim=", PyBool(c.use_quote_delim()));
  }
  if (!c.na_value().empty()) {
    absl::StrAppend(&out, ", na_value=", PythonStringLiteral(c.na_value()));
  }
  if (c.select_cols_size() > 0) {
    absl::StrAppend(&out, ", select_cols=[", absl::StrJoin(c.select_cols(), ", "), "]");
  }
  return out + ")";
}

}  // namespace

SLUICE_REGISTER_OPS(csv_op) {
  SourceRegistration r;
  r.name = "csv_dataset";
  r.infer_spec = [](const proto::SourceDef& s) { return CsvSourceSpec(s.csv()); };
  // Cardinality: unknown without reading the files, as TF.
  r.expression = [](const proto::SourceDef& s) { return CsvExpression(s.csv()); };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::CsvSource csv = args.source.csv();
    return IteratorFactory([label, csv] { return NewCsvIterator(label, csv); });
  };
  registry.AddSource(proto::SourceDef::kCsv, std::move(r));
}

}  // namespace sluice
