// What an op's pipeline-expression syntax is, registered with the op (core/data/op_registry.h):
// the parser (core/data/pipeline_parser.h) tokenizes an expression, looks each call's name up in
// the registry, binds the call's positional and keyword arguments to the rule's parameters as
// Python does, and hands the bound call (ParseCall) to the rule's `parse` hook, which fills in
// the proto. The hooks check argument types with ParseCall's helpers, so every error keeps one
// form: "pipeline expression, column N: <op>: <argument> must be ..., got <text>".
//
// Thread safety: ParseCall is used by one thread, during one parse.
#ifndef SLUICE_CORE_DATA_OP_PARSE_H_
#define SLUICE_CORE_DATA_OP_PARSE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/format/python_literal.h"
#include "proto/dataset.pb.h"
#include "sluice/tensor.h"

namespace sluice {

// One argument of a call as the parser read it.
struct ParsedArg {
  std::optional<std::string> keyword;
  PyValue value;
  size_t at = 0;  // byte offset where the argument (or its keyword) begins
  // A call such as cast(tf.float32): `value` is a kName with the callee's name, and these are
  // its arguments.
  std::shared_ptr<std::vector<ParsedArg>> call_args;
  // A lambda such as `lambda f: text_line_dataset(f)`: the graph of its body, whose file
  // source's filenames are left empty (the lambda's parameter).
  std::shared_ptr<proto::DatasetDef> lambda;
  // A map() function whose rule reads its own argument text (MapFnParseRule::parse_text, as
  // parse_example's feature dict): the function it read.
  std::shared_ptr<proto::MapOp> map_fn;
};

// One parameter of a rule: Python's name (keyword arguments use it) and whether it is required.
struct ParseParam {
  const char* name;
  bool required;
};

// What the parser gives the hooks besides the call: the expression's text, the lambda parameter
// when the call is in a lambda body, and the parser itself for a nested pipeline.
struct ParseContext {
  absl::string_view text;
  // Set in a lambda body: the name that stands for the file names of its source.
  std::optional<std::string> lambda_param;
  // Parses `body` (a pipeline expression of its own) as the body of a lambda whose parameter is
  // `param`.
  std::function<absl::StatusOr<proto::DatasetDef>(const std::string& body,
                                                  const std::string& param)>
      parse_lambda_body;
};

// "pipeline expression, column N: <message>" (INVALID_ARGUMENT; N = at + 1).
absl::Status PipelineError(size_t at, absl::string_view message);
// The same with `status`'s code and "<prefix><status's message>".
absl::Status PipelineError(size_t at, const absl::Status& status, absl::string_view prefix = "");
// "expected <what>, found <what is at pos>" at `pos` of `text`.
absl::Status PipelineExpected(absl::string_view text, size_t pos, absl::string_view what);
// The name without the module prefixes a call may carry: tf.io., tf.image., tf.math., tf.,
// sluice..
std::string StripCallPrefixes(std::string name);

// A call bound to its rule's parameters.
class ParseCall {
 public:
  // Binds `args` to `params` as Python does; errors name `name` and the argument, placed at the
  // argument (a missing one at `at`, where the call's name begins).
  static absl::StatusOr<ParseCall> Bind(const ParseContext& context, std::string name, size_t at,
                                        std::vector<ParsedArg> args,
                                        const std::vector<ParseParam>& params);
  // The call unbound (a rule that reads args() itself: range, plugin).
  static ParseCall Unbound(const ParseContext& context, std::string name, size_t at,
                           std::vector<ParsedArg> args);

  const std::string& name() const { return name_; }
  size_t at() const { return at_; }
  const ParseContext& context() const { return *context_; }
  // The arguments as written.
  const std::vector<ParsedArg>& args() const { return args_; }
  // Parameter i's value (unset when not given) and the argument bound to it (null when none).
  const std::optional<PyValue>& arg(size_t i) const { return bound_[i]; }
  const ParsedArg* slot(size_t i) const { return slots_[i] < 0 ? nullptr : &args_[slots_[i]]; }
  // Parameter i is given and not None.
  bool given(size_t i) const;

  // Errors at `at` (PipelineError).
  absl::Status Error(size_t at, absl::string_view message) const;
  // The source text of a value, shortened for messages.
  std::string Text(const PyValue& v) const;

