// AssignmentWatchers: the workers' assignment watches (WatchAssignment, docs/SERVICE.md,
// "Assignment watch") waiting for a change of their worker's assignment. Each watch is a
// callback, not a thread: Notify(worker_id) answers that worker's watches with changed=true,
// ExpireUntil answers those whose deadline passed with false, Close() answers every one with
// false and refuses new ones. Every watch's `done` runs exactly once, without this object's
// lock held (but possibly under the caller's: Notify runs under the Coordinator's mutex, so
// `done` must not block or call back into the Coordinator).
//
// Bounded: at most max_watches at once (Add refuses more with RESOURCE_EXHAUSTED), and at
// most kMaxPerWorker per worker (a newer watch of the same worker supersedes the oldest, which
// is answered false: a worker has one watch out, a second one is a reconnect's leftover).
//
// Thread safety: thread-safe.
#ifndef SLUICE_SERVER_ASSIGNMENT_WATCHERS_H_
#define SLUICE_SERVER_ASSIGNMENT_WATCHERS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice {

class AssignmentWatchers {
 public:
  // Called once with whether the worker's assignment changed.
  using Done = std::function<void(bool changed)>;

  static constexpr size_t kMaxPerWorker = 2;

  // max_watches: at least 1.
  explicit AssignmentWatchers(size_t max_watches);
  ~AssignmentWatchers();  // Close()

  // Registers a watch of `worker_id` until `deadline`; returns its id (never 0), with which
  // Cancel() ends it. RESOURCE_EXHAUSTED naming max_watches when that many wait; UNAVAILABLE
  // after Close(). On error `done` is not called.
  absl::StatusOr<uint64_t> Add(int64_t worker_id, absl::Time deadline, Done done);
  // Answers every watch of `worker_id` with true.
  void Notify(int64_t worker_id);
  // Answers every watch with true (the callers' versions became unknown).
  void NotifyAll();
  // Answers the watch `id` with false, if it still waits (the caller went away).
  void Cancel(uint64_t id);
  // Answers the watches whose deadline is at or before `now` with false.
  void ExpireUntil(absl::Time now);
  // Answers every watch with false; Add refuses from now on. Idempotent.
  void Close();

  size_t size() const;

 private:
  struct Watch {
    uint64_t id = 0;
    absl::Time deadline;
    Done done;
  };
  // Moves the watches of `worker_id` that `take` selects into *out.
  template <typename Predicate>
  void TakeLocked(int64_t worker_id, Predicate take, std::vector<Done>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every watch into *out.
  void TakeAllLocked(std::vector<Done>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_watches_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
  // Per worker, its watches, oldest first.
  absl::flat_hash_map<int64_t, std::vector<Watch>> by_worker_ ABSL_GUARDED_BY(mu_);
  // Watch id -> worker id, for Cancel.
  absl::flat_hash_map<uint64_t, int64_t> workers_of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_SERVER_ASSIGNMENT_WATCHERS_H_
