// parse_example: serialized tf.train.Example protos (proto/example.proto) to a dict of dense
// tensors, as TensorFlow's tf.io.parse_example (a 1-D batch of strings) and
// tf.io.parse_single_example (a string scalar) do.
//
// Feature kinds (proto::FeatureSpec, proto/dataset.proto):
//   FIXED_LEN  tf.io.FixedLenFeature(shape, dtype, default_value): exactly prod(shape) values,
//              output shape `shape` (batched: [batch] + shape). A missing feature takes
//              default_value; without one it is INVALID_ARGUMENT.
//   VAR_LEN    tf.io.VarLenFeature(dtype): any number of values, missing = none. TF returns a
//              SparseTensor; Sluice returns what tf.sparse.to_dense gives: shape [n] for one
//              Example, [batch, max n in the batch] for a batch, padded with 0 / "".
// dtypes: tf.string (BytesList), tf.int64 (Int64List), tf.float32 (FloatList).
// The output dict's keys are in TF's order: VAR_LEN keys sorted, then FIXED_LEN keys sorted.
//
// Errors are INVALID_ARGUMENT with TF's wording, naming the feature and the batch index:
//   "Name: <unknown>, Key: scores, Index: 0.  Number of float values != expected.  Values
//    size: 2 but output shape: [3]"
//   "Name: <unknown>, Key: label, Index: 0.  Data types don't match. Data type: int64 but
//    expected type: float"
//   "Name: <unknown>, Feature: label (data type: int64) is required but could not be found."
//   "Could not parse example input at index 2" (bytes that are not an Example).
// A batch whose FIXED_LEN output would pass the element limit (core/data/shape_limits.h) is
// RESOURCE_EXHAUSTED naming the feature, checked before it is allocated.
// Any input bytes are safe: the wire parser is bounds-checked (fuzzed by
// tests/fuzz/example_parser_fuzz.cc).
//
// Thread safety: a const ExampleParser may be used from many threads at once.
#ifndef SLUICE_CORE_EXAMPLE_PARSER_H_
#define SLUICE_CORE_EXAMPLE_PARSER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"
#include "proto/dataset.pb.h"

namespace sluice {

class ExampleParser {
 public:
  // Validates `fn`: unique non-empty keys, dtypes string/int64/float32, FIXED_LEN shapes with
  // known non-negative dims, defaults of the feature's dtype and prod(shape) elements.
  // INVALID_ARGUMENT naming the feature otherwise.
  static absl::StatusOr<ExampleParser> Create(const proto::ParseExampleFn& fn);

  // The output spec (a dict) for an input of `input` (string scalar or 1-D string vector).
  // INVALID_ARGUMENT when the input is anything else.
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const;
  absl::StatusOr<ElementSpec> OutputSpec(const ElementSpec& input) const;

  // Parses a string scalar (one Example) or a 1-D string tensor (a batch).
  absl::StatusOr<Element> Parse(const Tensor& serialized) const;
  absl::StatusOr<Element> ParseSingle(absl::string_view serialized) const;
  absl::StatusOr<Element> ParseBatch(const std::vector<absl::string_view>& serialized) const;

  // The feature spec as pipeline syntax: {'image': FixedLenFeature([], tf.string), ...}, which
  // ParseFeatureSpec reads back to an equal spec.
  static std::string ToExpression(const proto::ParseExampleFn& fn);

  // Reads a feature-spec dict in pipeline syntax starting at text[*pos] (leading whitespace
  // skipped) and sets *pos just past its closing '}':
  //   {'image': FixedLenFeature([], tf.string),
  //    'label': tf.io.FixedLenFeature([], tf.int64, default_value=0),
  //    'tags': VarLenFeature(tf.string)}
  // FixedLenFeature(shape, dtype, default_value=None) and VarLenFeature(dtype), with or
  // without the tf.io. prefix; dtype as tf.string / tf.int64 / tf.float32 (or 'int64').
  // INVALID_ARGUMENT "<context>, column N: ..." naming the feature otherwise. The result is
  // checked as Create() checks it.
  static absl::StatusOr<proto::ParseExampleFn> ParseFeatureSpec(
      absl::string_view text, size_t* pos, absl::string_view context = "pipeline expression");

  struct Feature {
    std::string key;
    bool var_len = false;
    DType dtype = DType::kInvalid;
    Shape shape;                  // FIXED_LEN
    std::optional<Tensor> default_value;  // FIXED_LEN, flattened to shape
  };
  // In output order.
  const std::vector<Feature>& features() const { return features_; }

 private:
  std::vector<Feature> features_;
  absl::flat_hash_map<std::string, int> index_;  // key -> position in features_
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

}  // namespace sluice

#endif  // SLUICE_CORE_EXAMPLE_PARSER_H_
