// Static checking of dataset graphs and element-spec inference, with tf.data's rules. No data
// is read: the specs come from the literals' dtypes and shapes and from each op's arguments.
// Each source's and op's rule is its registration's infer_spec (core/data/op_registry.h, in
// core/data/ops/*_op.cc: range -> int64 scalar, batch(n, drop) -> n or None prepended, ...);
// this file walks the graph and names the position that failed.
//
// Positions name where a check failed: kGraphPosition for the graph as a whole (version,
// missing source), 0 for the source, i >= 1 for op i (def.ops(i - 1)). Messages read
// "op 2 (batch): batch_size must be positive, got 0" or "source (range): step must not be 0".
//
// Thread safety: plain functions on values.
#ifndef SLUICE_CORE_SPEC_INFERENCE_H_
#define SLUICE_CORE_SPEC_INFERENCE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "proto/dataset.pb.h"

namespace sluice {

inline constexpr int kGraphPosition = -1;

// The registered name: "range", "from_tensors", "text_line_dataset"; "unset" when empty; the
// proto field's name for a kind without a registration.
std::string SourceKindName(const proto::SourceDef& source);
// "batch", "repeat", ..., "rebatch", "legacy_rebatch" (a RebatchOp with legacy_num_replicas
// != 0); "unset" when empty.
std::string OpKindName(const proto::OpDef& op);
// "dataset graph", "source (range)" or "op 2 (batch)".
std::string DescribePosition(const proto::DatasetDef& def, int position);

// Checks every argument and literal of `def` and infers the element spec after the source
// (result[0]) and after each op (result[i] after op i). INVALID_ARGUMENT
// "<DescribePosition>: <what is wrong>" otherwise, with *failed_position (when non-null) set
// to the position that failed.
absl::StatusOr<std::vector<ElementSpec>> InferElementSpecs(const proto::DatasetDef& def,
                                                           int* failed_position = nullptr);

// The spec after one op given its input's spec; INVALID_ARGUMENT (without the position prefix)
// when the op's arguments are out of range or it cannot apply to that input.
absl::StatusOr<ElementSpec> InferOpSpec(const proto::OpDef& op, const ElementSpec& input);
// The spec of a source alone, as InferOpSpec (a permuted source's is its inner source's).
absl::StatusOr<ElementSpec> InferSourceSpec(const proto::SourceDef& source);

// For the sources' and ops' rules:
// A source literal decoded, refusing oversized shape claims before anything is allocated,
// list structures (tf.data reads Python lists as tensors) and elements without tensors.
absl::StatusOr<Element> DecodeSourceLiteral(const proto::ElementProto& p);
// The index (in flatten order) of the first scalar leaf of `spec`, or -1.
int FirstScalarComponent(const ElementSpec& spec);

// TF's repr of a spec: "TensorSpec(shape=(None, 1), dtype=tf.float32, name=None)", tuples as
// "(A, B)" / "(A,)", dicts as "{'a': A}" in insertion order.
std::string ElementSpecToString(const ElementSpec& spec);

}  // namespace sluice

#endif  // SLUICE_CORE_SPEC_INFERENCE_H_
