// bucket_by_sequence_length(element_length_func, bucket_boundaries, bucket_batch_sizes,
// padded_shapes=None, padding_values=None, pad_to_bucket_boundary=False, no_padding=False,
// drop_remainder=False), as tf.data.Dataset.bucket_by_sequence_length (TF 2.15), for
// variable-length inputs that are batched rather than packed:
//
//   jsonl_dataset(f, keys={'ids': [tf.int32]})
//       .bucket_by_sequence_length(length('ids'), [16, 64], [32, 16, 8])
//
// element_length_func is written length(key) (dimension 0 of the dict entry `key`), length(i)
// (of tuple component i) or length() (of the element, a single tensor): TF's
// `lambda e: tf.shape(e[key])[0]`. The element goes to bucket i, the first with
// boundaries[i-1] <= length < boundaries[i] (boundaries[-1] = INT32_MIN, boundaries[n] =
// INT32_MAX, as TF); bucket i collects bucket_batch_sizes[i] elements and is then emitted as
// padded_batch(bucket_batch_sizes[i], padded_shapes, padding_values, drop_remainder) would
// batch them (core/data/ops/padded_batch_iterator.h, whose code does the padding), or as
// batch() with no_padding. At the end of the input the partial buckets are emitted in bucket
// order (TF's group_by_window flushes its groups by key), or dropped with drop_remainder.
// pad_to_bucket_boundary pads every unknown dimension to boundaries[i] - 1; an element that
// lands in the last bucket then fails its bucket with TF's "When pad_to_bucket_boundary=True,
// elements must have length < max(bucket_boundaries)." (an element error: the bucket is
// dropped).
//
// SparseTensor / RaggedTensor components (issue 31), as TF 2.15: with no_padding they batch as
// batch() batches them, and length() / length(key) / length(i) of a composite is its number of
// rows (TF's tf.shape(e)[0]: dense_shape[0], nrows). Without no_padding they are refused
// (INVALID_ARGUMENT, spec time), as TF's padded_batch refuses them (a TypeError).
//
// Static errors (INVALID_ARGUMENT): TF's "`len(bucket_batch_sizes)` must equal
// `len(bucket_boundaries) + 1` ...", a non-positive batch size, a length component that is
// missing or a scalar, and padded_batch's checks of padded_shapes / padding_values. Memory: at
// most sum(bucket_batch_sizes) elements are held. Not thread-safe.
#ifndef SLUICE_CORE_DATA_OPS_BUCKET_BY_SEQUENCE_LENGTH_ITERATOR_H_
#define SLUICE_CORE_DATA_OPS_BUCKET_BY_SEQUENCE_LENGTH_ITERATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"
#include "sluice/element.h"

namespace sluice {

// The output spec, or INVALID_ARGUMENT for the static errors above.
absl::StatusOr<ElementSpec> InferBucketBySequenceLengthSpec(
    const proto::BucketBySequenceLengthOp& op, const ElementSpec& input);

// Requires InferBucketBySequenceLengthSpec to accept `op` for `input_spec`.
std::unique_ptr<Iterator> NewBucketBySequenceLengthIterator(
    std::string label, std::unique_ptr<Iterator> input, const ElementSpec& input_spec,
    proto::BucketBySequenceLengthOp op);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_BUCKET_BY_SEQUENCE_LENGTH_ITERATOR_H_
