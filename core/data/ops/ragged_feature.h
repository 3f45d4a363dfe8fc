// The row structure of one tf.io.RaggedFeature over the Examples of a parse_example batch: each
// record's partitions (RowLengths / RowSplits / RowStarts / RowLimits / ValueRowIds read from
// the record, trailing UniformRowLengths from the spec) checked and concatenated into the row_splits of the RaggedTensor TF 2.15 gives.
//
//   RaggedRows rows(layout, /*batched=*/true);
//   RETURN_IF_ERROR(rows.AddRecord(0, /*num_values=*/4, {{2, 2}}));  // RowLengths [2, 2]
//   RETURN_IF_ERROR(rows.AddRecord(1, 2, {{1, 1}}));
//   ASSIGN_OR_RETURN(Element out, rows.Finish(flat_values));
//   // <tf.RaggedTensor [[[v0, v1], [v2, v3]], [[v4], [v5]]]>: row_splits [0, 2, 4], [0, 2, 4, 5, 6]
//
// Shapes, as TF's parse_example / parse_single_example:
//   batched, k ragged partitions: RaggedTensor of ragged rank k + 1, [batch, None x (k+1), U...]
//   one Example, k >= 1:          RaggedTensor of ragged rank k,     [None, None x k, U...]
//   one Example, k = 0:           a dense tensor [None, U...]
// where U are the UniformRowLengths (which Sluice allows only after the ragged partitions: its
// RaggedTensors have no uniform dimension between ragged ones).
//
// Every record is checked as TF's validate=True checks it (Sluice always validates: TF without
// it gives undefined rows for inconsistent records). A record that fails is INVALID_ARGUMENT
// naming the feature, the record's index in the batch and the partition:
//   "parse_example: RaggedFeature 'words', record 1: the row lengths of 'lens' sum to 5 but the
//    level below has 3 rows (the values of 'ids')"
// Huge lengths or splits fail that way (sums are checked as they grow, never overflow); the
// outputs are allocated through the memory budget (RESOURCE_EXHAUSTED naming the feature).
//
// Thread safety: one RaggedRows per parse; not shared.
#ifndef SLUICE_CORE_DATA_OPS_RAGGED_FEATURE_H_
#define SLUICE_CORE_DATA_OPS_RAGGED_FEATURE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/element.h"

namespace sluice {

// What a RaggedFeature spec says about the rows (validated by ExampleParser::Create).
struct RaggedLayout {
  // TF's RaggedFeature.RowLengths, RowSplits, RowStarts, RowLimits and ValueRowIds.
  enum class PartitionKind { kRowLengths, kRowSplits, kRowStarts, kRowLimits, kValueRowIds };
  struct Partition {
    PartitionKind kind = PartitionKind::kRowLengths;
    std::string key;  // the int64 feature holding the lengths, splits, starts, limits or ids
  };
  std::string key;                   // the output's dict key, for errors
  std::string value_key;             // the values' feature, for errors
  std::vector<Partition> ragged;     // outermost first
  std::vector<int64_t> uniform;      // the trailing UniformRowLengths, outermost first (each > 0)

  // The product of `uniform` (1 without any).
  int64_t UniformSize() const;
  // The output spec for `dtype` values; `batch_dim` is the batch's static size (kUnknownDim if
  // unknown) when `batched`.
  ElementSpec Spec(DType dtype, bool batched, int64_t batch_dim) const;
};

class RaggedRows {
 public:
  // A record's ValueRowIds may open at most this many empty rows before a value (each costs
  // 8 bytes of row_splits; a hostile row id must not allocate without bound).
  static constexpr int64_t kMaxEmptyRowsPerRecord = int64_t{1} << 20;

  // `layout` is borrowed for the RaggedRows' lifetime.
  RaggedRows(const RaggedLayout& layout, bool batched);

  // Adds record `record` (its index in the batch, for errors): `num_values` values and one
  // list of int64s per ragged partition of the layout, outermost first (empty for a missing
  // feature). INVALID_ARGUMENT as above when they do not fit together.
  absl::Status AddRecord(int64_t record, int64_t num_values,
                         const std::vector<std::span<const int64_t>>& partitions);

  // The output, given every added record's values concatenated in record order as a 1-D
  // tensor: it is reshaped to [n, U...] and split by the row_splits built. RESOURCE_EXHAUSTED
  // when the allocator refuses a row_splits tensor.
  absl::StatusOr<Element> Finish(const Tensor& flat_values) const;

 private:
  absl::Status Fail(int64_t record, absl::string_view why) const;
  // The row splits partition `part` of record `record` gives from its int64s `v` over the
  // `below` rows of the level below (`below_name`, for errors), checked as the file comment says.
  absl::Status PartitionSplits(int64_t record, const RaggedLayout::Partition& part,
                               std::span<const int64_t> v, int64_t below,
                               const std::string& below_name, std::vector<int64_t>* s) const;
  absl::Status LengthsToSplits(int64_t record, const std::string& key,
                               std::span<const int64_t> v, int64_t below,
                               const std::string& below_name, std::vector<int64_t>* s) const;
  absl::Status CheckSplits(int64_t record, absl::string_view what, const std::string& key,
                           const std::vector<int64_t>& s, int64_t below,
                           const std::string& below_name) const;
  absl::Status RowIdsToSplits(int64_t record, const std::string& key,
                              std::span<const int64_t> v, int64_t below,
                              const std::string& below_name, std::vector<int64_t>* s) const;

  const RaggedLayout& layout_;
  const bool batched_;
  // The row_splits of each ragged dimension, outermost first (the batch's first when batched),
  // each starting at 0.
  std::vector<std::vector<int64_t>> splits_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_RAGGED_FEATURE_H_
