// WorkerLiveness: when each worker last heartbeated, ordered by that time, so that finding the
// workers silent for a timeout costs O(log W + silent ones) rather than a scan of every worker
// on every request (docs/SERVICE.md, "Scale of the control plane"). Not coordinator state: it
// lives in the Coordinator only (heartbeat ages are times, and times are not journaled).
//
// Thread safety: none; the Coordinator guards it with its mutex.
#ifndef SLUICE_SERVER_WORKER_LIVENESS_H_
#define SLUICE_SERVER_WORKER_LIVENESS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace sluice {

class WorkerLiveness {
 public:
  // The worker heartbeated at `at` (a later time replaces an earlier one; an earlier one is
  // ignored). It is watched from now on.
  void Heartbeat(int64_t worker_id, absl::Time at);
  // The worker is dead or drained: no longer watched (its last time stays known for status).
  void Unwatch(int64_t worker_id);
  // The coordinator itself did not run for `stall` (its process paused or starved, its lock
  // held): every watched worker's last heartbeat moves `stall` later (at most to `now`), so
  // that time nobody could have heard them is not counted as their silence. O(W log W); called
  // only when a stall is seen.
  void Excuse(absl::Duration stall, absl::Time now);
  // Forgets the worker altogether.
  void Forget(int64_t worker_id);
  // When it last heartbeated, if ever (watched or not).
  std::optional<absl::Time> LastHeartbeat(int64_t worker_id) const;
  bool watched(int64_t worker_id) const { return watched_.contains(worker_id); }
  // The watched workers whose last heartbeat is at or before `cutoff`, oldest first.
  std::vector<int64_t> SilentSince(absl::Time cutoff) const;
  size_t num_watched() const { return by_time_.size(); }
  // Workers known at all (watched or not).
  size_t size() const { return last_.size(); }

 private:
  absl::flat_hash_map<int64_t, absl::Time> last_;
  absl::flat_hash_map<int64_t, absl::Time> watched_;  // the key of each in by_time_
  std::set<std::pair<absl::Time, int64_t>> by_time_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_WORKER_LIVENESS_H_
