// interleave(fn, cycle_length, block_length, num_parallel_calls, deterministic), with
// tf.data.Dataset.interleave's order:
//
// Keep `cycle_length` open inputs (slots), each made by `make_input` from the next input
// element. Visit the slots in turn, taking `block_length` elements from each; a slot with no
// open input opens one from the next input element and is read at once; a slot whose input
// ends is closed and the turn moves on (it is refilled when the turn comes back). The sequence
// ends when the input is exhausted and no slot is open. Example (TF 2.15): files of 3, 1, 4, 0,
// 2, 5 lines, cycle_length=2, block_length=1 give
//   f0-0 f1-0 f0-1 f0-2 f2-0 f2-1 f2-2 f4-0 f2-3 f4-1 f5-0 f5-1 f5-2 f5-3 f5-4.
//
// num_parallel_calls > 0: every open slot is read ahead (up to max(block_length, 2) elements
// each) by jobs on the process's shared thread pool (core/util/thread_pool.h); the interleave
// starts no thread of its own. When the slot whose turn it is has nothing ready and no pool
// thread is reading it (its job queued behind other work, possibly behind this very consumer
// when it runs on the pool), the consumer reads it itself instead of waiting, so nested
// parallel ops cannot deadlock on a pool of any size. With deterministic=true (the default) the order is the
// one above, as TF's parallel interleave gives. With deterministic=false, when the slot whose
// turn it is has nothing ready, an element is taken from another slot that has one, so a slow
// file does not stall the others; every element still comes out exactly once.
//
// An input element that `make_input` refuses, and element errors of the slots, are element
// errors; any other error of a slot or of the input ends the sequence with it.
//
// Thread safety: as Iterator, one caller at a time. The destructor (and closing a slot at its
// end) waits only for a read in progress on a pool thread; a job still queued then does
// nothing.
#ifndef SLUICE_CORE_INTERLEAVE_ITERATOR_H_
#define SLUICE_CORE_INTERLEAVE_ITERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"

namespace sluice {

// Makes the iterator of one input element (a file name for file readers). Must be callable
// from the consumer's thread; the iterators it makes are then used by one thread at a time
// (a pool thread or the consumer's).
using InterleaveInputFn =
    std::function<absl::StatusOr<std::unique_ptr<Iterator>>(const Element&)>;

// Requires cycle_length >= 1, block_length >= 1 (the executor resolves TF's None/AUTOTUNE).
std::unique_ptr<Iterator> NewInterleaveIterator(std::string label,
                                                std::unique_ptr<Iterator> input,
                                                InterleaveInputFn make_input,
                                                int64_t cycle_length, int64_t block_length,
                                                int64_t num_parallel_calls, bool deterministic);

}  // namespace sluice

#endif  // SLUICE_CORE_INTERLEAVE_ITERATOR_H_
