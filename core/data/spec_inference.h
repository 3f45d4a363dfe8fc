// Static checking of dataset graphs and element-spec inference, with tf.data's rules. No data
// is read: the specs come from the literals' dtypes and shapes and from each op's arguments.
//
//   range               -> int64 scalar
//   from_tensors(v)     -> the exact spec of v
//   from_tensor_slices  -> each leaf without its dimension 0
//   text_line_dataset   -> string scalar
//   tf_record_dataset, fixed_length_record_dataset -> string scalar (core/data/ops/record_iterators.h)
//   map(parse_example(spec)) -> a dict (core/data/ops/example_parser.h)
//   batch(n, drop)      -> n prepended when drop_remainder, else None prepended
//   repeat, take, skip, shard, shuffle, prefetch -> unchanged
//   unbatch             -> dimension 0 dropped (scalars are an error)
//   rebatch(sizes, drop) (TF's _RebatchDataset._compute_static_batch_dim): when all sizes equal
//                          b, dimension 0 becomes b if drop_remainder, or if every known input
//                          batch dimension equals d with d % b == 0; otherwise None
//   legacy rebatch(N)   -> dimension 0 becomes d / N when d is known and divisible by N, else
//                          None
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

// "range", "from_tensors", "from_tensor_slices", "text_line_dataset"; "unset" when empty.
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

// TF's repr of a spec: "TensorSpec(shape=(None, 1), dtype=tf.float32, name=None)", tuples as
// "(A, B)" / "(A,)", dicts as "{'a': A}" in insertion order.
std::string ElementSpecToString(const ElementSpec& spec);

}  // namespace sluice

#endif  // SLUICE_CORE_SPEC_INFERENCE_H_
