#include "core/data/op_expression.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "core/data/op_registry.h"
#include "core/tensor/proto_convert.h"
#include "google/protobuf/descriptor.h"

namespace sluice {

std::string SourceExpression(const proto::SourceDef& source) {
  if (source.kind_case() == proto::SourceDef::KIND_NOT_SET) return "<no source>";
  const SourceRegistration* r = OpRegistry::Global().FindSource(source.kind_case());
  if (r == nullptr) {
    const google::protobuf::FieldDescriptor* f =
        proto::SourceDef::descriptor()->FindFieldByNumber(source.kind_case());
    return absl::StrCat("<unregistered source '", f != nullptr ? f->name() : "?", "'>");
  }
  return r->expression(source);
}

std::string OpExpression(const proto::OpDef& op) {
  if (op.kind_case() == proto::OpDef::KIND_NOT_SET) return "<unset op>()";
  const OpRegistration* r = OpRegistry::Global().FindOp(op.kind_case());
  if (r == nullptr) {
    const google::protobuf::FieldDescriptor* f =
        proto::OpDef::descriptor()->FindFieldByNumber(op.kind_case());
    return absl::StrCat("<unregistered op '", f != nullptr ? f->name() : "?", "'>()");
  }
  return r->expression(op);
}

const char* PyBool(bool b) { return b ? "True" : "False"; }

std::string TfDType(proto::DataType d) { return TfDType(static_cast<DType>(d)); }

std::string TfDType(DType d) { return absl::StrCat("tf.", DTypeName(d)); }

std::string TensorLiteral(const proto::TensorProto& p) {
  absl::StatusOr<Tensor> t = TensorFromProto(p);
  return t.ok() ? TensorToPythonLiteral(*t) : "<invalid literal>";
}

std::string ElementLiteral(const proto::ElementProto& p) {
  absl::StatusOr<Element> e = ElementFromProto(p);
  return e.ok() ? ElementToPythonLiteral(*e) : "<invalid literal>";
}

std::string StringList(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& n : names) quoted.push_back(PythonStringLiteral(n));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string FloatList(const google::protobuf::RepeatedField<float>& values) {
  std::vector<std::string> out;
  for (float v : values) out.push_back(PythonFloat32Literal(v));
  return absl::StrCat("[", absl::StrJoin(out, ", "), "]");
}

std::string ParallelArgs(int64_t num_parallel_calls, bool has_deterministic, bool deterministic) {
  std::string out;
  if (num_parallel_calls == -1) {
    out += ", num_parallel_calls=tf.data.AUTOTUNE";
  } else if (num_parallel_calls != 0) {
    absl::StrAppend(&out, ", num_parallel_calls=", num_parallel_calls);
  }
  if (has_deterministic) absl::StrAppend(&out, ", deterministic=", PyBool(deterministic));
  return out;
}

std::string Structure(std::vector<std::string> parts) {
  if (parts.size() == 1) return parts[0];
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace sluice
