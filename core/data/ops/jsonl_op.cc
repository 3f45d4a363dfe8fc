// jsonl_dataset(filenames, keys): the registration of the source (core/data/op_registry.h); the
// reader, with the JSON-to-tensor rules, is in jsonl_reader.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/jsonl_reader.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// keys=['a', 'b'] when every key is a string scalar, else the dict form.
std::string KeysExpression(const proto::JsonlSource& s) {
  bool all_strings = true;
  for (const proto::JsonlSource::Key& k : s.keys()) {
    all_strings = all_strings && k.dtype() == proto::DT_STRING && !k.vector();
  }
  std::vector<std::string> parts;
  for (const proto::JsonlSource::Key& k : s.keys()) {
    if (all_strings) {
      parts.push_back(PythonStringLiteral(k.name()));
      continue;
    }
    const std::string dtype = TfDType(k.dtype());
    parts.push_back(absl::StrCat(PythonStringLiteral(k.name()), ": ",
                                 k.vector() ? absl::StrCat("[", dtype, "]") : dtype));
  }
  return all_strings ? absl::StrCat("[", absl::StrJoin(parts, ", "), "]")
                     : absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

// One key's type: a dtype, or [dtype] for a vector.
absl::Status ParseKeyType(const ParseCall& c, const PyValue& v, proto::JsonlSource::Key* key) {
  const PyValue* dtype = &v;
  if (v.kind == PyValue::Kind::kList) {
    if (v.items.size() != 1) {
      return c.Error(v.begin, absl::StrCat("jsonl_dataset: key '", key->name(),
                                           "': a vector is written [dtype], got ", c.Text(v)));
    }
    dtype = &v.items[0];
    key->set_vector(true);
  }
  ASSIGN_OR_RETURN(DType d, c.DTypeArg("keys", *dtype));
  key->set_dtype(static_cast<proto::DataType>(d));
  return absl::OkStatus();
}

absl::Status ParseKeys(const ParseCall& c, const PyValue& keys, proto::JsonlSource* s) {
  if (keys.kind == PyValue::Kind::kList || keys.kind == PyValue::Kind::kTuple) {
    for (const PyValue& k : keys.items) {
      ASSIGN_OR_RETURN(std::string name, c.Str("keys", k));
      proto::JsonlSource::Key* key = s->add_keys();
      key->set_name(name);
      key->set_dtype(proto::DT_STRING);
    }
    return absl::OkStatus();
  }
  if (keys.kind == PyValue::Kind::kDict) {
    for (size_t i = 0; i < keys.items.size(); ++i) {
      proto::JsonlSource::Key* key = s->add_keys();
      key->set_name(keys.keys[i]);
      RETURN_IF_ERROR(ParseKeyType(c, keys.items[i], key));
    }
    return absl::OkStatus();
  }
  return c.Error(keys.begin,
                 absl::StrCat("jsonl_dataset: keys must be a list of names (string values) or a "
                              "dict such as {'text': tf.string, 'ids': [tf.int32]}, got ",
                              c.Text(keys)));
}

}  // namespace

SLUICE_REGISTER_OPS(jsonl_op) {
  SourceRegistration r;
  r.name = "jsonl_dataset";
  r.infer_spec = [](const proto::SourceDef& s) { return JsonlSourceSpec(s.jsonl()); };
  // Cardinality: unknown without reading the files, as TF's line-based sources.
  r.expression = [](const proto::SourceDef& s) {
    return absl::StrCat("jsonl_dataset(", StringList(s.jsonl().filenames()),
                        ", keys=", KeysExpression(s.jsonl()), ")");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::JsonlSource jsonl = args.source.jsonl();
    return IteratorFactory([label, jsonl] { return NewJsonlIterator(label, jsonl); });
  };
  {
    SourceParseRule p;
    p.name = "jsonl_dataset";
    p.list_order = 16;
    p.params = {{"filenames", true}, {"keys", true}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::JsonlSource* s = source->mutable_jsonl();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), s->mutable_filenames()));
      return ParseKeys(c, *c.arg(1), s);
    };
    r.parse.push_back(std::move(p));
  }
  // Element i is the i-th non-blank line over the files, found through each file's line index
  // (random_access_source.h, jsonl_line_index.h).
  r.random_access = [](const proto::SourceDef&) { return absl::OkStatus(); };
  registry.AddSource(proto::SourceDef::kJsonl, std::move(r));
}

}  // namespace sluice
