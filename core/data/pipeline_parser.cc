#include "core/data/pipeline_parser.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/npy_reader.h"
#include "core/data/ops/webdataset_reader.h"
#include "core/data/spec_inference.h"
#include "core/format/python_literal.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

constexpr absl::string_view kContext = "pipeline expression";

bool IsIdentStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

bool IsAutotune(absl::string_view name) {
  return name == "AUTOTUNE" || name == "tf.data.AUTOTUNE" ||
         name == "tf.data.experimental.AUTOTUNE";
}
bool IsShardHint(absl::string_view name) {
  return name == "SHARD_HINT" || name == "tf.data.experimental.SHARD_HINT";
}

// One parameter of a signature.
struct Param {
  const char* name;
  bool required;
};

struct Signature {
  const char* name;
  std::vector<Param> params;
};

const std::vector<Signature>& OpSignatures() {
  static const auto* kOps = new std::vector<Signature>{
      {"batch", {{"batch_size", true}, {"drop_remainder", false}}},
      {"repeat", {{"count", false}}},
      {"take", {{"count", true}}},
      {"skip", {{"count", true}}},
      {"shard", {{"num_shards", true}, {"index", true}}},
      {"shuffle", {{"buffer_size", true}, {"seed", false}, {"reshuffle_each_iteration", false}}},
      {"prefetch", {{"buffer_size", true}}},
      {"unbatch", {}},
      {"rebatch", {{"batch_size", true}, {"drop_remainder", false}}},
      {"legacy_rebatch", {{"num_replicas", true}}},
      // Transforms; their builders are in pipeline_parser_transforms.inc.
      {"map", {{"map_func", true}, {"num_parallel_calls", false}, {"deterministic", false},
               {"key", false}}},
      {"filter", {{"predicate", true}, {"key", false}}},
      {"padded_batch", {{"batch_size", true}, {"padded_shapes", false},
                        {"padding_values", false}, {"drop_remainder", false}}},
      {"cache", {{"filename", false}}},
      {"ignore_errors", {{"log_warning", false}}},
      {"interleave", {{"map_func", true}, {"cycle_length", false}, {"block_length", false},
                      {"num_parallel_calls", false}, {"deterministic", false}}},
  };
  return *kOps;
}

const std::vector<Signature>& SourceSignatures() {
  static const auto* kSources = new std::vector<Signature>{
      {"range", {}},  // positional only, handled apart
      {"from_tensors", {{"tensors", true}}},
      {"from_tensor_slices", {{"tensors", true}}},
      {"text_line_dataset", {{"filenames", true}}},
      {"tf_record_dataset", {{"filenames", true}, {"compression_type", false},
                             {"buffer_size", false}, {"num_parallel_reads", false},
                             {"start_record", false}, {"num_records", false}}},
      {"fixed_length_record_dataset", {{"filenames", true}, {"record_bytes", true},
                                       {"header_bytes", false}, {"footer_bytes", false},
                                       {"buffer_size", false}, {"compression_type", false},
                                       {"start_record", false}, {"num_records", false}}},
      {"csv_dataset", {{"filenames", true}, {"record_defaults", true},
                       {"compression_type", false}, {"buffer_size", false}, {"header", false},
                       {"field_delim", false}, {"use_quote_delim", false}, {"na_value", false},
                       {"select_cols", false}, {"exclude_cols", false}}},
      {"npy_dataset", {{"filenames", true}, {"dtype", false}, {"shape", false}}},
      {"webdataset_dataset", {{"urls", true}, {"keys", false}}},
      {"list_files", {{"file_pattern", true}, {"shuffle", false}, {"seed", false},
                      {"num_shards", false}, {"shard_index", false}}},
  };
  return *kSources;
}

