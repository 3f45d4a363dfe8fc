// repeat(), take(), skip() and shard(): ops that pass elements through unchanged, with TF's
// semantics. The iterators are not thread-safe; `label` names the op in errors (OpLabel()).
// Each passes a Skip (core/data/iterator.h) on to its input as the elements it drops, so a
// source below them that drops elements for less than making them does so for all of them.
#ifndef SLUICE_CORE_SIMPLE_OP_ITERATORS_H_
#define SLUICE_CORE_SIMPLE_OP_ITERATORS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"

namespace sluice {

// Runs `input` `count` times (any negative count: forever), making a fresh input iterator per
// epoch, or rewinding the last one when it can (Iterator::Rewind: exactly what a fresh one
// gives, without building it). An epoch that yields no element ends the sequence, so repeat()
// of an empty dataset terminates.
std::unique_ptr<Iterator> NewRepeatIterator(std::string label, IteratorFactory input,
                                            int64_t count);

// The first `count` elements (negative: all). take(0) never pulls from its input.
std::unique_ptr<Iterator> NewTakeIterator(std::string label, std::unique_ptr<Iterator> input,
                                          int64_t count);

// All but the first `count` elements (negative: none), dropped through the input's Skip
// (core/data/iterator.h).
std::unique_ptr<Iterator> NewSkipIterator(std::string label, std::unique_ptr<Iterator> input,
                                          int64_t count);

// Elements index, index + num_shards, index + 2 * num_shards, ... of the input; on the
// element-by-element path the others are dropped through the input's Skip.
// INVALID_ARGUMENT unless num_shards > 0 and 0 <= index < num_shards.
absl::StatusOr<std::unique_ptr<Iterator>> NewShardIterator(std::string label,
                                                           std::unique_ptr<Iterator> input,
                                                           int64_t num_shards, int64_t index);

}  // namespace sluice

#endif  // SLUICE_CORE_SIMPLE_OP_ITERATORS_H_
