#include "core/data/pipeline_parser.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/spec_inference.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

constexpr absl::string_view kContext = "pipeline expression";
// Calls and lambdas nest at most this deep, so hostile input cannot exhaust the stack.
constexpr int kMaxCallDepth = 32;

bool IsIdentStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// The tokenizer: reads a source call and a chain of op calls, and hands each call to the parse
// rule its name has in the registry (core/data/op_parse.h).
class PipelineParser {
 public:
  explicit PipelineParser(absl::string_view text) : text_(text) { InitContext(); }
  // A parser for the body of a lambda in `text` from `pos`: it ends at a ',' or ')' outside
  // brackets, and `param` stands for the file names of its source.
  PipelineParser(absl::string_view text, size_t pos, std::string param, int call_depth)
      : text_(text), pos_(pos), call_depth_(call_depth) {
    InitContext();
    context_.lambda_param = std::move(param);
  }
  PipelineParser(const PipelineParser&) = delete;
  PipelineParser& operator=(const PipelineParser&) = delete;
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
    const OpRegistry& registry = OpRegistry::Global();
    for (;;) {
      SkipWs();
      if (AtEnd()) break;
      if (context_.lambda_param.has_value() && (Peek() == ',' || Peek() == ')')) break;
      if (Peek() != '.') return Expected("'.' and the next op, or the end of the expression");
      ++pos_;
      SkipWs();
      if (!IsIdentStart(Peek())) return Expected("an op name after '.'");
      size_t op_at = pos_;
      std::string name = Identifier();
      const OpParseRule* rule = registry.FindOpParser(name);
      if (rule == nullptr) {
        return Error(op_at, absl::StrCat("unknown op '", name, "'; known ops: ",
                                         registry.OpParserNames()));
      }
      ASSIGN_OR_RETURN(std::vector<ParsedArg> args, Arguments(name));
      ASSIGN_OR_RETURN(ParseCall call, Bind(*rule, rule->name, op_at, std::move(args)));
      proto::OpDef op;
      RETURN_IF_ERROR(rule->parse(call, &op));
      *out.def.add_ops() = std::move(op);
      out.columns.push_back(static_cast<int>(op_at) + 1);
    }
    return out;
  }

 private:
  void InitContext() {
    context_.text = text_;
    context_.parse_lambda_body = [this](const std::string& body,
                                        const std::string& param)
        -> absl::StatusOr<proto::DatasetDef> {
      PipelineParser reader(body, 0, param, call_depth_);
      ASSIGN_OR_RETURN(ParsedPipeline parsed, reader.Parse());
      return std::move(parsed.def);
    };
  }

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
    return PipelineError(at, message);
  }
  absl::Status Expected(absl::string_view what) const {
    return PipelineExpected(text_, pos_, what);
  }

  template <typename Out>
  absl::StatusOr<ParseCall> Bind(const ParseRule<Out>& rule, std::string name, size_t at,
                                 std::vector<ParsedArg> args) const {
    if (rule.unbound) return ParseCall::Unbound(context_, std::move(name), at, std::move(args));
    return ParseCall::Bind(context_, std::move(name), at, std::move(args), rule.params);
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
    const OpRegistry& registry = OpRegistry::Global();
    const SourceParseRule* rule = registry.FindSourceParser(base);
    if (rule == nullptr) {
      std::string hint = registry.FindOpParser(base) != nullptr
                             ? absl::StrCat(" ('", base, "' is an op; a pipeline starts with a "
                                            "source)")
                             : "";
      std::vector<std::string> aliases = registry.ListedSourceAliases();
      return Error(at, absl::StrCat("unknown source '", name, "'", hint, "; known sources: ",
                                    registry.SourceParserNames(),
                                    aliases.empty()
                                        ? ""
                                        : absl::StrCat(" (or ", absl::StrJoin(aliases, ", "),
                                                       ")")));
    }
    ASSIGN_OR_RETURN(std::vector<ParsedArg> args, Arguments(rule->name));
    ASSIGN_OR_RETURN(ParseCall call, Bind(*rule, rule->name, at, std::move(args)));
    return rule->parse(call, def->mutable_source());
  }

  // After the name: '(' args ')'.
  absl::StatusOr<std::vector<ParsedArg>> Arguments(const std::string& op) {
    SkipWs();
    if (Peek() != '(') return Expected(absl::StrCat("'(' after ", op));
    ++pos_;
    std::vector<ParsedArg> args;
    for (;;) {
      SkipWs();
      if (Peek() == ')') {
        ++pos_;
        return args;
      }
      if (AtEnd() || Peek() == ',') {
        return Expected(absl::StrCat("an argument or ')' to close the arguments of ", op));
      }
      ParsedArg arg;
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

  // One argument's value: a lambda, a call such as cast(tf.float32), or a Python literal.
  absl::Status ParseArgValue(ParsedArg* arg) {
    SkipWs();
    if (call_depth_ >= kMaxCallDepth) {
      return Error(pos_, absl::StrCat("calls and lambdas nest deeper than ", kMaxCallDepth));
    }
    ++call_depth_;
    absl::Status s = ParseArgValueAtDepth(arg);
    --call_depth_;
    return s;
  }

  absl::Status ParseArgValueAtDepth(ParsedArg* arg) {
    if (IsIdentStart(Peek())) {
      const size_t start = pos_;
      std::string name = Identifier();
      while (Peek() == '.' && IsIdentStart(Peek(1))) {
        ++pos_;
        absl::StrAppend(&name, ".", Identifier());
      }
      if (name == "lambda") return ParseLambda(arg, start);
      SkipWs();
      if (Peek() == '(') {
        // A map() function that reads its own arguments (parse_example's feature dict).
        const MapFnParseRule* rule = OpRegistry::Global().FindMapFnParser(StripCallPrefixes(name));
        if (rule != nullptr && rule->parse_text) {
          ASSIGN_OR_RETURN(proto::MapOp fn, rule->parse_text(text_, &pos_));
          SetCall(arg, name, start);
          arg->call_args = std::make_shared<std::vector<ParsedArg>>();
          arg->map_fn = std::make_shared<proto::MapOp>(std::move(fn));
          return absl::OkStatus();
        }
      }
      if (Peek() == '(' && !IsLiteralCall(name)) {
        ASSIGN_OR_RETURN(std::vector<ParsedArg> inner, Arguments(name));
        SetCall(arg, name, start);
        arg->call_args = std::make_shared<std::vector<ParsedArg>>(std::move(inner));
        return absl::OkStatus();
      }
      pos_ = start;
    }
    ASSIGN_OR_RETURN(arg->value, ParsePyValue(text_, &pos_, kContext));
    return absl::OkStatus();
  }

  // `value` of a call or lambda: a kName with its name, spanning [start, pos_).
  void SetCall(ParsedArg* arg, const std::string& name, size_t start) const {
    arg->value = PyValue();
    arg->value.kind = PyValue::Kind::kName;
    arg->value.text = name;
    arg->value.begin = start;
    arg->value.end = pos_;
  }

  // `lambda NAME: <pipeline expression>` (the body of interleave's function).
  absl::Status ParseLambda(ParsedArg* arg, size_t start) {
    SkipWs();
    if (!IsIdentStart(Peek())) return Expected("a parameter name after 'lambda'");
    std::string param = Identifier();
    SkipWs();
    if (Peek() != ':') return Expected("':' after the lambda's parameter");
    ++pos_;
    PipelineParser body(text_, pos_, param, call_depth_);
    ASSIGN_OR_RETURN(ParsedPipeline parsed, body.Parse());
    pos_ = body.pos();
    SetCall(arg, "lambda", start);
    arg->lambda = std::make_shared<proto::DatasetDef>(std::move(parsed.def));
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int call_depth_ = 0;
  ParseContext context_;
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
