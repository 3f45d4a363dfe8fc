// Graph-level rules of the transforms (map, filter, padded_batch, cache, ignore_errors,
// interleave) and of the csv/npy/list_files sources: element specs, cardinality and their
// pipeline-expression spelling. core/data/spec_inference.cc and core/data/dataset.cc call these from
// their switches; the iterators live in the files named in each function's comment.
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_TRANSFORM_GRAPH_H_
#define SLUICE_CORE_TRANSFORM_GRAPH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "proto/dataset.pb.h"

namespace sluice {

// Element specs of the sources (INVALID_ARGUMENT for bad arguments); csv: csv_reader.h.
absl::StatusOr<ElementSpec> NpySourceSpec(const proto::NpySource& source);
absl::StatusOr<ElementSpec> ListFilesSourceSpec(const proto::ListFilesSource& source);

// The spec of the transform ops (INVALID_ARGUMENT without the position prefix).
absl::StatusOr<ElementSpec> InferTransformOpSpec(const proto::OpDef& op,
                                                 const ElementSpec& input);
// True for the ops InferTransformOpSpec handles.
bool IsTransformOp(const proto::OpDef& op);

// interleave: the input must be string scalars; the spec is fn's, checked with a stand-in
// file name. TF's limits on the arguments (num_parallel_calls <= cycle_length when both fixed).
absl::StatusOr<ElementSpec> InferInterleaveSpec(const proto::InterleaveOp& op,
                                                const ElementSpec& input);

// `fn` reading only `filename`: its source's `filenames` set to that one name.
// INVALID_ARGUMENT when the source reads no files (has no `filenames` field).
absl::StatusOr<proto::DatasetDef> InterleaveInputGraph(const proto::DatasetDef& fn,
                                                       const std::string& filename);

// Cardinality after a transform op given the input's (kUnknownCardinality etc.).
int64_t TransformOpCardinality(const proto::OpDef& op, int64_t input_cardinality);

// The expression of csv/npy/list_files sources and of the transform ops, in the syntax
// core/data/pipeline_parser.h reads back; "" for anything else.
std::string TransformSourceExpression(const proto::SourceDef& source);
std::string TransformOpExpression(const proto::OpDef& op);

}  // namespace sluice

#endif  // SLUICE_CORE_TRANSFORM_GRAPH_H_
