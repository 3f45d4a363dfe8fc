// Pipeline expressions of dataset graphs (Dataset::ToExpression(), in the syntax
// core/data/pipeline_parser.h reads back): the walk over the graph, and the Python spellings the
// ops' registrations (core/data/op_registry.h) print their arguments with.
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_DATA_OP_EXPRESSION_H_
#define SLUICE_CORE_DATA_OP_EXPRESSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/format/python_literal.h"
#include "proto/dataset.pb.h"
#include "sluice/dtype.h"

namespace sluice {

// The expression of a source / op through its registration; "<no source>" / "<unset op>()"
// when the oneof is empty, "<unregistered source 'foo'>" for a kind without a registration.
std::string SourceExpression(const proto::SourceDef& source);
std::string OpExpression(const proto::OpDef& op);

// "True" / "False".
const char* PyBool(bool b);
// "tf.float32".
std::string TfDType(proto::DataType d);
std::string TfDType(DType d);
// A tensor / element literal as Python ("<invalid literal>" when it does not decode).
std::string TensorLiteral(const proto::TensorProto& p);
std::string ElementLiteral(const proto::ElementProto& p);
// "['a', 'b']".
std::string StringList(const google::protobuf::RepeatedPtrField<std::string>& names);
// "[0.5, 1.0]" (float32 spellings).
std::string FloatList(const google::protobuf::RepeatedField<float>& values);
// ", num_parallel_calls=tf.data.AUTOTUNE, deterministic=False" as given; "" for the defaults.
std::string ParallelArgs(int64_t num_parallel_calls, bool has_deterministic, bool deterministic);
// One part as itself, several as a tuple "(a, b)".
std::string Structure(std::vector<std::string> parts);

// ", key='x'" / ", key=1" / "" for an op with a `component` oneof (map, filter).
template <typename Op>
std::string KeyArg(const Op& op, bool has_key, bool has_index) {
  if (has_key) return absl::StrCat(", key=", PythonStringLiteral(op.key()));
  if (has_index) return absl::StrCat(", key=", op.index());
  return "";
}

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OP_EXPRESSION_H_
