// csv_dataset(files, record_defaults, ...): the registration of the source
// (core/data/op_registry.h); the reader is in csv_reader.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/csv_reader.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::string CsvExpression(const proto::CsvSource& c) {
  std::vector<std::string> defaults;
  for (const proto::TensorProto& d : c.record_defaults()) {
    bool empty = false;
    for (int64_t x : d.shape()) empty = empty || x == 0;
    defaults.push_back(empty ? TfDType(d.dtype()) : TensorLiteral(d));
  }
  std::string out = absl::StrCat("csv_dataset(", StringList(c.filenames()), ", record_defaults=[",
                                 absl::StrJoin(defaults, ", "), "]");
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
  {
    SourceParseRule p;
    p.name = "csv_dataset";
    p.list_order = 6;
    p.aliases = {"CsvDataset", "experimental.CsvDataset"};
    p.params = {{"filenames", true},        {"record_defaults", true}, {"compression_type", false},
                {"buffer_size", false},     {"header", false},         {"field_delim", false},
                {"use_quote_delim", false}, {"na_value", false},       {"select_cols", false},
                {"exclude_cols", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::CsvSource* cs = source->mutable_csv();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), cs->mutable_filenames()));
      const PyValue& defaults = *c.arg(1);
      if (defaults.kind != PyValue::Kind::kList && defaults.kind != PyValue::Kind::kTuple) {
        return c.Error(defaults.begin,
                       "csv_dataset: record_defaults must be a list such as "
                       "[0, 0.0, '', tf.int64]");
      }
      for (const PyValue& d : defaults.items) {
        if (d.kind == PyValue::Kind::kName) {  // a dtype: a required column
          ASSIGN_OR_RETURN(DType t, c.DTypeArg("record_defaults", d));
          *cs->add_record_defaults() = TensorToProto(Tensor::Allocate(t, Shape({0})));
          continue;
        }
        absl::StatusOr<Tensor> t = PyValueToTensor(d);
        if (!t.ok()) {
          return c.Error(d.begin,
                         absl::StrCat("csv_dataset: record_defaults: ", t.status().message()));
        }
        *cs->add_record_defaults() = TensorToProto(*t);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(std::string ct, c.Str("compression_type", *c.arg(2)));
        if (!ct.empty()) {
          return c.Error(c.arg(2)->begin,
                         "csv_dataset: compressed CSV files are not supported yet");
        }
      }
      if (c.given(4)) {
        ASSIGN_OR_RETURN(bool h, c.Bool("header", *c.arg(4)));
        cs->set_header(h);
      }
      if (c.given(5)) {
        ASSIGN_OR_RETURN(std::string d, c.Str("field_delim", *c.arg(5)));
        cs->set_field_delim(d);
      }
      if (c.given(6)) {
        ASSIGN_OR_RETURN(bool q, c.Bool("use_quote_delim", *c.arg(6)));
        cs->set_use_quote_delim(q);
      }
      if (c.given(7)) {
        ASSIGN_OR_RETURN(std::string na, c.Str("na_value", *c.arg(7)));
        cs->set_na_value(na);
      }
      if (c.given(8)) {
        ASSIGN_OR_RETURN(std::vector<int64_t> cols, c.Ints("select_cols", *c.arg(8), false));
        for (int64_t x : cols) cs->add_select_cols(x);
      }
      if (c.given(9)) {
        return c.Error(c.arg(9)->begin,
                       "csv_dataset: exclude_cols is not supported; use select_cols");
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.no_random_access =
      "where a record starts is known only by reading the records before it; convert the "
      "files to tf_record_dataset or npy_dataset files";
  registry.AddSource(proto::SourceDef::kCsv, std::move(r));
}

}  // namespace sluice
