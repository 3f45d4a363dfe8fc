// HeartbeatView: a consumer's picture of its job's tasks, kept from versioned ClientHeartbeat
// answers (docs/SERVICE.md, "Versioned heartbeats"). The coordinator answers a request that
// carries the version of the last answer applied with only the tasks that changed since (a
// delta); this view merges deltas and full answers, and gives every caller a full answer
// (every task, in task_index order, as the coordinator's full answer would list them), so the
// read orders never see a delta.
//
// Answers may arrive out of order (several threads heartbeat at once): an answer older than
// the view's version is not applied (the view is newer), and the view is returned.
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_CLIENT_HEARTBEAT_VIEW_H_
#define SLUICE_CLIENT_HEARTBEAT_VIEW_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace sluice {

class HeartbeatView {
 public:
  // Sets request->known_incarnation / known_version to those of the answer applied last.
  void FillRequest(proto::ClientHeartbeatRequest* request) const;
  // Applies `answer` (full or delta) and returns the view as a full answer.
  proto::ClientHeartbeatResponse Apply(const proto::ClientHeartbeatResponse& answer);

 private:
  proto::ClientHeartbeatResponse FullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool have_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // The answer's scalar fields (job_finished, num_tasks, ...) of the newest answer applied.
  proto::ClientHeartbeatResponse header_ ABSL_GUARDED_BY(mu_);
  // By (task_index, task_id).
  std::map<std::pair<int64_t, int64_t>, proto::TaskInfo> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_HEARTBEAT_VIEW_H_
