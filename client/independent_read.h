// IndependentRead: the read order of an independent consumer (ServiceReadMode::kIndependent;
// docs/SERVICE.md, "Independent reads"): the next step of whichever task has one, the look
// starting one task further on after every step (so that no task with steps is passed over for
// long); a task leaves at its end, and the data ends when every task has ended. The order of
// steps is not deterministic.
//
// It opens every task the first heartbeat listed. A task's failure is the read's failure once
// no task has a step queued. The streams (client/task_streams.h) acknowledge the steps of an
// independent read, so a reconnect neither loses nor repeats one.
#ifndef SLUICE_CLIENT_INDEPENDENT_READ_H_
#define SLUICE_CLIENT_INDEPENDENT_READ_H_

#include <cstddef>
#include <vector>

#include "client/read_order.h"
#include "client/task_streams.h"

namespace sluice {

class IndependentRead : public ReadOrder {
 public:
  // Opens the streams of `tasks`' tasks. `streams` must outlive this.
  IndependentRead(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks);

  absl::Status Next(std::vector<Element>* replicas, bool* end_of_data) override;

 private:
  TaskStreams* const streams_;
  // The tasks not yet ended, in task_index order, and where the next turn starts.
  std::vector<TaskStream*> rotation_;
  size_t next_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_INDEPENDENT_READ_H_
