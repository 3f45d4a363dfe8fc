// pack(sequence_length, keys=None, max_open_rows=8): concatenates the token vectors of dict
// elements into rows of exactly sequence_length, as seqio's trim_and_pack and Grain's
// first-fit packer, for training on packed sequences:
//
//   {'text': [5, 6, 7]}, {'text': [8, 9]}, {'text': [4]}   --pack(4)-->
//   {'text': [5, 6, 7, 4], 'text_segment_ids': [1, 1, 1, 2], 'text_positions': [0, 1, 2, 0]},
//   {'text': [8, 9, 0, 0], 'text_segment_ids': [1, 1, 0, 0], 'text_positions': [0, 1, 0, 0]}
//
// Input: a dict whose packed features (`keys`, or every key when none are given; other keys are
// dropped) are 1-D numeric tensors (a token id vector each; their lengths may differ per element
// and per feature). Output: a dict with, per packed feature k in the input's key order, `k`
// (k's dtype), `k_segment_ids` and `k_positions` (int32), each of shape [sequence_length]
// (seqio's names). Segment ids number the examples of a row from 1; positions count from 0
// within each example; padding is 0 in all three.
//
// Algorithm (deterministic: the output is a function of the input sequence alone):
//  - An example longer than sequence_length in a feature is truncated to its first
//    sequence_length tokens (seqio's trim). An example whose packed features are all empty adds
//    nothing and is dropped.
//  - Greedy first fit over at most max_open_rows open rows, kept in the order they were opened:
//    the example goes into the first open row where every feature still has room for it. If
//    none has room, a new row is opened for it; when max_open_rows rows are already open, the
//    oldest is emitted first (so rows leave in opening order except for the full ones below).
//  - A row in which every feature is exactly full is emitted at once.
//  - At the end of the input the open rows are emitted oldest first.
// Every input token (within the truncation) thus appears exactly once, in order, inside its
// example's segment. Memory: at most max_open_rows + 1 rows (charged to the memory budget).
//
// Exactly once across workers and resumable: the op keeps no state beyond its open rows, all
// derived from the input; a sharded job (DATA, or RANGES, which falls back to DATA since packing
// is not element-wise) runs the same packing on every task and keeps its steps, and a resumed
// job recomputes the rows up to its start step, so no token is lost or repeated.
//
// Errors: the spec checks (INVALID_ARGUMENT: sequence_length <= 0, max_open_rows < 0, an input
// that is not a dict, a missing key, a feature that is not 1-D numeric, an output key that
// collides with an input key); at run time a feature that is not 1-D is an element error naming
// it. Not thread-safe.
#ifndef SLUICE_CORE_DATA_OPS_PACK_ITERATOR_H_
#define SLUICE_CORE_DATA_OPS_PACK_ITERATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"
#include "sluice/element.h"

namespace sluice {

// The output spec, or INVALID_ARGUMENT for the checks above.
absl::StatusOr<ElementSpec> InferPackSpec(const proto::PackOp& op, const ElementSpec& input);

// Requires InferPackSpec to accept `op` for the input's spec.
std::unique_ptr<Iterator> NewPackIterator(std::string label, std::unique_ptr<Iterator> input,
                                          proto::PackOp op);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_PACK_ITERATOR_H_
