// The PermutedSource (proto/dataset.proto): positions [begin, end) of one epoch of a seeded
// global order over an indexed source. Element i is element Permutation(begin + i) of the inner
// source, where Permutation is IndexPermutation::Create(n, shuffle, seed, epoch, block_size)
// (core/util/index_permutation.h) over the inner source's n elements, read through
// RandomAccessSource (core/data/ops/random_access_source.h). Its element spec is the inner source's and
// its cardinality end - begin.
//
// The coordinator writes these sources for SHARDING_RANGES jobs (GlobalOrderRange() in
// core/data/distribute/global_order.h); users do not.
//
// Thread safety: the Iterator contract.
#ifndef SLUICE_CORE_PERMUTED_SOURCE_ITERATOR_H_
#define SLUICE_CORE_PERMUTED_SOURCE_ITERATOR_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/data/iterator.h"
#include "core/io/record_index.h"
#include "proto/dataset.pb.h"

namespace sluice {

// INVALID_ARGUMENT (no position prefix) naming the field: source unset, nested permuted or
// without random access (CheckRandomAccess), shuffle not a ShuffleMode, block_size < 1 with
// SHUFFLE_BLOCK or negative, epoch < 0, begin < 0, end < begin. Whether end fits the inner
// source is known only once its files are opened (the iterator checks it).
absl::Status ValidatePermutedSource(const proto::PermutedSource& source);

// Opens the inner source on the first GetNext. Errors name the op (`label`): the inner source's
// (missing or corrupt files), INVALID_ARGUMENT when `end` is past the inner source's size.
// `index_options` says where record indexes are cached.
std::unique_ptr<Iterator> NewPermutedSourceIterator(std::string label,
                                                    proto::PermutedSource source,
                                                    RecordIndexOptions index_options = {});

}  // namespace sluice

#endif  // SLUICE_CORE_PERMUTED_SOURCE_ITERATOR_H_
