// HeartbeatVersions: what changed, and at which version, so that heartbeat answers carry only
// changes (docs/SERVICE.md, "Versioned heartbeats"). Every change the coordinator applies that
// a heartbeat answer shows (a task made, moved, finished; a job finished or failed; a worker's
// assignment) takes the next version; a caller that sends back the version of the last answer
// it applied gets only what changed after it. Not coordinator state: versions live in memory
// only, under an incarnation chosen at random when the coordinator starts (and again when it
// reloads its journal), so a version from another incarnation is unknown and gets a full
// answer.
//
// Per job, a bounded log of (version, task id) changes; a caller older than the log's floor
// gets a full answer too. Per worker, the version of the last change to its assignment.
//
// Thread safety: none; the Coordinator guards it with its mutex.
#ifndef SLUICE_SERVER_HEARTBEAT_VERSIONS_H_
#define SLUICE_SERVER_HEARTBEAT_VERSIONS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace sluice {

class HeartbeatVersions {
 public:
  // Changes logged per job before the oldest half is dropped (callers older than what is kept
  // get full answers).
  static constexpr size_t kMaxJobLog = 256;

  explicit HeartbeatVersions(uint64_t incarnation) : incarnation_(incarnation) {}

  uint64_t incarnation() const { return incarnation_; }
  // The version of the latest change (an answer made now covers every change up to it).
  uint64_t version() const { return version_; }

  // Task `task_id` of job `job_id` changed; task_id 0: the job itself (finished, failed).
  void TaskChanged(int64_t job_id, int64_t task_id);
  // Worker `worker_id`'s assignment changed (a task given, taken, finished); 0 is ignored.
  void WorkerChanged(int64_t worker_id);

  // The ids of the tasks of `job_id` that changed after version `since` (each once, in no
  // particular order; empty when nothing did), or nullopt when `since` is not known: from
  // another incarnation (checked by the caller), 0, or older than the job's log keeps.
  std::optional<std::vector<int64_t>> JobChangesSince(int64_t job_id, uint64_t since) const;
  // Whether worker_id's assignment changed after version `since` (true for since 0).
  bool WorkerChangedSince(int64_t worker_id, uint64_t since) const;

  // The job was removed; the worker was removed.
  void ForgetJob(int64_t job_id) { jobs_.erase(job_id); }
  void ForgetWorker(int64_t worker_id) { workers_.erase(worker_id); }

  // Forget everything, under a new incarnation: every caller's next answer is full.
  void Reset(uint64_t incarnation);

  // For tests and /metrics: jobs and workers with versions kept.
  size_t tracked_jobs() const { return jobs_.size(); }
  size_t tracked_workers() const { return workers_.size(); }

 private:
  struct JobLog {
    uint64_t floor = 0;  // changes at or before it are no longer logged
    std::vector<std::pair<uint64_t, int64_t>> changes;  // (version, task id), by version
  };

  uint64_t incarnation_;
  uint64_t version_ = 1;  // answers carry at least 1; 0 means "none"
  uint64_t start_version_ = 1;  // the version this incarnation began at
  absl::flat_hash_map<int64_t, JobLog> jobs_;
  absl::flat_hash_map<int64_t, uint64_t> workers_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_HEARTBEAT_VERSIONS_H_
