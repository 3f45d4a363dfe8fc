// batch() and unbatch(): stacking consecutive elements leaf by leaf and splitting them again.
// The iterators are not thread-safe; `label` names the op in errors (OpLabel()).
#ifndef SLUICE_CORE_BATCH_ITERATOR_H_
#define SLUICE_CORE_BATCH_ITERATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/iterator.h"

namespace sluice {

// Stacks `batch_size` consecutive elements of `input` along a new dimension 0 (Tensor::Stack);
// the last batch is shorter unless drop_remainder. Elements whose leaves differ in shape within
// a batch are INVALID_ARGUMENT with TF's wording: "Cannot batch tensors with different shapes
// in component 0. First element had shape [2] and element 1 had shape [3]."
// INVALID_ARGUMENT at construction if batch_size <= 0. Pulling element by element, from its
// first batch's second element on, it offers a map right below it the row where each
// element's largest numeric leaf goes (output_slot.h); a fn that writes such a leaf whole
// (random_resized_crop) writes it there, and that row is not copied; any other element's leaf
// is copied into its row as the element arrives, while the map below maps the next ones. The
// values are the same either way.
absl::StatusOr<std::unique_ptr<Iterator>> NewBatchIterator(std::string label,
                                                           std::unique_ptr<Iterator> input,
                                                           int64_t batch_size,
                                                           bool drop_remainder);

// Yields the rows of each input element (zero-copy, Tensor::Index); input elements with 0 rows
// yield nothing. INVALID_ARGUMENT if a leaf is a scalar or the leaves' dim 0 differ.
std::unique_ptr<Iterator> NewUnbatchIterator(std::string label, std::unique_ptr<Iterator> input);

}  // namespace sluice

#endif  // SLUICE_CORE_BATCH_ITERATOR_H_
