// prefetch(n): reads its input ahead on the process's shared thread pool, keeping at most n
// elements ready. It starts no thread of its own.
#ifndef SLUICE_CORE_PREFETCH_ITERATOR_H_
#define SLUICE_CORE_PREFETCH_ITERATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/data/cancellation.h"
#include "core/data/iterator.h"
#include "core/data/memory_budget.h"

namespace sluice {

class ThreadPool;  // core/util/thread_pool.h

// Reading ahead starts at the first GetNext (as TF's does): a job on the pool pulls from the
// input while fewer than `buffer_size` elements are queued, then ends, and taking an element
// schedules it again; so at most buffer_size elements have been produced and not yet consumed
// at any time. A GetNext that finds the queue empty while no pool thread is pulling (the job
// still queued behind other work on the pool, possibly behind this very caller when it runs on
// the pool itself) pulls the next element itself instead of waiting: nested prefetches,
// interleaves and maps never wait for work queued behind them, so they cannot deadlock on a
// pool of any size. Elements, then the input's error or end of sequence, come out in the
// input's order; the error or end then repeats.
//
// Cancellation (core/data/cancellation.h): once `cancellation` is cancelled, GetNext returns
// CANCELLED at once, also while a pool thread is in the middle of pulling an element (the
// element it pulls is dropped, and its input returns CANCELLED at its next pull).
//
// The destructor stops reading ahead and returns promptly, also mid-stream: the only wait is
// for an input GetNext call in progress on a pool thread (a job still queued then does nothing).
//
// Thread safety: as Iterator, one caller at a time; `input` is used by one thread at a time
// (the pool's or the caller's).
class PrefetchIterator : public Iterator {
 public:
  // Requires buffer_size > 0. The queued elements count against the process's memory budget
  // (core/data/memory_budget.h); `label` names the op when they would exceed it. `pool`:
  // borrowed, must outlive the iterator; null: ProcessThreadPool() (when its threads cannot
  // start, GetNext returns its RESOURCE_EXHAUSTED, naming `label`). `cancellation`: the
  // pipeline's token (ExecutorOptions::cancellation), or null.
  PrefetchIterator(std::unique_ptr<Iterator> input, int64_t buffer_size,
                   std::string label = "prefetch", ThreadPool* pool = nullptr,
                   std::shared_ptr<CancellationToken> cancellation = nullptr);
  ~PrefetchIterator() override;
  PrefetchIterator(const PrefetchIterator&) = delete;
  PrefetchIterator& operator=(const PrefetchIterator&) = delete;

  absl::Status GetNext(Element* out, bool* end_of_sequence) override;

  // Test hook: the most elements the queue has held at once.
  int64_t max_queued() const;

 private:
  struct State;  // shared with the pool's jobs (prefetch_iterator.cc)
  absl::Status pool_error_;  // the process's pool could not start
  std::shared_ptr<State> state_;
  std::shared_ptr<CancellationToken> cancellation_;
  // Wakes a GetNext waiting for the pool's puller when the token is cancelled. Declared last:
  // unregistered first, while state_ lives.
  std::unique_ptr<ScopedCancelWake> cancel_wake_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_PREFETCH_ITERATOR_H_
