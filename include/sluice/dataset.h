// Dataset: an immutable dataset graph (proto::DatasetDef) with a fluent builder in tf.data's
// vocabulary, static element-spec inference and a stable fingerprint.
//
//   Dataset ds = Dataset::FromTensorSlices(e).Repeat().Batch(4);
//   absl::StatusOr<Dataset> parsed = Dataset::Parse("from_tensor_slices([1, 2]).batch(2)");
//
// Builder methods never fail; a graph that cannot run (batch(0), shard index out of range, an
// op that needs a batched input on an unbatched one) is reported by Validate(),
// element_spec() and by iterators, as INVALID_ARGUMENT naming the op and its position in the
// chain ("op 2 (batch): batch_size must be positive, got 0").
//
// Thread safety: a const Dataset may be shared freely.
#ifndef SLUICE_CORE_DATASET_H_
#define SLUICE_CORE_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"

namespace sluice {

// The graph's wire form (proto/dataset.proto). Sluice's own code includes "proto/dataset.pb.h" to
// use def() and FromDef(); a trainer never needs them.
namespace proto {
class DatasetDef;
class OpDef;
}  // namespace proto

// Cardinality() results that are not a count, as in tf.data.
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

class Dataset {
 public:
  // Sources.
  static Dataset Range(int64_t stop) { return Range(0, stop, 1); }
  static Dataset Range(int64_t start, int64_t stop, int64_t step = 1);
  static Dataset FromTensors(const Element& element);
  // Slices every leaf along dimension 0; all leaves must have the same dim 0.
  static Dataset FromTensorSlices(const Element& element);
  static Dataset TextLine(std::vector<std::string> filenames);
  // tf_record_dataset(files, compression_type, buffer_size, num_parallel_reads); 0: default.
  static Dataset TFRecord(std::vector<std::string> filenames, std::string compression_type = "",
                          int64_t buffer_size = 0, int64_t num_parallel_reads = 0);
  // fixed_length_record_dataset(files, record_bytes, header_bytes, footer_bytes, ...).
  static Dataset FixedLengthRecord(std::vector<std::string> filenames, int64_t record_bytes,
                                   int64_t header_bytes = 0, int64_t footer_bytes = 0,
                                   std::string compression_type = "");

  // Ops.
  Dataset Batch(int64_t batch_size, bool drop_remainder = false) const;
  Dataset Repeat(int64_t count = -1) const;  // -1: forever
  Dataset Take(int64_t count) const;
  Dataset Skip(int64_t count) const;
  Dataset Shard(int64_t num_shards, int64_t index) const;
  // shard(SHARD_HINT, SHARD_HINT): a placeholder for AutoShardPolicy::HINT.
  Dataset ShardHint() const;
  // seed nullopt: nondeterministic seed, as in TF.
  Dataset Shuffle(int64_t buffer_size, std::optional<int64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  Dataset Prefetch(int64_t buffer_size) const;  // -1: AUTOTUNE
  Dataset Unbatch() const;
  Dataset Rebatch(std::vector<int64_t> batch_sizes, bool drop_remainder = false) const;
  // TF's legacy rebatch: each input batch split into `num_replicas` pieces on its own.
  Dataset LegacyRebatch(int64_t num_replicas) const;

  // Text (docs/PIPELINES.md "Text and tokens"). One key of jsonl_dataset: a `dtype` scalar, or
  // with `vector` a 1-D vector from a JSON array.
  struct JsonlKey {
    std::string name;
    DType dtype = DType::kString;
    bool vector = false;
  };
  // jsonl_dataset(filenames, keys): one dict of `keys` per JSON line.
  static Dataset Jsonl(std::vector<std::string> filenames, std::vector<JsonlKey> keys);
  // map(tokenize(model, add_bos, add_eos), key=key, num_parallel_calls=...): SentencePiece ids.
  Dataset Tokenize(std::string model, std::string key, bool add_bos = false, bool add_eos = false,
                   int64_t num_parallel_calls = 0) const;
  // pack(sequence_length, keys, max_open_rows); empty keys: every key; 0 rows: the default (8).
  Dataset Pack(int64_t sequence_length, std::vector<std::string> keys = {},
               int64_t max_open_rows = 0) const;
  // bucket_by_sequence_length(length(length_key), boundaries, batch_sizes, ...), padding every
  // component to the longest in its batch (padded shapes and values: Parse()).
  Dataset BucketBySequenceLength(std::string length_key, std::vector<int64_t> boundaries,
                                 std::vector<int64_t> batch_sizes,
                                 bool pad_to_bucket_boundary = false,
                                 bool drop_remainder = false) const;

  // Parses a pipeline expression in tf.data's syntax (core/data/pipeline_parser.h).
  static absl::StatusOr<Dataset> Parse(absl::string_view expression);
  // Wraps a graph received from elsewhere; INVALID_ARGUMENT if it does not Validate().
  static absl::StatusOr<Dataset> FromDef(proto::DatasetDef def);

  const proto::DatasetDef& def() const { return *def_; }

  // OK if the graph can run; else INVALID_ARGUMENT naming the op and what is wrong.
  absl::Status Validate() const;
  // Static element spec (spec_inference.cc); no data is read.
  absl::StatusOr<ElementSpec> element_spec() const;
  // Number of elements, kInfiniteCardinality or kUnknownCardinality; no data is read.
  int64_t Cardinality() const;
  // A hex digest of the deterministic serialization; equal graphs have equal fingerprints.
  std::string Fingerprint() const;
  // The graph as a pipeline expression that Parse() reads back to an equal graph.
  std::string ToExpression() const;

 private:
  explicit Dataset(proto::DatasetDef def);
  Dataset WithOp(proto::OpDef op) const;

  // Never null; shared between copies (the graph is immutable).
  std::shared_ptr<const proto::DatasetDef> def_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATASET_H_
