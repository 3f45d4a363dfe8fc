// map(fn, num_parallel_calls=None, deterministic=None): applies a MapFunction to every element.
//
// With num_parallel_calls <= 1 the fn runs in the caller's thread. With N > 1, N threads (created
// at the first GetNext) pull input elements one at a time, in order, and apply the fn in
// parallel; at most 2 * N elements are in flight or waiting to be taken, so a slow consumer
// stalls the pool instead of growing memory.
//   deterministic=true (TF's default): outputs come in input order.
//   deterministic=false: an output is returned as soon as it is ready, so a slow element does
//     not hold up later ones; the multiset of outputs is the same.
// An fn error is an element error (core/data/op_iterator.h): returned in that element's place and
// iteration can go on. The input's end, or a non-element input error, comes after every earlier
// element (in either mode) and then repeats.
//
// The destructor stops and joins the threads; the only wait is for an input GetNext or an fn
// call already in progress.
//
// Thread safety: as Iterator, one caller at a time.
#ifndef SLUICE_CORE_MAP_ITERATOR_H_
#define SLUICE_CORE_MAP_ITERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"

namespace sluice {

// One element in, one out; must be safe to call from many threads at once.
using ElementFn = std::function<absl::StatusOr<Element>(Element)>;

// `label` names the op in errors; `fn` errors are passed through with the label prepended.
// num_parallel_calls is the resolved thread count (AUTOTUNE already replaced).
std::unique_ptr<Iterator> NewMapIterator(std::string label, std::unique_ptr<Iterator> input,
                                         ElementFn fn, int64_t num_parallel_calls,
                                         bool deterministic);

// The thread count for num_parallel_calls = -1 (AUTOTUNE): the number of CPU cores, at least 1.
int64_t AutotuneParallelism();

}  // namespace sluice

#endif  // SLUICE_CORE_MAP_ITERATOR_H_
