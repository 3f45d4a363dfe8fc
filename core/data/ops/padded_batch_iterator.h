// padded_batch(batch_size, padded_shapes=None, padding_values=None, drop_remainder=False), as
// tf.data.Dataset.padded_batch.
//
// Each component of a batch is padded to `padded_shapes` (per component, in flatten order; -1,
// TF's None, pads that dimension to the longest in the batch; no padded_shapes pads every
// dimension to the longest) with `padding_values` (one scalar per component, or one for all;
// 0 / "" by default; its dtype must be the component's, as TF requires).
//
// Static checks (TF's ValueError/TypeError, here INVALID_ARGUMENT): a padded shape must have the
// component's rank and no known dimension smaller than the component's known one; padding values
// must be scalars of the component's dtype. At run time an element larger than a fixed padded
// dimension is DATA_LOSS "Attempted to pad to a smaller size than the input element.", as in TF.
#ifndef SLUICE_CORE_PADDED_BATCH_ITERATOR_H_
#define SLUICE_CORE_PADDED_BATCH_ITERATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"
#include "core/data/op_parse.h"
#include "proto/dataset.pb.h"

namespace sluice {

// The output spec, or INVALID_ARGUMENT for the static errors above.
absl::StatusOr<ElementSpec> InferPaddedBatchSpec(const proto::PaddedBatchOp& op,
                                                 const ElementSpec& input);

// Requires InferPaddedBatchSpec to accept `op` for the input's spec. Not thread-safe.
std::unique_ptr<Iterator> NewPaddedBatchIterator(std::string label,
                                                 std::unique_ptr<Iterator> input,
                                                 proto::PaddedBatchOp op);

// The parse of padded_shapes= and padding_values= (arguments `shapes_arg` and `values_arg` of
// `c`, each optional) into `p`: shapes in flatten order (a list per component, None for -1),
// scalar values in flatten order. Errors at the argument (op_parse.h). Defined in
// padded_batch_op.cc; bucket_by_sequence_length reads the same arguments.
absl::Status ParsePaddedShapesAndValues(const ParseCall& c, size_t shapes_arg, size_t values_arg,
                                        proto::PaddedBatchOp* p);
// What ParsePaddedShapesAndValues reads back: ", padded_shapes=..., padding_values=..." (each
// part only when non-empty).
std::string PaddedShapesAndValuesExpression(
    const google::protobuf::RepeatedPtrField<proto::PaddedShape>& padded_shapes,
    const google::protobuf::RepeatedPtrField<proto::TensorProto>& padding_values);

}  // namespace sluice

#endif  // SLUICE_CORE_PADDED_BATCH_ITERATOR_H_
