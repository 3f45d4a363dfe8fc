// map(fn, num_parallel_calls=None, deterministic=None): applies a MapFunction to every element.
//
// With num_parallel_calls <= 1 the fn runs in the caller's thread. With N > 1 the caller's thread
// pulls input elements, in order, in units of up to 32 consecutive elements (fewer once they hold
// 256 KiB: a unit of large elements, such as batches or images, is one or a few), and the fn runs on
// the process's shared thread pool (core/util/thread_pool.h), at most N units at a time; at most
// 2 * N units are in flight or waiting to be taken, so a slow consumer stalls the map instead of
// growing memory. With deterministic=true, when the next unit is not ready and no pool thread has
// started it, the caller's thread maps it instead of waiting, so a map never waits on a pool
// busy with other pipelines. With deterministic=false a caller that itself runs on the pool
// (under a prefetch or a parallel interleave) waits for a finished unit only while some unit is
// being mapped on the pool; when every unit is still queued it maps one itself, so it never
// waits for work queued behind it.
// The map starts no thread of its own.
//   deterministic=true (TF's default): outputs come in input order.
//   deterministic=false: a unit's outputs are returned as soon as the unit is done, so a slow
//     unit does not hold up later ones; the multiset of outputs is the same.
// Under a batch() (output_slot.h), a parallel map in input order gives each element it pulls
// for a row of the batch being built that row as the fn's slot, on whichever thread maps it,
// so a fn that writes a whole output (random_resized_crop) writes it into the batch; out of
// order it gives none. The outputs are the same either way.
// An fn error is an element error (core/data/op_iterator.h): returned in that element's place and
// iteration can go on. The input's end, or a non-element input error, comes after every earlier
// element (in either mode) and then repeats.
//
// The destructor waits for the fn calls of units already running on the pool.
//
// Thread safety: as Iterator, one caller at a time.
#ifndef SLUICE_CORE_MAP_ITERATOR_H_
#define SLUICE_CORE_MAP_ITERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/deferred_check_blocks.h"
#include "core/data/iterator.h"

namespace sluice {

// One element in, one out; must be safe to call from many threads at once.
using ElementFn = std::function<absl::StatusOr<Element>(Element)>;

// `label` names the op in errors; `fn` errors are passed through with the label prepended.
// num_parallel_calls is the resolved thread count (AUTOTUNE already replaced).
//
// `block_fn`, when set, maps a block of elements (core/data/iterator.h) to the block of their
// mapped elements (MapFunction::ElementWise); the map then supports the bulk path when its input
// does (an iterator pulled in blocks is never pulled element by element). A sequential map runs
// block_fn in the caller's thread. A parallel one splits each request for up to M elements into
// input blocks of ceil(M / parallelism) rows and runs block_fn on them on the shared pool, at
// most `parallelism` at once, with the same order and deterministic semantics as its
// per-element path: under batch(B), B rows are mapped by `parallelism` threads in one block_fn
// call each (map-and-batch fusion: no per-element objects or hand-offs). When block_fn fails on
// a block, the map goes through that block row by row with `fn`, handing out blocks of one
// element and the failing row's element error where the per-element path would.
// When the input's blocks may be pulled on the pool (Iterator::BlocksPullableOnPool: a record
// file source), a parallel map's bulk path reads them there too: each pool job takes the
// input's lock, reads the next block, releases the lock and maps it, so one job reads while
// others map and the consumer's thread only hands out mapped blocks (or runs a job still
// queued rather than wait). A finished job queues the next one itself while fewer than
// 2 * parallelism blocks are held or coming, so the pool reads ahead while the consumer is away;
// a block the consumer takes queues one too when it frees room under that bound.
// Blocks are queued in read order: same elements, order and errors. Under the input's lock a
// TFRecord source only frames its records in the reader's buffers; copying them out and
// verifying their data checksums is done after it, outside the lock
// (core/data/deferred_check_blocks.h), with the same result as doing it in the read.
// Map-and-batch fusion (batch_destinations.h): in input order, under a batch() on the bulk
// path, each block read is given the rows of the batch's stacked tensors it will fill, and its
// block_fn / rows_fn call runs with them as its fn block slot (parse_example writes its rows
// there, on the thread that maps the block); batch checks every row is in place before it
// uses them, else concatenates as without the fusion. Out of order no rows are given.
// `rows_fn`, when set, is block_fn on serialized rows (core/data/deferred_check_blocks.h:
// parse_example's fn over a block of records): such a map hands it to those checks, which then
// parse the verified records straight from the reader's buffers instead of copying each one
// into a string of its own first (map-and-parse fusion); where rows_fn fails, the block is
// built and mapped as without it, so outputs, their order and errors are the same either way.
//
// `autotune` (num_parallel_calls=AUTOTUNE, with num_parallel_calls the most it may use): the map
// starts at AutotuneInitialParallelism(num_parallel_calls) units at a time (tf.data's start:
// the pool's size; from one, a map of image decodes spent its first ~20 ms of each run on one
// core, bench/RESULTS.md "autoscale") and hill-climbs as tf.data's AUTOTUNE does: every 256
// outputs or every 10 ms, whichever ends first (so that a map of slow elements, such as image
// decodes of milliseconds, adapts within a few elements), if the caller spent more than a tenth
// of that period waiting for outputs, one more unit may run at once, up to num_parallel_calls.
// AutotunedMapParallelism() reports the choice.
//
// num_parallel_calls is a parallelism hint (TF accepts any positive value): it is clamped to
// MaxParallelCalls(), since more units in flight than the pool has threads only hold more
// elements. The output (order, determinism) does not depend on it.
std::unique_ptr<Iterator> NewMapIterator(std::string label, std::unique_ptr<Iterator> input,
                                         ElementFn fn, int64_t num_parallel_calls,
                                         bool deterministic, ElementFn block_fn = nullptr,
                                         bool autotune = false, SerializedRowsFn rows_fn = nullptr);

// The parallelism AUTOTUNE chose for the parallel maps alive in this process, by op label
// ("op 1 (map)"), averaged over the maps of that label. Thread-safe.
std::vector<std::pair<std::string, double>> AutotunedMapParallelism();

// The parallelism for num_parallel_calls = -1 (AUTOTUNE): the size of the process's thread pool
// (ProcessThreadPoolSize(), by default the number of cores).
int64_t AutotuneParallelism();

// AUTOTUNE's first parallelism for a map that may run up to `max_parallelism` units at once,
// as tf.data's (GetAutotuneDefaultParallelism): the pool's size (AutotuneParallelism()), at
// most kAutotuneMaxInitialParallelism and max_parallelism, at least 1.
inline constexpr int64_t kAutotuneMaxInitialParallelism = 16;
int64_t AutotuneInitialParallelism(int64_t max_parallelism);

// The most map calls in flight for one map: 4 * ProcessThreadPoolSize(), at least 64.
int64_t MaxParallelCalls();

}  // namespace sluice

#endif  // SLUICE_CORE_MAP_ITERATOR_H_