struct Arg {
  std::optional<std::string> keyword;
  PyValue value;
  size_t at = 0;  // byte offset where the argument (or its keyword) begins
  // A call such as cast(tf.float32): `value` is a kName with the callee's name, and these are
  // its arguments.
  std::shared_ptr<std::vector<Arg>> call_args;
  // A lambda such as `lambda f: text_line_dataset(f)`: the graph of its body, whose file
  // source's filenames are left empty (the lambda's parameter).
  std::shared_ptr<proto::DatasetDef> lambda;
  // parse_example({...}): its feature spec (core/data/ops/example_parser.h reads the dict).
  std::shared_ptr<proto::ParseExampleFn> parse_example;
};

class PipelineParser {
 public:
  explicit PipelineParser(absl::string_view text) : text_(text) {}
  // A parser for the body of a lambda in `text` from `pos`: it ends at a ',' or ')' outside
  // brackets, and `param` stands for the file names of its source.
  PipelineParser(absl::string_view text, size_t pos, std::string param)
      : text_(text), pos_(pos), lambda_param_(std::move(param)) {}
  size_t pos() const { return pos_; }

  absl::StatusOr<ParsedPipeline> Parse() {
    ParsedPipeline out;
    out.def.set_version(proto::DATASET_GRAPH_VERSION_1);
    SkipWs();
    if (AtEnd()) {
      return Error(pos_, "empty expression; expected a source such as range(10) or "
                         "from_tensor_slices([1, 2, 3])");
    }
    if (!IsIdentStart(Peek())) {
      return Expected("a source such as range(10) or from_tensor_slices([1, 2, 3])");
    }
    size_t source_at = pos_;
    RETURN_IF_ERROR(ParseSource(&out.def));
    out.columns.push_back(static_cast<int>(source_at) + 1);
    for (;;) {
      SkipWs();
      if (AtEnd()) break;
      if (lambda_param_.has_value() && (Peek() == ',' || Peek() == ')')) break;
      if (Peek() != '.') return Expected("'.' and the next op, or the end of the expression");
      ++pos_;
      SkipWs();
      if (!IsIdentStart(Peek())) return Expected("an op name after '.'");
      size_t op_at = pos_;
      std::string name = Identifier();
      const Signature* sig = Find(OpSignatures(), name);
      if (sig == nullptr) {
        return Error(op_at, absl::StrCat("unknown op '", name, "'; known ops: ",
                                         Names(OpSignatures())));
      }
      ASSIGN_OR_RETURN(std::vector<Arg> args, Arguments(name));
      std::vector<const Arg*> slots;
      ASSIGN_OR_RETURN(std::vector<std::optional<PyValue>> bound,
                       Bind(*sig, args, op_at, &slots));
      ASSIGN_OR_RETURN(proto::OpDef op, IsTransformName(name)
                                            ? BuildTransformOp(name, bound, slots, op_at)
                                            : BuildOp(name, bound));
      *out.def.add_ops() = std::move(op);
      out.columns.push_back(static_cast<int>(op_at) + 1);
    }
    return out;
  }

 private:
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  void SkipWs() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  std::string Identifier() {
    size_t s = pos_;
    while (IsIdentChar(Peek())) ++pos_;
    return std::string(text_.substr(s, pos_ - s));
  }

