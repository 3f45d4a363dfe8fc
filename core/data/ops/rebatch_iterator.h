// rebatch(): re-cutting a stream of batches into pieces of other sizes, as TF's
// RebatchDatasetV2 (`rebatch(batch_sizes)`) and its legacy RebatchDataset (`num_replicas`).
// The iterators are not thread-safe; `label` names the op in errors (OpLabel()).
#ifndef SLUICE_CORE_REBATCH_ITERATOR_H_
#define SLUICE_CORE_REBATCH_ITERATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"

namespace sluice {

// Behaves like unbatch().batch(k) with k cycling through `batch_sizes`, without the copies:
// a piece inside one input batch is a zero-copy Tensor::Slice of it, and only a piece that
// crosses input batches is concatenated. Follows TF's RebatchDatasetV2 step by step:
//  - a size-0 entry yields an empty piece (dim 0 = 0) without reading the input; its other
//    dimensions come from `output_spec` (unknown ones become 0) when given, else from the last
//    input batch seen (the first one is read ahead if none was seen yet);
//  - the input's end yields the short piece gathered so far (dropped with drop_remainder), and
//    the sequence ends at the first piece that would need an element after it.
// Every leaf of an input element must have rank >= 1 and the same dim 0 (INVALID_ARGUMENT).
// INVALID_ARGUMENT at construction if batch_sizes is empty, has a negative entry or has no
// positive entry (that would yield empty pieces forever).
absl::StatusOr<std::unique_ptr<Iterator>> NewRebatchIterator(
    std::string label, std::unique_ptr<Iterator> input, std::vector<int64_t> batch_sizes,
    bool drop_remainder, std::optional<ElementSpec> output_spec = std::nullopt);

// TF's legacy rebatch: every input batch, on its own, is cut into `num_replicas` pieces of
// ceil(b / num_replicas) rows, each leaf by its own dim 0; pieces past the end are empty.
// range(8).batch(4) over 3 replicas: [0,1],[2,3],[] then [4,5],[6,7],[].
// INVALID_ARGUMENT at construction if num_replicas <= 0, and for a scalar leaf.
absl::StatusOr<std::unique_ptr<Iterator>> NewLegacyRebatchIterator(std::string label,
                                                                   std::unique_ptr<Iterator> input,
                                                                   int64_t num_replicas);

}  // namespace sluice

#endif  // SLUICE_CORE_REBATCH_ITERATOR_H_
