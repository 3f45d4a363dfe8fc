#include "core/data/op_parse.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

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

// How an error names what is at `at`.
std::string Describe(absl::string_view text, size_t at) {
  if (at >= text.size()) return "end of expression";
  char c = text[at];
  if (IsIdentStart(c)) {
    size_t e = at;
    while (e < text.size() && IsIdentChar(text[e])) ++e;
    return absl::StrCat("'", text.substr(at, std::min<size_t>(e - at, 40)), "'");
  }
  if (absl::ascii_isdigit(c)) {
    size_t e = at;
    while (e < text.size() && (absl::ascii_isalnum(text[e]) || text[e] == '.')) ++e;
    return absl::StrCat("'", text.substr(at, std::min<size_t>(e - at, 40)), "'");
  }
  if (c == '\'' || c == '"') return "a string";
  if (absl::ascii_isprint(c)) return absl::StrCat("'", std::string(1, c), "'");
  return absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c));
}

}  // namespace

absl::Status PipelineError(size_t at, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(kContext, ", column ", at + 1, ": ", message));
}

absl::Status PipelineError(size_t at, const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(),
                      absl::StrCat(kContext, ", column ", at + 1, ": ", prefix, status.message()));
}

absl::Status PipelineExpected(absl::string_view text, size_t pos, absl::string_view what) {
  return PipelineError(pos, absl::StrCat("expected ", what, ", found ", Describe(text, pos)));
}

std::string StripCallPrefixes(std::string name) {
  for (absl::string_view p : {"tf.io.", "tf.image.", "tf.math.", "tf.", "sluice."}) {
    if (absl::StartsWith(name, p)) return name.substr(p.size());
  }
  return name;
}

ParseCall ParseCall::Unbound(const ParseContext& context, std::string name, size_t at,
                             std::vector<ParsedArg> args) {
  return ParseCall(context, std::move(name), at, std::move(args));
}

absl::StatusOr<ParseCall> ParseCall::Bind(const ParseContext& context, std::string name, size_t at,
                                          std::vector<ParsedArg> args,
                                          const std::vector<ParseParam>& params) {
  ParseCall call(context, std::move(name), at, std::move(args));
  const std::string& sig = call.name_;
  call.bound_.assign(params.size(), std::nullopt);
  call.slots_.assign(params.size(), -1);
  size_t positional = 0;
  bool saw_keyword = false;
  for (size_t a = 0; a < call.args_.size(); ++a) {
    const ParsedArg& arg = call.args_[a];
    size_t slot;
    if (arg.keyword.has_value()) {
      saw_keyword = true;
      slot = params.size();
      for (size_t i = 0; i < params.size(); ++i) {
        if (*arg.keyword == params[i].name) slot = i;
      }
      if (slot == params.size()) {
        std::vector<std::string> known;
        for (const ParseParam& p : params) known.push_back(p.name);
        return PipelineError(
            arg.at, absl::StrCat(sig, ": unexpected keyword argument '", *arg.keyword, "'",
                                 known.empty()
                                     ? " (it takes no arguments)"
                                     : absl::StrCat(" (known: ", absl::StrJoin(known, ", "), ")")));
      }
    } else {
      if (saw_keyword) {
        return PipelineError(arg.at,
                             absl::StrCat(sig, ": positional argument follows keyword argument"));
      }
      if (positional >= params.size()) {
        return PipelineError(arg.at, absl::StrCat(sig, ": takes ", params.size(), " argument",
                                                  params.size() == 1 ? "" : "s", " at most, got ",
                                                  call.args_.size()));
      }
      slot = positional++;
    }
    if (call.bound_[slot].has_value()) {
      return PipelineError(arg.at,
                           absl::StrCat(sig, ": argument ", params[slot].name, " given twice"));
    }
    call.bound_[slot] = arg.value;
    call.slots_[slot] = static_cast<int>(a);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].required && !call.bound_[i].has_value()) {
      return PipelineError(at, absl::StrCat(sig, ": missing required argument ", params[i].name));
    }
  }
  return call;
}

bool ParseCall::given(size_t i) const {
  return bound_[i].has_value() && bound_[i]->kind != PyValue::Kind::kNone;
}

absl::Status ParseCall::Error(size_t at, absl::string_view message) const {
  return PipelineError(at, message);
}

std::string ParseCall::Text(const PyValue& v) const {
  absl::string_view text = context_->text;
  absl::string_view t = v.begin <= text.size() && v.end <= text.size() && v.begin <= v.end
                            ? text.substr(v.begin, v.end - v.begin)
                            : absl::string_view();
  if (t.size() > 40) return absl::StrCat(t.substr(0, 37), "...");
  return std::string(t);
}

absl::StatusOr<proto::ElementProto> ParseCall::ElementLiteral(size_t i) const {
  const PyValue& v = *arg(i);
  absl::StatusOr<Element> element = PyValueToElement(v);
  if (!element.ok()) return Error(v.begin, absl::StrCat(name_, ": ", element.status().message()));
  return ElementToProto(*element);
}

