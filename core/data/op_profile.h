// Per-op profiling: how many elements each op of a pipeline handed out and how long its
// GetNext calls took, so a user sees which op is the bottleneck.
//
//   auto profile = std::make_shared<OpProfile>();
//   ExecutorOptions options;
//   options.profile = profile;            // MakeIterator wraps every op's iterator
//   ... iterate ...
//   std::cout << profile->ToTable();      // one line per op: elements, calls, total and self time
//
// Times are wall-clock nanoseconds in the caller's thread. An op's total includes the time of the
// ops below it that ran inside its calls; its self time is its total minus the total of the op
// just below it (positions are the executor's: 0 the source, i op i), floored at zero: an op
// whose input runs on other threads (prefetch, a parallel map's fn calls) shows the time spent
// waiting for them, not their CPU time. A pipeline an interleave opens per file is profiled
// under the positions of its own graph, added to the outer pipeline's.
//
// Thread safety: OpProfile is thread-safe (atomic counters); one profile may collect from many
// pipelines at once (a worker's tasks), their counts summed per position.
#ifndef SLUICE_CORE_DATA_OP_PROFILE_H_
#define SLUICE_CORE_DATA_OP_PROFILE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/data/iterator.h"

namespace sluice {

class OpProfile {
 public:
  struct OpStats {
    int position = 0;      // 0: the source; i: op i
    std::string label;     // "op 2 (batch)"
    int64_t calls = 0;     // GetNext, GetNextBlock and Skip calls
    int64_t elements = 0;  // elements handed out (a block of n counts n)
    int64_t total_ns = 0;
    int64_t self_ns = 0;
  };

  // The counters of op `position`, labelled `label` (the first label given for a position is
  // kept). The pointer stays valid for the profile's life.
  struct Counters {
    std::atomic<int64_t> calls{0};
    std::atomic<int64_t> elements{0};
    std::atomic<int64_t> nanos{0};
  };
  Counters* For(int position, const std::string& label);

  // Every op seen so far, by position.
  std::vector<OpStats> Snapshot() const;

  // A Markdown table of Snapshot(): op, elements, calls, total ms, self ms, self share.
  std::string ToTable() const;

 private:
  struct Slot {
    int position;
    std::string label;
    Counters counters;
  };
  mutable absl::Mutex mu_;
  std::deque<Slot> slots_ ABSL_GUARDED_BY(mu_);  // a deque: Counters* stay valid
};

// The profile MakeIterator records into when ExecutorOptions::profile is null: none by default
// (no cost). `sluicectl run --profile` sets one for its whole run and prints it at the end; a
// benchmark can do the same. Thread-safe.
void SetProcessOpProfile(std::shared_ptr<OpProfile> profile);
std::shared_ptr<OpProfile> ProcessOpProfile();

// Wraps `inner` (op `position`'s iterator) so that its calls are counted in `profile`, which
// must outlive the returned iterator. Passes the bulk path through.
std::unique_ptr<Iterator> NewProfilingIterator(std::unique_ptr<Iterator> inner, int position,
                                               const std::string& label, OpProfile* profile);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OP_PROFILE_H_
