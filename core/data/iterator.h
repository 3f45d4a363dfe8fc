// Iterator: pulls the elements of a dataset one at a time.
#ifndef SLUICE_CORE_ITERATOR_H_
#define SLUICE_CORE_ITERATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "sluice/element.h"

namespace sluice {

// Not thread-safe: one caller at a time (an iterator may run threads of its own inside).
class Iterator {
 public:
  virtual ~Iterator() = default;

  // Sets *end_of_sequence and, when false, *out to the next element. Errors are those of the
  // failing op (INVALID_ARGUMENT, NOT_FOUND for a missing file, ...), naming it; after an error
  // or the end of the sequence, further calls repeat it.
  virtual absl::Status GetNext(Element* out, bool* end_of_sequence) = 0;

  // The bulk path (optional): true if GetNextBlock may be called. Constant for the iterator's
  // life. Ops that consume runs of elements (batch, padded_batch) ask for blocks when their
  // input supports them and BulkPathsEnabled(); every other op pulls elements one at a time.
  virtual bool SupportsBlocks() const { return false; }

  // Sets *end_of_sequence and, when false, *n (1 <= *n <= max_elements) and *out to the next *n
  // elements as one block: *out has the elements' structure and each leaf holds the *n
  // elements' leaves stacked along a new dimension 0, exactly what Stack()ing them would give.
  // The elements of one block share dtypes and shapes. A block may be shorter than
  // max_elements before the end (a source may cut at a file or epoch boundary). Errors as
  // GetNext's; an element error (core/data/op_iterator.h) stands for the first element after
  // the block's earlier ones, exactly where GetNext would have returned it. An iterator is
  // pulled through one of the two paths for its whole life, never both. Requires
  // SupportsBlocks() and max_elements >= 1; the default is UNIMPLEMENTED.
  virtual absl::Status GetNextBlock(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence);

  // Drops the next `count` (>= 0) elements, as `count` GetNext calls whose elements are thrown
  // away would: sets *skipped to how many it dropped, fewer than `count` only at the end
  // (*end_of_sequence) or on an error, which is GetNext's for the element after the *skipped
  // dropped ones (an element error consumes that element, as GetNext's does; it is not counted).
  // The default calls GetNext. An iterator overrides it only where it can drop elements for
  // less than making them with the same outcome: the fused fixed-length source
  // (core/data/ops/record_iterators.h) drops records without decoding them. skip() and shard()
  // drop their input's elements through it; repeat(), take(), skip(), shard() and the
  // profiling wrapper pass it on to their input; an op that makes its elements (a map) does
  // not (this default: it makes them), nor does the place of a map a source runs itself
  // (core/data/executor.cc).
  virtual absl::Status Skip(int64_t count, int64_t* skipped, bool* end_of_sequence);

  // Optional: true if GetNextBlock may be called from any thread, including a thread of the
  // process's pool (core/util/thread_pool.h), because it never waits for the pool's closures
  // (it only reads files or memory). The calls stay one at a time, ordered by the caller's
  // locking. A parallel map over such an input reads its blocks on the pool, so that reading
  // runs in parallel with mapping instead of on the consumer's thread. Constant for the
  // iterator's life; meaningful only when SupportsBlocks(). The default is false.
  virtual bool BlocksPullableOnPool() const { return false; }

  // Optional: restarts the sequence at its first element, so that every call after it returns
  // exactly what a fresh iterator from the same factory would (core/data/op_iterator.h's
  // IteratorFactory), and returns true; returns false, changing nothing, when the iterator
  // cannot. Only an iterator whose elements do not depend on when it was built may say true:
  // never one drawing randomness per epoch (core/data/element_draws.h) nor one reading from a
  // resource that may have changed. repeat() rewinds its input at the end of an epoch instead
  // of building the next epoch's iterator (at small elements, building it was most of an
  // element's cost). The default is false.
  virtual bool Rewind() { return false; }
};

// Whether consumers use the bulk path (process-wide; on by default). Turning it off makes every
// op pull element by element: tests compare the two paths with it, benchmarks measure both.
bool BulkPathsEnabled();
void SetBulkPathsEnabled(bool enabled);

}  // namespace sluice

#endif  // SLUICE_CORE_ITERATOR_H_
