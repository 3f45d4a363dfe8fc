// RangesRead: the read order of a SHARDING_RANGES job (docs/SERVICE.md, "Consumers of a RANGES
// job"): task i is range i of the job's global steps, and the consumer reads task 0 to its end,
// then task 1, ..., so that the steps come in global order; the data ends after the last of the
// job's num_tasks.
//
// The coordinator makes the tasks as workers have room, so they are opened as heartbeats list
// them (OnHeartbeatLocked): the task being read and the ones after it, max_open_tasks in all,
// stream at once, and a task read to its end is retired and the monitor woken to open the next.
// A task that is not listed (not made yet, or its worker died and none took it) is waited for
// up to retry_deadline, then the read fails with UNAVAILABLE naming the task and the
// coordinator; a job the coordinator no longer knows fails it at once (the monitor's error).
#ifndef SLUICE_CLIENT_RANGES_READ_H_
#define SLUICE_CLIENT_RANGES_READ_H_

#include <cstdint>
#include <map>
#include <vector>

#include "client/read_order.h"
#include "client/task_streams.h"

namespace sluice {

class RangesRead : public ReadOrder {
 public:
  // Opens the first tasks `tasks` lists (possibly none yet). `streams` must outlive this.
  RangesRead(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks);

  // Takes the job's number of tasks and opens the listed tasks now in the window.
  void OnHeartbeatLocked(const proto::ClientHeartbeatResponse& response) override;
  absl::Status Next(std::vector<Element>* replicas, bool* end_of_data) override;

 private:
  absl::Status NextLocked(std::vector<Element>* replicas, bool* end_of_data);

  TaskStreams* const streams_;
  const ServiceStepSourceOptions& options_;
  // Guarded by the streams' mu: the open tasks by task_index, the index being read and the
  // job's number of tasks.
  std::map<int64_t, TaskStream*> by_index_;
  int64_t next_index_ = 0;
  int64_t num_tasks_ = -1;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_RANGES_READ_H_