absl::Status ParseCall::RecordRange(size_t i, proto::RecordRange* out) const {
  out->set_count(-1);
  if (given(i)) {
    absl::StatusOr<int64_t> start = Int("start_record", *arg(i));
    if (!start.ok()) return start.status();
    out->set_start(*start);
  }
  if (given(i + 1)) {
    absl::StatusOr<int64_t> count = Int("num_records", *arg(i + 1));
    if (!count.ok()) return count.status();
    out->set_count(*count);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseCall::Int(absl::string_view param, const PyValue& v) const {
  if (v.kind == PyValue::Kind::kName && (IsAutotune(v.text) || IsShardHint(v.text))) return -1;
  if (v.kind == PyValue::Kind::kInt) {
    std::optional<int64_t> n = v.AsInt64();
    if (n.has_value()) return *n;
    return Error(v.begin,
                 absl::StrCat(name_, ": ", param, " is out of range for int64, got ", Text(v)));
  }
  return Error(v.begin, absl::StrCat(name_, ": ", param, " must be an integer, got ", Text(v)));
}

absl::StatusOr<bool> ParseCall::Bool(absl::string_view param, const PyValue& v) const {
  if (v.kind == PyValue::Kind::kBool) return v.bool_value;
  return Error(v.begin, absl::StrCat(name_, ": ", param, " must be True or False, got ", Text(v)));
}

absl::StatusOr<std::string> ParseCall::Str(absl::string_view param, const PyValue& v) const {
  if (v.kind == PyValue::Kind::kStr || v.kind == PyValue::Kind::kBytes) return v.text;
  return Error(v.begin, absl::StrCat(name_, ": ", param, " must be a string, got ", Text(v)));
}

absl::StatusOr<DType> ParseCall::DTypeArg(absl::string_view param, const PyValue& v) const {
  if (v.kind == PyValue::Kind::kName || v.kind == PyValue::Kind::kStr) {
    absl::StatusOr<DType> d = ParseDType(v.text);
    if (d.ok()) return *d;
  }
  return Error(v.begin, absl::StrCat(name_, ": ", param,
                                     " must be a dtype such as tf.float32, got ", Text(v)));
}

absl::StatusOr<double> ParseCall::Number(absl::string_view param, const PyValue& v) const {
  if (v.kind == PyValue::Kind::kInt || v.kind == PyValue::Kind::kFloat) return v.float_value;
  return Error(v.begin, absl::StrCat(name_, ": ", param, " must be a number, got ", Text(v)));
}

absl::StatusOr<std::vector<float>> ParseCall::Floats(absl::string_view param,
                                                     const PyValue& v) const {
  std::vector<float> out;
  if (v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple) {
    for (const PyValue& x : v.items) {
      ASSIGN_OR_RETURN(double d, Number(param, x));
      out.push_back(static_cast<float>(d));
    }
    return out;
  }
  ASSIGN_OR_RETURN(double d, Number(param, v));
  out.push_back(static_cast<float>(d));
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParseCall::Ints(absl::string_view param, const PyValue& v,
                                                     bool none_ok) const {
  std::vector<int64_t> out;
  auto one = [&](const PyValue& x) -> absl::Status {
    if (none_ok && x.kind == PyValue::Kind::kNone) {
      out.push_back(-1);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(int64_t n, Int(param, x));
    out.push_back(n);
    return absl::OkStatus();
  };
  if (v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple) {
    for (const PyValue& x : v.items) RETURN_IF_ERROR(one(x));
  } else {
    RETURN_IF_ERROR(one(v));
  }
  return out;
}

absl::StatusOr<Tensor> ParseCall::Scalar(absl::string_view param, const PyValue& v) const {
  absl::StatusOr<Tensor> t = PyValueToTensor(v);
  if (!t.ok()) return Error(v.begin, absl::StrCat(name_, ": ", param, ": ", t.status().message()));
  if (t->shape().rank() != 0) {
    return Error(v.begin, absl::StrCat(name_, ": ", param, " must be a scalar, got ", Text(v)));
  }
  return *t;
}

absl::Status ParseCall::Filenames(const PyValue& v,
                                  google::protobuf::RepeatedPtrField<std::string>* out) const {
  auto is_string = [](const PyValue& x) {
    return x.kind == PyValue::Kind::kStr || x.kind == PyValue::Kind::kBytes;
  };
  const std::optional<std::string>& param = context_->lambda_param;
  if (param.has_value() && v.kind == PyValue::Kind::kName && v.text == *param) {
    return absl::OkStatus();
  }
  if (is_string(v)) {
    *out->Add() = v.text;
    return absl::OkStatus();
  }
  if (v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple) {
    for (const PyValue& f : v.items) {
      if (!is_string(f)) {
        return Error(f.begin, absl::StrCat(name_, ": filenames must be strings, got ", Text(f)));
      }
      *out->Add() = f.text;
    }
    return absl::OkStatus();
  }
  return Error(v.begin, absl::StrCat(name_,
                                     ": filenames must be a string or a list of strings, "
                                     "got ",
                                     Text(v)));
}

std::string ParseCall::KeyError(const PyValue& v) const {
  return absl::StrCat(name_, ": key must be a dict key (a string) or a tuple index (an int), got ",
                      Text(v));
}

}  // namespace sluice