  absl::Status Error(size_t at, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(kContext, ", column ", at + 1, ": ", message));
  }
  std::string Describe(size_t at) const {
    if (at >= text_.size()) return "end of expression";
    char c = text_[at];
    if (IsIdentStart(c)) {
      size_t e = at;
      while (e < text_.size() && IsIdentChar(text_[e])) ++e;
      return absl::StrCat("'", text_.substr(at, std::min<size_t>(e - at, 40)), "'");
    }
    if (absl::ascii_isdigit(c)) {
      size_t e = at;
      while (e < text_.size() && (absl::ascii_isalnum(text_[e]) || text_[e] == '.')) ++e;
      return absl::StrCat("'", text_.substr(at, std::min<size_t>(e - at, 40)), "'");
    }
    if (c == '\'' || c == '"') return "a string";
    if (absl::ascii_isprint(c)) return absl::StrCat("'", std::string(1, c), "'");
    return absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c));
  }
  absl::Status Expected(absl::string_view what) const {
    return Error(pos_, absl::StrCat("expected ", what, ", found ", Describe(pos_)));
  }
  // The source text of an argument, shortened for messages.
  std::string Text(const PyValue& v) const {
    absl::string_view t = text_.substr(v.begin, v.end - v.begin);
    if (t.size() > 40) return absl::StrCat(t.substr(0, 37), "...");
    return std::string(t);
  }

  static const Signature* Find(const std::vector<Signature>& sigs, absl::string_view name) {
    for (const Signature& s : sigs) {
      if (name == s.name) return &s;
    }
    return nullptr;
  }
  static std::string Names(const std::vector<Signature>& sigs) {
    std::vector<std::string> names;
    for (const Signature& s : sigs) names.push_back(s.name);
    return absl::StrJoin(names, ", ");
  }

  absl::Status ParseSource(proto::DatasetDef* def) {
    size_t at = pos_;
    std::string name = Identifier();
    for (;;) {  // a dotted name: tf.data.Dataset.range
      size_t save = pos_;
      SkipWs();
      if (Peek() != '.') {
        pos_ = save;
        break;
      }
      ++pos_;
      SkipWs();
      if (!IsIdentStart(Peek())) return Expected(absl::StrCat("a name after '", name, ".'"));
      absl::StrAppend(&name, ".", Identifier());
    }
    std::string base = name;
    for (absl::string_view prefix : {"tf.data.Dataset.", "Dataset.", "tf.data."}) {
      if (absl::StartsWith(base, prefix)) {
        base = base.substr(prefix.size());
        break;
      }
    }
    if (base == "TextLineDataset") base = "text_line_dataset";
    if (base == "TFRecordDataset") base = "tf_record_dataset";
    if (base == "FixedLengthRecordDataset") base = "fixed_length_record_dataset";
    if (base == "CsvDataset" || base == "experimental.CsvDataset") base = "csv_dataset";
    const Signature* sig = Find(SourceSignatures(), base);
    if (sig == nullptr) {
      std::string hint = Find(OpSignatures(), base) != nullptr
                             ? absl::StrCat(" ('", base, "' is an op; a pipeline starts with a "
                                            "source)")
                             : "";
      return Error(at, absl::StrCat("unknown source '", name, "'", hint, "; known sources: ",
                                    Names(SourceSignatures()), " (or TextLineDataset)"));
    }
    ASSIGN_OR_RETURN(std::vector<Arg> args, Arguments(base));
    proto::SourceDef* source = def->mutable_source();
    if (base == "range") return BuildRange(args, at, source->mutable_range());
    ASSIGN_OR_RETURN(std::vector<std::optional<PyValue>> bound, Bind(*sig, args, at));
    const PyValue& v = *bound[0];
    if (base == "text_line_dataset") {
      return Filenames(v, source->mutable_text_line()->mutable_filenames(), base);
    }
    if (base == "csv_dataset" || base == "npy_dataset" || base == "list_files" ||
        base == "webdataset_dataset") {
      return BuildTransformSource(base, bound, at, source);
    }
    if (base == "tf_record_dataset" || base == "fixed_length_record_dataset") {
      return BuildRecordSource(base, bound, source);
    }
    absl::StatusOr<Element> element = PyValueToElement(v);
    if (!element.ok()) {
      return Error(v.begin, absl::StrCat(base, ": ", element.status().message()));
    }
    proto::ElementProto p = ElementToProto(*element);
    if (base == "from_tensors") {
      *source->mutable_from_tensors()->mutable_element() = std::move(p);
    } else {
      *source->mutable_from_tensor_slices()->mutable_element() = std::move(p);
    }
    return absl::OkStatus();
  }

  // After the name: '(' args ')'.
  absl::StatusOr<std::vector<Arg>> Arguments(const std::string& op) {
    SkipWs();
    if (Peek() != '(') return Expected(absl::StrCat("'(' after ", op));
    ++pos_;
    std::vector<Arg> args;
    for (;;) {
      SkipWs();
      if (Peek() == ')') {
        ++pos_;
        return args;
      }
      if (AtEnd() || Peek() == ',') {
        return Expected(absl::StrCat("an argument or ')' to close the arguments of ", op));
      }
      Arg arg;
      arg.at = pos_;
      if (IsIdentStart(Peek())) {
        size_t save = pos_;
        std::string kw = Identifier();
        SkipWs();
        if (Peek() == '=' && Peek(1) != '=') {
          ++pos_;
          arg.keyword = std::move(kw);
        } else {
          pos_ = save;
        }
      }
      RETURN_IF_ERROR(ParseArgValue(&arg));
      args.push_back(std::move(arg));
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ')') {
        ++pos_;
        return args;
      }
      return Expected(absl::StrCat("',' or ')' to close the arguments of ", op));
    }
  }

  // Python's binding of positional and keyword arguments to `sig`.
  // `slots` (when set) receives, per parameter, the Arg bound to it (null if none); they point
  // into `args`, whose values have been moved out but whose call_args/lambda remain.
  absl::StatusOr<std::vector<std::optional<PyValue>>> Bind(const Signature& sig,
                                                           std::vector<Arg>& args,
                                                           size_t op_at,
                                                           std::vector<const Arg*>* slots =
                                                               nullptr) {
    std::vector<std::optional<PyValue>> bound(sig.params.size());
    if (slots != nullptr) slots->assign(sig.params.size(), nullptr);
    size_t positional = 0;
    bool saw_keyword = false;
    for (Arg& arg : args) {
      size_t slot;
      if (arg.keyword.has_value()) {
        saw_keyword = true;
        slot = sig.params.size();
        for (size_t i = 0; i < sig.params.size(); ++i) {
          if (*arg.keyword == sig.params[i].name) slot = i;
        }
        if (slot == sig.params.size()) {
          std::vector<std::string> known;
          for (const Param& p : sig.params) known.push_back(p.name);
          return Error(arg.at, absl::StrCat(sig.name, ": unexpected keyword argument '",
                                            *arg.keyword, "'",
                                            known.empty() ? " (it takes no arguments)"
                                                          : absl::StrCat(" (known: ",
                                                                         absl::StrJoin(known, ", "),
                                                                         ")")));
        }
      } else {
        if (saw_keyword) {
          return Error(arg.at, absl::StrCat(sig.name,
                                            ": positional argument follows keyword argument"));
        }
        if (positional >= sig.params.size()) {
          return Error(arg.at, absl::StrCat(sig.name, ": takes ", sig.params.size(),
                                            " argument", sig.params.size() == 1 ? "" : "s",
                                            " at most, got ", args.size()));
        }
        slot = positional++;
      }
      if (bound[slot].has_value()) {
        return Error(arg.at, absl::StrCat(sig.name, ": argument ", sig.params[slot].name,
                                          " given twice"));
      }
      bound[slot] = std::move(arg.value);
      if (slots != nullptr) (*slots)[slot] = &arg;
    }
    for (size_t i = 0; i < sig.params.size(); ++i) {
      if (sig.params[i].required && !bound[i].has_value()) {
        return Error(op_at, absl::StrCat(sig.name, ": missing required argument ",
                                         sig.params[i].name));
      }
    }
    return bound;
  }

  // An int argument; AUTOTUNE and SHARD_HINT read as -1, as in TF.
  absl::StatusOr<int64_t> Int(absl::string_view op, absl::string_view param,
                              const PyValue& v) const {
    if (v.kind == PyValue::Kind::kName && (IsAutotune(v.text) || IsShardHint(v.text))) return -1;
    if (v.kind == PyValue::Kind::kInt) {
      std::optional<int64_t> n = v.AsInt64();
      if (n.has_value()) return *n;
      return Error(v.begin, absl::StrCat(op, ": ", param, " is out of range for int64, got ",
                                         Text(v)));
    }
    return Error(v.begin, absl::StrCat(op, ": ", param, " must be an integer, got ", Text(v)));
  }
  absl::StatusOr<bool> Bool(absl::string_view op, absl::string_view param,
                            const PyValue& v) const {
    if (v.kind == PyValue::Kind::kBool) return v.bool_value;
    return Error(v.begin, absl::StrCat(op, ": ", param, " must be True or False, got ", Text(v)));
  }

  absl::Status BuildRange(const std::vector<Arg>& args, size_t at, proto::RangeSource* r) {
    for (const Arg& a : args) {
      if (a.keyword.has_value()) {
        return Error(a.at, absl::StrCat("range: unexpected keyword argument '", *a.keyword,
                                        "' (range takes 1 to 3 positional arguments: "
                                        "[start,] stop[, step])"));
      }
    }
    if (args.empty() || args.size() > 3) {
      return Error(args.empty() ? at : args[3].at,
                   absl::StrCat("range: takes 1 to 3 positional arguments ([start,] stop[, "
                                "step]), got ", args.size()));
    }
    static const char* const kNames[] = {"start", "stop", "step"};
    int64_t values[3] = {0, 0, 1};
    const char* const* names = args.size() == 1 ? kNames + 1 : kNames;
    int first = args.size() == 1 ? 1 : 0;
    for (size_t i = 0; i < args.size(); ++i) {
      ASSIGN_OR_RETURN(values[first + i], Int("range", names[i], args[i].value));
    }
    r->set_start(values[0]);
    r->set_stop(values[1]);
    r->set_step(values[2]);
    return absl::OkStatus();
  }

  // A string or a list of strings into `out`. In a lambda body the lambda's parameter stands
  // for the file name and leaves `out` empty.
  absl::Status Filenames(const PyValue& v, google::protobuf::RepeatedPtrField<std::string>* out,
                         absl::string_view op) {
    auto is_string = [](const PyValue& x) {
      return x.kind == PyValue::Kind::kStr || x.kind == PyValue::Kind::kBytes;
    };
    if (lambda_param_.has_value() && v.kind == PyValue::Kind::kName && v.text == *lambda_param_) {
      return absl::OkStatus();
    }
    if (is_string(v)) {
      *out->Add() = v.text;
      return absl::OkStatus();
    }
    if (v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple) {
      for (const PyValue& f : v.items) {
        if (!is_string(f)) {
          return Error(f.begin, absl::StrCat(op, ": filenames must be strings, got ", Text(f)));
        }
        *out->Add() = f.text;
      }
      return absl::OkStatus();
    }
    return Error(v.begin, absl::StrCat(op, ": filenames must be a string or a list of strings, "
                                       "got ", Text(v)));
  }
