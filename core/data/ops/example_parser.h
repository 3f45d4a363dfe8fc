// parse_example: serialized tf.train.Example protos (proto/example.proto) to a dict of
// tensors, SparseTensors and RaggedTensors, as TensorFlow 2.15's tf.io.parse_example (a 1-D
// batch of strings) and tf.io.parse_single_example (a string scalar) do.
//
// Feature kinds (proto::FeatureSpec, proto/dataset.proto):
//   FIXED_LEN  tf.io.FixedLenFeature(shape, dtype, default_value): exactly prod(shape) values,
//              output shape `shape` (batched: [batch] + shape). A missing feature takes
//              default_value; without one it is INVALID_ARGUMENT.
//   VAR_LEN    tf.io.VarLenFeature(dtype): any number of values, missing = none. A SparseTensor
//              as TF gives it: one Example: indices [n, 1], values [n], dense_shape [n]; a
//              batch: indices [N, 2] (row, position) in row-major order, dense_shape
//              [batch, max n]. With ParseExampleFn.var_len_as_dense (parse_example(...,
//              var_len_as_dense=True)) the dense form tf.sparse.to_dense gives instead: shape
//              [n], or [batch, max n] padded with 0 / "".
//   RAGGED     tf.io.RaggedFeature(dtype, value_key=key, partitions=[...], row_splits_dtype=
//              tf.int64, validate=False): the values of `value_key` split by RowLengths(key),
//              RowSplits(key), RowStarts(key), RowLimits(key), ValueRowIds(key) and trailing
//              UniformRowLength(n) partitions, outermost first
//              (core/data/ops/ragged_feature.h gives the shapes and the per-record checks).
//              Sluice's row splits are int64: row_splits_dtype must be tf.int64 (TF's default
//              is tf.int32, whose specs print differently). Records are always validated.
// dtypes: tf.string (BytesList), tf.int64 (Int64List), tf.float32 (FloatList).
// The output dict's keys are in TF's order: VAR_LEN keys sorted, then FIXED_LEN keys sorted,
// then RAGGED keys: first those that are also keys some RaggedFeature reads (in the order the
// features, sorted by key, first read them), then the others sorted. As in TF, a
// RaggedFeature's value and partition keys may not be the key of a VarLenFeature or
// FixedLenFeature.
//
// Errors are INVALID_ARGUMENT with TF's wording, naming the feature and the batch index:
//   "Name: <unknown>, Key: scores, Index: 0.  Number of float values != expected.  Values
//    size: 2 but output shape: [3]"
//   "Name: <unknown>, Key: label, Index: 0.  Data types don't match. Data type: int64 but
//    expected type: float"
//   "Name: <unknown>, Key: lens, Index: 1.  Data types don't match. Expected type: int64,
//    Actual type: float" (a RaggedFeature's values or partitions)
//   "Name: <unknown>, Feature: label (data type: int64) is required but could not be found."
//   "Could not parse example input at index 2" (bytes that are not an Example).
//   "parse_example: RaggedFeature 'x', record 1: ..." (partitions that do not fit the values)
// A batch whose FIXED_LEN output would pass the element limit (core/data/shape_limits.h) is
// RESOURCE_EXHAUSTED naming the feature, checked before it is allocated; every output is
// allocated through the memory budget (RESOURCE_EXHAUSTED naming the feature).
// Any input bytes are safe: the wire parser is bounds-checked (fuzzed by
// tests/fuzz/example_parser_fuzz.cc).
//
// Thread safety: a const ExampleParser may be used from many threads at once.
#ifndef SLUICE_CORE_EXAMPLE_PARSER_H_
#define SLUICE_CORE_EXAMPLE_PARSER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/ops/ragged_feature.h"
#include "sluice/element.h"
#include "proto/dataset.pb.h"

namespace sluice {

class ExampleParser {
 public:
  // Validates `fn`: unique non-empty keys, dtypes string/int64/float32, FIXED_LEN shapes with
  // known non-negative dims, defaults of the feature's dtype and prod(shape) elements, RAGGED
  // partitions with keys, uniform lengths > 0 only after the ragged ones, int64 row splits.
  // INVALID_ARGUMENT naming the feature otherwise.
  static absl::StatusOr<ExampleParser> Create(const proto::ParseExampleFn& fn);

  // The output spec (a dict) for an input of `input` (string scalar or 1-D string vector).
  // INVALID_ARGUMENT when the input is anything else.
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const;
  absl::StatusOr<ElementSpec> OutputSpec(const ElementSpec& input) const;

  // Parses a string scalar (one Example) or a 1-D string tensor (a batch).
  absl::StatusOr<Element> Parse(const Tensor& serialized) const;
  absl::StatusOr<Element> ParseSingle(absl::string_view serialized) const;
  // `check`, when set, is called on row i before row i is read; its error is returned as is
  // (core/data/deferred_check_blocks.h RowCheck: a record's checksum, verified just before the
  // parse reads the record).
  absl::StatusOr<Element> ParseBatch(
      const std::vector<absl::string_view>& serialized,
      const std::function<absl::Status(size_t)>& check = nullptr) const;

