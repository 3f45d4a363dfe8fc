// The pipeline-expression parser: tf.data's own Python syntax for a source and a chain of ops,
// read into a dataset graph (proto::DatasetDef). The parser tokenizes and binds arguments; each
// source's, op's and map() function's syntax (its name, parameters and the proto it writes) is
// the `parse` rule of its registration (core/data/op_parse.h, core/data/ops/<name>_op.cc). Dataset::Parse (include/sluice/dataset.h) is defined in
// pipeline_parser.cc on top of ParsePipelineExpression.
//
//   from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)
//   tf.data.Dataset.from_tensors(([1.], [1.])).repeat(4).batch(4, drop_remainder=True)
//   TextLineDataset(['a.txt', 'b.txt']).shard(SHARD_HINT, SHARD_HINT).prefetch(tf.data.AUTOTUNE)
//
// Sources (optionally prefixed by `tf.data.Dataset.`, `Dataset.` or `tf.data.`):
//   range(stop) | range(start, stop) | range(start, stop, step)      positional only
//   from_tensors(tensors)          from_tensor_slices(tensors)
//   text_line_dataset(filenames)   (also TextLineDataset); a string or a list of strings
// Ops, with TF's parameter names (positional or keyword):
//   batch(batch_size, drop_remainder=False)   repeat(count=None)   take(count)   skip(count)
//   shard(num_shards, index)                  shuffle(buffer_size, seed=None,
//                                                     reshuffle_each_iteration=None)
//   prefetch(buffer_size)   unbatch()   rebatch(batch_size, drop_remainder=False)
//   legacy_rebatch(num_replicas)   (Sluice's spelling of TF's internal _LegacyRebatchDataset)
// Transforms and more file sources (docs/PIPELINES.md):
//   map(cast(tf.float32), key='image', num_parallel_calls=AUTOTUNE, deterministic=None)
//   filter(less(5), key=None)   padded_batch(batch_size, padded_shapes=None,
//   padding_values=None, drop_remainder=False)   cache(filename='')   ignore_errors()
//   interleave(text_line_dataset | lambda f: <reader>(f)..., cycle_length, block_length,
//              num_parallel_calls, deterministic)
//   csv_dataset(filenames, record_defaults, ...)   npy_dataset(filenames, dtype=None, shape=None)
//   list_files(file_pattern, shuffle=False, seed=None)
// Literals are Python's (core/format/python_literal.h). Names: AUTOTUNE, tf.data.AUTOTUNE and
// tf.data.experimental.AUTOTUNE are -1; SHARD_HINT and tf.data.experimental.SHARD_HINT are -1
// and, as arguments of shard, the HINT placeholder (so is a literal -1 there, as in TF).
// rebatch's batch_size is an int or a list of ints; repeat(None) and repeat() repeat forever;
// shuffle's reshuffle_each_iteration=None means True.
//
// Errors are INVALID_ARGUMENT "pipeline expression, column N: <what>", N the 1-based byte
// column, e.g.
//   pipeline expression, column 18: expected ',' or ')' to close the arguments of batch, found '5'
//   pipeline expression, column 11: unknown op 'map'; known ops: batch, repeat, ...
//   pipeline expression, column 17: batch: batch_size must be an integer, got 1.5
//   pipeline expression, column 11: op 1 (batch): batch_size must be positive, got 0
// (the last kind from Dataset::Validate, placed at the op's column).
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_PIPELINE_PARSER_H_
#define SLUICE_CORE_PIPELINE_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/dataset.pb.h"

namespace sluice {

// A parsed expression: the graph, not yet validated (argument values such as batch(0) are
// checked by Dataset::Validate), and where each part of it begins.
struct ParsedPipeline {
  proto::DatasetDef def;
  // 1-based columns: columns[0] of the source's name, columns[i] of op i's name.
  std::vector<int> columns;
};

// Parses syntax, names and argument types; never crashes on any input.
absl::StatusOr<ParsedPipeline> ParsePipelineExpression(absl::string_view expression);

}  // namespace sluice

#endif  // SLUICE_CORE_PIPELINE_PARSER_H_
