// Iterators for the dataset sources: range, from_tensors, from_tensor_slices and
// text_line_dataset, with TF's semantics. Each returns a fresh iterator positioned at the start;
// `label` names the op in errors (OpLabel()). The iterators are not thread-safe.
#ifndef SLUICE_CORE_SOURCE_ITERATORS_H_
#define SLUICE_CORE_SOURCE_ITERATORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"

namespace sluice {

// int64 scalars start, start+step, ... strictly before stop (after it for a negative step), as
// tf.data.Dataset.range. INVALID_ARGUMENT naming the op when step == 0.
absl::StatusOr<std::unique_ptr<Iterator>> NewRangeIterator(std::string label, int64_t start,
                                                           int64_t stop, int64_t step);

// Yields `element` once.
std::unique_ptr<Iterator> NewFromTensorsIterator(std::string label, Element element);

// Yields row i of every leaf for i in [0, dim 0), sharing the leaves' storage (Tensor::Index).
// INVALID_ARGUMENT naming the op if a leaf is a scalar or the leaves' dim 0 differ.
absl::StatusOr<std::unique_ptr<Iterator>> NewFromTensorSlicesIterator(std::string label,
                                                                      Element element);

// One string scalar per line of each file in turn, as tf.data.TextLineDataset: the '\n' is
// removed and so is every '\r' (TF's BufferedInputStream::ReadLine drops them all), a last
// line without '\n' is still a line unless nothing is left of it, an empty file yields nothing. Files are opened lazily, in order; a file that cannot be opened or read is an error
// naming it (NOT_FOUND when missing, else the code for its errno).
std::unique_ptr<Iterator> NewTextLineIterator(std::string label, std::vector<std::string> filenames);

}  // namespace sluice

#endif  // SLUICE_CORE_SOURCE_ITERATORS_H_