  // The feature spec as pipeline syntax: {'image': FixedLenFeature([], tf.string), ...}, which
  // ParseFeatureSpec reads back to an equal spec.
  static std::string ToExpression(const proto::ParseExampleFn& fn);

  // Reads a feature-spec dict in pipeline syntax starting at text[*pos] (leading whitespace
  // skipped) and sets *pos just past its closing '}':
  //   {'image': FixedLenFeature([], tf.string),
  //    'label': tf.io.FixedLenFeature([], tf.int64, default_value=0),
  //    'tags': VarLenFeature(tf.string),
  //    'words': tf.io.RaggedFeature(tf.int64, value_key='ids', row_splits_dtype=tf.int64,
  //        partitions=[tf.io.RaggedFeature.RowLengths('lens')])}
  // FixedLenFeature(shape, dtype, default_value=None), VarLenFeature(dtype) and
  // RaggedFeature(dtype, value_key=None, partitions=(), row_splits_dtype, validate=False) with
  // RowLengths(key), RowSplits(key), UniformRowLength(length) partitions, with or without the
  // tf.io. prefix; dtype as tf.string / tf.int64 / tf.float32 (or 'int64').
  // INVALID_ARGUMENT "<context>, column N: ..." naming the feature otherwise. The result is
  // checked as Create() checks it.
  static absl::StatusOr<proto::ParseExampleFn> ParseFeatureSpec(
      absl::string_view text, size_t* pos, absl::string_view context = "pipeline expression");

  // In TF's output order.
  enum class Kind { kVarLen, kFixedLen, kRagged };
  struct Feature {
    std::string key;
    Kind kind = Kind::kFixedLen;
    DType dtype = DType::kInvalid;
    Shape shape;                  // FIXED_LEN
    std::optional<Tensor> default_value;  // FIXED_LEN, flattened to shape
    RaggedLayout ragged;          // RAGGED
    int slot = 0;                 // the values' key in the keys read from each Example
    std::vector<int> partition_slots;  // RAGGED: each ragged partition's key, outermost first
  };
  // In output order.
  const std::vector<Feature>& features() const { return features_; }

 private:
  // One Example (`single`: parse_single_example's shapes) or a batch.
  absl::StatusOr<Element> ParseRows(
      const std::vector<absl::string_view>& serialized, bool single,
      const std::function<absl::Status(size_t)>& check = nullptr) const;
  // A batch's rows of `batch` records to write the output into, when this parse runs under a
  // fused map-and-batch (batch_destinations.h) and every feature is a FixedLenFeature: the
  // tensors by feature, taken from the fn block slot. nullopt otherwise.
  std::optional<std::vector<Tensor>> FusedBatchRows(int64_t batch) const;
  // Orders the RaggedFeatures (the tail of `features`, sorted by key) as TF's dict gives them.
  static void OrderRaggedFeaturesAsTf(std::vector<Feature>* features);
  // The position of `key` among the keys read from each Example (added if new).
  int Slot(const std::string& key);

  std::vector<Feature> features_;
  bool var_len_as_dense_ = false;
  std::vector<std::string> keys_read_;           // every key read from an Example
  absl::flat_hash_map<std::string, int> index_;  // key -> position in keys_read_
};

// A default_value as TF's FixedLenFeature takes it: `value` converted to `dtype` (int -> int64
// or float32, float -> float32, str/bytes -> string; nothing else) and reshaped to `shape`,
// whose element count it must have. INVALID_ARGUMENT naming `key` otherwise.
absl::StatusOr<Tensor> ConvertDefaultValue(absl::string_view key, const Tensor& value,
                                           DType dtype, const Shape& shape);

// Convenience builders for C++ users and tests.
proto::FeatureSpec FixedLenFeatureSpec(std::string key, std::vector<int64_t> shape, DType dtype,
                                       std::optional<Tensor> default_value = std::nullopt);
proto::FeatureSpec VarLenFeatureSpec(std::string key, DType dtype);
// tf.io.RaggedFeature(dtype, value_key, partitions, row_splits_dtype=tf.int64); an empty
// `value_key` reads `key`.
proto::FeatureSpec RaggedFeatureSpec(std::string key, DType dtype, std::string value_key = "",
                                     std::vector<proto::RaggedPartition> partitions = {});
proto::RaggedPartition RowLengthsPartition(std::string key);
proto::RaggedPartition RowSplitsPartition(std::string key);
// RaggedFeature.RowStarts / RowLimits / ValueRowIds (`kind`) of the int64 feature `key`.
proto::RaggedPartition KeyedPartition(proto::RaggedPartition::Kind kind, std::string key);
proto::RaggedPartition UniformRowLengthPartition(int64_t length);

}  // namespace sluice

#endif  // SLUICE_CORE_EXAMPLE_PARSER_H_