  // Typed arguments; errors "<name>: <param> must be ..., got <text>" at the value.
  // An int; AUTOTUNE and SHARD_HINT read as -1, as in TF.
  absl::StatusOr<int64_t> Int(absl::string_view param, const PyValue& v) const;
  absl::StatusOr<bool> Bool(absl::string_view param, const PyValue& v) const;
  absl::StatusOr<std::string> Str(absl::string_view param, const PyValue& v) const;
  // tf.float32, float32, 'float32'.
  absl::StatusOr<DType> DTypeArg(absl::string_view param, const PyValue& v) const;
  absl::StatusOr<double> Number(absl::string_view param, const PyValue& v) const;
  // A number or a list/tuple of numbers.
  absl::StatusOr<std::vector<float>> Floats(absl::string_view param, const PyValue& v) const;
  // A list/tuple of ints (None as -1 when `none_ok`), or one int.
  absl::StatusOr<std::vector<int64_t>> Ints(absl::string_view param, const PyValue& v,
                                            bool none_ok) const;
  absl::StatusOr<Tensor> Scalar(absl::string_view param, const PyValue& v) const;
  // Argument i as an element literal (a nest of Python values, as tf.constant takes), errors
  // at the value.
  absl::StatusOr<proto::ElementProto> ElementLiteral(size_t i) const;
  // A record source's start_record= and num_records= at arguments i and i + 1 into `out`
  // (count -1 unless num_records is given).
  absl::Status RecordRange(size_t i, proto::RecordRange* out) const;
  // A string or a list of strings into `out`. In a lambda body the lambda's parameter stands for
  // the file name and leaves `out` empty.
  absl::Status Filenames(const PyValue& v,
                         google::protobuf::RepeatedPtrField<std::string>* out) const;
  // key='name' / key=N (a MapOp's or FilterOp's component).
  template <typename Op>
  absl::Status Component(const std::optional<PyValue>& v, Op* out) const {
    if (!v.has_value() || v->kind == PyValue::Kind::kNone) return absl::OkStatus();
    if (v->kind == PyValue::Kind::kStr) {
      out->set_key(v->text);
      return absl::OkStatus();
    }
    if (v->kind == PyValue::Kind::kInt) {
      absl::StatusOr<int64_t> i = Int("key", *v);
      if (!i.ok()) return i.status();
      out->set_index(*i);
      return absl::OkStatus();
    }
    return Error(v->begin, KeyError(*v));
  }

 private:
  ParseCall(const ParseContext& context, std::string name, size_t at, std::vector<ParsedArg> args)
      : context_(&context), name_(std::move(name)), at_(at), args_(std::move(args)) {}
  std::string KeyError(const PyValue& v) const;

  const ParseContext* context_;
  std::string name_;
  size_t at_;
  std::vector<ParsedArg> args_;
  std::vector<std::optional<PyValue>> bound_;
  std::vector<int> slots_;
};

// The syntax of one source, op or map() function: its name, other spellings, parameters and the
// hook that fills in `Out` (proto::SourceDef, proto::OpDef or proto::MapOp) from the bound call.
template <typename Out>
struct ParseRule {
  std::string name;                  // "batch"; errors name the call by it
  std::vector<std::string> aliases;  // other spellings: "TextLineDataset", "decode_jpeg"
  // Aliases also shown after the list of known names in an "unknown ..." error.
  std::vector<std::string> listed_aliases;
  // Where the name appears in the parser's lists of known names (errors list the names in the
  // order they joined the syntax).
  int list_order = 0;
  std::vector<ParseParam> params;
  // True: the call is not bound (ParseCall::Unbound); the hook checks args() itself.
  bool unbound = false;
  std::function<absl::Status(const ParseCall&, Out*)> parse;
};

using SourceParseRule = ParseRule<proto::SourceDef>;
using OpParseRule = ParseRule<proto::OpDef>;

struct MapFnParseRule : ParseRule<proto::MapOp> {
  // Set for a function whose arguments are not Python literals (parse_example's feature dict):
  // reads the call from text[*pos] (at its '(') to just past its ')', advancing *pos.
  std::function<absl::StatusOr<proto::MapOp>(absl::string_view text, size_t* pos)> parse_text;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OP_PARSE_H_