#include "core/data/pipeline_parser_transforms.inc"


  // tf_record_dataset and fixed_length_record_dataset (core/data/ops/record_iterators.h), with TF's
  // parameter order; start_record/num_records (Sluice's) make the source a record range.
  // Argument values are checked by spec inference.
  absl::Status BuildRecordSource(const std::string& base,
                                 const std::vector<std::optional<PyValue>>& a,
                                 proto::SourceDef* source) {
    auto given = [&](size_t i) { return a[i].has_value() && a[i]->kind != PyValue::Kind::kNone; };
    auto files = [&](google::protobuf::RepeatedPtrField<std::string>* out) -> absl::Status {
      const PyValue& v = *a[0];
      // In an interleave lambda the parameter stands for the file name (Filenames()).
      if (lambda_param_.has_value()) return Filenames(v, out, base);
      auto is_string = [](const PyValue& x) {
        return x.kind == PyValue::Kind::kStr || x.kind == PyValue::Kind::kBytes;
      };
      if (is_string(v)) {
        out->Add(std::string(v.text));
        return absl::OkStatus();
      }
      if (v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple) {
        for (const PyValue& f : v.items) {
          if (!is_string(f)) {
            return Error(f.begin, absl::StrCat(base, ": filenames must be strings, got ", Text(f)));
          }
          out->Add(std::string(f.text));
        }
        return absl::OkStatus();
      }
      return Error(v.begin, absl::StrCat(base, ": filenames must be a string or a list of "
                                         "strings, got ", Text(v)));
    };
    auto str = [&](size_t i, const char* param, std::string* out) -> absl::Status {
      const PyValue& v = *a[i];
      if (v.kind != PyValue::Kind::kStr && v.kind != PyValue::Kind::kBytes) {
        return Error(v.begin, absl::StrCat(base, ": ", param, " must be a string, got ", Text(v)));
      }
      *out = v.text;
      return absl::OkStatus();
    };
    auto range = [&](size_t i, proto::RecordRange* r) -> absl::Status {
      r->set_count(-1);
      if (given(i)) {
        ASSIGN_OR_RETURN(int64_t start, Int(base, "start_record", *a[i]));
        r->set_start(start);
      }
      if (given(i + 1)) {
        ASSIGN_OR_RETURN(int64_t count, Int(base, "num_records", *a[i + 1]));
        r->set_count(count);
      }
      return absl::OkStatus();
    };
    if (base == "tf_record_dataset") {
      proto::TFRecordSource* t = source->mutable_tf_record();
      RETURN_IF_ERROR(files(t->mutable_filenames()));
      if (given(1)) RETURN_IF_ERROR(str(1, "compression_type", t->mutable_compression_type()));
      if (given(2)) {
        ASSIGN_OR_RETURN(int64_t n, Int(base, "buffer_size", *a[2]));
        t->set_buffer_size(n);
      }
      if (given(3)) {
        ASSIGN_OR_RETURN(int64_t n, Int(base, "num_parallel_reads", *a[3]));
        t->set_num_parallel_reads(n);
      }
      if (given(4) || given(5)) RETURN_IF_ERROR(range(4, t->mutable_record_range()));
      return absl::OkStatus();
    }
    proto::FixedLengthRecordSource* f = source->mutable_fixed_length_record();
    RETURN_IF_ERROR(files(f->mutable_filenames()));
    ASSIGN_OR_RETURN(int64_t record_bytes, Int(base, "record_bytes", *a[1]));
    f->set_record_bytes(record_bytes);
    if (given(2)) {
      ASSIGN_OR_RETURN(int64_t n, Int(base, "header_bytes", *a[2]));
      f->set_header_bytes(n);
    }
    if (given(3)) {
      ASSIGN_OR_RETURN(int64_t n, Int(base, "footer_bytes", *a[3]));
      f->set_footer_bytes(n);
    }
    if (given(4)) {
      ASSIGN_OR_RETURN(int64_t n, Int(base, "buffer_size", *a[4]));
      f->set_buffer_size(n);
    }
    if (given(5)) RETURN_IF_ERROR(str(5, "compression_type", f->mutable_compression_type()));
    if (given(6) || given(7)) RETURN_IF_ERROR(range(6, f->mutable_record_range()));
    return absl::OkStatus();
  }

  absl::StatusOr<proto::OpDef> BuildOp(const std::string& name,
                                       const std::vector<std::optional<PyValue>>& a) {
    proto::OpDef op;
    if (name == "batch") {
      ASSIGN_OR_RETURN(int64_t n, Int(name, "batch_size", *a[0]));
      op.mutable_batch()->set_batch_size(n);
      if (a[1].has_value()) {
        ASSIGN_OR_RETURN(bool drop, Bool(name, "drop_remainder", *a[1]));
        op.mutable_batch()->set_drop_remainder(drop);
      }
    } else if (name == "repeat") {
      int64_t count = -1;
      if (a[0].has_value() && a[0]->kind != PyValue::Kind::kNone) {
        ASSIGN_OR_RETURN(count, Int(name, "count", *a[0]));
      }
      op.mutable_repeat()->set_count(count);
    } else if (name == "take") {
      ASSIGN_OR_RETURN(int64_t count, Int(name, "count", *a[0]));
      op.mutable_take()->set_count(count);
    } else if (name == "skip") {
      ASSIGN_OR_RETURN(int64_t count, Int(name, "count", *a[0]));
      op.mutable_skip()->set_count(count);
    } else if (name == "shard") {
      proto::ShardOp* s = op.mutable_shard();
      ASSIGN_OR_RETURN(int64_t num_shards, Int(name, "num_shards", *a[0]));
      ASSIGN_OR_RETURN(int64_t index, Int(name, "index", *a[1]));
      // SHARD_HINT is -1 in TF, so a literal -1 is the placeholder too.
      if (num_shards == -1) {
        s->set_num_shards_is_hint(true);
      } else {
        s->set_num_shards(num_shards);
      }
      if (index == -1) {
        s->set_index_is_hint(true);
      } else {
        s->set_index(index);
      }
    } else if (name == "shuffle") {
      proto::ShuffleOp* s = op.mutable_shuffle();
      ASSIGN_OR_RETURN(int64_t buffer_size, Int(name, "buffer_size", *a[0]));
      s->set_buffer_size(buffer_size);
      if (a[1].has_value() && a[1]->kind != PyValue::Kind::kNone) {
        ASSIGN_OR_RETURN(int64_t seed, Int(name, "seed", *a[1]));
        s->set_seed(seed);
        s->set_has_seed(true);
      }
      bool reshuffle = true;
      if (a[2].has_value() && a[2]->kind != PyValue::Kind::kNone) {
        ASSIGN_OR_RETURN(reshuffle, Bool(name, "reshuffle_each_iteration", *a[2]));
      }
      s->set_reshuffle_each_iteration(reshuffle);
    } else if (name == "prefetch") {
      ASSIGN_OR_RETURN(int64_t buffer_size, Int(name, "buffer_size", *a[0]));
      op.mutable_prefetch()->set_buffer_size(buffer_size);
    } else if (name == "unbatch") {
      op.mutable_unbatch();
    } else if (name == "rebatch") {
      proto::RebatchOp* r = op.mutable_rebatch();
      const PyValue& sizes = *a[0];
      if (sizes.kind == PyValue::Kind::kList || sizes.kind == PyValue::Kind::kTuple) {
        for (const PyValue& s : sizes.items) {
          ASSIGN_OR_RETURN(int64_t n, Int(name, "batch_size", s));
          r->add_batch_sizes(n);
        }
      } else {
        ASSIGN_OR_RETURN(int64_t n, Int(name, "batch_size", sizes));
        r->add_batch_sizes(n);
      }
      if (a[1].has_value()) {
        ASSIGN_OR_RETURN(bool drop, Bool(name, "drop_remainder", *a[1]));
        r->set_drop_remainder(drop);
      }
    } else if (name == "legacy_rebatch") {
      ASSIGN_OR_RETURN(int64_t n, Int(name, "num_replicas", *a[0]));
      // In the proto 0 means "not legacy", so refuse it here, where the op is still named.
      if (n == 0) {
        return Error(a[0]->begin, "legacy_rebatch: num_replicas must be positive, got 0");
      }
      op.mutable_rebatch()->set_legacy_num_replicas(n);
    }
    return op;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::optional<std::string> lambda_param_;  // set in a lambda body
};

}  // namespace

absl::StatusOr<ParsedPipeline> ParsePipelineExpression(absl::string_view expression) {
  return PipelineParser(expression).Parse();
}

absl::StatusOr<Dataset> Dataset::Parse(absl::string_view expression) {
  ASSIGN_OR_RETURN(ParsedPipeline parsed, ParsePipelineExpression(expression));
  int failed = kGraphPosition;
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(parsed.def, &failed);
  if (!specs.ok()) {
    int column = failed >= 0 && failed < static_cast<int>(parsed.columns.size())
                     ? parsed.columns[failed]
                     : 1;
    return absl::InvalidArgumentError(
        absl::StrCat(kContext, ", column ", column, ": ", specs.status().message()));
  }
  return Dataset(std::move(parsed.def));
}

}  // namespace sluice
