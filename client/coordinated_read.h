// CoordinatedRead: the read order of a coordinated consumer (docs/SERVICE.md, "Coordinated
// reads"): the job's tasks round-robin in task_index order, one step each, a task leaving the
// rotation at its end; the data ends when every task has ended. The order is deterministic, so
// every consumer of the job sees the same sequence of global steps.
//
// It opens every task the first heartbeat listed (the job's tasks are all made when it is
// created) and waits for the task whose turn it is, even when another task has steps queued.
// A task's failure is the read's failure.
#ifndef SLUICE_CLIENT_COORDINATED_READ_H_
#define SLUICE_CLIENT_COORDINATED_READ_H_

#include <cstddef>
#include <vector>

#include "client/read_order.h"
#include "client/task_streams.h"

namespace sluice {

class CoordinatedRead : public ReadOrder {
 public:
  // Opens the streams of `tasks`' tasks. `streams` must outlive this.
  CoordinatedRead(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks);

  absl::Status Next(std::vector<Element>* replicas, bool* end_of_data) override;

 private:
  TaskStreams* const streams_;
  // The tasks not yet ended, in task_index order, and where the next turn starts.
  std::vector<TaskStream*> rotation_;
  size_t next_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_COORDINATED_READ_H_
