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

#include "client/task_rotation.h"

namespace sluice {

class IndependentRead : public TaskRotation {
 public:
  using TaskRotation::TaskRotation;

 private:
  Turn TakeTurnLocked() override;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_INDEPENDENT_READ_H_
