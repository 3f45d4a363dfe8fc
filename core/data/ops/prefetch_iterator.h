// prefetch(n): runs its input on a background thread that keeps at most n elements ready.
#ifndef SLUICE_CORE_PREFETCH_ITERATOR_H_
#define SLUICE_CORE_PREFETCH_ITERATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/data/iterator.h"
#include "core/data/memory_budget.h"

namespace sluice {

// The producer thread starts at the first GetNext (as TF's does) and pulls from the input only
// while fewer than `buffer_size` elements are queued, so at most buffer_size elements have been
// produced and not yet consumed at any time. Elements, then the input's error or end of
// sequence, come out in the input's order; the error or end then repeats.
//
// The destructor stops the producer and joins it promptly, also mid-stream or while it waits
// on a full queue; the only wait is for an input GetNext call already in progress.
//
// Thread safety: as Iterator, one caller at a time; the producer owns `input` once started.
class PrefetchIterator : public Iterator {
 public:
  // Requires buffer_size > 0. The queued elements count against the process's memory budget
  // (core/data/memory_budget.h); `label` names the op when they would exceed it.
  PrefetchIterator(std::unique_ptr<Iterator> input, int64_t buffer_size,
                   std::string label = "prefetch");
  ~PrefetchIterator() override;
  PrefetchIterator(const PrefetchIterator&) = delete;
  PrefetchIterator& operator=(const PrefetchIterator&) = delete;

  absl::Status GetNext(Element* out, bool* end_of_sequence) override;

  // Test hook: the most elements the queue has held at once.
  int64_t max_queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Produce() ABSL_LOCKS_EXCLUDED(mu_);

  std::unique_ptr<Iterator> input_;  // used by the producer thread only, once started
  const int64_t buffer_size_;

  mutable absl::Mutex mu_;
  absl::CondVar not_full_;   // signalled when an element is taken or on cancel
  absl::CondVar not_empty_;  // signalled when an element or the final status arrives
  std::deque<Element> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> footprints_ ABSL_GUARDED_BY(mu_);  // ElementFootprint of each queued one
  MemoryReservation held_ ABSL_GUARDED_BY(mu_);          // their sum
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the producer has stopped
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);  // OK means end of sequence
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int64_t max_queued_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_PREFETCH_ITERATOR_H_
